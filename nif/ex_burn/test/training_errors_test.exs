defmodule ExBurn.TrainingErrorsTest do
  # Bad arguments to ExBurn.Training and its callbacks raise ArgumentError naming the
  # function and the value.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  import ExBurn.TrainingHelpers

  alias ExBurn.Training
  alias ExBurn.Training.Callbacks

  ## Errors

  test "bad arguments raise naming the function and the value" do
    model = linear(:sgd)
    {x, y} = hd(batches())

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown option\(s\) :epoch \(options: /, fn ->
      Training.fit(model, {x, y}, epoch: 2)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown optimizer :lion/, fn ->
      Training.fit(model, {x, y}, optimizer: :lion)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown option\(s\) :b1 for the :sgd optimizer/, fn ->
      Training.fit(model, {x, y}, b1: 0.5)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown schedule :linear/, fn ->
      Training.fit(model, {x, y}, schedule: :linear)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: invalid :lr_schedule \{:linear, 0.1\}/, fn ->
      Training.fit(model, {x, y}, lr_schedule: {:linear, 0.1})
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown :grad_method :symbolic/, fn ->
      Training.fit(model, {x, y}, grad_method: :symbolic)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :epochs must be a positive integer, got 0/, fn ->
      Training.fit(model, {x, y}, epochs: 0)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :batch_size must be a positive integer, got -2/, fn ->
      Training.fit(model, {x, y}, batch_size: -2)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :shuffle must be a boolean, got :yes/, fn ->
      Training.fit(model, {x, y}, shuffle: :yes)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :verbose must be a boolean or an IO device, got 3/, fn ->
      Training.fit(model, {x, y}, verbose: 3)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: x has 4 samples but y has 3/, fn ->
      Training.fit(model, {x, Nx.iota({3, 1}, type: :f32)})
    end

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: targets of shape \{4, 2\} don't fit the model's output \{nil, 1\}/,
                 fn -> Training.fit(model, {x, Nx.iota({4, 2}, type: :f32)}) end

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: input of shape \{4, 3\} doesn't match the model's input \{nil, 2\}/,
                 fn -> Training.fit(model, {Nx.iota({4, 3}, type: :f32), y}) end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :batch_size applies to \{x, y\} tensors/, fn ->
      Training.fit(model, batches(), batch_size: 2)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown metric :recal/, fn ->
      Training.fit(model, {x, y}, metrics: [:recal])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.Callbacks.early_stopping: cannot monitor :val_loss/, fn ->
      Training.fit(model, {x, y}, verbose: false, callbacks: [Callbacks.early_stopping(monitor: :val_loss)])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: invalid callback :log/, fn ->
      Training.fit(model, {x, y}, callbacks: [:log])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: a callback must return the metrics map, got :ok/, fn ->
      Training.fit(model, {x, y}, verbose: false, callbacks: [fn _ -> :ok end])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: the model has no loss/, fn ->
      Training.fit(%{model | loss_fn: nil}, {x, y})
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.train_step: \[:epochs\] are options of fit\/3/, fn ->
      Training.train_step(model, {x, y}, epochs: 2)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.train_step: expected a batch \{x, y\}, got/, fn ->
      Training.train_step(model, x)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.evaluate: unknown option\(s\) :epochs/, fn ->
      Training.evaluate(model, {x, y}, epochs: 1)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.compute_gradients: :epsilon must be a positive number/, fn ->
      Training.compute_gradients(model, {x, y}, grad_method: :numerical, epsilon: 0)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.Callbacks.early_stopping: invalid :patience: 0/, fn ->
      Callbacks.early_stopping(patience: 0)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.Callbacks.checkpoint: unknown option\(s\) \[:dir\]/, fn ->
      Callbacks.checkpoint(dir: "x")
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.Callbacks.on: unknown event\(s\) \[:done\]/, fn ->
      Callbacks.on(:done, fn _ -> :continue end)
    end
  end
end
