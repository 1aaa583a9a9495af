defmodule ExBurn.DataParallelTest do
  # ExBurn.Training.fit/3 with devices: two logical wgpu devices of one process (wgpu's
  # default adapter and its CPU adapter: Mesa's lavapipe twice where there is no GPU, as in
  # ExCubecl's collective_test.exs). k steps on 2 devices with shards of B/2 against k steps
  # on one device with batches of B, and the replicas identical after every epoch.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  alias ExBurn.Model
  alias ExBurn.Training
  alias ExBurn.Training.Callbacks

  @devices ["wgpu", "wgpu:cpu"]
  # The two runs differ by the order of float sums only (the gradient of B rows against the
  # mean of two gradients of B/2 rows), over 4 steps of a small MLP in f32.
  @tolerance 1.0e-5

  setup do
    if Enum.any?(ExCubecl.devices(), &(&1.device == "wgpu:cpu")),
      do: :ok,
      else: {:skip, "no wgpu CPU adapter (lavapipe) beside the default one"}
  end

  defp model(opts \\ []) do
    Axon.input("x", shape: {nil, 4})
    |> Axon.dense(6, activation: :tanh, name: "hidden")
    |> Axon.dense(3, name: "out")
    |> Model.compile(
      Keyword.merge([loss: :cross_entropy, optimizer: :sgd, learning_rate: 0.5, seed: 3, device: "wgpu"], opts)
    )
  end

  # 16 samples: 2 batches of 8 per epoch, no shuffling, so both runs see the same batches.
  defp data do
    key = Nx.Random.key(7)
    {x, key} = Nx.Random.normal(key, shape: {16, 4}, type: :f32)
    {labels, _} = Nx.Random.randint(key, 0, 3, shape: {16}, type: :s32)
    {Nx.backend_copy(x, Nx.BinaryBackend), Nx.backend_copy(labels, Nx.BinaryBackend)}
  end

  defp host(container), do: container |> Nx.Defn.Composite.flatten_list() |> Enum.map(&Nx.to_binary/1)

  defp params(model), do: Map.new(Model.parameters(model), fn {k, v} -> {k, Nx.backend_copy(v, Nx.BinaryBackend)} end)

  defp max_diff(a, b) do
    a
    |> Map.keys()
    |> Enum.map(&(Nx.subtract(a[&1], b[&1]) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()))
    |> Enum.max()
  end

  test "Nx.backend_copy between the two devices: values, type and the target device; the source unchanged" do
    t = Nx.tensor([[1.5, -2.0], [0.25, 8.0]], type: :f32, backend: {ExBurn.Backend, device: "wgpu"})
    c = Nx.backend_copy(t, {ExBurn.Backend, device: "wgpu:cpu"})
    assert %ExBurn.Backend{device: "wgpu:cpu"} = c.data
    assert c.data.ref != t.data.ref
    assert Nx.to_list(c) == Nx.to_list(t)
    assert Nx.to_list(Nx.add(c, 1)) == [[2.5, -1.0], [1.25, 9.0]]
    back = Nx.backend_transfer(c, {ExBurn.Backend, device: "wgpu"})
    assert %ExBurn.Backend{device: "wgpu"} = back.data
    assert Nx.to_list(back) == Nx.to_list(t)
    ints = Nx.backend_copy(Nx.tensor([1, -2, 3], backend: {ExBurn.Backend, device: "wgpu"}), {ExBurn.Backend, device: "wgpu:cpu"})
    assert {Nx.type(ints), Nx.to_list(ints)} == {{:s, 32}, [1, -2, 3]}
  end

  test "4 steps on 2 devices with shards of 4 equal 4 steps on one device with batches of 8" do
    opts = [epochs: 2, batch_size: 8, shuffle: false, verbose: false]
    parent = self()

    replicas =
      Callbacks.on(:epoch_completed, fn state, ctx ->
        send(parent, {:replicas, Training.current_replicas(state, ctx)})
        :continue
      end)

    {one, one_history} = Training.fit_with_progress(model(), data(), opts)
    {two, two_history} = Training.fit_with_progress(model(), data(), [devices: @devices, callbacks: [replicas]] ++ opts)

    assert two.device_spec == "wgpu"
    assert max_diff(params(one), params(two)) < @tolerance
    assert params(one) != params(model())

    for {a, b} <- Enum.zip(one_history, two_history),
        do: assert_in_delta(a.loss, b.loss, @tolerance)

    # Every epoch, the replica on each device holds the very same parameters and optimizer state.
    for _epoch <- 1..2 do
      assert_receive {:replicas, [first, second]}
      assert first.device_spec == "wgpu" and second.device_spec == "wgpu:cpu"
      for {_name, t} <- Model.parameters(second), do: assert(%ExBurn.Backend{device: "wgpu:cpu"} = t.data)
      assert params(first) == params(second)
      assert first.optimizer_state.updates == second.optimizer_state.updates
      assert host([first.optimizer_state.state]) == host([second.optimizer_state.state])
    end
  end

  test "layer state (batch norm) averaged over the devices; a second fit continues the optimizer state" do
    bn =
      Axon.input("x", shape: {nil, 4})
      |> Axon.dense(6, name: "hidden")
      |> Axon.batch_norm(name: "bn")
      |> Axon.dense(3, name: "out")
      |> Model.compile(loss: :cross_entropy, optimizer: :adam, learning_rate: 0.01, seed: 3, device: "wgpu")

    parent = self()

    last =
      Callbacks.on(:epoch_completed, fn state, ctx ->
        send(parent, {:replicas, Training.current_replicas(state, ctx)}) && :continue
      end)

    opts = [epochs: 1, batch_size: 8, shuffle: false, verbose: false, devices: @devices]
    once = Training.fit(bn, data(), opts)
    twice = Training.fit(once, data(), [callbacks: [last]] ++ opts)
    assert twice.optimizer_state.updates == 4
    assert max_diff(params(once), params(twice)) > 0

    # The running mean and variance moved from their start, and are the same on both devices.
    assert_receive {:replicas, [first, second]}
    state = fn model -> model.state.data["bn"] |> Map.take(["mean", "var"]) |> then(&host([&1])) end
    assert state.(first) == state.(second)
    assert state.(first) != state.(bn)
  end

  test "a batch that doesn't split, an unknown device, numerical gradients: errors naming fit" do
    model = model()

    assert_raise ArgumentError,
                 ~r/ExBurn.Training.fit: a batch \(:batch_size\) of 7 examples doesn't split into equal shards over 2 devices/,
                 fn ->
                   Training.fit(model, data(), devices: @devices, batch_size: 7, epochs: 1, verbose: false)
                 end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: the last batch of 1 examples doesn't split/, fn ->
      {x, y} = data()
      Training.fit(model, {x[0..8], y[0..8]}, devices: @devices, batch_size: 4, epochs: 1, verbose: false)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: a batch of 3 examples doesn't split/, fn ->
      {x, y} = data()
      Training.fit(model, [{x[0..2], y[0..2]}], devices: @devices, epochs: 1, verbose: false)
    end

    error =
      assert_raise ExBurn.Error, fn -> Training.fit(model, data(), devices: ["wgpu", "wgpu:99"], verbose: false) end

    assert Exception.message(error) =~ "ExBurn.Training.fit"
    assert Exception.message(error) =~ "wgpu:99"

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :devices must be a non-empty list/, fn ->
      Training.fit(model, data(), devices: [], verbose: false)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :devices names "wgpu" more than once/, fn ->
      Training.fit(model, data(), devices: ["wgpu", "wgpu"], verbose: false)
    end

    assert_raise ArgumentError, ~r/ExBurn.Training.fit: :devices trains with exact gradients/, fn ->
      Training.fit(model, data(), devices: @devices, grad_method: :numerical, verbose: false)
    end
  end
end
