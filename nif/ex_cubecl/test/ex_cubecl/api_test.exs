defmodule ExCubecl.ApiTest do
  use ExUnit.Case, async: true
  doctest ExCubecl

  test "every dtype the device supports round-trips through a buffer" do
    for dtype <- ExCubecl.supported_dtypes() do
      values = if dtype == :bool, do: [true, false, true], else: [1, 0, 2]
      b = ExCubecl.buffer!(values, [3], dtype)
      got = ExCubecl.to_list!(b)
      assert Enum.map(got, &if(is_float(&1), do: trunc(&1), else: &1)) == values, "#{dtype}"
      assert ExCubecl.dtype(b) == dtype
    end
  end

  test "u64 keeps its whole range: extremes round-trip, addition wraps, constants above i64" do
    max = 18_446_744_073_709_551_615
    b = ExCubecl.buffer!([max, 0, 9_223_372_036_854_775_808], [3], :u64)
    assert ExCubecl.to_list!(b) == [max, 0, 9_223_372_036_854_775_808]
    one = ExCubecl.buffer!([1, 1, 1], [3], :u64)
    [sum] = ExCubecl.run_kernel!(:add, [b, one])
    assert ExCubecl.to_list!(sum) == [0, 1, 9_223_372_036_854_775_809]
    [full] = ExCubecl.run_kernel!(:full, [], shape: [2], dtype: "u64", value: max)
    assert ExCubecl.to_list!(full) == [max, max]
  end

  test "binary data must match shape x dtype" do
    assert {:error, %ExCubecl.Error{op: "buffer", reason: reason}} = ExCubecl.buffer(<<0, 0, 0>>, [1], :f32)
    assert reason =~ "3 bytes"
    assert_raise ExCubecl.Error, ~r/^buffer: /, fn -> ExCubecl.buffer!(<<0>>, [2], :u8) end
  end

  test "a tensor larger than the device takes is refused, naming the size and the limit" do
    assert {:error, %ExCubecl.Error{op: "zeros", reason: reason}} =
             ExCubecl.run_kernel(:zeros, [], shape: [1_099_511_627_776], dtype: :f32)

    assert reason =~ "largest buffer"
  end

  test "mixed devices and dtypes are refused" do
    a = ExCubecl.buffer!([1.0], [1], :f32)
    b = ExCubecl.buffer!([1.0], [1], :f16)
    assert {:error, %ExCubecl.Error{op: "add", reason: reason}} = ExCubecl.run_kernel(:add, [a, b])
    assert reason =~ "dtypes differ"
  end

  test "devices, memory, dtypes, version" do
    assert ExCubecl.device_count() >= 1
    assert :wgpu in ExCubecl.available_backends()
    assert is_boolean(ExCubecl.cuda_available?())
    assert is_boolean(ExCubecl.gpu?())
    assert %{device: _, runtimes: _} = ExCubecl.device_info()
    assert :f32 in ExCubecl.supported_dtypes()
    assert ExCubecl.version() == "0.1.0"
    assert :ok = ExCubecl.synchronize()
  end
end
