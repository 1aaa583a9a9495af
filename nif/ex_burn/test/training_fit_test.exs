defmodule ExBurn.TrainingFitTest do
  # ExBurn.Training.fit/3 with its data, options and defaults, the models it trains (frozen
  # layers, layers with state), one compiled call a step; Axon's own trainer through the
  # compiler; the timing of a step. The hand-computed references are ExBurn.TrainingHelpers'.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  import ExUnit.CaptureIO
  import ExBurn.TrainingHelpers

  alias ExBurn.Model
  alias ExBurn.Training

  ## fit/3

  test "fit/3 learns a separable data set and returns the trained model; fit_with_progress/3 the history" do
    {x, y} = blobs(32)
    {val_x, val_y} = blobs(8)
    model = classifier()
    {loss_before, _} = Training.evaluate(model, {x, y}, true)

    {trained, history} =
      Training.fit_with_progress(model, {x, y},
        epochs: 6,
        batch_size: 16,
        accuracy: true,
        validation_data: {val_x, val_y},
        verbose: false,
        seed: 1
      )

    assert %Model{} = trained
    assert Enum.map(history, & &1.epoch) == [1, 2, 3, 4, 5, 6]

    assert Enum.all?(
             history,
             &(Enum.sort(Map.keys(&1)) == [:accuracy, :epoch, :learning_rate, :loss, :val_accuracy, :val_loss])
           )

    assert Enum.all?(history, &(&1.learning_rate == 0.1 and is_float(&1.val_loss) and is_float(&1.val_accuracy)))
    losses = Enum.map(history, & &1.loss)
    assert List.last(losses) < hd(losses)
    {loss, accuracy} = Training.evaluate(trained, {x, y}, true)
    assert loss < 0.2 and loss < loss_before
    assert accuracy == 1.0
    assert_in_delta List.last(history).val_loss, Training.evaluate(trained, {val_x, val_y}), 1.0e-5
    assert trained.optimizer_state.updates == 12

    again = Training.fit(model, {x, y}, epochs: 6, batch_size: 16, verbose: false, seed: 1)
    assert bytes(again) == bytes(trained)
  end

  test "fit/3 on batches, resuming the optimizer state; evaluate/2 against the hand loss" do
    model = linear(:adam, learning_rate: 0.05)
    once = Training.fit(model, batches(), epochs: 1, verbose: false)
    assert_params(once, reference({:adam, []}, batches(), fn _ -> 0.05 end))
    twice = Training.fit(once, batches(), epochs: 1, verbose: false)
    assert_params(twice, reference({:adam, []}, batches() ++ batches(), fn _ -> 0.05 end))

    p = %{"lin.kernel" => w0(), "lin.bias" => b0()}
    [{xa, ya}, {xb, yb}] = batches()
    want = (Nx.to_number(hand_loss(p, xa, ya)) + Nx.to_number(hand_loss(p, xb, yb))) / 2
    assert_in_delta Training.evaluate(model, batches()), want, 1.0e-6
    # mse has no classes: accuracy is nil
    assert {loss, nil} = Training.evaluate(model, batches(), true)
    assert_in_delta loss, want, 1.0e-6
  end

  test "fit/3 defaults: 10 epochs, a progress line per epoch (verbose: true)" do
    {x, y} = blobs(8)
    out = capture_io(fn -> send(self(), {:model, Training.fit(classifier(), {x, y}, batch_size: 8)}) end)
    assert_received {:model, %Model{optimizer_state: %{updates: 10}}}
    lines = String.split(out, "\n", trim: true)
    assert length(lines) == 10

    assert hd(lines) =~
             ~r/^Epoch 1\/10 - loss: \d+\.\d{4} - lr: 0\.1000 - \d+ samples\/s - \d+\.\d\ds - ETA \d+\.\d\ds$/

    assert List.last(lines) =~ ~r/^Epoch 10\/10 .* ETA 0\.00s$/
  end

  test "lr_schedule: step, exponential and cosine, counted in epochs, with warmup" do
    {x, y} = blobs(8)

    lrs = fn opts ->
      {_m, history} =
        Training.fit_with_progress(classifier(), {x, y}, [epochs: 4, batch_size: 8, verbose: false] ++ opts)

      Enum.map(history, & &1.learning_rate)
    end

    assert_lrs(lrs.(lr_schedule: {:step, 0.01, 2, 0.5}), [0.01, 0.01, 0.005, 0.005])
    assert_lrs(lrs.(lr_schedule: {:exponential, 0.01, 0.5}), [0.01, 0.005, 0.0025, 0.00125])

    cosine = for e <- 0..3, do: 1.0e-4 + (0.01 - 1.0e-4) * (1 + :math.cos(:math.pi() * e / 4)) / 2
    assert_lrs(lrs.(lr_schedule: {:cosine, 0.01, 1.0e-4}), cosine)
    assert_lrs(lrs.(warmup: 2), [0.05, 0.1, 0.1, 0.1])

    # the schedule's rate is the step's: sgd on one batch per epoch, as by hand
    model = linear(:sgd, learning_rate: 0.1, optimizer: {:sgd, momentum: nil})
    trained = Training.fit(model, [hd(batches())], epochs: 3, verbose: false, lr_schedule: {:exponential, 0.2, 0.5})

    assert_params(
      trained,
      reference({:sgd, momentum: nil}, List.duplicate(hd(batches()), 3), fn t -> 0.2 * :math.pow(0.5, t - 1) end)
    )
  end

  test "nesterov: true is SGD's Nesterov momentum; accepted (without effect) with Adam" do
    model = linear(:sgd, learning_rate: 0.1)
    trained = Training.fit(model, batches(), epochs: 1, verbose: false, nesterov: true)
    assert_params(trained, reference({:sgd, momentum: 0.9, nesterov: true}, batches(), fn _ -> 0.1 end))

    adam = linear(:adam, learning_rate: 0.05)

    assert bytes(Training.fit(adam, batches(), epochs: 1, verbose: false, nesterov: true)) ==
             bytes(Training.fit(adam, batches(), epochs: 1, verbose: false))
  end

  test "each training step is one compiled call, a last smaller batch included" do
    {x, y} = blobs(10)
    model = classifier()

    runs =
      count_program_runs(fn ->
        Training.fit(model, {x, y}, epochs: 2, batch_size: 4, shuffle: false, verbose: false)
      end)

    # batches of 4, 4 and 2 in each epoch; the optimizer's initial state and the loop's
    assert runs == 2 * 3 + 2
  end

  defp count_program_runs(fun) do
    mfa = {ExCubecl.Native, :program_run, 2}
    # every run on a dirty scheduler: one program_run/2 per run
    Application.put_env(:ex_burn, :normal_scheduler_us, 0)
    :erlang.trace_pattern(mfa, true, [:call_count])

    try do
      fun.()
      {:call_count, n} = :erlang.trace_info(mfa, :call_count)
      n
    after
      :erlang.trace_pattern(mfa, false, [:call_count])
      Application.delete_env(:ex_burn, :normal_scheduler_us)
    end
  end

  test "frozen layers keep their parameters through training" do
    model =
      Axon.input("x", shape: {nil, 2})
      |> Axon.dense(3, activation: :tanh, name: "hidden")
      |> Axon.dense(1, name: "out")
      |> Model.compile(loss: :mse, optimizer: :sgd, learning_rate: 0.1, seed: 5)
      |> Model.freeze(["hidden"])

    grads = Training.compute_gradients(model, hd(batches()))
    assert Map.keys(grads) |> Enum.sort() == ["out.bias", "out.kernel"]

    trained = Training.fit(model, batches(), epochs: 2, verbose: false)
    before = bytes(model)
    after_ = bytes(trained)
    assert Map.take(after_, ["hidden.kernel", "hidden.bias"]) == Map.take(before, ["hidden.kernel", "hidden.bias"])
    refute after_["out.kernel"] == before["out.kernel"]
    assert Model.frozen_layers(trained) == MapSet.new(["hidden"])
  end

  test "layers with state (batch norm, dropout) train, their state updated by the step" do
    model =
      Axon.input("x", shape: {nil, 2})
      |> Axon.dense(4, name: "d")
      |> Axon.batch_norm(name: "bn")
      |> Axon.dropout(rate: 0.25, name: "drop")
      |> Axon.dense(1, name: "out")
      |> Model.compile(loss: :mse, optimizer: :sgd, learning_rate: 0.1, seed: 4)

    {trained, history} = Training.fit_with_progress(model, batches(), epochs: 2, verbose: false)
    assert length(history) == 2
    before = bytes(model)
    after_ = bytes(trained)
    for name <- ~w(bn.mean bn.var drop.key d.kernel out.kernel), do: refute(after_[name] == before[name], name)
    assert {:ok, %Nx.Tensor{shape: {4, 1}}} = Model.predict(trained, elem(hd(batches()), 0))
  end

  ## Axon directly

  test "Axon.Loop.trainer runs through ExBurn.Defn.Compiler as on Nx.Defn.Evaluator" do
    model = Axon.input("x", shape: {nil, 2}) |> Axon.dense(3, activation: :relu) |> Axon.dense(1)

    run = fn opts ->
      model
      |> Axon.Loop.trainer(:mean_squared_error, Polaris.Optimizers.adam(learning_rate: 0.05), log: 0, seed: 11)
      |> Axon.Loop.run(batches(), Axon.ModelState.empty(), [epochs: 2] ++ opts)
    end

    got = run.(compiler: ExBurn.Defn.Compiler)
    want = Nx.with_default_backend(Nx.BinaryBackend, fn -> run.(compiler: Nx.Defn.Evaluator) end)
    assert %ExBurn.Backend{} = got.data["dense_0"]["kernel"].data

    for {layer, params} <- want.data, {name, w} <- params do
      assert Nx.all_close(bin(got.data[layer][name]), w, atol: 1.0e-5) |> Nx.to_number() == 1, "#{layer}.#{name}"
    end
  end

  ## Timing

  test "profile_step/3 and benchmark of a training step" do
    profile = Training.profile_step(linear(:adam), hd(batches()), iterations: 2, warmup: 1)
    assert Enum.all?([:forward_ms, :total_ms, :first_call_ms, :samples_per_sec], &(profile[&1] > 0))
    assert profile.backward_ms >= 0 and profile.optimizer_ms >= 0

    bench = Model.benchmark(linear(:adam), hd(batches()), mode: :train, runs: 2, warmup: 1)
    assert %{mode: :train, batch_size: 4, runs: 2} = bench
    assert bench.median_ms > 0
  end
end
