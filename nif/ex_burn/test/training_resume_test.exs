defmodule ExBurn.TrainingResumeTest do
  # Exact resume (issue 54): a run of fit/3 stopped after epoch 2 and resumed from its
  # checkpoint (resume: the checkpoint callback's folder) ends bit for bit where the
  # uninterrupted run ends: the parameters, the dropout layer's random key, every tensor of
  # Adam's state, the step count, the history, and the last checkpoint file byte for byte.
  # The run exercises what a checkpoint must carry: shuffled data (the order of each epoch), a
  # dropout layer (its key), an epoch-counted cosine schedule (the epoch), a callback that
  # changes the learning rate (the factor), a last smaller batch.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  alias ExBurn.{Model, Training}
  alias ExBurn.Training.CheckpointCallback
  alias Nx.Defn.Composite

  @opts [
    epochs: 4,
    batch_size: 16,
    shuffle: true,
    lr_schedule: {:cosine, 0.02, 1.0e-3},
    accuracy: true,
    verbose: false
  ]

  defp data do
    {values, _} = Enum.map_reduce(1..(40 * 6), :rand.seed_s(:exsss, 11), fn _, s -> :rand.uniform_s(s) end)
    x = values |> Nx.tensor(type: :f32) |> Nx.reshape({40, 6})
    sums = Nx.sum(x, axes: [1])
    class = Nx.add(Nx.greater(sums, 2.6), Nx.greater(sums, 3.4))
    {x, Nx.equal(Nx.new_axis(class, 1), Nx.iota({1, 3})) |> Nx.as_type(:f32)}
  end

  defp model(optimizer \\ :adam) do
    Axon.input("x", shape: {nil, 6})
    |> Axon.dense(16, activation: :relu)
    |> Axon.dropout(rate: 0.25, seed: 7)
    |> Axon.dense(3)
    |> Axon.softmax()
    |> Model.compile(loss: :cross_entropy, optimizer: optimizer, learning_rate: 0.01, seed: 3)
  end

  # Lowers the learning rate of the epochs that follow by 10% after each epoch.
  defp decay, do: fn metrics -> Map.update!(metrics, :learning_rate, &(&1 * 0.9)) end

  defp stop_after(k),
    do: fn metrics -> if metrics.epoch == k, do: Map.put(metrics, :stop_training, true), else: metrics end

  # Every byte of the model's training state.
  defp snapshot(%Model{optimizer_state: %{state: state, updates: updates}} = model) do
    %{
      params: Map.new(Model.parameters(model), fn {name, t} -> {name, {t.type, t.shape, Nx.to_binary(t)}} end),
      optimizer: [state] |> Composite.flatten_list() |> Enum.map(&{&1.type, &1.shape, Nx.to_binary(&1)}),
      updates: updates
    }
  end

  defp epochs_in(dir), do: dir |> File.ls!() |> Enum.sort()

  setup_all do
    root = Path.join(System.tmp_dir!(), "ex_burn_resume_#{System.unique_integer([:positive])}")
    File.rm_rf!(root)
    on_exit(fn -> File.rm_rf!(root) end)
    straight_dir = Path.join(root, "straight")

    {straight, history} =
      Training.fit_with_progress(
        model(),
        data(),
        @opts ++ [callbacks: [decay(), CheckpointCallback.every(1, straight_dir)]]
      )

    %{root: root, straight_dir: straight_dir, straight: straight, history: history}
  end

  test "a run stopped after epoch 2 and resumed from its checkpoint ends bit for bit where the uninterrupted run ends",
       ctx do
    stopped_dir = Path.join(ctx.root, "stopped")
    resumed_dir = Path.join(ctx.root, "resumed")
    callbacks = [decay(), CheckpointCallback.every(1, stopped_dir), stop_after(2)]
    stopped = Training.fit(model(), data(), @opts ++ [callbacks: callbacks])
    assert epochs_in(stopped_dir) == ["epoch_1.exburn", "epoch_2.exburn"]
    assert snapshot(stopped) != snapshot(ctx.straight)

    {resumed, history} =
      Training.fit_with_progress(
        model(),
        data(),
        @opts ++ [callbacks: [decay(), CheckpointCallback.every(1, resumed_dir)], resume: stopped_dir]
      )

    assert epochs_in(resumed_dir) == ["epoch_3.exburn", "epoch_4.exburn"]
    assert snapshot(resumed) == snapshot(ctx.straight), "the resumed run ends elsewhere than the uninterrupted one"
    assert history == ctx.history
    assert [3, 4] == Enum.map(history, & &1.epoch) |> Enum.drop(2)

    assert File.read!(Path.join(resumed_dir, "epoch_4.exburn")) ==
             File.read!(Path.join(ctx.straight_dir, "epoch_4.exburn")),
           "the last checkpoints differ"

    IO.puts(
      "training resume: stopped after epoch 2 of 4, resumed from #{Path.basename(stopped_dir)}/epoch_2.exburn: " <>
        "#{map_size(snapshot(resumed).params)} parameter tensors, #{length(snapshot(resumed).optimizer)} optimizer tensors, " <>
        "#{snapshot(resumed).updates} steps, all bit for bit the uninterrupted run's"
    )
  end

  test "a checkpoint is a model file; resume refuses a plain save, another optimizer, a damaged file", ctx do
    last = Path.join(ctx.straight_dir, "epoch_4.exburn")
    second = Path.join(ctx.straight_dir, "epoch_2.exburn")

    # Read as any model file: the parameters.
    assert {:ok, loaded} = Model.load(model(), last)
    assert snapshot(%{loaded | optimizer_state: ctx.straight.optimizer_state}) == snapshot(ctx.straight)

    # From the last epoch's checkpoint there is nothing left to train.
    done = Training.fit(model(), data(), @opts ++ [resume: last])
    assert snapshot(done) == snapshot(ctx.straight)

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: the checkpoint to resume from is of epoch 2, past epochs: 1/,
                 fn ->
                   Training.fit(model(), data(), Keyword.put(@opts, :epochs, 1) ++ [resume: second])
                 end

    plain = Path.join(ctx.root, "plain.exburn")
    :ok = Model.save(ctx.straight, plain)

    assert_raise ArgumentError, ~r/plain.exburn holds no training state/, fn ->
      Training.fit(model(), data(), @opts ++ [resume: plain])
    end

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: the checkpoint .* is of another run: it has the optimizer/,
                 fn ->
                   Training.fit(model(:sgd), data(), @opts ++ [resume: second])
                 end

    empty = Path.join(ctx.root, "empty")
    File.mkdir_p!(empty)

    assert_raise ArgumentError, ~r/no checkpoint \(epoch_<n>.exburn\) in the folder/, fn ->
      Training.fit(model(), data(), @opts ++ [resume: empty])
    end

    assert_raise ExBurn.Error, ~r/ExBurn.Training.fit: cannot read .*missing.exburn/, fn ->
      Training.fit(model(), data(), @opts ++ [resume: Path.join(ctx.root, "missing.exburn")])
    end

    damaged = Path.join(ctx.root, "damaged.exburn")
    <<head::binary-size(100), byte, rest::binary>> = File.read!(second)
    File.write!(damaged, <<head::binary, Bitwise.bxor(byte, 1), rest::binary>>)

    assert_raise ExBurn.Error, ~r/checksum mismatch/, fn ->
      Training.fit(model(), data(), @opts ++ [resume: damaged])
    end
  end
end
