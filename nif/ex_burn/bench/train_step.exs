# The MLP 784-256-128-10 training step (softmax cross-entropy, Adam, lr 1e-3) from Elixir:
#   * as Axon users write it: Axon 0.8.1's `Axon.Loop.train_step` (the step of
#     `Axon.Loop.trainer`) with Polaris's Adam, jitted with ExBurn.Defn.Compiler;
#   * in plain defn (the Rust benchmark's math: Adam in tensor ops, the state fed back),
#     jitted with ExBurn.Defn.Compiler, and through Nx.Defn.Evaluator on ExBurn.Backend;
# and a jitted 16-element add. Compare with the Rust step on the same device: the benches
# crate's `pipeline` binary (scripts/pipeline_cuda.sh), and its "tiny add" row.
#
#     cd nif/ex_burn
#     EX_CUBECL_PROFILE=release MIX_ENV=prod mix run bench/train_step.exs [--batches 64,1024] [--iters N] [--warmup N]
#
# Medians of the time per step, each step ending in a device sync (its loss read back), after
# warm-up steps (the first call compiles). "NIF calls" counts the calls of ExCubecl.Native
# functions in one warm step.
defmodule Bench.MLP do
  import Nx.Defn

  @layers [784, 256, 128, 10]

  def params(key) do
    @layers
    |> Enum.chunk_every(2, 1, :discard)
    |> Enum.map_reduce(key, fn [i, o], key ->
      {w, key} = Nx.Random.normal(key, 0.0, :math.sqrt(2 / i), shape: {i, o})
      {[w, Nx.broadcast(0.0, {1, o})], key}
    end)
    |> elem(0)
    |> List.flatten()
    |> List.to_tuple()
  end

  defn loss({w1, b1, w2, b2, w3, b3}, x, y) do
    logits = x |> Nx.dot(w1) |> Nx.add(b1) |> Nx.max(0) |> Nx.dot(w2) |> Nx.add(b2) |> Nx.max(0) |> Nx.dot(w3) |> Nx.add(b3)
    log_probs = logits - Nx.logsumexp(logits, axes: [1], keep_axes: true)
    -Nx.mean(Nx.sum(log_probs * y, axes: [1]))
  end

  # One step: the loss, and the next {params, first moments, second moments, step count}.
  defn step({params, m, v, t}, x, y) do
    {loss, g} = value_and_grad(params, &loss(&1, x, y))
    t = t + 1
    c1 = 1 - 0.9 ** t
    c2 = 1 - 0.999 ** t
    m = zip_map(m, g, fn m, g -> 0.9 * m + 0.1 * g end)
    v = zip_map(v, g, fn v, g -> 0.999 * v + 0.001 * g * g end)
    update = zip_map(m, v, fn m, v -> m / c1 / (Nx.sqrt(v / c2) + 1.0e-8) end)
    params = zip_map(params, update, fn p, u -> p - 1.0e-3 * u end)
    {loss, {params, m, v, t}}
  end

  deftransformp zip_map(a, b, fun), do: Enum.zip_with(Tuple.to_list(a), Tuple.to_list(b), fun) |> List.to_tuple()

  def zeros_like(params), do: params |> Tuple.to_list() |> Enum.map(&Nx.broadcast(0.0, &1)) |> List.to_tuple()
end

defmodule Bench do
  def median(fun, warmup, iters) do
    for _ <- 1..warmup, do: fun.()
    times = for _ <- 1..iters, do: elem(:timer.tc(fun), 0)
    Enum.at(Enum.sort(times), div(iters, 2))
  end

  def nif_calls(fun) do
    :erlang.trace_pattern({ExCubecl.Native, :_, :_}, true, [:call_count])

    try do
      fun.()
      for {name, arity} <- ExCubecl.Native.__info__(:functions), {:call_count, n} = :erlang.trace_info({ExCubecl.Native, name, arity}, :call_count), is_integer(n) and n > 0, do: {name, n}
    after
      :erlang.trace_pattern({ExCubecl.Native, :_, :_}, false, [:call_count])
    end
  end

  def ms(us), do: :erlang.float_to_binary(us / 1000, decimals: 3)
end

{opts, _, _} = OptionParser.parse(System.argv(), strict: [batches: :string, iters: :integer, warmup: :integer])
batches = (opts[:batches] || "64,1024") |> String.split(",") |> Enum.map(&String.to_integer/1)
iters = opts[:iters] || 100
warmup = opts[:warmup] || 10

Nx.global_default_backend(ExBurn.Backend)
device = ExBurn.default_device_spec()
IO.puts("device: #{device} (#{ExBurn.device_name()}); medians of #{iters} steps after #{warmup}, ms per step (step + loss read back)\n")
IO.puts("| batch | step | ms/step | NIF calls/step | launches replayed |")
IO.puts("|---|---|---|---|---|")

compiler = ExBurn.Defn.Compiler

for batch <- batches do
  key = Nx.Random.key(batch)
  {x, key} = Nx.Random.uniform(key, shape: {batch, 784}, type: :f32)
  y = Nx.iota({batch, 10}) |> Nx.remainder(10) |> Nx.equal(Nx.remainder(Nx.iota({batch, 1}), 10)) |> Nx.as_type(:f32)
  params = Bench.MLP.params(key)
  state = {params, Bench.MLP.zeros_like(params), Bench.MLP.zeros_like(params), Nx.tensor(0.0)}

  # plain defn, compiled: the state fed back every step
  ExBurn.Defn.Compiler.clear_cache()
  step = Nx.Defn.jit(&Bench.MLP.step/3, compiler: compiler)
  run = fn st -> {loss, st} = step.(st, x, y); Nx.to_number(loss); st end
  {:ok, holder} = Agent.start_link(fn -> state end)
  one = fn -> Agent.update(holder, run, :infinity) end
  us = Bench.median(one, warmup, iters)
  calls = Bench.nif_calls(fn -> {loss, st} = step.(Agent.get(holder, & &1), x, y); Agent.update(holder, fn _ -> st end); loss end)
  launches = with [{_, %{ref: ref}} | _] <- :ets.tab2list(ExBurn.Defn.Cache), {:ok, {_, _, _, n, _}} <- ExCubecl.Native.program_info(ref), do: n, else: (_ -> "?")
  IO.puts("| #{batch} | defn, ExBurn.Defn.Compiler | #{Bench.ms(us)} | #{inspect(calls)} | #{launches} |")

  # the same defn through Nx.Defn.Evaluator, one NIF call per op
  eval_step = Nx.Defn.jit(&Bench.MLP.step/3, compiler: Nx.Defn.Evaluator)
  eval_us = Bench.median(fn -> {loss, _} = eval_step.(state, x, y); Nx.to_number(loss) end, 2, max(div(iters, 10), 3))
  IO.puts("| #{batch} | defn, Nx.Defn.Evaluator on ExBurn.Backend | #{Bench.ms(eval_us)} | | | (compiled #{Float.round(eval_us / us, 1)}x faster)")

  # Axon's train step with Polaris's Adam
  model = Axon.input("x", shape: {nil, 784}) |> Axon.dense(256, activation: :relu) |> Axon.dense(128, activation: :relu) |> Axon.dense(10, activation: :softmax)
  {init_fn, step_fn} = Axon.Loop.train_step(model, :categorical_cross_entropy, Polaris.Optimizers.adam(learning_rate: 1.0e-3))
  axon_state = Nx.Defn.jit(init_fn, compiler: compiler).({x, y}, Axon.ModelState.empty())
  axon_step = Nx.Defn.jit(step_fn, compiler: compiler)
  Agent.update(holder, fn _ -> axon_state end)
  axon_one = fn -> Agent.update(holder, fn st -> st = axon_step.({x, y}, st); Nx.to_number(st.loss); st end, :infinity) end
  axon_us = Bench.median(axon_one, warmup, iters)
  axon_calls = Bench.nif_calls(fn -> Agent.update(holder, fn st -> axon_step.({x, y}, st) end) end)
  IO.puts("| #{batch} | Axon.Loop.train_step + Polaris Adam, ExBurn.Defn.Compiler | #{Bench.ms(axon_us)} | #{inspect(axon_calls)} | |")
  Agent.stop(holder)
end

t = Nx.iota({16}, type: :f32)
add = Nx.Defn.jit(&Nx.add/2, compiler: compiler)
add_us = Bench.median(fn -> add.(t, t) |> Nx.to_binary() end, 100, 2000)
IO.puts("\njitted 16-element f32 add + read back: #{add_us} us (#{inspect(Bench.nif_calls(fn -> add.(t, t) end))} per call)")
sync = fn -> :ok = ExCubecl.synchronize(device: device) end
add_sync_us = Bench.median(fn -> add.(t, t); sync.() end, 100, 2000)
IO.puts("jitted 16-element f32 add + sync: #{add_sync_us} us")

# Where the jitted add's time goes: the program's NIF call alone (no Nx.Defn.jit around it),
# the jit call without a sync (queued work), the sync alone, and the eager Nx.add.
[{_, %{ref: program}}] = :ets.tab2list(ExBurn.Defn.Cache) |> Enum.filter(fn {_, p} -> match?(%Nx.Tensor{shape: {16}}, p.result) end)
ref = t.data.ref
part = fn label, fun -> IO.puts("  #{label}: #{Bench.median(fun, 100, 2000)} us") end
part.("program_run NIF + sync", fn -> ExCubecl.Native.program_run(program, [ref, ref]); sync.() end)
part.("program_run NIF alone, queued", fn -> ExCubecl.Native.program_run(program, [ref, ref]) end)
part.("jitted add alone, queued", fn -> add.(t, t) end)
part.("sync alone, idle device", sync)
part.("eager Nx.add + sync", fn -> Nx.add(t, t); sync.() end)
