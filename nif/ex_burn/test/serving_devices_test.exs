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

  test "an unknown device, an empty list: errors naming build" do
    assert_raise ExBurn.Error, ~r/ExBurn.Serving.build: the device "wgpu:99" is not available/, fn ->
      Serving.build(model(), device: ["wgpu", "wgpu:99"], partitions: true)
    end

    assert_raise ExBurn.Error, ~r/ExBurn.Serving.build: :device must be a device or a non-empty list/, fn ->
      Serving.build(model(), device: [], partitions: true)
    end
  end
end
