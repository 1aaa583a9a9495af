# Every ExCubecl.Native call of one data-parallel step of ExBurn.Training.fit/3 (devices:),
# in order: the process that made it, the call, its tensors' device, and how long it held
# the caller (call to return, host time), to see which calls only queue work and which wait
# for a device. The MLP of bench/scale.exs, 8 steps of `batch` per device; the fourth step of
# the second fit is traced (the first fit compiles).
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/trace_step.exs [--kind cuda | --devices a,b] [--hidden 1024]
#         [--batch 1024] [--metrics]
#
# On a GPU machine: bash scripts/elixir_gpu.sh nif/ex_burn/bench/trace_step.exs --kind cuda
{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [kind: :string, devices: :string, hidden: :integer, batch: :integer, metrics: :boolean]
  )

kind = opts[:kind] || "cuda"
hidden = opts[:hidden] || 1024
batch = opts[:batch] || 1024

devices =
  if opts[:devices],
    do: String.split(opts[:devices], ","),
    else: for(%{device: d} <- ExCubecl.devices(), String.starts_with?(d, kind), do: d)

IO.puts("trace_step: devices: #{inspect(devices)}")
if devices == [], do: System.halt(0)
n = length(devices)

key = Nx.Random.key(0)
{x, key} = Nx.Random.normal(key, shape: {8 * batch * n, 784}, type: :f32)
{labels, _} = Nx.Random.randint(key, 0, 10, shape: {8 * batch * n}, type: :s64)
x = Nx.backend_copy(x, Nx.BinaryBackend)
y = labels |> Nx.new_axis(1) |> Nx.equal(Nx.iota({1, 10})) |> Nx.as_type(:f32) |> Nx.backend_copy(Nx.BinaryBackend)

model =
  Axon.input("x", shape: {nil, 784})
  |> Axon.dense(hidden, activation: :relu)
  |> Axon.dense(hidden, activation: :relu)
  |> Axon.dense(10)
  |> ExBurn.Model.compile(
    loss: :cross_entropy,
    loss_opts: [from_logits: true],
    optimizer: :sgd,
    learning_rate: 0.01,
    seed: 0
  )
  |> ExBurn.Model.to_device(hd(devices))

fit_opts =
  [devices: devices, epochs: 1, batch_size: batch * n, shuffle: false, verbose: false] ++
    if(opts[:metrics], do: [accuracy: true], else: [])

_ = ExBurn.Training.fit(model, {x, y}, fit_opts)

# A process is never its own tracer: the calls go to this one.
tracer =
  spawn(fn ->
    collect = fn collect, acc ->
      receive do
        {:done, to} -> send(to, {:traced, Enum.reverse(acc)})
        message -> collect.(collect, [message | acc])
      end
    end

    collect.(collect, [])
  end)

window =
  ExBurn.Training.Callbacks.on(:iteration_completed, fn state ->
    case state.iteration do
      2 -> :erlang.trace(:all, true, [:call, :timestamp, {:tracer, tracer}])
      3 -> :erlang.trace(:all, false, [:call, :timestamp])
      _ -> :ok
    end

    :continue
  end)

:erlang.trace_pattern({ExCubecl.Native, :_, :_}, [{:_, [], [{:return_trace}]}], [:local])
_ = ExBurn.Training.fit(model, {x, y}, [callbacks: [window]] ++ fit_opts)
:erlang.trace_pattern({ExCubecl.Native, :_, :_}, false, [:local])
send(tracer, {:done, self()})
trace = receive(do: ({:traced, t} -> t))

describe = fn
  r when is_reference(r) ->
    try do
      case ExCubecl.Native.device(r) do
        {:ok, dev} -> "tensor@#{dev}"
        _ -> "tensor(freed)"
      end
    rescue
      ArgumentError -> "ref"
    end

  b when is_binary(b) and byte_size(b) <= 24 ->
    inspect(b)

  b when is_binary(b) ->
    "<<#{byte_size(b)} bytes>>"

  l when is_list(l) ->
    "[#{length(l)}]"

  other ->
    inspect(other, limit: 3)
end

{t0, _} =
  Enum.find_value(trace, fn
    {:trace_ts, _pid, :call, _mfa, ts} -> {ts, nil}
    _ -> nil
  end) || {nil, nil}

# Each call with the host time until its return (calls of one process return in order).
{rows, _open} =
  Enum.reduce(trace, {[], %{}}, fn
    {:trace_ts, pid, :call, {_m, fun, args}, ts}, {rows, open} ->
      row = %{pid: pid, fun: fun, args: Enum.map_join(args, ", ", describe), at: :timer.now_diff(ts, t0)}
      {[row | rows], Map.update(open, pid, [row.at], &[row.at | &1])}

    {:trace_ts, pid, :return_from, {_m, fun, _a}, _result, ts}, {rows, open} ->
      [at | rest] = Map.fetch!(open, pid)

      rows =
        Enum.map(rows, fn r ->
          if r.pid == pid and r.at == at and r.fun == fun, do: Map.put(r, :us, :timer.now_diff(ts, t0) - at), else: r
        end)

      {rows, Map.put(open, pid, rest)}

    _other, acc ->
      acc
  end)

for r <- Enum.reverse(rows) do
  IO.puts(
    "trace_step: #{String.pad_leading(to_string(r.at), 7)} us #{inspect(r.pid)} #{r.fun}(#{r.args}) held #{r[:us] || "?"} us"
  )
end

calls = Enum.frequencies(Enum.map(rows, & &1.fun))
IO.puts("trace_step: calls in the step: #{inspect(calls)}")
