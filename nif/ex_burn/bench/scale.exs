# Several devices from Elixir: ExCubecl.all_reduce/2's bus bandwidth, data-parallel
# ExBurn.Training.fit/3 (devices:) against one device, and the throughput of an
# ExBurn.Serving with one partition per device (images/s and the speed-up over one device),
# at 1, 2, 4, ... devices of one kind.
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/scale.exs [--kind cuda | --devices a,b] [--seconds 15]
#         [--callers 32] [--hidden 1024] [--batch 1024] [--mib 1,64,256]
#         [--only all_reduce,fit,serving]
#         [--partitions-per-device 1] [--serving-read both | device | host]
#
# --callers is per device (the serving's callers grow with the devices, so that every
# partition has batches waiting); --only runs some of the three parts.
#
# On a GPU machine, from the Elixir bundle of scripts/elixir_cuda.sh:
#
#     bash scripts/elixir_gpu.sh nif/ex_burn/bench/scale.exs --seconds 20
#
# Without two devices of the kind, it measures one. On lavapipe (`--devices wgpu,wgpu:cpu
# --hidden 32 --batch 64 --mib 1 --seconds 2`: the default adapter and the CPU adapter) it
# checks the logic only.
{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict:
      [kind: :string, devices: :string, seconds: :integer, callers: :integer, hidden: :integer, mib: :string] ++
        [batch: :integer, partitions_per_device: :integer, serving_read: :string, only: :string]
  )

kind = opts[:kind] || "cuda"
seconds = opts[:seconds] || 15

hidden = opts[:hidden] || 1024
batch = opts[:batch] || 1024
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

parts = String.split(opts[:only] || "all_reduce,fit,serving", ",") |> Enum.map(&String.to_atom/1)

# 1. ExCubecl.all_reduce/2: the bus bandwidth as nccl-tests report it (algbw * 2(n-1)/n).
for n <- counts, n > 1, :all_reduce in parts, mib <- sizes do
  elems = div(mib * 1024 * 1024, 4)

  bufs =
    for d <- Enum.take(devices, n),
        do: ExCubecl.buffer!(<<1.0::float-32-native>> |> :binary.copy(elems), [elems], :f32, device: d)

  for _ <- 1..3, do: ExCubecl.all_reduce!(bufs, :sum)
  Enum.each(Enum.take(devices, n), &ExCubecl.synchronize(device: &1))
  iters = 10
  {ms, outs} = time.(fn -> for(_ <- 1..iters, do: ExCubecl.all_reduce!(bufs, :sum)) |> List.last() end)
  Enum.each(Enum.take(devices, n), &ExCubecl.synchronize(device: &1))
  <<first::float-32-native, _::binary>> = ExCubecl.read!(hd(outs))
  busbw = mib * 1024 * 1024 / (ms / iters / 1000) * 2 * (n - 1) / n / 1.0e9

  IO.puts(
    "scale: all_reduce #{n} devices, #{mib} MiB: #{Float.round(ms / iters, 3)} ms, bus #{Float.round(busbw, 1)} GB/s, first value #{first} (want #{n * 1.0})"
  )

  if first != n * 1.0, do: raise("all_reduce gave #{first}, want #{n * 1.0}")
end

# 2. Data-parallel fit, weak scaling: an MLP 784-hidden-hidden-10, a fixed batch of `batch`
# examples per device and 8 steps per epoch, so n devices train on 8 * batch * n examples in
# batches of batch * n. One device: fit/3 without :devices (the baseline) and with
# devices: [d] (the data-parallel path on one device). Each run: a first fit compiles, then a
# fit of 3 epochs is timed epoch by epoch (each epoch ends reading its metrics, which waits for
# the devices); the row gives the median of epochs 2 and 3 (the first one of a fit also moves
# the data to the device) and the speed-up: examples per second against the baseline's.
key = Nx.Random.key(0)
examples = 8 * batch * Enum.max(counts)
{x, key} = Nx.Random.normal(key, shape: {examples, 784}, type: :f32)
{labels, _} = Nx.Random.randint(key, 0, 10, shape: {examples}, type: :s64)
x = Nx.backend_copy(x, Nx.BinaryBackend)
y = labels |> Nx.new_axis(1) |> Nx.equal(Nx.iota({1, 10})) |> Nx.as_type(:f32) |> Nx.backend_copy(Nx.BinaryBackend)

mlp =
  Axon.input("x", shape: {nil, 784})
  |> Axon.dense(hidden, activation: :relu)
  |> Axon.dense(hidden, activation: :relu)
  |> Axon.dense(10)

model =
  ExBurn.Model.compile(mlp,
    loss: :cross_entropy,
    loss_opts: [from_logits: true],
    optimizer: :sgd,
    learning_rate: 0.01,
    seed: 0
  )

epoch_ms = fn fit_opts, n ->
  rows = 8 * batch * n
  data = {Nx.slice_along_axis(x, 0, rows), Nx.slice_along_axis(y, 0, rows)}
  opts = [batch_size: batch * n, shuffle: false, verbose: false] ++ fit_opts
  _ = ExBurn.Training.fit(ExBurn.Model.to_device(model, hd(devices)), data, [epochs: 1] ++ opts)
  me = self()

  stamp =
    ExBurn.Training.Callbacks.on(:epoch_completed, fn _state ->
      send(me, {:epoch, System.monotonic_time(:microsecond)}) && :continue
    end)

  start = System.monotonic_time(:microsecond)

  trained =
    ExBurn.Training.fit(ExBurn.Model.to_device(model, hd(devices)), data, [epochs: 3, callbacks: [stamp]] ++ opts)

  ends = for _ <- 1..3, do: receive(do: ({:epoch, t} -> t))
  [e1, e2, e3] = Enum.zip_with([start | ends], ends, fn a, b -> (b - a) / 1000 end)
  {Enum.min_max([e2, e3]) |> then(fn {a, b} -> (a + b) / 2 end), e1, trained, data}
end

if :fit in parts do
  {base_ms, _, _, _} = epoch_ms.([], 1)
  base = 8 * batch / (base_ms / 1000)

  IO.puts(
    "scale: fit 1 device, no :devices (baseline), 8 steps of #{batch}: #{Float.round(base_ms, 1)} ms/epoch, #{round(base)} examples/s"
  )

  for n <- counts do
    {ms, first_ms, trained, data} = epoch_ms.([devices: Enum.take(devices, n)], n)
    speed = 8 * batch * n / (ms / 1000)
    loss = trained |> ExBurn.Training.evaluate(data, batch_size: batch) |> inspect()

    IO.puts(
      "scale: fit #{n} device(s) (devices:), 8 steps of #{batch} per device (batch #{batch * n}): #{Float.round(ms, 1)} ms/epoch " <>
        "(first epoch #{Float.round(first_ms, 1)}), #{round(speed)} examples/s, speed-up #{Float.round(speed / base, 2)}x; evaluate #{loss}"
    )
  end
end

# 3. Serving throughput, as a user sees it: the MLP above (an image of 784 pixels in, 10
# logits out) in an ExBurn.Serving with `--partitions-per-device` partitions on each of n
# devices (1: `partitions: true`), batches of 64 (padded: one program per partition, compiled
# when the serving starts), `--callers` concurrent callers per device (default 32: with
# requests of 16 images, 8 batches in flight per device) for `seconds`. Two rows per device
# count: the callers take their results as the serving gives them (on the partition's device)
# and each caller reads its results to the host (`Nx.to_binary/1`, what a caller answering a
# request over the network does). Every result is checked against one device's first.
# Partitions on one device share its compiled program, whose runs take turns: more than one
# per device overlaps only the building of batches. A caller's read waits for its batch on a
# dirty I/O scheduler (10 by default, for every device): to see whether they limit the
# second row, run again with `ELIXIR_ERL_OPTIONS="+fnu +SDio 128"`.
request = Nx.backend_copy(x[0..15], Nx.BinaryBackend)
per_device = opts[:partitions_per_device] || 1
serving_callers = opts[:callers] || 32
modes = if opts[:serving_read] in [nil, "both"], do: [:device, :host], else: [String.to_atom(opts[:serving_read])]

want =
  ExBurn.Serving.run(ExBurn.Serving.build(model, device: hd(devices), batch_size: 64), request)
  |> Nx.backend_copy(Nx.BinaryBackend)

check! = fn out, n ->
  unless Nx.all_close(Nx.backend_copy(out, Nx.BinaryBackend), want, atol: 1.0e-3) |> Nx.to_number() == 1,
    do: raise("serving on #{n} device(s) gave another result than one device")
end

serving_rates =
  for n <- counts, :serving in parts, mode <- modes, into: %{} do
    name = :"scale_serving_#{n}_#{mode}"
    partitions = if per_device == 1, do: true, else: n * per_device
    callers = serving_callers * n

    serving =
      ExBurn.Serving.build(model,
        device: Enum.take(devices, n),
        partitions: partitions,
        batch_size: 64,
        batch_timeout: 2,
        padding: true
      )

    {:ok, sup} = Supervisor.start_link([{Nx.Serving, serving: serving, name: name}], strategy: :one_for_one)

    call =
      if mode == :host,
        do: fn -> ExBurn.Serving.run(name, request) |> Nx.to_binary() end,
        else: fn -> ExBurn.Serving.run(name, request) end

    load = fn ms ->
      deadline = System.monotonic_time(:millisecond) + ms

      1..callers
      |> Task.async_stream(
        fn _ ->
          Stream.repeatedly(call)
          |> Enum.reduce_while(0, fn _, acc ->
            if System.monotonic_time(:millisecond) < deadline, do: {:cont, acc + 16}, else: {:halt, acc + 16}
          end)
        end,
        timeout: :infinity,
        max_concurrency: callers
      )
      |> Enum.reduce(0, fn {:ok, rows}, acc -> acc + rows end)
    end

    # The first answers (on every partition, most likely) checked, then 2 s of load untimed.
    1..(4 * n * per_device)
    |> Task.async_stream(fn _ -> check!.(ExBurn.Serving.run(name, request), n) end, max_concurrency: 4 * n * per_device)
    |> Stream.run()

    _ = load.(2_000)
    {ms, done} = time.(fn -> load.(seconds * 1000) end)
    Supervisor.stop(sup)
    rate = done / (ms / 1000)
    {{n, mode}, rate}
  end

for mode <- modes, n <- counts, :serving in parts do
  rate = serving_rates[{n, mode}]
  speedup = rate / serving_rates[{1, mode}]
  results = if mode == :host, do: "read to the host by each caller", else: "left on the device"

  IO.puts(
    "scale: serving #{n} device(s), #{n * per_device} partition(s): #{round(rate)} images/s, #{Float.round(speedup, 2)}x one device (#{serving_callers * n} callers of 16 images, batches of 64, results #{results}, #{seconds} s)"
  )
end
