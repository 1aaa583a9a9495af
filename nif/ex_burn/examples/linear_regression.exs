# Linear regression, the simplest ML workflow on ExBurn: synthetic points of y = 3x + 2 with
# noise, a one-unit Axon dense layer, mean squared error and SGD, trained with
# ExBurn.Training.fit/3 on the default device; prints what it learned and fails unless it
# found the line (slope and intercept within 0.1).
#
#     mix run examples/linear_regression.exs [--epochs N] [--samples N] [--seed N]
{opts, _, _} = OptionParser.parse(System.argv(), strict: [epochs: :integer, samples: :integer, seed: :integer])
epochs = opts[:epochs] || 20
samples = opts[:samples] || 256
seed = opts[:seed] || 42

Nx.default_backend(ExBurn.Backend)
IO.puts("device: #{inspect(ExBurn.default_device())} (#{ExBurn.device_name()})")

# The data: x uniform in [-1, 1), y = 3x + 2 + noise of deviation 0.1
key = Nx.Random.key(seed)
{x, key} = Nx.Random.uniform(key, -1.0, 1.0, shape: {samples, 1}, type: :f32)
{noise, _key} = Nx.Random.normal(key, 0.0, 0.1, shape: {samples, 1}, type: :f32)
y = x |> Nx.multiply(3.0) |> Nx.add(2.0) |> Nx.add(noise)

# The model: y = w x + b
model = Axon.input("x", shape: {nil, 1}) |> Axon.dense(1, name: "linear")
compiled = ExBurn.Model.compile(model, loss: :mse, optimizer: :sgd, learning_rate: 0.05, seed: seed)

started = System.monotonic_time(:millisecond)
trained = ExBurn.Training.fit(compiled, {x, y}, epochs: epochs, batch_size: 32, verbose: true)
seconds = (System.monotonic_time(:millisecond) - started) / 1000

params = ExBurn.Model.parameters(trained)
[w] = Nx.to_flat_list(params["linear.kernel"])
[b] = Nx.to_flat_list(params["linear.bias"])
mse = ExBurn.Training.evaluate(trained, {x, y})
{:ok, at_half} = ExBurn.Model.predict(trained, Nx.tensor([[0.5]]))

IO.puts("""
learned: y = #{Float.round(w, 3)} x + #{Float.round(b, 3)}   (true: y = 3.0 x + 2.0)
mean squared error: #{Float.round(mse, 5)} (the noise's variance is 0.01)
prediction at x = 0.5: #{Float.round(hd(Nx.to_flat_list(at_half)), 3)} (true: 3.5)
#{epochs} epochs of #{samples} samples in #{Float.round(seconds, 2)} s\
""")

if abs(w - 3.0) > 0.1 or abs(b - 2.0) > 0.1,
  do: raise("linear_regression.exs: the fit missed the line (w = #{w}, b = #{b})")
