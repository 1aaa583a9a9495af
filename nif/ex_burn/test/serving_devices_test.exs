defmodule ExBurn.ServingDevicesTest do
  # ExBurn.Serving with partitions over two logical wgpu devices of one process (wgpu's
  # default adapter and its CPU adapter, both lavapipe where there is no GPU): the
  # parameters placed on each device once, at build, each partition running its batches on
  # its device, the results those of the model.
  use ExUnit.Case, async: false

  alias ExBurn.Serving

  @devices ["wgpu", "wgpu:cpu"]

  setup do
    if Enum.any?(ExCubecl.devices(), &(&1.device == "wgpu:cpu")),
      do: :ok,
      else: {:skip, "no wgpu CPU adapter (lavapipe) beside the default one"}
  end

  defp kernel, do: Nx.tensor([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], backend: Nx.BinaryBackend)
  defp bias, do: Nx.tensor([0.1, -0.2], backend: Nx.BinaryBackend)

  defp model do
    axon = Axon.input("x", shape: {nil, 3}) |> Axon.dense(2, name: "d")
    {axon, Axon.ModelState.new(%{"d" => %{"kernel" => kernel(), "bias" => bias()}})}
  end

  defp reference(x), do: x |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.dot(kernel()) |> Nx.add(bias())

  defp device_of(%Nx.Tensor{data: %ExBurn.Backend{device: dev}}), do: dev

  def batch_event(_event, _measurements, %{module: ExBurn.Serving.Server, metadata: metadata}, pid),
    do: send(pid, {:batch, metadata.partition, metadata.device})

  def batch_event(_event, _measurements, _metadata, _pid), do: :ok

  test "partitions: true places the parameters on each device once; each partition runs on its device" do
    serving = Serving.build(model(), device: @devices, partitions: true, batch_size: 2, batch_timeout: 1)
    assert Serving.status(serving).partitions == 2

    # Placed at build: one copy of the parameters per device.
    assert serving.arg.params |> Map.keys() |> Enum.sort() == Enum.sort(@devices)

    for {dev, state} <- serving.arg.params,
        t <- Nx.Defn.Composite.flatten_list([state]),
        do: assert(device_of(t) == dev)

    id = "serving-devices-#{System.unique_integer()}"
    :telemetry.attach(id, [:nx, :serving, :execute, :stop], &__MODULE__.batch_event/4, self())
    name = :"serving_devices_#{System.unique_integer([:positive])}"

    try do
      start_supervised!({Nx.Serving, serving: serving, name: name})
      inputs = for i <- 1..6, do: Nx.iota({2, 3}, type: :f32) |> Nx.multiply(0.1 * i) |> Nx.subtract(1.0)

      results =
        for x <- inputs do
          out = Serving.run(name, x)
          assert_receive {:batch, partition, dev}, 5_000
          assert Enum.at(@devices, partition) == dev
          # The result comes from the device that ran the batch.
          assert device_of(out) == dev
          assert Nx.all_close(Nx.backend_copy(out, Nx.BinaryBackend), reference(x), atol: 1.0e-5) |> Nx.to_number() == 1
          dev
        end

      assert results |> Enum.uniq() |> Enum.sort() == Enum.sort(@devices)
    after
      :telemetry.detach(id)
    end
  end

  test "partitions: n spread over the devices in turn; an inline run uses the first" do
    serving = Serving.build(model(), device: @devices, partitions: 3, batch_size: 2)
    assert serving.defn_options[:device] == ["wgpu", "wgpu:cpu", "wgpu"]
    assert Serving.status(serving).partitions == 3

    x = Nx.iota({2, 3}, type: :f32)
    out = Serving.run(serving, x)
    assert device_of(out) == "wgpu"
    assert Nx.all_close(Nx.backend_copy(out, Nx.BinaryBackend), reference(x), atol: 1.0e-5) |> Nx.to_number() == 1

    # new/2 keeps the count and the devices for build/2.
    built = Serving.build(Serving.new(model(), device: @devices, partitions: true))
    assert built.defn_options[:device] == @devices
  end

  # The NIF calls (with their arguments) of the processes traced with `tracer`.
  defp trace_calls(pids, fun) do
    me = self()

    tracer =
      spawn_link(fn ->
        collect = fn collect, acc ->
          receive do
            {:trace, pid, :call, {ExCubecl.Native, f, args}} -> collect.(collect, [{pid, f, args} | acc])
            {:trace, _pid, :call, _other} -> collect.(collect, acc)
            :dump -> send(me, {:calls, Enum.reverse(acc)})
          end
        end

        collect.(collect, [])
      end)

    :erlang.trace_pattern({ExCubecl.Native, :_, :_}, true, [:local])
    for pid <- pids, do: :erlang.trace(pid, true, [:call, :set_on_spawn, {:tracer, tracer}])

    try do
      fun.()
    after
      for pid <- pids, Process.alive?(pid), do: :erlang.trace(pid, false, [:call, :set_on_spawn])
      :erlang.trace_pattern({ExCubecl.Native, :_, :_}, false, [:local])
    end

    send(tracer, :dump)
    assert_receive {:calls, calls}, 5_000
    calls
  end

  def task_event(_event, _measurements, %{module: ExBurn.Serving.Server, metadata: metadata}, pid),
    do: send(pid, {:task, self(), metadata.partition, metadata.device, metadata.size})

  def task_event(_event, _measurements, _metadata, _pid), do: :ok

  # The device strings among a NIF call's arguments.
  defp devices_named(args), do: for(arg <- args, is_binary(arg), String.starts_with?(arg, "wgpu"), do: arg)

  test "each partition builds its batch on its own device: one upload with the model's call, no read back by the callers" do
    serving = Serving.build(model(), device: @devices, partitions: true, batch_size: 4, batch_timeout: 20, shape: {3})
    name = :"serving_batches_#{System.unique_integer([:positive])}"
    start_supervised!({Nx.Serving, serving: serving, name: name})
    tasks = Process.whereis(Module.concat(name, "TaskSupervisor"))
    id = "serving-batches-#{System.unique_integer()}"
    :telemetry.attach(id, [:nx, :serving, :execute, :stop], &__MODULE__.task_event/4, self())

    # Host inputs, and inputs already on the second device.
    host = for i <- 1..4, do: Nx.iota({2, 3}, type: :f32, backend: Nx.BinaryBackend) |> Nx.multiply(0.25 * i)
    on_second = for x <- host, do: Nx.backend_copy(x, {ExBurn.Backend, device: "wgpu:cpu"})

    run = fn inputs ->
      inputs |> Task.async_stream(&Serving.run(name, &1), ordered: true) |> Enum.map(fn {:ok, out} -> out end)
    end

    try do
      # Warm: each partition compiles its program for the batch sizes that come.
      for _ <- 1..3, do: [run.(host), run.(on_second)]
      flush_tasks()
      me = self()

      calls =
        trace_calls([me, tasks], fn ->
          outputs = for inputs <- [host, on_second], _ <- 1..3, do: run.(inputs)
          send(me, {:outputs, outputs})
        end)

      assert_receive {:outputs, outputs}

      for {outs, inputs} <- Enum.zip(outputs, List.duplicate(host, 6)),
          {out, x} <- Enum.zip(outs, inputs),
          do:
            assert(
              Nx.all_close(Nx.backend_copy(out, Nx.BinaryBackend), reference(x), atol: 1.0e-5) |> Nx.to_number() == 1
            )

      batches = flush_tasks()
      assert length(batches) >= 6
      assert batches |> Enum.map(&elem(&1, 1)) |> Enum.uniq() |> Enum.sort() == [0, 1]

      # The callers (this test's Task.async_stream's processes) read nothing back from a device:
      # the rows' numbers stay on the host, and inputs on a device are not copied to the host.
      assert for({_pid, :read, _} <- calls, do: :read) == []

      for {task, partition, dev, _size} <- batches do
        own = for {^task, f, args} <- calls, do: {f, args}
        assert Enum.at(@devices, partition) == dev
        # Every call of the batch's process names the partition's device, never the other.
        named = own |> Enum.flat_map(fn {_f, args} -> devices_named(args) end) |> Enum.uniq()
        assert named -- [dev] == []
        # One run of the program; host parts go with it as one input, never as uploads of their own.
        assert for({f, _} <- own, f in [:buffer, :read], do: f) == []
        runs = for {f, [_program, inputs | _]} <- own, f in [:program_run, :program_run_normal], do: inputs
        assert runs != []
        # Inputs on the second device: copied device to device only for the first device's batches.
        copies = for {:to_device, [_ref, to]} <- own, do: to
        if dev == "wgpu:cpu", do: assert(copies == [])
        assert Enum.uniq(copies) -- [dev] == []
      end
    after
      :telemetry.detach(id)
    end
  end

  defp flush_tasks(acc \\ []) do
    receive do
      {:task, pid, partition, dev, size} -> flush_tasks([{pid, partition, dev, size} | acc])
    after
      200 -> Enum.reverse(acc)
    end
  end

  def barrier(t, opts) do
    send(opts[:test], {:arrived, self(), opts[:tag]})
    receive do: (:go -> t)
  end

  test "two partitions on two devices run their batches at the same time (a barrier both must reach)" do
    # Each batch's run stops in the middle, in a runtime call that waits for this test's :go;
    # the test lets none go until a batch of each partition has arrived there, which they can
    # only do running at the same time.
    test = self()

    fun = fn x ->
      doubled = Nx.multiply(x, 2)
      doubled |> Nx.runtime_call(doubled, [test: test, tag: :batch], &__MODULE__.barrier/2) |> Nx.add(1)
    end

    serving = Serving.build(fun, device: @devices, partitions: true, batch_size: 1, batch_timeout: 1, shape: {2})
    name = :"serving_barrier_#{System.unique_integer([:positive])}"
    start_supervised!({Nx.Serving, serving: serving, name: name})
    id = "serving-barrier-#{System.unique_integer()}"
    :telemetry.attach(id, [:nx, :serving, :execute, :stop], &__MODULE__.task_event/4, self())

    try do
      # One batch at a time first, on each partition in turn (each compiles its program).
      for _ <- 1..2 do
        caller = Task.async(fn -> Serving.run(name, Nx.tensor([[0.5, 0.5]])) end)
        assert_receive {:arrived, pid, :batch}, 30_000
        send(pid, :go)
        assert Nx.to_flat_list(Task.await(caller, 30_000)) == [2.0, 2.0]
      end

      warm = flush_tasks() |> Enum.map(&elem(&1, 1)) |> Enum.sort()
      assert warm == [0, 1]
      callers = for i <- 1..2, do: Task.async(fn -> Serving.run(name, Nx.tensor([[i * 1.0, -i * 1.0]])) end)
      assert_receive {:arrived, first, :batch}, 30_000
      assert_receive {:arrived, second, :batch}, 30_000
      assert first != second
      for pid <- [first, second], do: send(pid, :go)
      results = callers |> Task.await_many(30_000) |> Enum.map(&Nx.to_flat_list/1)
      assert results == [[3.0, -1.0], [5.0, -3.0]]
      # The two batches ran in the two partitions, one on each device.
      assert flush_tasks() |> Enum.map(&elem(&1, 2)) |> Enum.sort() == Enum.sort(@devices)
    after
      :telemetry.detach(id)
    end
  end

  test "a request split over batches of both devices gets its rows in order" do
    name = :"serving_split_#{System.unique_integer([:positive])}"

    start_supervised!(
      Serving.supervise(&Nx.multiply(&1, 2),
        name: name,
        shape: {4},
        batch_size: 4,
        batch_timeout: 1,
        device: @devices,
        partitions: true
      )
    )

    results =
      1..8
      |> Task.async_stream(
        fn caller ->
          for n <- 1..6 do
            x = Nx.iota({3, 4}, type: :f32, backend: Nx.BinaryBackend) |> Nx.add(1000 * caller + 10 * n)
            {Nx.to_flat_list(Nx.multiply(x, 2)), Serving.run(name, x) |> Nx.to_flat_list()}
          end
        end,
        max_concurrency: 8,
        timeout: 60_000
      )
      |> Enum.flat_map(fn {:ok, r} -> r end)

    assert Enum.reject(results, fn {want, got} -> want == got end) == []
  end

  test "an unknown device, an empty list: errors naming build" do
    assert_raise ExBurn.Error, ~r/ExBurn.Serving.build: the device "wgpu:99" is not available/, fn ->
      Serving.build(model(), device: ["wgpu", "wgpu:99"], partitions: true)
    end

    assert_raise ExBurn.Error, ~r/ExBurn.Serving.build: :device must be a device or a non-empty list/, fn ->
      Serving.build(model(), device: [], partitions: true)
    end
  end
end
