# A soak of a supervised ExBurn.Serving: concurrent callers (64) send requests of 1 to 4 rows
# to a small Axon classifier (16 -> 64 -> 10, softmax) for a bounded time, each answer
# checked against the model run on Nx.BinaryBackend. After a warm-up (not recorded: the first
# batches of each size compile), a line every few seconds gives the window's throughput, p50
# and p99 latency, errors (exceptions and wrong answers), and the memory of the BEAM and of
# the device (bytes in use, after every process is garbage-collected). The run fails (exit 1)
# on:
#
#   * any error;
#   * device memory in use that grew: the last window over the first by more than 1 MiB;
#   * BEAM memory that grew: the last window over the first by more than 25% or 16 MiB,
#     whichever is larger;
#   * a p99 that drifted: the last window's over 3x the median window's (1 ms at least).
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/serving_soak.exs [--seconds 180] [--every 10] [--warmup 5]
#         [--callers 64] [--partitions N] [--batch-size 16] [--batch-timeout 2]
#
# On a GPU machine, from the Elixir bundle of scripts/elixir_cuda.sh (up to ~8 minutes):
#
#     bash scripts/elixir_gpu.sh nif/ex_burn/bench/serving_soak.exs --seconds 480 --every 15
#
# scripts/test.sh runs 40 s of it on lavapipe; the figures of longer runs are in
# benches/RESULTS.md.
{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [
      seconds: :integer,
      every: :integer,
      warmup: :integer,
      callers: :integer,
      partitions: :integer,
      batch_size: :integer,
      batch_timeout: :integer
    ]
  )

seconds = opts[:seconds] || 180
every = opts[:every] || 10
warmup = opts[:warmup] || 5
callers = opts[:callers] || 64
batch_size = opts[:batch_size] || 16

serving_opts =
  [batch_size: batch_size, batch_timeout: opts[:batch_timeout] || 2] ++
    if(opts[:partitions], do: [partitions: opts[:partitions]], else: [])

Nx.default_backend(ExBurn.Backend)

model =
  Axon.input("x", shape: {nil, 16})
  |> Axon.dense(64, activation: :relu)
  |> Axon.dense(10)
  |> Axon.softmax()

{init_fn, _} = Axon.build(model, seed: 1)
model_state = init_fn.(Nx.broadcast(0.0, {1, 16}), Axon.ModelState.empty())
name = ServingSoak.Serving

{:ok, _sup} =
  Supervisor.start_link([ExBurn.Serving.supervise({model, model_state}, [name: name] ++ serving_opts)],
    strategy: :one_for_one
  )

# Requests: a fixed host-side pool of 1 to 4 rows each; every answer is checked against the
# model run on Nx.BinaryBackend.
:rand.seed(:exsss, 7)
pool = for i <- 1..32, do: Nx.tensor(for(_ <- 1..(1 + rem(i, 4)), do: for(_ <- 1..16, do: :rand.uniform() - 0.5)))
pool = List.to_tuple(pool)
binary_state = Nx.backend_copy(model_state, Nx.BinaryBackend)

expected =
  Nx.with_default_backend(Nx.BinaryBackend, fn ->
    for i <- 0..(tuple_size(pool) - 1),
        into: %{},
        do: {i, Axon.predict(model, binary_state, Nx.backend_copy(elem(pool, i), Nx.BinaryBackend))}
  end)

stats = :ets.new(:soak, [:public, :duplicate_bag, write_concurrency: true])
started = System.monotonic_time(:millisecond)
record_from = started + warmup * 1000
stop_at = record_from + seconds * 1000

caller = fn caller_id ->
  Stream.iterate(caller_id, &(&1 + 1))
  |> Enum.reduce_while(:ok, fn n, :ok ->
    if System.monotonic_time(:millisecond) >= stop_at do
      {:halt, :ok}
    else
      i = rem(n, tuple_size(pool))
      t0 = System.monotonic_time(:microsecond)

      outcome =
        try do
          got = Nx.backend_copy(ExBurn.Serving.run(name, elem(pool, i)), Nx.BinaryBackend)

          if Nx.all_close(got, expected[i], atol: 1.0e-5, rtol: 1.0e-4) |> Nx.to_number() == 1,
            do: :ok,
            else: {:wrong, i, Nx.to_flat_list(got) |> Enum.take(4)}
        rescue
          e -> {:error, Exception.message(e)}
        catch
          :exit, reason -> {:exit, reason}
        end

      done = System.monotonic_time(:millisecond)
      if done >= record_from, do: :ets.insert(stats, {done, System.monotonic_time(:microsecond) - t0, outcome})
      {:cont, :ok}
    end
  end)
end

# Memory after every process is garbage-collected: the device's bytes in use, the BEAM's total.
memory = fn ->
  for pid <- Process.list(), do: :erlang.garbage_collect(pid)
  {:ok, %{bytes_in_use: device}} = ExCubecl.memory_info()
  {:erlang.memory(:total) / 1_048_576, device / 1_048_576}
end

{beam0, device0} = memory.()

IO.puts(
  "serving soak: #{callers} callers, #{seconds} s after #{warmup} s of warm-up, a line every #{every} s; " <>
    "device #{ExBurn.default_device_spec()}, batch size #{batch_size}, partitions #{opts[:partitions] || System.schedulers_online()}, " <>
    "memory before: BEAM #{Float.round(beam0, 1)} MiB, device #{Float.round(device0, 2)} MiB"
)

IO.puts("  t(s)   req/s  p50(ms)  p99(ms)  errors  beam(MiB)  device(MiB)")
tasks = for c <- 1..callers, do: Task.async(fn -> caller.(c * 1000) end)
Process.sleep(max(record_from - System.monotonic_time(:millisecond), 0))

windows =
  Stream.iterate(1, &(&1 + 1))
  |> Enum.reduce_while([], fn w, acc ->
    Process.sleep(max(record_from + w * every * 1000 - System.monotonic_time(:millisecond), 0))
    to = record_from + w * every * 1000
    from = to - every * 1000

    rows =
      :ets.select(stats, [
        {{:"$1", :"$2", :"$3"}, [{:andalso, {:>=, :"$1", from}, {:<, :"$1", to}}], [{{:"$2", :"$3"}}]}
      ])

    :ets.select_delete(stats, [{{:"$1", :_, :_}, [{:<, :"$1", to}], [true]}])
    latencies = rows |> Enum.map(&elem(&1, 0)) |> Enum.sort()
    count = length(latencies)
    errors = Enum.count(rows, &(elem(&1, 1) != :ok))
    pick = fn q -> if count == 0, do: 0.0, else: Enum.at(latencies, min(count - 1, trunc(q * count))) / 1000 end

    for {_, e} <- Enum.take(Enum.reject(rows, &(elem(&1, 1) == :ok)), 3),
        do: IO.puts("  error: #{inspect(e, limit: 8)}")

    {beam, device} = memory.()

    window = %{
      t: w * every,
      rps: count / every,
      p50: pick.(0.5),
      p99: pick.(0.99),
      errors: errors,
      beam: beam,
      device: device,
      requests: count
    }

    IO.puts(
      :io_lib.format("  ~4B  ~7.1f  ~7.2f  ~7.2f  ~6B  ~9.1f  ~11.2f", [
        window.t,
        window.rps,
        window.p50,
        window.p99,
        window.errors,
        window.beam,
        window.device
      ])
    )

    if to >= stop_at, do: {:halt, Enum.reverse([window | acc])}, else: {:cont, [window | acc]}
  end)

Enum.each(tasks, &Task.await(&1, 120_000))
[first | _] = windows
last = List.last(windows)
errors = Enum.sum(Enum.map(windows, & &1.errors))
total = Enum.sum(Enum.map(windows, & &1.requests))
p99s = windows |> Enum.map(& &1.p99) |> Enum.sort()
median_p99 = Enum.at(p99s, div(length(p99s), 2))
beam_bound = first.beam + max(0.25 * first.beam, 16.0)
device_bound = first.device + 1.0
p99_bound = 3 * max(median_p99, 1.0)

IO.puts(
  "serving soak: #{total} requests in #{seconds} s (#{Float.round(total / seconds, 1)}/s), #{errors} errors; " <>
    "p50 #{first.p50} -> #{last.p50} ms, p99 #{first.p99} -> #{last.p99} ms (median window #{median_p99}, bound #{Float.round(p99_bound, 2)}); " <>
    "device memory #{Float.round(first.device, 2)} -> #{Float.round(last.device, 2)} MiB (bound #{Float.round(device_bound, 2)}); " <>
    "BEAM #{Float.round(first.beam, 1)} -> #{Float.round(last.beam, 1)} MiB (bound #{Float.round(beam_bound, 1)})"
)

failures =
  [
    errors > 0 && "#{errors} errors",
    total == 0 && "no request answered",
    last.device > device_bound && "device memory grew",
    last.beam > beam_bound && "BEAM memory grew",
    (length(windows) > 1 and last.p99 > p99_bound) && "p99 drifted past 3x the median window's"
  ]
  |> Enum.filter(& &1)

if failures != [] do
  IO.puts("serving soak: FAILED: #{Enum.join(failures, ", ")}")
  System.halt(1)
end
