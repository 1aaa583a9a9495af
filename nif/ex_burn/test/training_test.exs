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
  alias ExBurn.Training.{Callbacks, Schedule}

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
    # SGD's documented default momentum is 0.9; momentum: nil is plain SGD.
    case Keyword.get(o, :momentum, 0.9) do
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
    do: Enum.reduce(batches, model, fn b, m -> m |> Training.train_step(b, opts) |> elem(1) end)

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
    grads = Training.compute_gradients(model, {x, y})
    p = %{"lin.kernel" => w0(), "lin.bias" => b0()}
    assert Enum.sort(Map.keys(grads)) == ["lin.bias", "lin.kernel"]
    {:ok, pred} = Model.forward(model, x)
    {:ok, loss} = Model.compute_loss(model, pred, y)
    assert_in_delta Nx.to_number(loss), Nx.to_number(hand_loss(p, x, y)), 1.0e-6

    for {name, g} <- hand_grad(p, x, y),
        do: assert(Nx.all_close(bin(grads[name]), g, atol: 1.0e-6) |> Nx.to_number() == 1, name)
  end

  test "train_step/3 returns the batch's loss before the update" do
    [{x, y} | _] = batches()
    {loss, model} = Training.train_step(linear(:sgd, learning_rate: 0.1), {x, y})
    assert is_float(loss)

    assert_in_delta loss,
                    Nx.to_number(hand_loss(%{"lin.kernel" => w0(), "lin.bias" => b0()}, x, y)),
                    1.0e-6

    assert %{key: _, state: _, updates: 1} = model.optimizer_state

    # the next step continues the optimizer state and replays the cached program
    size = ExBurn.Defn.Compiler.cache_size()
    {_loss, model} = Training.train_step(model, {x, y})
    assert ExBurn.Defn.Compiler.cache_size() == size
    assert model.optimizer_state.updates == 2
  end

  test "train_step/3 reuses the step it built for the same model, and builds anew for another" do
    [{x, y} | _] = batches()
    {_loss, model} = Training.train_step(linear(:sgd, learning_rate: 0.1), {x, y})
    spec = elem(model.optimizer_state.key, 0)
    built = ExBurn.Training.Step.build(model, spec)
    {_loss, next} = Training.train_step(model, {x, y})
    assert :erts_debug.same(ExBurn.Training.Step.build(next, spec).step, built.step)
    # another loss, another gradient method, or other trainable parameters, is another step
    refute :erts_debug.same(ExBurn.Training.Step.build(%{next | loss_fn: :cross_entropy}, spec).step, built.step)
    refute :erts_debug.same(ExBurn.Training.Step.build(next, spec, {:numerical, 1.0e-3}).step, built.step)
    refute ExBurn.Training.Step.build(Model.freeze(next, "lin"), spec).key == built.key
  end

  for {name, optimizer, lr} <- [
        {"plain sgd", {:sgd, momentum: nil}, 0.1},
        {"sgd with its documented default momentum 0.9", {:sgd, []}, 0.1},
        {"sgd with momentum 0.5", {:sgd, momentum: 0.5}, 0.1},
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
    {_, one} = Training.train_step(linear(:sgd, learning_rate: 0.1), {xa, ya}, accumulate_gradients: 2)
    assert bytes(one) == bytes(linear(:sgd))

    {_, two} = Training.train_step(one, {xb, yb}, accumulate_gradients: 2)
    mean = zip(hand_grad(p0, xa, ya), hand_grad(p0, xb, yb), fn a, b -> Nx.divide(Nx.add(a, b), 2) end)
    want = zip(p0, mean, fn p, g -> Nx.subtract(p, Nx.multiply(0.1, g)) end)
    assert_params(two, want)

    {_, three} = Training.train_step(two, {xa, ya}, accumulate_gradients: 2)
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

  ## Gradient methods

  test "grad_method: :numerical and :numerical_batch come close to the exact gradient" do
    model =
      Axon.input("x", shape: {nil, 2})
      |> Axon.dense(3, activation: :tanh, name: "hidden")
      |> Axon.dense(2, name: "out")
      |> Model.compile(loss: :cross_entropy, optimizer: :sgd, seed: 9)

    {x, _} = hd(batches())
    y = Nx.tensor([0, 1, 1, 0])
    exact = Training.compute_gradients(model, {x, y})
    central = Training.compute_gradients(model, {x, y}, grad_method: :numerical, epsilon: 1.0e-3)
    one_sided = Training.compute_gradients(model, {x, y}, grad_method: :numerical_batch, epsilon: 1.0e-3)
    assert Map.keys(central) == Map.keys(exact) and Map.keys(one_sided) == Map.keys(exact)

    for {name, g} <- exact do
      assert Nx.all_close(bin(central[name]), bin(g), atol: 2.0e-3) |> Nx.to_number() == 1,
             "#{name}: central #{inspect(bin(central[name]))}, exact #{inspect(bin(g))}"

      assert Nx.all_close(bin(one_sided[name]), bin(g), atol: 1.0e-2) |> Nx.to_number() == 1, name
    end

    # The documented default step, 1.0e-5: differences taken in f64 where the device has it
    # (lavapipe does), the gradients in the parameters' type.
    if ExBurn.Training.Numerical.precision(model.device_spec) == {:f, 64} do
      default = Training.compute_gradients(model, {x, y}, grad_method: :numerical)

      for {name, g} <- exact do
        assert default[name].type == {:f, 32}
        assert Nx.all_close(bin(default[name]), bin(g), atol: 1.0e-5) |> Nx.to_number() == 1, name
      end

      batch = Training.compute_gradients(model, {x, y}, grad_method: :numerical_batch)

      for {name, g} <- exact,
          do: assert(Nx.all_close(bin(batch[name]), bin(g), atol: 1.0e-4) |> Nx.to_number() == 1, name)
    end
  end

  test "train_step and fit with grad_method: :numerical follow the exact steps" do
    model = linear(:sgd, learning_rate: 0.1)
    exact = steps(model, batches())
    numerical = steps(model, batches(), grad_method: :numerical, epsilon: 1.0e-3)
    assert_params(numerical, Map.new(Model.parameters(exact), fn {k, t} -> {k, bin(t)} end), 1.0e-3)

    fitted = Training.fit(model, batches(), epochs: 1, verbose: false, grad_method: :numerical_batch, epsilon: 1.0e-3)
    assert_params(fitted, Map.new(Model.parameters(exact), fn {k, t} -> {k, bin(t)} end), 1.0e-2)
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

  defp assert_lrs(got, want) do
    assert length(got) == length(want)
    Enum.zip_with(got, want, &assert_in_delta(&1, &2, 1.0e-9))
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
