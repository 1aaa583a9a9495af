# A soak of a supervised ExBurn.Serving: 64 concurrent callers send requests of 1 to 4 rows to
# a small Axon classifier for a bounded time; every few seconds a line gives the window's
# throughput, p50 and p99 latency, errors, and the BEAM's and the device's memory. At the end
# the run fails (exit 1) on any error, on device memory that grew (last window against the
# first, past a tolerance of 1 MiB), or on a p99 of the last window over 3x the first's.
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/serving_soak.exs [--seconds 120] [--every 10] [--callers 64]
#
# On lavapipe (CI: a few minutes) and on a GPU for an hour (`--seconds 3600`); the figures go
# in benches/RESULTS.md.
{opts, _, _} = OptionParser.parse(System.argv(), strict: [seconds: :integer, every: :integer, callers: :integer])
seconds = opts[:seconds] || 120
every = opts[:every] || 10
callers = opts[:callers] || 64

Nx.default_backend(ExBurn.Backend)

model = Axon.input("x", shape: {nil, 16}) |> Axon.dense(64, activation: :relu) |> Axon.dense(10) |> Axon.softmax()
{init_fn, _} = Axon.build(model)
model_state = init_fn.(Nx.broadcast(0.0, {1, 16}), Axon.ModelState.empty())
name = ServingSoak.Serving

{:ok, _sup} =
  Supervisor.start_link([ExBurn.Serving.supervise({model, model_state}, name: name, batch_size: 16, batch_timeout: 2)],
    strategy: :one_for_one
  )

# Requests: rows of a fixed host-side random pool, so that every answer can be checked against
# the first answer to the same request.
pool = for i <- 1..32, do: Nx.tensor(for(_ <- 1..(1 + rem(i, 4)), do: for(_ <- 1..16, do: :rand.uniform() - 0.5)))
expected = Map.new(Enum.with_index(pool), fn {x, i} -> {i, Nx.backend_copy(ExBurn.Serving.run(name, x), Nx.BinaryBackend)} end)

stats = :ets.new(:soak, [:public, :duplicate_bag, write_concurrency: true])
stop_at = System.monotonic_time(:millisecond) + seconds * 1000

caller = fn caller_id ->
  Stream.iterate(caller_id, &(&1 + 1))
  |> Enum.reduce_while(:ok, fn n, :ok ->
    if System.monotonic_time(:millisecond) >= stop_at do
      {:halt, :ok}
    else
      i = rem(n, length(pool))
      t0 = System.monotonic_time(:microsecond)

      outcome =
        try do
          got = Nx.backend_copy(ExBurn.Serving.run(name, Enum.at(pool, i)), Nx.BinaryBackend)
          if Nx.all_close(got, expected[i], atol: 1.0e-5) |> Nx.to_number() == 1, do: :ok, else: :wrong
        rescue
          e -> {:error, Exception.message(e)}
        end

      :ets.insert(stats, {System.monotonic_time(:millisecond), System.monotonic_time(:microsecond) - t0, outcome})
      {:cont, :ok}
    end
  end)
end

device_bytes = fn ->
  {:ok, %{bytes_in_use: b}} = ExCubecl.memory_info()
  b
end

IO.puts("serving soak: #{callers} callers, #{seconds} s, a line every #{every} s (device #{ExBurn.default_device()})")
IO.puts("  t(s)  req/s   p50(ms)  p99(ms)  errors  beam(MiB)  device(MiB)")
tasks = for c <- 1..callers, do: Task.async(fn -> caller.(c * 1000) end)
started = System.monotonic_time(:millisecond)

windows =
  Stream.iterate(1, &(&1 + 1))
  |> Enum.reduce_while([], fn w, acc ->
    Process.sleep(every * 1000)
    now = System.monotonic_time(:millisecond)
    from = now - every * 1000
    rows = :ets.select(stats, [{{:"$1", :"$2", :"$3"}, [{:>=, :"$1", from}], [{{:"$2", :"$3"}}]}])
    :ets.select_delete(stats, [{{:"$1", :_, :_}, [{:<, :"$1", from}], [true]}])
    latencies = rows |> Enum.map(&elem(&1, 0)) |> Enum.sort()
    errors = Enum.count(rows, &(elem(&1, 1) != :ok))
    pick = fn q -> if latencies == [], do: 0.0, else: Enum.at(latencies, min(length(latencies) - 1, trunc(q * length(latencies)))) / 1000 end
    for {_, e} <- rows, e != :ok, do: IO.puts("  error: #{inspect(e)}")
    :erlang.garbage_collect()
    window = %{t: div(now - started, 1000), rps: length(rows) / every, p50: pick.(0.5), p99: pick.(0.99), errors: errors,
               beam: :erlang.memory(:total) / 1_048_576, device: device_bytes.() / 1_048_576}
    IO.puts(:io_lib.format("  ~4B  ~7.1f  ~7.2f  ~7.2f  ~6B  ~9.1f  ~11.2f", [window.t, window.rps, window.p50, window.p99, window.errors, window.beam, window.device]))
    if now >= stop_at, do: {:halt, Enum.reverse([window | acc])}, else: {:cont, [window | acc]}
  end)

Enum.each(tasks, &Task.await(&1, 60_000))
[first | _] = windows
last = List.last(windows)
errors = Enum.sum(Enum.map(windows, & &1.errors))
total = Enum.sum(Enum.map(windows, &(&1.rps * every)))

IO.puts(
  "serving soak: #{round(total)} requests, #{errors} errors; p99 #{first.p99} -> #{last.p99} ms; " <>
    "device memory #{Float.round(first.device, 2)} -> #{Float.round(last.device, 2)} MiB; BEAM #{Float.round(first.beam, 1)} -> #{Float.round(last.beam, 1)} MiB"
)

failures =
  [
    errors > 0 && "#{errors} errors",
    last.device > first.device + 1.0 && "device memory grew",
    length(windows) > 1 and last.p99 > 3 * max(first.p99, 1.0) && "p99 grew more than 3x"
  ]
  |> Enum.filter(& &1)

if failures != [] do
  IO.puts("serving soak: FAILED: #{Enum.join(failures, ", ")}")
  System.halt(1)
end
