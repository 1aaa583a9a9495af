# Epoch time of the digits MLP (the Rust job's 64-128-64-10, batch 32, Adam) and CNN (its two
# 3x3 convolutions, max pool, 256-64-10; `--models mlp,cnn`, the default) from Elixir, on
# the split that `digits --export-data PATH` writes; compare with the Rust job's "time per
# epoch" on the same device (`digits --model mlp`):
#   * ExBurn.Training.fit (Axon's loop, one compiled call per step), median of 3 epochs;
#   * plain Axon.Loop.trainer |> Axon.Loop.run with ExBurn.Defn.Compiler;
#   * 45 ExBurn.Training.train_step calls on one batch (the steps alone, loss read back);
#   * the same Axon loop on Nx.BinaryBackend with Nx.Defn.Evaluator (one epoch).
# The ExBurn rows run fused and unfused (ExBurn.Defn.Compiler's :fuse), alternated twice.
#
#     cd nif/ex_burn
#     EX_CUBECL_PROFILE=release MIX_ENV=prod mix run bench/digits_epoch.exs --data DIGITS.mpk [--no-binary] [--no-unfused] [--models mlp,cnn]
#
# `--no-binary` leaves out the BinaryBackend epoch (about a minute), `--no-unfused` the
# unfused programs (each model runs fused twice instead).
Code.require_file("../examples/digits_models.exs", __DIR__)

defmodule Bench.Digits do
  def ms(fun) do
    {us, result} = :timer.tc(fun)
    {us / 1000, result}
  end

  def batches(x, y, backend) do
    x = Nx.backend_copy(x, backend)
    y = Nx.backend_copy(y, backend)
    Enum.zip(Nx.to_batched(x, 32, leftover: :discard), Nx.to_batched(y, 32, leftover: :discard))
  end

  def axon_epoch(axon, batches, compiler) do
    loop = Axon.Loop.trainer(axon, &Axon.Losses.categorical_cross_entropy(&1, &2, from_logits: true, reduction: :mean), Polaris.Optimizers.adam(learning_rate: 3.0e-3), log: 0)
    state = Axon.Loop.run(loop, Enum.take(batches, 1), Axon.ModelState.empty(), epochs: 1, compiler: compiler)
    elem(ms(fn -> Axon.Loop.run(loop, batches, state, epochs: 1, compiler: compiler) end), 0)
  end
end

{opts, _, _} = OptionParser.parse(System.argv(), strict: [data: :string, binary: :boolean, models: :string, unfused: :boolean])
models = String.split(opts[:models] || "mlp,cnn", ",")
Logger.configure(level: :info)
Nx.global_default_backend(ExBurn.Backend)
d = ExBurn.Record.load!(opts[:data] || raise("digits_epoch.exs: --data DIGITS.mpk is required"))
x = d["train.images"]
y = ExBurn.Dataset.one_hot(d["train.labels"], 10)
IO.puts("device: #{ExBurn.default_device_spec()}; #{elem(Nx.shape(x), 0)} training images, batch 32, ms per epoch\n")

fit = fn model -> ExBurn.Training.fit(model, {x, y}, epochs: 1, batch_size: 32, verbose: false) end
xb = Nx.slice_along_axis(x, 0, 32)
yb = Nx.slice_along_axis(y, 0, 32)
ex_batches = Bench.Digits.batches(x, y, ExBurn.Backend)

# Per model, fused and unfused programs (ExBurn.Defn.Compiler's :fuse), alternated.
fusions = if Keyword.get(opts, :unfused, true), do: [true, false, true, false], else: [true, true]

for name <- models, fuse <- fusions do
  axon = Digits.Models.model(name)
  model = ExBurn.Model.compile(axon, loss: :cross_entropy, optimizer: :adam, learning_rate: 3.0e-3, seed: 42)
  Application.put_env(:ex_burn, :defn_fuse, fuse)
  ExBurn.Defn.Compiler.clear_cache()
  tag = "#{name}, " <> if(fuse, do: "fused", else: "unfused")
  model = fit.(model)
  epochs = for _ <- 1..3, do: elem(Bench.Digits.ms(fn -> fit.(model) end), 0)
  IO.puts("| ExBurn.Training.fit, #{tag} | #{Enum.at(Enum.sort(epochs), 1)} |")
  {_loss, m} = ExBurn.Training.train_step(model, {xb, yb})
  steps = fn -> Enum.reduce(1..45, m, fn _, m -> {_loss, m} = ExBurn.Training.train_step(m, {xb, yb}); m end) end
  steps.()
  IO.puts("| 45 ExBurn.Training.train_step calls, #{tag} | #{elem(Bench.Digits.ms(steps), 0)} |")
  IO.puts("| Axon.Loop.trainer + run, ExBurn.Defn.Compiler, #{tag} | #{Bench.Digits.axon_epoch(axon, ex_batches, ExBurn.Defn.Compiler)} |")
end

Application.delete_env(:ex_burn, :defn_fuse)

if Keyword.get(opts, :binary, true) do
  Nx.global_default_backend(Nx.BinaryBackend)
  bin_batches = Bench.Digits.batches(x, y, Nx.BinaryBackend)
  for name <- models do
    IO.puts("| Axon.Loop.trainer + run, Nx.Defn.Evaluator on Nx.BinaryBackend, #{name} | #{Bench.Digits.axon_epoch(Digits.Models.model(name), bin_batches, Nx.Defn.Evaluator)} |")
  end
end
