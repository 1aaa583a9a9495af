defmodule ExBurn.TrainingTest do
  # ExBurn.Training against steps computed by hand on Nx.BinaryBackend: a linear model with
  # the mean squared error, whose gradient is x^T (2 (x w + b - y) / n); each optimizer,
  # schedule, clipping, accumulation and weight decay applied to it as the formulas say.
  # Then fit/3 with its data, metrics and callbacks, and Axon's own trainer through the
  # compiler.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  import ExUnit.CaptureIO

  alias ExBurn.Model
  alias ExBurn.Training
  alias ExBurn.Training.{Callbacks, History, Schedule}

  @dir Path.join(System.tmp_dir!(), "ex_burn_training_test_#{System.unique_integer([:positive])}")

  setup_all do
    File.mkdir_p!(@dir)
    on_exit(fn -> File.rm_rf!(@dir) end)
    :ok
  end

  ## The linear model and its hand-computed steps

  defp w0, do: Nx.tensor([[0.5], [-0.3]], backend: Nx.BinaryBackend)
  defp b0, do: Nx.tensor([0.1], backend: Nx.BinaryBackend)

  defp batches do
    [
      {Nx.tensor([[1.0, 2.0], [-1.0, 0.5], [0.5, -1.5], [2.0, 1.0]]), Nx.tensor([[1.0], [-0.5], [2.0], [0.0]])},
      {Nx.tensor([[0.0, 1.0], [1.5, -0.5], [-2.0, 1.0], [1.0, 1.0]]), Nx.tensor([[0.5], [1.0], [-1.0], [3.0]])}
    ]
  end

  defp linear(optimizer, opts \\ []) do
    Axon.input("x", shape: {nil, 2})
    |> Axon.dense(1, name: "lin")
    |> Model.compile(Keyword.merge([loss: :mse, optimizer: optimizer, seed: 0], opts))
    |> Model.update_params(%{"lin.kernel" => w0(), "lin.bias" => b0()})
  end

  defp bin(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  # d(mean((x w + b - y)^2)) / d{w, b}, by hand.
  defp hand_grad(%{"lin.kernel" => w, "lin.bias" => b}, x, y) do
    {x, y} = {bin(x), bin(y)}
    d = x |> Nx.dot(w) |> Nx.add(b) |> Nx.subtract(y) |> Nx.multiply(2 / Nx.size(y))
    %{"lin.kernel" => Nx.dot(Nx.transpose(x), d), "lin.bias" => Nx.sum(d, axes: [0])}
  end

  defp hand_loss(%{"lin.kernel" => w, "lin.bias" => b}, x, y),
    do: bin(x) |> Nx.dot(w) |> Nx.add(b) |> Nx.subtract(bin(y)) |> Nx.pow(2) |> Nx.mean()

  defp zip(a, b, fun), do: Map.new(a, fn {k, v} -> {k, fun.(v, Map.fetch!(b, k))} end)
  defp each(a, fun), do: Map.new(a, fn {k, v} -> {k, fun.(v)} end)

  # The optimizer's direction (before the learning rate) for gradient g at step t (from 1).
  defp direction({:sgd, o}, g, _p, s, _t) do
    case o[:momentum] do
      nil ->
        {g, s}

      m ->
        trace = zip(g, s[:trace] || each(g, &Nx.multiply(&1, 0)), fn g, tr -> Nx.add(Nx.multiply(tr, m), g) end)
        u = if o[:nesterov], do: zip(g, trace, fn g, tr -> Nx.add(Nx.multiply(tr, m), g) end), else: trace
        {u, %{trace: trace}}
    end
  end

  defp direction({kind, o}, g, p, s, t) when kind in [:adam, :adamw] do
    {b1, b2, eps, eps_root} =
      {o[:b1] || 0.9, o[:b2] || 0.999, o[:eps] || 1.0e-8, o[:eps_root] || if(kind == :adam, do: 1.0e-15, else: 0.0)}

    zero = each(g, &Nx.multiply(&1, 0))
    mu = zip(g, s[:mu] || zero, fn g, m -> Nx.add(Nx.multiply(1 - b1, g), Nx.multiply(b1, m)) end)
    nu = zip(g, s[:nu] || zero, fn g, v -> Nx.add(Nx.multiply(1 - b2, Nx.pow(g, 2)), Nx.multiply(b2, v)) end)

    u =
      zip(mu, nu, fn m, v ->
        Nx.divide(
          Nx.divide(m, 1 - :math.pow(b1, t)),
          Nx.add(Nx.sqrt(Nx.add(Nx.divide(v, 1 - :math.pow(b2, t)), eps_root)), eps)
        )
      end)

    u = if kind == :adamw, do: zip(u, p, fn u, p -> Nx.add(u, Nx.multiply(o[:weight_decay] || 1.0e-2, p)) end), else: u
    {u, %{mu: mu, nu: nu}}
  end

  defp direction({:rmsprop, o}, g, _p, s, _t) do
    d = o[:decay] || 0.9

    nu =
      zip(g, s[:nu] || each(g, &Nx.multiply(&1, 0)), fn g, v ->
        Nx.add(Nx.multiply(1 - d, Nx.pow(g, 2)), Nx.multiply(d, v))
      end)

    {zip(g, nu, fn g, v -> Nx.multiply(Nx.rsqrt(Nx.add(v, o[:eps] || 1.0e-8)), g) end), %{nu: nu}}
  end

  # Parameters after the hand-computed steps on `batches`, learning rate `lr.(t)`.
  defp reference(optimizer, batches, lr, opts \\ []) do
    p0 = %{"lin.kernel" => w0(), "lin.bias" => b0()}

    batches
    |> Enum.with_index(1)
    |> Enum.reduce({p0, %{}}, fn {{x, y}, t}, {p, s} ->
      g = hand_grad(p, x, y)
      g = if c = opts[:clip_value], do: each(g, &Nx.clip(&1, -c, c)), else: g
      g = if c = opts[:clip_norm], do: clip_norm(g, c), else: g
      g = if wd = opts[:l2], do: zip(g, p, fn g, p -> Nx.add(g, Nx.multiply(wd, p)) end), else: g
      {u, s} = direction(optimizer, g, p, s, t)
      {zip(p, u, fn p, u -> Nx.subtract(p, Nx.multiply(lr.(t), u)) end), s}
    end)
    |> elem(0)
  end

  defp clip_norm(g, c) do
    norm = g |> Map.values() |> Enum.map(&(&1 |> Nx.pow(2) |> Nx.sum() |> Nx.to_number())) |> Enum.sum() |> :math.sqrt()
    if norm < c, do: g, else: each(g, &Nx.multiply(&1, c / norm))
  end

  defp steps(model, batches, opts \\ []),
    do: Enum.reduce(batches, model, fn b, m -> m |> Training.train_step(b, opts) |> elem(0) end)

  defp assert_params(model, want, atol \\ 1.0e-6) do
    got = Model.parameters(model)

    for {name, w} <- want do
      assert Nx.all_close(bin(got[name]), w, atol: atol, rtol: 1.0e-5) |> Nx.to_number() == 1,
             "#{name}: got #{inspect(bin(got[name]))}, want #{inspect(w)}"
    end
  end

  defp bytes(model), do: model |> Model.parameters() |> Map.new(fn {k, t} -> {k, Nx.to_binary(t)} end)

  ## Gradients and single steps

  test "compute_gradients/3 gives the exact gradient of the loss" do
    model = linear(:sgd)
    [{x, y} | _] = batches()
    {loss, grads} = Training.compute_gradients(model, {x, y})
    p = %{"lin.kernel" => w0(), "lin.bias" => b0()}
    assert_in_delta Nx.to_number(loss), Nx.to_number(hand_loss(p, x, y)), 1.0e-6

    for {name, g} <- hand_grad(p, x, y),
        do: assert(Nx.all_close(bin(grads[name]), g, atol: 1.0e-6) |> Nx.to_number() == 1, name)
  end

  test "train_step/3 returns the batch's loss before the update" do
    [{x, y} | _] = batches()
    {model, loss} = Training.train_step(linear(:sgd, learning_rate: 0.1), {x, y})

    assert_in_delta Nx.to_number(loss),
                    Nx.to_number(hand_loss(%{"lin.kernel" => w0(), "lin.bias" => b0()}, x, y)),
                    1.0e-6

    assert %{key: _, state: _, updates: 1} = model.optimizer_state

    # the next step continues the optimizer state and replays the cached program
    size = ExBurn.Defn.Compiler.cache_size()
    {model, _loss} = Training.train_step(model, {x, y})
    assert ExBurn.Defn.Compiler.cache_size() == size
    assert model.optimizer_state.updates == 2
  end

  test "train_step/3 reuses the step it built for the same model, and builds anew for another" do
    [{x, y} | _] = batches()
    {model, _loss} = Training.train_step(linear(:sgd, learning_rate: 0.1), {x, y})
    spec = elem(model.optimizer_state.key, 0)
    built = ExBurn.Training.Step.build(model, spec)
    {next, _loss} = Training.train_step(model, {x, y})
    assert :erts_debug.same(ExBurn.Training.Step.build(next, spec).step, built.step)
    # another loss, or other trainable parameters, is another step
    refute :erts_debug.same(ExBurn.Training.Step.build(%{next | loss: :cross_entropy}, spec).step, built.step)
    refute ExBurn.Training.Step.build(Model.freeze(next, "lin"), spec).key == built.key
  end

  for {name, optimizer, lr} <- [
        {"sgd", {:sgd, []}, 0.1},
        {"sgd with momentum", {:sgd, momentum: 0.9}, 0.1},
        {"sgd with nesterov momentum", {:sgd, momentum: 0.9, nesterov: true}, 0.1},
        {"adam", {:adam, []}, 0.05},
        {"adam with its options", {:adam, b1: 0.8, b2: 0.99, eps: 1.0e-6}, 0.05},
        {"adamw", {:adamw, weight_decay: 0.1}, 0.05},
        {"rmsprop", {:rmsprop, decay: 0.8}, 0.01}
      ] do
    @optimizer optimizer
    @lr lr
    test "#{name}: two steps as computed by hand" do
      {kind, opts} = @optimizer
      model = linear({kind, opts}, learning_rate: @lr) |> steps(batches())
      assert_params(model, reference({kind, opts}, batches(), fn _ -> @lr end))
    end
  end

  test "weight decay (L2) adds wd * param to the gradient" do
    model = linear(:sgd, learning_rate: 0.1, weight_decay: 0.5) |> steps(batches())
    assert_params(model, reference({:sgd, []}, batches(), fn _ -> 0.1 end, l2: 0.5))
  end

  test "clip_value and clip_norm clip the gradient before the optimizer" do
    model = linear(:sgd, learning_rate: 0.1) |> steps(batches(), clip_value: 0.3)
    assert_params(model, reference({:sgd, []}, batches(), fn _ -> 0.1 end, clip_value: 0.3))
    model = linear(:sgd, learning_rate: 0.1) |> steps(batches(), clip_norm: 0.5)
    assert_params(model, reference({:sgd, []}, batches(), fn _ -> 0.1 end, clip_norm: 0.5))
    refute bytes(model) == bytes(linear(:sgd, learning_rate: 0.1) |> steps(batches()))
  end

  test "accumulate_gradients: n applies the mean gradient every n steps" do
    [{xa, ya}, {xb, yb}] = batches()
    p0 = %{"lin.kernel" => w0(), "lin.bias" => b0()}
    {one, _} = Training.train_step(linear(:sgd, learning_rate: 0.1), {xa, ya}, accumulate_gradients: 2)
    assert bytes(one) == bytes(linear(:sgd))

    {two, _} = Training.train_step(one, {xb, yb}, accumulate_gradients: 2)
    mean = zip(hand_grad(p0, xa, ya), hand_grad(p0, xb, yb), fn a, b -> Nx.divide(Nx.add(a, b), 2) end)
    want = zip(p0, mean, fn p, g -> Nx.subtract(p, Nx.multiply(0.1, g)) end)
    assert_params(two, want)

    {three, _} = Training.train_step(two, {xa, ya}, accumulate_gradients: 2)
    assert bytes(three) == bytes(two)
  end

  ## Schedules

  test "schedules give the learning rates of their formulas" do
    lr = 0.1

    at = fn spec, warmup, t ->
      lr |> Schedule.build(Schedule.validate!(spec, "test"), warmup) |> then(& &1.(Nx.tensor(t))) |> Nx.to_number()
    end

    for t <- 0..7 do
      assert_in_delta at.({:step, step_size: 3, gamma: 0.5}, 0, t), lr * :math.pow(0.5, div(t, 3)), 1.0e-7

      assert_in_delta at.({:exponential, decay_rate: 0.5, transition_steps: 2}, 0, t),
                      lr * :math.pow(0.5, t / 2),
                      1.0e-7

      assert_in_delta at.({:cosine, decay_steps: 4, alpha: 0.1}, 0, t),
                      lr * (0.9 * (1 + :math.cos(:math.pi() * min(t, 4) / 4)) / 2 + 0.1),
                      1.0e-7

      warm = if t < 3, do: lr * (t + 1) / 3, else: lr * :math.pow(0.5, div(t - 3, 2))
      assert_in_delta at.({:step, step_size: 2, gamma: 0.5}, 3, t), warm, 1.0e-7
    end

    assert_raise ArgumentError, ~r/test: unknown schedule :triangle/, fn -> Schedule.validate!(:triangle, "test") end

    assert_raise ArgumentError, ~r/unknown option\(s\) \[:gamma\] for the :cosine schedule/, fn ->
      Schedule.validate!({:cosine, gamma: 2}, "test")
    end
  end

  test "a schedule with warm-up drives the training step" do
    four = batches() ++ batches()

    model =
      linear(:sgd, learning_rate: 0.1) |> steps(four, schedule: {:step, step_size: 1, gamma: 0.5}, warmup_steps: 2)

    assert_params(model, reference({:sgd, []}, four, fn t -> Enum.at([0.05, 0.1, 0.1, 0.05], t - 1) end))
  end

  ## fit/3

  # Two separable clusters: class 1 around (1, 1), class 0 around (-1, -1).
  defp blobs(n) do
    x =
      for i <- 0..(n - 1),
          do: [
            if(rem(i, 2) == 0, do: 1, else: -1) + 0.3 * :math.sin(i),
            if(rem(i, 2) == 0, do: 1, else: -1) + 0.3 * :math.cos(3 * i)
          ]

    y = for i <- 0..(n - 1), do: [if(rem(i, 2) == 0, do: 1.0, else: 0.0)]
    {Nx.tensor(x), Nx.tensor(y)}
  end

  defp classifier(opts \\ []) do
    Axon.input("x", shape: {nil, 2})
    |> Axon.dense(1, activation: :sigmoid, name: "out")
    |> Model.compile(Keyword.merge([loss: :binary_cross_entropy, optimizer: :adam, learning_rate: 0.1, seed: 3], opts))
  end

  test "fit/3 learns a separable data set" do
    {x, y} = blobs(32)
    {val_x, val_y} = blobs(8)
    model = classifier()
    before = Training.evaluate(model, {x, y}, metrics: [:accuracy])

    {trained, history} =
      Training.fit(model, {x, y},
        epochs: 6,
        batch_size: 16,
        metrics: [:accuracy],
        validation_data: {val_x, val_y},
        log: false,
        seed: 1
      )

    assert %History{status: :completed, epochs: epochs} = history
    assert Enum.map(epochs, & &1.epoch) == [1, 2, 3, 4, 5, 6]

    assert Enum.all?(
             epochs,
             &(&1.samples == 32 and is_float(&1.val_loss) and is_float(&1.val_accuracy) and &1.learning_rate == 0.1)
           )

    losses = History.values(history, :loss)
    assert List.last(losses) < hd(losses)
    after_ = Training.evaluate(trained, {x, y}, metrics: [:accuracy], batch_size: 8)
    assert after_.loss < 0.2 and after_.loss < before.loss
    assert after_.accuracy == 1.0
    assert_in_delta History.last(history).val_loss, Training.evaluate(trained, {val_x, val_y}).loss, 1.0e-5
    assert trained.optimizer_state.updates == 12
  end

  test "fit/3 on batches, resuming the optimizer state; evaluate/3 against the hand loss" do
    model = linear(:adam, learning_rate: 0.05)
    {once, _} = Training.fit(model, batches(), epochs: 1, log: false)
    assert_params(once, reference({:adam, []}, batches(), fn _ -> 0.05 end))
    {twice, _} = Training.fit(once, batches(), epochs: 1, log: false)
    assert_params(twice, reference({:adam, []}, batches() ++ batches(), fn _ -> 0.05 end))

    p = %{"lin.kernel" => w0(), "lin.bias" => b0()}
    [{xa, ya}, {xb, yb}] = batches()
    want = (Nx.to_number(hand_loss(p, xa, ya)) + Nx.to_number(hand_loss(p, xb, yb))) / 2
    assert_in_delta Training.evaluate(model, batches()).loss, want, 1.0e-6
  end

  test "each training step is one compiled call, a last smaller batch included" do
    {x, y} = blobs(10)
    me = self()
    model = classifier()

    runs =
      count_program_runs(fn ->
        {_model, history} = Training.fit(model, {x, y}, epochs: 2, batch_size: 4, shuffle: false, log: false)
        send(me, {:history, history})
      end)

    assert_received {:history, history}
    assert History.values(history, :samples) == [10, 10]
    # batches of 4, 4 and 2 in each epoch; the optimizer's initial state and the loop's
    assert runs == 2 * 3 + 2
  end

  defp count_program_runs(fun) do
    mfa = {ExCubecl.Native, :program_run, 2}
    :erlang.trace_pattern(mfa, true, [:call_count])

    try do
      fun.()
      {:call_count, n} = :erlang.trace_info(mfa, :call_count)
      n
    after
      :erlang.trace_pattern(mfa, false, [:call_count])
    end
  end

  test "frozen layers keep their parameters through training" do
    model =
      Axon.input("x", shape: {nil, 2})
      |> Axon.dense(3, activation: :tanh, name: "hidden")
      |> Axon.dense(1, name: "out")
      |> Model.compile(loss: :mse, optimizer: :sgd, learning_rate: 0.1, seed: 5)
      |> Model.freeze("hidden")

    {_loss, grads} = Training.compute_gradients(model, hd(batches()))
    assert Map.keys(grads) |> Enum.sort() == ["out.bias", "out.kernel"]

    {trained, _} = Training.fit(model, batches(), epochs: 2, log: false)
    before = bytes(model)
    after_ = bytes(trained)
    assert Map.take(after_, ["hidden.kernel", "hidden.bias"]) == Map.take(before, ["hidden.kernel", "hidden.bias"])
    refute after_["out.kernel"] == before["out.kernel"]
    assert Model.frozen_layers(trained) == ["hidden"]
  end

  test "layers with state (batch norm, dropout) train, their state updated by the step" do
    model =
      Axon.input("x", shape: {nil, 2})
      |> Axon.dense(4, name: "d")
      |> Axon.batch_norm(name: "bn")
      |> Axon.dropout(rate: 0.25, name: "drop")
      |> Axon.dense(1, name: "out")
      |> Model.compile(loss: :mse, optimizer: :sgd, learning_rate: 0.1, seed: 4)

    {trained, history} = Training.fit(model, batches(), epochs: 2, log: false)
    assert length(history.epochs) == 2
    before = bytes(model)
    after_ = bytes(trained)
    for name <- ~w(bn.mean bn.var drop.key d.kernel out.kernel), do: refute(after_[name] == before[name], name)
    assert Model.predict(trained, elem(hd(batches()), 0)).shape == {4, 1}
  end

  ## Callbacks

  test "callbacks run in the order given, on their events" do
    me = self()
    {x, y} = blobs(8)

    callbacks = [
      Callbacks.on(:epoch_completed, fn state -> send(me, {:a, state.epoch}) && :continue end),
      {:epoch_completed, fn state -> send(me, {:b, state.epoch}) && {:continue, state} end},
      Callbacks.on(:epoch_started, fn state, ctx -> send(me, {:start, state.epoch, ctx.epochs}) && :continue end)
    ]

    Training.fit(classifier(), {x, y}, epochs: 2, batch_size: 8, callbacks: callbacks, log: false)
    assert collect() == [{:start, 0, 2}, {:a, 0}, {:b, 0}, {:start, 1, 2}, {:a, 1}, {:b, 1}]
  end

  defp collect do
    receive do
      msg -> [msg | collect()]
    after
      0 -> []
    end
  end

  test "early stopping stops after `patience` epochs without an improvement over min_delta" do
    {x, y} = blobs(8)

    stop = fn opts ->
      Training.fit(classifier(learning_rate: 0.05), {x, y},
        epochs: 6,
        batch_size: 8,
        log: false,
        callbacks: [Callbacks.early_stopping(opts)]
      )
      |> elem(1)
    end

    history = stop.(patience: 2, min_delta: 10.0)
    assert history.status == :early_stopped
    assert length(history.epochs) == 3

    history = stop.(patience: 2, min_delta: 0.0, monitor: :loss)
    assert history.status == :completed
    assert length(history.epochs) == 6
  end

  test "reduce_lr_on_plateau and warmup scale the learning rate of the step" do
    {x, y} = blobs(8)
    plateau = Callbacks.reduce_lr_on_plateau(patience: 1, factor: 0.5, min_delta: 10.0)

    {model, history} =
      Training.fit(classifier(learning_rate: 0.01), {x, y}, epochs: 4, batch_size: 8, log: false, callbacks: [plateau])

    assert_lrs(History.values(history, :learning_rate), [0.01, 0.01, 0.005, 0.0025])
    assert Nx.to_number(ExBurn.Training.Step.multiplier(model.optimizer_state.state)) == 0.125

    model = linear(:sgd, learning_rate: 0.1)

    {trained, history} =
      Training.fit(model, [hd(batches())], epochs: 3, log: false, callbacks: [Callbacks.warmup(epochs: 2)])

    assert_lrs(History.values(history, :learning_rate), [0.05, 0.1, 0.1])

    assert_params(
      trained,
      reference({:sgd, []}, List.duplicate(hd(batches()), 3), fn t -> Enum.at([0.05, 0.1, 0.1], t - 1) end)
    )
  end

  defp assert_lrs(got, want), do: Enum.zip_with(got, want, &assert_in_delta(&1, &2, 1.0e-9))

  test "checkpoint saves every n epochs with ExBurn.Model.save" do
    {x, y} = blobs(8)
    dir = Path.join(@dir, "ckpt")

    {trained, _} =
      Training.fit(classifier(), {x, y},
        epochs: 4,
        batch_size: 8,
        log: false,
        callbacks: [Callbacks.checkpoint(path: dir, every: 2)]
      )

    assert File.ls!(dir) |> Enum.sort() == ["epoch_2.exburn", "epoch_4.exburn"]
    assert {:ok, loaded} = Model.load(Path.join(dir, "epoch_4.exburn"), classifier())
    assert bytes(loaded) == bytes(trained)
  end

  test "fit_with_progress/3 sends progress messages and prints a line per epoch" do
    {x, y} = blobs(8)

    out =
      capture_io(fn ->
        {_model, history} =
          Training.fit_with_progress(classifier(), {x, y},
            epochs: 2,
            batch_size: 4,
            metrics: [:accuracy],
            validation_data: {x, y}
          )

        send(self(), {:history, history})
      end)

    assert_received {:history, history}
    [e1, e2] = history.epochs
    assert_received {:training_progress, 1, loss1, val1}
    assert_received {:training_progress, 2, loss2, val2}
    assert {loss1, val1, loss2, val2} == {e1.loss, e1.val_loss, e2.loss, e2.val_loss}

    assert [line1, line2] = String.split(out, "\n", trim: true)

    assert line1 =~
             ~r/^Epoch 1\/2 - loss: \d+\.\d{4} - accuracy: \d\.\d{4} - val_loss: \d+\.\d{4} - val_accuracy: \d\.\d{4} - lr: 0\.1000 - \d+ samples\/s - \d+\.\d\ds - ETA \d+\.\d\ds$/

    assert line2 =~ ~r/^Epoch 2\/2 .* ETA 0\.00s$/

    {_model, _history} = Training.fit_with_progress(classifier(), {x, y}, epochs: 1, batch_size: 8, log: false)
    assert_received {:training_progress, 1, loss, nil} when is_float(loss)
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
    assert Enum.all?([:first_call_ms, :step_ms, :forward_ms, :gradients_ms, :samples_per_sec], &(profile[&1] > 0))
    assert profile.update_ms >= 0

    bench = Model.benchmark(linear(:adam), hd(batches()), mode: :train, iterations: 2, warmup: 1)
    assert %{mode: :train, batch_size: 4, iterations: 2} = bench
    assert bench.median_ms > 0
  end

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

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :epochs must be a positive integer, got 0/, fn ->
      Training.fit(model, {x, y}, epochs: 0)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :batch_size must be a positive integer, got -2/, fn ->
      Training.fit(model, {x, y}, batch_size: -2)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :shuffle must be a boolean, got :yes/, fn ->
      Training.fit(model, {x, y}, shuffle: :yes)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: x has 4 samples but y has 3/, fn ->
      Training.fit(model, {x, Nx.iota({3, 1}, type: :f32)})
    end

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: targets of shape \{4\} don't fit the model's output \{nil, 1\}/,
                 fn -> Training.fit(model, {x, Nx.iota({4}, type: :f32)}) end

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: input of shape \{4, 3\} doesn't match the model's input \{nil, 2\}/,
                 fn -> Training.fit(model, {Nx.iota({4, 3}, type: :f32), y}) end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :batch_size applies to \{x, y\} tensors/, fn ->
      Training.fit(model, batches(), batch_size: 2)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: unknown metric :recal/, fn ->
      Training.fit(model, {x, y}, metrics: [:recal])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: cannot monitor :val_loss/, fn ->
      Training.fit(model, {x, y}, log: false, callbacks: [Callbacks.early_stopping(monitor: :val_loss)])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: invalid callback :log/, fn ->
      Training.fit(model, {x, y}, callbacks: [:log])
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: the model has no loss/, fn ->
      Training.fit(%{model | loss: nil}, {x, y})
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
