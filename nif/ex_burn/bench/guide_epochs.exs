# The figures of guides/05_training_optimization.md: time per epoch of ExBurn.Training.fit
# for MLPs of about 1K, 10K and 100K parameters (Adam, exact gradients) on 1,024 synthetic
# samples, at batch sizes 32 and 128; the median of 3 epochs after one warm-up epoch (which
# compiles the step and its kernels), and that first epoch's time.
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/guide_epochs.exs [--samples 1024] [--batches 32,128]
{opts, _, _} = OptionParser.parse(System.argv(), strict: [samples: :integer, batches: :string])
samples = opts[:samples] || 1024
batches = (opts[:batches] || "32,128") |> String.split(",") |> Enum.map(&String.to_integer/1)

Nx.default_backend(ExBurn.Backend)
IO.puts("device: #{inspect(ExBurn.default_device())} (#{ExBurn.device_name()}), #{samples} samples")

features = 64
key = Nx.Random.key(1)
{x, key} = Nx.Random.uniform(key, -1.0, 1.0, shape: {samples, features}, type: :f32)
{w, _} = Nx.Random.normal(key, shape: {features, 10}, type: :f32)
y = x |> Nx.dot(w) |> Nx.argmax(axis: 1) |> Nx.new_axis(1) |> Nx.equal(Nx.iota({1, 10})) |> Nx.as_type(:f32)

mlp = fn hidden ->
  Enum.reduce(hidden, Axon.input("input", shape: {nil, features}), &Axon.dense(&2, &1, activation: :relu))
  |> Axon.dense(10)
end

# fit/3 returns the model (the documented form) or {model, history} (before the merge)
fit = fn model, opts ->
  case ExBurn.Training.fit(model, {x, y}, opts) do
    {%{} = m, _history} -> m
    m -> m
  end
end

for {name, hidden} <- [{"tiny", [12]}, {"small", [128]}, {"medium", [512, 128]}], batch <- batches do
  model = ExBurn.Model.compile(mlp.(hidden), loss: :cross_entropy, optimizer: :adam, learning_rate: 1.0e-3, seed: 1)
  params = ExBurn.Model.parameters(model) |> Map.values() |> Enum.map(&Nx.size/1) |> Enum.sum()
  {first, model} = :timer.tc(fn -> fit.(model, epochs: 1, batch_size: batch) end)

  times =
    Enum.map_reduce(1..3, model, fn _, m ->
      {us, m} = :timer.tc(fn -> fit.(m, epochs: 1, batch_size: batch) end)
      {us, m}
    end)
    |> elem(0)
    |> Enum.sort()

  median = Enum.at(times, 1) / 1000
  steps = ceil(samples / batch)

  IO.puts(
    "#{name}: #{params} parameters, batch #{batch}: #{Float.round(median, 1)} ms per epoch " <>
      "(#{steps} steps, #{Float.round(median / steps, 2)} ms per step); first epoch #{Float.round(first / 1000, 1)} ms"
  )
end
