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

  # `n` samples of 4 features and 3 classes on the host. 16 (the default): 2 batches of 8 per
  # epoch, no shuffling, so both runs see the same batches; 20: batches of 8, 8 and 4 (the
  # last one cut into shards of 2).
  defp data(n \\ 16, seed \\ 7) do
    key = Nx.Random.key(seed)
    {x, key} = Nx.Random.normal(key, shape: {n, 4}, type: :f32)
    {labels, _} = Nx.Random.randint(key, 0, 3, shape: {n}, type: :s32)
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

    ints =
      Nx.backend_copy(
        Nx.tensor([1, -2, 3], backend: {ExBurn.Backend, device: "wgpu"}),
        {ExBurn.Backend, device: "wgpu:cpu"}
      )

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

  test "shuffled batches with a smaller last one, and batches of an enumerable, equal one device; so does accuracy" do
    opts = [epochs: 2, batch_size: 8, shuffle: true, seed: 5, accuracy: true, verbose: false]
    {one, one_history} = Training.fit_with_progress(model(), data(20, 11), opts)
    {two, two_history} = Training.fit_with_progress(model(), data(20, 11), [devices: @devices] ++ opts)
    assert max_diff(params(one), params(two)) < @tolerance

    for {a, b} <- Enum.zip(one_history, two_history) do
      assert_in_delta(a.loss, b.loss, @tolerance)
      assert a.accuracy == b.accuracy
    end

    # The same batches as a list (cut into shards by the step, each copied to its device):
    # on the host, and on the first device.
    {x, y} = data(20, 11)
    on_host = for {s, l} <- [{0, 8}, {8, 8}], do: {Nx.slice_along_axis(x, s, l), Nx.slice_along_axis(y, s, l)}

    on_device =
      {x |> Nx.slice_along_axis(16, 4) |> Nx.backend_copy({ExBurn.Backend, device: "wgpu"}),
       Nx.slice_along_axis(y, 16, 4)}

    batches = on_host ++ [on_device]
    list_opts = [epochs: 2, accuracy: true, verbose: false]
    {one, one_history} = Training.fit_with_progress(model(), batches, list_opts)
    {two, two_history} = Training.fit_with_progress(model(), batches, [devices: @devices] ++ list_opts)
    assert max_diff(params(one), params(two)) < @tolerance
    for {a, b} <- Enum.zip(one_history, two_history), do: assert(a.accuracy == b.accuracy)
  end

  # Every ExCubecl.Native call of the third step of a 2-device fit (32 samples, batches of 8),
  # or (`:epochs`) of its epochs (from each epoch's start to its end), with the process that
  # made it and the device of its first tensor argument.
  defp traced_step(opts, window \\ :step) do
    key = Nx.Random.key(9)
    {x, key} = Nx.Random.normal(key, shape: {32, 4}, type: :f32)
    {labels, _} = Nx.Random.randint(key, 0, 3, shape: {32}, type: :s32)
    data = {Nx.backend_copy(x, Nx.BinaryBackend), Nx.backend_copy(labels, Nx.BinaryBackend)}
    # A process is never its own tracer: the loop's calls (this process's) go to another.
    tracer =
      spawn_link(fn ->
        collect = fn collect, acc ->
          receive do
            {:trace, pid, :call, {ExCubecl.Native, fun, args}} -> collect.(collect, [{pid, fun, args} | acc])
            {:done, to} -> send(to, {:traced, Enum.reverse(acc)})
          end
        end

        collect.(collect, [])
      end)

    on = fn -> :erlang.trace(:all, true, [:call, {:tracer, tracer}]) end
    off = fn -> :erlang.trace(:all, false, [:call]) end

    tracing =
      case window do
        :step ->
          [
            Callbacks.on(:iteration_completed, fn state ->
              if state.iteration == 1, do: on.(), else: if(state.iteration == 2, do: off.())
              :continue
            end)
          ]

        :epochs ->
          [
            Callbacks.on(:epoch_started, fn _ -> on.() && :continue end),
            Callbacks.on(:epoch_completed, fn _ -> off.() && :continue end)
          ]
      end

    :erlang.trace_pattern({ExCubecl.Native, :_, :_}, true, [:local])

    try do
      Training.fit(
        model(),
        data,
        opts ++ [devices: @devices, epochs: 1, batch_size: 8, shuffle: false, verbose: false, callbacks: tracing]
      )
    after
      :erlang.trace(:all, false, [:call])
      :erlang.trace_pattern({ExCubecl.Native, :_, :_}, false, [:local])
    end

    send(tracer, {:done, self()})
    assert_receive {:traced, calls}, 5000

    for {pid, fun, args} <- calls do
      # (a program's reference is not a tensor's)
      device =
        args
        |> List.flatten()
        |> Enum.filter(&is_reference/1)
        |> Enum.find_value(fn ref ->
          try do
            case ExCubecl.Native.device(ref) do
              {:ok, dev} -> dev
              {:error, _freed} -> nil
            end
          rescue
            ArgumentError -> nil
          end
        end)

      %{pid: pid, fun: fun, args: args, device: device}
    end
  end

  defp count(calls, fun), do: Enum.count(calls, &(&1.fun == fun))

  test "a step copies nothing between devices or through the host, all-reduces once, and runs each device's programs in a process of its own" do
    calls = traced_step([])
    assert count(calls, :all_reduce) == 1
    # No copy to another device, no read, no upload: each device's shard is on it already.
    assert count(calls, :to_device) == 0
    assert count(calls, :read) == 0
    assert count(calls, :buffer) == 0
    # The programs' inputs are on their devices, but for the loss average's iteration number.
    assert [{<<_::32>>, [], "s32"}] =
             for(%{fun: :program_run_normal, args: [_, inputs | _]} <- calls, i <- inputs, not is_reference(i), do: i)

    # Each device's gradient and update programs: 2 runs, from one process per device, neither
    # of them the loop's.
    runs = for %{fun: f} = c <- calls, f in [:program_run, :program_run_normal], do: c
    by_device = runs |> Enum.group_by(& &1.device, & &1.pid) |> Map.new(fn {d, pids} -> {d, Enum.uniq(pids)} end)
    assert [a] = by_device["wgpu:cpu"]
    assert a != self()
    assert runs |> Enum.filter(&(&1.pid == a)) |> Enum.map(&hd(&1.args)) |> Enum.uniq() |> length() == 2
    assert self() in by_device["wgpu"]
    assert [b] = by_device["wgpu"] -- [self()]
    assert b != a
  end

  test "each pass copies the second device's rows to it once, with one take per tensor and device" do
    calls = traced_step([epochs: 2, shuffle: true], :epochs)
    # 2 epochs of 4 steps: x and y to "wgpu:cpu" once per epoch (the parts, freed at the end
    # of their pass, may have no device to tell by now).
    assert ["wgpu:cpu", "wgpu:cpu", "wgpu:cpu", "wgpu:cpu"] = for(%{fun: :to_device, args: [_, to]} <- calls, do: to)

    # Per epoch: the targets in the pass's order, and x and y of each device.
    assert length(for %{fun: :run_kernel, args: ["nx_take" | _]} = c <- calls, do: c) == 2 * (1 + 2 * 2)
    assert count(calls, :all_reduce) == 8
    # The only reads: each epoch's loss and learning rate at its end, and Axon's first running
    # average of the loss where it makes it on another device than the first.
    first_average = if ExBurn.default_device_spec() == "wgpu", do: 0, else: 1
    assert count(calls, :read) == 2 * (2 + first_average)
  end

  test "with a metric, the second device's predictions go to the first device, and nothing else moves" do
    calls = traced_step(accuracy: true)
    assert count(calls, :all_reduce) == 1
    assert [%{device: "wgpu:cpu", args: [_, "wgpu"]}] = Enum.filter(calls, &(&1.fun == :to_device))
    # The predictions are copied as they are: no copy of their own on their device first.
    assert [] = for(%{fun: :run_kernel, args: ["nx_copy" | _]} = c <- calls, do: c)
    assert [_] = for(%{fun: :run_kernel, args: ["nx_concatenate" | _]} = c <- calls, do: c)
    assert count(calls, :read) == 0
    assert count(calls, :buffer) == 0
  end

  test "the devices' processes: results in order; an exception in one is raised in the caller once all have ended" do
    alias ExBurn.Training.Parallel.Workers
    {handle, [1, 2]} = Workers.start([fn -> 1 end, fn -> 2 end])
    {_tag, tasks} = handle
    assert [{:a, 1}, {:b, 2}] = Workers.finish(handle, [fn -> {:a, 1} end, fn -> {:b, 2} end])
    refute Enum.any?(tasks, &Process.alive?(&1.pid))

    assert_raise ArgumentError, "shard 1", fn ->
      Workers.start([fn -> 1 end, fn -> raise ArgumentError, "shard 1" end])
    end

    {handle, _} = Workers.start([fn -> 1 end, fn -> 2 end])
    assert_raise RuntimeError, "update 0", fn -> Workers.finish(handle, [fn -> raise "update 0" end, fn -> :ok end]) end
    {{_tag, tasks} = handle, _} = Workers.start([fn -> 1 end, fn -> 2 end])
    Workers.stop(handle)
    refute Enum.any?(tasks, &Process.alive?(&1.pid))
    refute_received _
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
