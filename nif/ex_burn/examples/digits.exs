# The Elixir main job: the Rust job's 8x8 digits (the same images and seeded split, written by
# `digits --export-data`), an Axon MLP and a small CNN trained on ExBurn with
# ExBurn.Training (one compiled call per step), a line per epoch, the final test accuracy,
# a save -> load round trip, and the Rust job's saved MLP loaded into the same Axon MLP.
# scripts/run_elixir.sh does the set-up and runs it:
#
#     mix run examples/digits.exs --data DIGITS.mpk [--rust-mlp MLP.mpk] [--model mlp|cnn|all]
#                                 [--rust-hits N] [--epochs N] [--batch N] [--lr X] [--out DIR]
Code.require_file("digits_models.exs", __DIR__)

defmodule Digits do
  @classes 10
  # The Rust job's module paths and the Axon layers they pair with (ExBurn.Record.Axon).
  @rust_mlp [{"hidden1", "dense_0"}, {"hidden2", "dense_1"}, {"output", "dense_2"}]

  def compile(axon, opts) do
    ExBurn.Model.compile(axon,
      loss: :cross_entropy,
      optimizer: :adam,
      learning_rate: opts[:lr],
      seed: opts[:seed]
    )
  end

  def accuracy(model, x, labels), do: hits(model, x, labels) / elem(Nx.shape(labels), 0)

  def hits(model, x, labels) do
    {:ok, output} = ExBurn.Model.predict(model, x)
    predicted = output |> Nx.argmax(axis: 1) |> Nx.as_type(:s32)
    predicted |> Nx.equal(labels) |> Nx.sum() |> Nx.to_number()
  end

  def train(name, axon, data, opts) do
    %{x_train: x, y_train: y, x_test: xt, labels_test: lt, y_test: yt} = data
    model = compile(axon, opts)
    IO.puts("\n#{name}: #{ExBurn.Model.info(model).total_params} parameters")
    steps = opts[:epochs] * ceil(elem(Nx.shape(x), 0) / opts[:batch])
    started = System.monotonic_time(:millisecond)

    model =
      ExBurn.Training.fit(model, {x, y},
        epochs: opts[:epochs],
        batch_size: opts[:batch],
        seed: opts[:seed],
        schedule: {:cosine, decay_steps: steps},
        validation_data: {xt, yt},
        accuracy: true
      )

    seconds = (System.monotonic_time(:millisecond) - started) / 1000
    acc = accuracy(model, xt, lt)
    IO.puts("#{name}: final test accuracy #{pct(acc)}; #{Float.round(seconds / opts[:epochs], 2)} s per epoch")

    path = Path.join(opts[:out], "ex_burn_digits_#{name}.exburn")
    :ok = ExBurn.Model.save(model, path)
    {:ok, reloaded} = ExBurn.Model.load(compile(axon, opts), path)
    {{:ok, a}, {:ok, b}} = {ExBurn.Model.predict(reloaded, xt), ExBurn.Model.predict(model, xt)}
    same = Nx.equal(a, b) |> Nx.all() |> Nx.to_number()
    IO.puts("#{name}: saved to #{path}; reloaded predictions identical: #{same == 1}")
    if same != 1, do: raise("#{name}: the reloaded model predicts differently")
    acc
  end

  # The Rust job's saved MLP in the Axon MLP; with `--rust-hits N` (the test images the Rust
  # job classified right, as it printed), fails unless Elixir gets the same count.
  def rust_mlp(path, data, opts) do
    {:ok, model} = ExBurn.Model.import_params(compile(Digits.Models.mlp(), opts), path, @rust_mlp)
    hits = hits(model, data.x_test, data.labels_test)
    n = elem(Nx.shape(data.labels_test), 0)
    IO.puts("\nRust job's MLP (#{path}) in the Axon MLP: test accuracy #{pct(hits / n)} (#{hits}/#{n})")

    if (want = opts[:rust_hits]) && want != hits,
      do: raise("digits.exs: the Rust job classified #{want} test images right, its weights in Elixir #{hits}")
  end

  def pct(x), do: "#{:erlang.float_to_binary(100 * x, decimals: 2)}%"

  def load(path) do
    d = ExBurn.Record.load!(path)
    one_hot = &ExBurn.Dataset.one_hot(&1, num_classes: @classes)
    %{x_train: d["train.images"], y_train: one_hot.(d["train.labels"]), x_test: d["test.images"], labels_test: Nx.as_type(d["test.labels"], :s32), y_test: one_hot.(d["test.labels"])}
  end
end

{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [data: :string, rust_mlp: :string, rust_hits: :integer, model: :string, epochs: :integer, batch: :integer, lr: :float, seed: :integer, out: :string]
  )

opts = Keyword.merge([model: "all", batch: 32, lr: 3.0e-3, seed: 42, out: System.tmp_dir!()], opts)
data = Digits.load(opts[:data] || raise("digits.exs: --data DIGITS.mpk is required (digits --export-data writes it)"))
Nx.default_backend(ExBurn.Backend)
Logger.configure(level: :info)
IO.puts("device: #{ExBurn.default_device_spec()}; #{elem(Nx.shape(data.x_train), 0)} training and #{elem(Nx.shape(data.x_test), 0)} test images")

accuracies =
  for {name, axon, epochs} <- [{"mlp", Digits.Models.mlp(), 10}, {"cnn", Digits.Models.cnn(), 8}], opts[:model] in [name, "all"] do
    Digits.train(name, axon, data, Keyword.put_new(opts, :epochs, epochs))
  end

if path = opts[:rust_mlp], do: Digits.rust_mlp(path, data, opts)
if Enum.any?(accuracies, &(&1 < 0.95)), do: raise("digits.exs: a model stayed under 95% test accuracy")
