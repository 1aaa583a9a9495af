# Nx.Random and dropout through ExBurn (issue 56's figures): `Nx.Random.uniform` of 32 and
# 2^20 values, eager and jitted, against Nx.BinaryBackend; an Axon MLP 784-256-10 training
# step (Polaris Adam, batch 64) with and without one `Axon.dropout(rate: 0.2)`.
#
#     cd nif/ex_burn
#     EX_CUBECL_PROFILE=release MIX_ENV=prod mix run bench/random.exs [--quick]
#
# Medians after warm-up; every timed call ends with its result on the device synchronised
# (for BinaryBackend, computed). `--quick` takes fewer runs and leaves out 2^20 values on
# BinaryBackend and eagerly (tens of seconds each on lavapipe); `--steps` times only the jitted
# uniform of 32 values and the two steps, 200 runs each (an A/B of builds).
defmodule Bench do
  def median(fun, iters) do
    for(_ <- 1..3, do: fun.())
    times = for _ <- 1..iters, do: elem(:timer.tc(fun), 0)
    Enum.at(Enum.sort(times), div(iters, 2)) / 1000
  end

  def row(label, ms), do: IO.puts(String.pad_trailing(label, 58) <> String.pad_leading(:erlang.float_to_binary(ms / 1, decimals: 3), 10) <> " ms")
end

quick = "--quick" in System.argv()
# --steps: only the jitted uniform of 32 values and the two training steps, 200 runs each
steps_only = "--steps" in System.argv()
iters = cond do
  steps_only -> 200
  quick -> 5
  true -> 50
end
# (a device string: EX_CUBECL_DEVICE where set, as scripts/elixir_gpu.sh sets it)
device = System.get_env("EX_CUBECL_DEVICE") || if(function_exported?(ExBurn, :default_device_spec, 0), do: apply(ExBurn, :default_device_spec, []), else: ExBurn.default_device())
IO.puts("device: #{device}")
sync = fn t ->
  :ok = ExCubecl.synchronize(device: device)
  t
end

uniform = fn key, n -> Nx.Random.uniform(key, shape: {n, 1}) end

for n <- if(steps_only, do: [32], else: [32, 1_048_576]) do
  key = Nx.Random.key(42) |> Nx.backend_transfer({ExBurn.Backend, device: device})
  host_key = Nx.Random.key(42) |> Nx.backend_copy(Nx.BinaryBackend)
  jitted = Nx.Defn.jit(fn k -> uniform.(k, n) end, compiler: ExBurn.Defn.Compiler)
  Bench.row("Nx.Random.uniform #{n} jitted (ExBurn)", Bench.median(fn -> jitted.(key) |> elem(0) |> sync.() end, iters))

  # called directly, with the compiler as the global default (as the seed's Quick Start sets
  # it): each call runs the cached program
  previous = Nx.Defn.default_options(compiler: ExBurn.Defn.Compiler)
  direct = fn -> uniform.(key, n) |> elem(0) |> sync.() end
  Bench.row("Nx.Random.uniform #{n} called, compiler: ExBurn (default)", Bench.median(direct, iters))
  Nx.Defn.default_options(previous)

  unless (quick and n > 32) or steps_only do
    eager = fn -> Nx.with_default_backend({ExBurn.Backend, device: device}, fn -> uniform.(key, n) end) |> elem(0) |> sync.() end
    Bench.row("Nx.Random.uniform #{n} eager (ExBurn)", Bench.median(eager, max(div(iters, 5), 3)))
    binary = fn -> Nx.with_default_backend(Nx.BinaryBackend, fn -> uniform.(host_key, n) end) end
    Bench.row("Nx.Random.uniform #{n} (Nx.BinaryBackend)", Bench.median(binary, if(n > 32, do: 3, else: max(div(iters, 5), 3))))
  end
end

step_ms = fn dropout? ->
  model = Axon.input("x", shape: {nil, 784}) |> Axon.dense(256, activation: :relu)
  model = if dropout?, do: Axon.dropout(model, rate: 0.2), else: model
  model = Axon.dense(model, 10)
  loss = &Axon.Losses.categorical_cross_entropy(&1, &2, from_logits: true, reduction: :mean)
  {init_fn, step_fn} = Axon.Loop.train_step(model, loss, Polaris.Optimizers.adam(learning_rate: 1.0e-3))
  x = Nx.iota({64, 784}, type: :f32) |> Nx.divide(64 * 784) |> Nx.backend_transfer({ExBurn.Backend, device: device})
  y = Nx.iota({64, 1}) |> Nx.remainder(10) |> Nx.equal(Nx.iota({1, 10})) |> Nx.as_type(:f32) |> Nx.backend_transfer({ExBurn.Backend, device: device})
  init = Nx.Defn.jit(init_fn, compiler: ExBurn.Defn.Compiler)
  step = Nx.Defn.jit(step_fn, compiler: ExBurn.Defn.Compiler)
  state = init.({x, y}, Axon.ModelState.empty())
  # each step trains on from the state the previous one left (as a training loop does)
  Process.put(:bench_state, state)
  run = fn -> Process.put(:bench_state, step.({x, y}, Process.get(:bench_state))) |> sync.() end
  Bench.median(run, iters)
end

without = step_ms.(false)
with_dropout = step_ms.(true)
Bench.row("Axon MLP 784-256-10 step, batch 64 (Adam), no dropout", without)
Bench.row("the same with Axon.dropout(rate: 0.2)", with_dropout)
IO.puts("dropout / no dropout: #{Float.round(with_dropout / without, 2)}x")
