defmodule ExCubecl.NxEntriesTest do
  # The Nx entries (nx_*) of the op table, called as ExBurn.Backend calls them, without Nx:
  # this package's CI has no Nx, so these cases keep Nx's semantics under test there too.
  # ExBurn's own suite (nif/ex_burn) compares every callback with Nx.BinaryBackend.
  use ExUnit.Case, async: true

  defp b(values, shape, dtype), do: ExCubecl.buffer!(values, shape, dtype)

  defp nx(op, inputs, type, shape, opts \\ []) do
    [out] = ExCubecl.run_kernel!("nx_#{op}", inputs, [type: type, shape: shape] ++ opts)
    # A c64 result is an f32 pair per element.
    assert out.shape == if(type == "c64", do: shape ++ [2], else: shape)
    ExCubecl.to_list!(out)
  end

  test "integers wrap, remainder takes the dividend's sign, shifts past the width" do
    assert nx(:add, [b([127, -128], [2], :s8), b([1], [1], :s8)], "s8", [2], compute: "s8") == [-128, -127]
    assert nx(:remainder, [b([-7, 7, -7], [3], :s32), b([2, -2, -2], [3], :s32)], "s32", [3], compute: "s32") == [-1, 1, -1]
    assert nx(:quotient, [b([-7, 7], [2], :s32), b([2, 2], [2], :s32)], "s32", [2], compute: "s32") == [-3, 3]
    assert nx(:right_shift, [b([-64, 64], [2], :s8), b([9, 3], [2], :s8)], "s8", [2], compute: "s8") == [-1, 8]
    assert nx(:left_shift, [b([1, 1], [2], :s16), b([16, 3], [2], :s16)], "s16", [2], compute: "s16") == [0, 8]
    assert nx(:population_count, [b([-1, 7], [2], :s8)], "s8", [2]) == [8, 3]
    assert nx(:count_leading_zeros, [b([1, 0, -1], [3], :s32)], "s32", [3]) == [31, 32, 0]
  end

  test "casts, rounding and NaN as Nx defines them" do
    x = b([:nan, :infinity, :neg_infinity, 2.7, -2.7, 300.0], [6], :f32)
    assert nx(:as_type, [x], "s32", [6]) == [0, 2_147_483_647, -2_147_483_648, 2, -2, 300]
    assert nx(:as_type, [x], "u8", [6]) == [0, 255, 0, 2, 254, 44]
    assert nx(:as_type, [b([-30], [1], :s8)], "u16", [1]) == [65506]
    assert nx(:round, [b([0.5, -0.5, 1.5, -2.5], [4], :f32)], "f32", [4]) == [1.0, -1.0, 2.0, -3.0]
    assert nx(:max, [b([1.0, :nan], [2], :f32), b([:nan, 2.0], [2], :f32)], "f32", [2], compute: "f32") == [:nan, :nan]
    assert nx(:greater, [b([1, 5], [2], :s32), b([3.5], [1], :f32)], "u8", [2], compute: "f32") == [0, 1]
  end

  test "creation, shapes, reductions, windows and indexing" do
    assert nx(:iota, [], "s32", [2, 3], axis: 1, flat: false) == [0, 1, 2, 0, 1, 2]
    assert nx(:eye, [], "f32", [2, 3]) == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    t = b([1, 2, 3, 4, 5, 6], [2, 3], :s32)
    assert nx(:pad, [t, b([0], [1], :s32)], "s32", [2, 4], config: [0, 0, 0, -1, 0, 1]) == [0, 2, 0, 3, 0, 5, 0, 6]
    assert nx(:sum, [t], "s32", [2], axes: [1], keep_axes: false) == [6, 15]
    assert nx(:argmax, [b([1, 3, 3], [3], :s32)], "s32", [], axis: 0, flat: true, last: true) == [2]
    assert nx(:window_sum, [t], "s32", [2, 2], window: [1, 2], strides: [1, 1], padding: [0, 0, 0, 0], dilations: [1, 1]) == [3, 5, 9, 11]
    assert nx(:gather, [t, b([1, 2, 0, 0], [2, 2], :s32)], "s32", [2], axes: [0, 1]) == [6, 1]
    assert nx(:sort, [b([3.0, :nan, 1.0], [3], :f32)], "f32", [3], axis: 0, descending: true) == [:nan, 3.0, 1.0]
    assert nx(:dot, [t, t], "s32", [3, 3], contract_a: [0], batch_a: [], contract_b: [0], batch_b: []) == [17, 22, 27, 22, 29, 36, 27, 36, 45]
  end

  test "complex results: an FFT as f32 pairs" do
    assert nx(:fft, [b([1.0, 1.0, 0.0, 0.0], [4], :f32)], "c64", [4], complex: [false], axis: 0, length: 4, eps: 1.0e-10) ==
             [2.0, 0.0, 1.0, -1.0, 0.0, 0.0, 1.0, 1.0]
  end

  test "bad Nx calls are errors naming the entry" do
    assert {:error, %ExCubecl.Error{op: "nx_add"}} = ExCubecl.run_kernel("nx_add", [b([1], [1], :s32)], type: "s32", shape: [1], compute: "s32")
    assert {:error, %ExCubecl.Error{op: "nx_reshape"}} = ExCubecl.run_kernel("nx_reshape", [b([1, 2], [2], :s32)], type: "s32", shape: [3])
    assert {:error, %ExCubecl.Error{op: "nx_sum"}} = ExCubecl.run_kernel("nx_sum", [b([1, 2], [2], :s32)], type: "nope", shape: [])
  end
end
