defmodule ExCubecl.CollectiveTest do
  # Two devices of one process: wgpu's default adapter and its CPU adapter, both Mesa's
  # lavapipe where there is no GPU (two wgpu devices, two cubecl servers). The all-reduce
  # goes through the host there.
  use ExUnit.Case, async: false

  @devices ["wgpu", "wgpu:cpu"]

  setup do
    if Enum.any?(ExCubecl.devices(), &(&1.device == "wgpu:cpu")),
      do: :ok,
      else: {:skip, "no wgpu CPU adapter (lavapipe) beside the default one"}
  end

  defp on_devices(lists, dtype),
    do: for({values, device} <- Enum.zip(lists, @devices), do: ExCubecl.buffer!(values, [length(values)], dtype, device: device))

  test "sum and mean of two devices' buffers, each result on its own device" do
    a = [1.0, 2.0, -3.5, 0.25]
    b = [10.0, -20.0, 30.0, 0.5]
    for dtype <- [:f32, :f16, :bf16], dtype in ExCubecl.supported_dtypes() do
      sum = Enum.zip_with(a, b, &(&1 + &2))
      results = ExCubecl.all_reduce!(on_devices([a, b], dtype), :sum)
      assert Enum.map(results, & &1.device) == @devices
      assert Enum.map(results, &ExCubecl.dtype/1) == [dtype, dtype]
      for r <- results, do: assert(ExCubecl.to_list!(r) == sum, "#{dtype} sum")

      {:ok, means} = ExCubecl.all_reduce(on_devices([a, b], dtype), :mean)
      for r <- means, do: assert(ExCubecl.to_list!(r) == Enum.map(sum, &(&1 / 2)), "#{dtype} mean")
    end
  end

  test "the default op is the sum" do
    [x, _] = ExCubecl.all_reduce!(on_devices([[1.0], [2.0]], :f32))
    assert ExCubecl.to_list!(x) == [3.0]
  end

  test "bad input is an error naming all_reduce" do
    [a, b] = on_devices([[1.0, 2.0], [1.0]], :f32)
    assert {:error, %ExCubecl.Error{op: "all_reduce", reason: reason}} = ExCubecl.all_reduce([a, b])
    assert reason =~ "differ in shape"

    [c, _] = on_devices([[1.0], [2.0]], :f32)
    assert {:error, %ExCubecl.Error{op: "all_reduce", reason: "two tensors are on one device"}} = ExCubecl.all_reduce([c, c])

    ints = on_devices([[1], [2]], :s32)
    assert {:error, %ExCubecl.Error{op: "all_reduce", reason: reason}} = ExCubecl.all_reduce(ints)
    assert reason =~ "not supported"

    assert {:error, %ExCubecl.Error{op: "all_reduce"}} = ExCubecl.all_reduce([c], :max)
    assert {:error, %ExCubecl.Error{op: "all_reduce"}} = ExCubecl.all_reduce([], :sum)
    assert {:error, %ExCubecl.Error{op: "all_reduce"}} = ExCubecl.all_reduce(:nope, :sum)
  end

  test "to_device copies a buffer to another device, values, dtype and shape kept" do
    for {values, dtype} <- [{[1.5, -2.0, 3.25], :f32}, {[7, -8, 9], :s32}, {[true, false, true], :bool}, {[1.0, 2.5, -4.0], :bf16}],
        dtype in ExCubecl.supported_dtypes() do
      [a, _] = on_devices([values, values], dtype)
      b = ExCubecl.to_device!(a, "wgpu:cpu")
      assert b.device == "wgpu:cpu" and b.dtype == dtype and b.shape == [3]
      assert ExCubecl.to_list!(b) == values, "#{dtype}"
      # the copy is its own buffer: freeing the source leaves it
      {:ok, true} = ExCubecl.free(a)
      assert ExCubecl.to_list!(b) == values
      back = ExCubecl.to_device!(b, "wgpu")
      assert back.device == "wgpu" and ExCubecl.to_list!(back) == values
    end

    [c, _] = on_devices([[1.0], [2.0]], :f32)
    assert {:ok, ^c} = ExCubecl.to_device(c, c.device)
  end

  test "to_device with bad input is an error naming to_device" do
    [c, _] = on_devices([[1.0], [2.0]], :f32)
    assert {:error, %ExCubecl.Error{op: "to_device"}} = ExCubecl.to_device(c, "nope:7")
    assert {:error, %ExCubecl.Error{op: "to_device"}} = ExCubecl.to_device(c, :wgpu)
    assert {:error, %ExCubecl.Error{op: "to_device"}} = ExCubecl.to_device(:nope, "wgpu")
    {:ok, true} = ExCubecl.free(c)
    assert {:error, %ExCubecl.Error{op: "to_device"}} = ExCubecl.to_device(c, "wgpu:cpu")
    assert_raise ExCubecl.Error, fn -> ExCubecl.to_device!(c, "wgpu:cpu") end
  end
end
