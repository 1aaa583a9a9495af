defmodule ExBurn.TrainingStepsTest do
  # ExBurn.Training's single steps against steps computed by hand on Nx.BinaryBackend
  # (ExBurn.TrainingHelpers): the gradient of a linear model with the mean squared error, then
  # each optimizer, schedule, clipping, accumulation and weight decay applied to it as the
  # formulas say, and the numerical gradient methods.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  import ExBurn.TrainingHelpers

  alias ExBurn.Model
  alias ExBurn.Training
  alias ExBurn.Training.Schedule

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
end
