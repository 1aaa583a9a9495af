# An MNIST-like classifier, the whole deep learning pipeline on ExBurn: the 8x8 handwritten
# digits (1,797 images that the smartcore crate ships, split and standardised by the Rust
# digits job, nothing downloaded), an Axon MLP compiled with ExBurn.Model, trained with
# ExBurn.Training.fit/3 (validation, accuracy, cosine schedule, callbacks), evaluated, used
# for predictions, saved and loaded back. Fails under 90% test accuracy.
#
#     mix run examples/mnist_simple.exs [--data DIGITS.mpk] [--epochs N] [--batch N] [--lr X]
#
# Without --data it runs the Rust job's `digits --export-data` (the binary in
# $CARGO_TARGET_DIR, else `cargo run`) to write the split into a temporary folder.
defmodule MnistSimple do
  @root Path.expand("../../..", __DIR__)

  # The seeded split of the Rust job, as tensors: images [n, 64] f32, labels [n] s32.
  def load(nil) do
    dir = Path.join(System.tmp_dir!(), "ex_burn_mnist_simple_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    path = Path.join(dir, "digits.mpk")
    {cmd, args} = exporter(path)
    IO.puts("exporting the digits: #{Path.basename(cmd)} #{Enum.join(args, " ")}")

    case System.cmd(cmd, args, cd: @root, stderr_to_stdout: true) do
      {_, 0} -> load(path)
      {out, status} -> raise "mnist_simple.exs: exporting the digits failed (#{status}):\n#{out}"
    end
  end

  def load(path) do
    d = ExBurn.Record.load!(path)
    {d["train.images"], Nx.as_type(d["train.labels"], :s32), d["test.images"], Nx.as_type(d["test.labels"], :s32)}
  end

  defp exporter(path) do
    target = System.get_env("CARGO_TARGET_DIR") || Path.expand("~/.cache/ex_cubecl/target")
    built = Enum.find(["release", "debug"], &File.exists?(Path.join([target, &1, "digits"])))

    if built do
      {Path.join([target, built, "digits"]), ["--export-data", path]}
    else
      {"cargo", ["run", "--locked", "--release", "-q", "-p", "ex_cubecl_examples", "--bin", "digits", "--", "--export-data", path]}
    end
  end

  def pct(x), do: "#{:erlang.float_to_binary(100 * x, decimals: 2)}%"
end

{opts, _, _} = OptionParser.parse(System.argv(), strict: [data: :string, epochs: :integer, batch: :integer, lr: :float])
epochs = opts[:epochs] || 10
batch = opts[:batch] || 32
lr = opts[:lr] || 3.0e-3

Nx.default_backend(ExBurn.Backend)
IO.puts("device: #{inspect(ExBurn.default_device())} (#{ExBurn.device_name()})")

# 1. Data: standardised 8x8 images, integer labels (cross-entropy takes class indices)
{train_x, train_y, test_x, test_y} = MnistSimple.load(opts[:data])
IO.puts("#{elem(Nx.shape(train_x), 0)} training and #{elem(Nx.shape(test_x), 0)} test images of #{elem(Nx.shape(train_x), 1)} pixels")

# 2. Model: an MLP ending in logits
model =
  Axon.input("input", shape: {nil, 64})
  |> Axon.dense(128, activation: :relu, name: "hidden1")
  |> Axon.dropout(rate: 0.2)
  |> Axon.dense(64, activation: :relu, name: "hidden2")
  |> Axon.dense(10, name: "output")

# 3. Compile: loss, optimizer, device, initial parameters
compiled =
  ExBurn.Model.compile(model,
    loss: :cross_entropy,
    optimizer: :adam,
    learning_rate: lr,
    device: ExBurn.default_device()
  )

IO.puts(ExBurn.Model.summary(compiled))

# 4. Train: validation each epoch, accuracy, cosine schedule, a log line per epoch, early stop
started = System.monotonic_time(:millisecond)

trained =
  ExBurn.Training.fit(compiled, {train_x, train_y},
    epochs: epochs,
    batch_size: batch,
    shuffle: true,
    validation_data: {test_x, test_y},
    accuracy: true,
    lr_schedule: {:cosine, lr, 1.0e-5},
    verbose: false,
    callbacks: [
      &ExBurn.Training.LoggingCallback.log/1,
      ExBurn.Training.EarlyStoppingCallback.wait(5, 1.0e-4)
    ]
  )

seconds = (System.monotonic_time(:millisecond) - started) / 1000
IO.puts("trained in #{Float.round(seconds, 1)} s (#{Float.round(seconds / epochs, 2)} s per epoch)")

# 5. Evaluate
{loss, accuracy} = ExBurn.Training.evaluate(trained, {test_x, test_y}, true)
IO.puts("test loss #{Float.round(loss, 4)}, test accuracy #{MnistSimple.pct(accuracy)}")

# 6. Predict: the first ten test images
{:ok, logits} = ExBurn.Model.predict(trained, test_x[0..9])
IO.puts("predicted: #{inspect(Nx.to_flat_list(Nx.argmax(logits, axis: 1)))}")
IO.puts("labels:    #{inspect(Nx.to_flat_list(test_y[0..9]))}")

# 7. Save and load back: the same predictions
path = Path.join(System.tmp_dir!(), "ex_burn_mnist_simple.bin")
:ok = ExBurn.Model.save(trained, path)
{:ok, reloaded} = ExBurn.Model.load(compiled, path)
{:ok, again} = ExBurn.Model.predict(reloaded, test_x[0..9])
same = Nx.equal(again, logits) |> Nx.all() |> Nx.to_number() == 1
IO.puts("saved to #{path}; reloaded predictions identical: #{same}")

if not same, do: raise("mnist_simple.exs: the reloaded model predicts differently")
if accuracy < 0.9, do: raise("mnist_simple.exs: test accuracy #{MnistSimple.pct(accuracy)} is under 90%")
