# Several devices from Elixir: ExCubecl.all_reduce/2's bus bandwidth, data-parallel
# ExBurn.Training.fit/3 (devices:) against one device, and the throughput of an
# ExBurn.Serving with one partition per device, at 1, 2, ... devices of one kind.
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/scale.exs [--kind cuda | --devices a,b] [--seconds 15]
#         [--callers 64] [--hidden 1024] [--mib 1,64,256]
#
# On a GPU machine, from the Elixir bundle of scripts/elixir_cuda.sh:
#
#     bash scripts/elixir_gpu.sh nif/ex_burn/bench/scale.exs --seconds 20
#
# Without two devices of the kind, it measures one. On lavapipe (`--devices wgpu,wgpu:cpu
# --hidden 32 --mib 1 --seconds 2`: the default adapter and the CPU adapter) it checks the
# logic only.
{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [kind: :string, devices: :string, seconds: :integer, callers: :integer, hidden: :integer, mib: :string]
  )

kind = opts[:kind] || "cuda"
seconds = opts[:seconds] || 15
callers = opts[:callers] || 64

hidden = opts[:hidden] || 1024
sizes = String.split(opts[:mib] || "1,64,256", ",") |> Enum.map(&String.to_integer/1)

devices =
  if opts[:devices],
    do: String.split(opts[:devices], ","),
    else: for(%{device: d} <- ExCubecl.devices(), String.starts_with?(d, kind), do: d)

IO.puts("scale: devices: #{inspect(devices)}")
if devices == [], do: System.halt(0)
counts = Enum.filter([1, 2, 4, 8], &(&1 <= length(devices)))

time = fn fun ->
  t = System.monotonic_time(:microsecond)
  result = fun.()
  {(System.monotonic_time(:microsecond) - t) / 1000, result}
end

# 1. ExCubecl.all_reduce/2: the bus bandwidth as nccl-tests report it (algbw * 2(n-1)/n).
for n <- counts, n > 1, mib <- sizes do
  elems = div(mib * 1024 * 1024, 4)
  bufs = for d <- Enum.take(devices, n), do: ExCubecl.buffer!(<<1.0::float-32-native>> |> :binary.copy(elems), [elems], :f32, device: d)
  for _ <- 1..3, do: ExCubecl.all_reduce!(bufs, :sum)
  Enum.each(Enum.take(devices, n), &ExCubecl.synchronize(device: &1))
  iters = 10
  {ms, outs} = time.(fn -> for(_ <- 1..iters, do: ExCubecl.all_reduce!(bufs, :sum)) |> List.last() end)
  Enum.each(Enum.take(devices, n), &ExCubecl.synchronize(device: &1))
  <<first::float-32-native, _::binary>> = ExCubecl.read!(hd(outs))
  busbw = mib * 1024 * 1024 / (ms / iters / 1000) * 2 * (n - 1) / n / 1.0e9
  IO.puts("scale: all_reduce #{n} devices, #{mib} MiB: #{Float.round(ms / iters, 3)} ms, bus #{Float.round(busbw, 1)} GB/s, first value #{first} (want #{n * 1.0})")
  if first != n * 1.0, do: raise("all_reduce gave #{first}, want #{n * 1.0}")
end

# 2. Data-parallel fit: an MLP 784-hidden-hidden-10, 8192 examples, global batch 1024.
key = Nx.Random.key(0)
{x, key} = Nx.Random.normal(key, shape: {8192, 784}, type: :f32)
{labels, _} = Nx.Random.randint(key, 0, 10, shape: {8192}, type: :s64)
x = Nx.backend_copy(x, Nx.BinaryBackend)
y = labels |> Nx.new_axis(1) |> Nx.equal(Nx.iota({1, 10})) |> Nx.as_type(:f32) |> Nx.backend_copy(Nx.BinaryBackend)

mlp =
  Axon.input("x", shape: {nil, 784})
  |> Axon.dense(hidden, activation: :relu)
  |> Axon.dense(hidden, activation: :relu)
  |> Axon.dense(10)

model = ExBurn.Model.compile(mlp, loss: :cross_entropy, loss_opts: [from_logits: true], optimizer: :sgd, learning_rate: 0.01, seed: 0)

for n <- counts do
  fit_opts = [epochs: 1, batch_size: 1024, shuffle: false, verbose: false] ++ if(n > 1, do: [devices: Enum.take(devices, n)], else: [])
  # the first epoch compiles; the second is timed
  _ = ExBurn.Training.fit(ExBurn.Model.to_device(model, hd(devices)), {x, y}, fit_opts)
  {ms, trained} = time.(fn -> ExBurn.Training.fit(ExBurn.Model.to_device(model, hd(devices)), {x, y}, fit_opts) end)
  loss = trained |> ExBurn.Training.evaluate({x, y}, batch_size: 1024) |> inspect()
  IO.puts("scale: fit #{n} device(s), 8 steps of 1024: #{Float.round(ms, 1)} ms/epoch, #{round(8192 / (ms / 1000))} examples/s; evaluate #{loss}")
end

# 3. Serving throughput: the MLP above, batches of up to 64 rows, `callers` concurrent
# callers of 16 rows each, for `seconds`, one partition per device.
request = Nx.backend_copy(x[0..15], Nx.BinaryBackend)

for n <- counts do
  name = :"scale_serving_#{n}"
  serving = ExBurn.Serving.build(model, device: Enum.take(devices, n), partitions: true, batch_size: 64, batch_timeout: 2)
  {:ok, sup} = Supervisor.start_link([{Nx.Serving, serving: serving, name: name}], strategy: :one_for_one)
  for _ <- 1..4, do: ExBurn.Serving.run(name, request)
  deadline = System.monotonic_time(:millisecond) + seconds * 1000

  done =
    1..callers
    |> Task.async_stream(
      fn _ ->
        Stream.repeatedly(fn -> ExBurn.Serving.run(name, request) end)
        |> Enum.reduce_while(0, fn _, acc -> if System.monotonic_time(:millisecond) < deadline, do: {:cont, acc + 16}, else: {:halt, acc + 16} end)
      end,
      timeout: :infinity
    )
    |> Enum.reduce(0, fn {:ok, rows}, acc -> acc + rows end)

  Supervisor.stop(sup)
  IO.puts("scale: serving #{n} partition(s) on #{n} device(s): #{round(done / seconds)} rows/s (#{callers} callers of 16 rows, batches of 64, #{seconds} s)")
end
