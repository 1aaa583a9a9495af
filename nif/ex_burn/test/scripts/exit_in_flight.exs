# A script that ends with work in flight, as a user's does: it compiles an Axon MLP, fits it,
# evaluates, saves and serializes it, serves a few batches through a supervised ExBurn.Serving
# that it then stops, and returns while asynchronous commands are still queued and processes
# are still launching kernels (many of them compiled for the first time). The VM must exit
# with status 0. Before the runtime wound itself down at exit (see ExCubecl.shutdown/0), such
# a script died of a segmentation fault in 2 runs of 6 on lavapipe, after printing
# everything: cubecl's device thread was still inside LLVM while the process tore it down.
# scripts/exit_check.sh runs it many times in a row:
#
#     MIX_ENV=test mix run test/scripts/exit_in_flight.exs
Nx.default_backend(ExBurn.Backend)

# Host-side random data (Nx.Random runs op by op: slow on lavapipe): rows of 4 features,
# labelled by the sign of their sum.
{values, _} = Enum.map_reduce(1..(64 * 4), :rand.seed_s(:exsss, 7), fn _, s -> :rand.uniform_s(s) end)
x = values |> Enum.map(&(2 * &1 - 1)) |> Nx.tensor(type: :f32) |> Nx.reshape({64, 4})
labels = x |> Nx.sum(axes: [1]) |> Nx.greater(0)
y = Nx.stack([Nx.subtract(1, labels), labels], axis: 1) |> Nx.as_type(:f32)

model =
  Axon.input("x", shape: {nil, 4})
  |> Axon.dense(8, activation: :relu)
  |> Axon.dense(2)
  |> ExBurn.Model.compile(loss: :cross_entropy, loss_opts: [from_logits: true], optimizer: :adam, learning_rate: 0.05, seed: 0)

model = ExBurn.Training.fit(model, {x, y}, epochs: 2, batch_size: 16, verbose: false)
loss = ExBurn.Training.evaluate(model, {x, y})
path = Path.join(System.tmp_dir!(), "ex_burn_exit_in_flight_#{System.pid()}.exburn")
:ok = ExBurn.Model.save(model, path)
bytes = byte_size(ExBurn.Model.serialize_params(model))
File.rm!(path)

{:ok, sup} = Supervisor.start_link([ExBurn.Serving.supervise(model, name: ExitInFlight.Serving, batch_size: 8)], strategy: :one_for_one)
served = ExitInFlight.Serving |> ExBurn.Serving.run(x[0..7]) |> Nx.shape()
:ok = Supervisor.stop(sup)
IO.puts("exit_in_flight: loss #{Float.round(loss, 4)}, #{bytes} bytes serialized, served #{inspect(served)}")

# Left in flight: commands queued and never waited for...
a = ExCubecl.buffer!(Enum.map(1..(96 * 96), &(rem(&1, 17) / 17)), [96, 96], :f32)

for _ <- 1..8 do
  {:ok, _id} = ExCubecl.submit([{:matmul, [{:input, 0}, {:input, 0}], []}, {:tanh, [{:step, 0, 0}], []}], [a])
end

# ...and processes launching kernels, most of them new (each op and dtype is a kernel of its
# own, compiled on first use), still going when the script returns.
ops = [:exp, :log1p, :sin, :cos, :tan, :tanh, :sinh, :cosh, :atan, :asinh, :sqrt, :abs, :erf, :sigmoid, :gelu, :floor, :ceil, :round, :neg, :recip]

for dtype <- [:f32, :f16, :f64] |> Enum.filter(&(&1 in ExCubecl.supported_dtypes())) do
  spawn(fn ->
    b = ExCubecl.buffer!(Enum.map(1..4096, &(&1 / 4096)), [64, 64], dtype)
    Stream.cycle(ops) |> Enum.each(fn op -> ExCubecl.run_kernel(op, [b]) end)
  end)
end

Process.sleep(30)
IO.puts("exit_in_flight: returning with work in flight")
