defmodule ExBurn.TrainingCallbacksTest do
  # fit/3's callbacks: the metrics map each gets, stopping, the learning rate they set,
  # checkpoints, history and logging, progress messages.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  import ExUnit.CaptureIO
  import ExBurn.TrainingHelpers

  alias ExBurn.Model
  alias ExBurn.Training
  alias ExBurn.Training.Callbacks

  @dir Path.join(System.tmp_dir!(), "ex_burn_training_test_#{System.unique_integer([:positive])}")

  setup_all do
    File.mkdir_p!(@dir)
    on_exit(fn -> File.rm_rf!(@dir) end)
    :ok
  end

  ## Callbacks

  test "callbacks get the documented metrics map after each epoch, in the order given, each the previous one's map" do
    me = self()
    {x, y} = blobs(8)
    {vx, vy} = blobs(4)

    tag = fn name ->
      fn metrics ->
        send(me, {name, metrics})
        Map.update(metrics, :seen, [name], &(&1 ++ [name]))
      end
    end

    callbacks = [
      tag.(:first),
      tag.(:second),
      Callbacks.on(:epoch_completed, fn state -> send(me, {:axon, state.epoch}) && :continue end)
    ]

    Training.fit(classifier(), {x, y},
      epochs: 2,
      batch_size: 8,
      validation_data: {vx, vy},
      accuracy: true,
      callbacks: callbacks,
      verbose: false
    )

    assert [
             {:first, m1},
             {:second, s1},
             {:axon, 0},
             {:first, m2},
             {:second, s2},
             {:axon, 1}
           ] = collect()

    for {m, epoch} <- [{m1, 1}, {m2, 2}] do
      assert %{epoch: ^epoch, loss: loss, val_loss: val_loss, accuracy: acc, val_accuracy: val_acc, model: %Model{}} = m
      assert Enum.all?([loss, val_loss, acc, val_acc], &is_float/1)
      assert Enum.sort(Map.keys(m)) == [:accuracy, :epoch, :learning_rate, :loss, :model, :val_accuracy, :val_loss]
    end

    assert s1.seen == [:first] and s2.seen == [:first]
    # the map's model is the model after that epoch
    assert_in_delta Training.evaluate(m2.model, {vx, vy}), m2.val_loss, 1.0e-5
  end

  defp collect do
    receive do
      msg -> [msg | collect()]
    after
      0 -> []
    end
  end

  test "a callback returning stop_training: true halts training (the documented custom callback)" do
    {x, y} = blobs(8)

    custom_callback = fn
      %{loss: loss, epoch: epoch} when loss < 0.01 or epoch >= 3 ->
        IO.puts("Converged!")
        %{epoch: epoch, loss: loss, stop_training: true}

      metrics ->
        metrics
    end

    out =
      capture_io(fn ->
        {_m, history} =
          Training.fit_with_progress(classifier(), {x, y},
            epochs: 8,
            batch_size: 8,
            verbose: false,
            callbacks: [custom_callback]
          )

        send(self(), {:epochs, length(history)})
      end)

    assert_received {:epochs, 3}
    assert out == "Converged!\n"
  end

  test "EarlyStoppingCallback.wait/2 stops after `patience` epochs without an improvement over min_delta" do
    {x, y} = blobs(8)

    epochs = fn callback ->
      {_m, history} =
        Training.fit_with_progress(classifier(learning_rate: 0.05), {x, y},
          epochs: 6,
          batch_size: 8,
          verbose: false,
          callbacks: [callback]
        )

      length(history)
    end

    assert epochs.(ExBurn.Training.EarlyStoppingCallback.wait(2, 10.0)) == 3
    assert epochs.(ExBurn.Training.EarlyStoppingCallback.wait(2)) == 6
    assert epochs.(Callbacks.early_stopping(patience: 1, min_delta: 10.0, monitor: :loss)) == 2
  end

  test "ReduceLROnPlateauCallback and WarmupCallback set the learning rate of the next epochs" do
    {x, y} = blobs(8)
    plateau = ExBurn.Training.ReduceLROnPlateauCallback.new(patience: 1, factor: 0.5, min_delta: 10.0)

    {_model, history} =
      Training.fit_with_progress(classifier(learning_rate: 0.01), {x, y},
        epochs: 4,
        batch_size: 8,
        verbose: false,
        callbacks: [plateau]
      )

    assert_lrs(Enum.map(history, & &1.learning_rate), [0.01, 0.01, 0.005, 0.0025])

    model = linear(:sgd, learning_rate: 0.1, optimizer: {:sgd, momentum: nil})
    warmup = ExBurn.Training.WarmupCallback.linear(2, 0.1, 0.3)

    {trained, history} =
      Training.fit_with_progress(model, [hd(batches())], epochs: 4, verbose: false, callbacks: [warmup])

    assert_lrs(Enum.map(history, & &1.learning_rate), [0.1, 0.2, 0.3, 0.3])

    assert_params(
      trained,
      reference({:sgd, momentum: nil}, List.duplicate(hd(batches()), 4), fn t ->
        Enum.at([0.1, 0.2, 0.3, 0.3], t - 1)
      end)
    )
  end

  test "CheckpointCallback.every/2 saves every n epochs, loadable with load(model, path)" do
    {x, y} = blobs(8)
    dir = Path.join(@dir, "ckpt")

    trained =
      Training.fit(classifier(), {x, y},
        epochs: 4,
        batch_size: 8,
        verbose: false,
        callbacks: [ExBurn.Training.CheckpointCallback.every(2, dir)]
      )

    assert File.ls!(dir) |> Enum.sort() == ["epoch_2.exburn", "epoch_4.exburn"]
    assert {:ok, loaded} = Model.load(classifier(), Path.join(dir, "epoch_4.exburn"))
    assert bytes(loaded) == bytes(trained)
  end

  test "HistoryCallback records the metrics maps; LoggingCallback.log/1 prints them" do
    {x, y} = blobs(8)

    out =
      capture_io(fn ->
        Training.fit(classifier(), {x, y},
          epochs: 2,
          batch_size: 8,
          verbose: false,
          callbacks: [&ExBurn.Training.LoggingCallback.log/1, ExBurn.Training.HistoryCallback.new()]
        )
      end)

    history = ExBurn.Training.HistoryCallback.get_history()
    assert history == ExBurn.Training.HistoryCallback.get_history(ExBurn.Training.HistoryCallback.pid())
    assert [%{epoch: 1, loss: l1}, %{epoch: 2, loss: l2}] = history
    refute Map.has_key?(hd(history), :model)
    assert [line1, _line2] = String.split(out, "\n", trim: true)
    assert line1 == "Epoch 1 - loss: #{:erlang.float_to_binary(l1, decimals: 4)} - lr: 0.1000"
    assert is_float(l2)
  end

  test "fit_with_progress/3 with to: pid sends progress messages" do
    {x, y} = blobs(8)

    {_model, history} =
      Training.fit_with_progress(classifier(), {x, y}, epochs: 2, batch_size: 8, verbose: false, to: self())

    [e1, e2] = history
    assert_received {:training_progress, 1, loss1, nil}
    assert_received {:training_progress, 2, loss2, nil}
    assert {loss1, loss2} == {e1.loss, e2.loss}
  end
end
