defmodule ExCubecl.KernelsTest do
  # Every kernel of `ExCubecl.kernels/0`, against values worked out by hand.
  use ExUnit.Case, async: true

  @nan :nan

  # {kernel, [{values, shape, dtype}], opts, [{expected values, shape, dtype}]}
  @cases [
    {:zeros, [], [shape: [2], dtype: "f32"], [{[0.0, 0.0], [2], :f32}]},
    {:ones, [], [shape: [1, 2], dtype: "s32"], [{[1, 1], [1, 2], :s32}]},
    {:full, [], [shape: [3], dtype: "f16", value: 2.5], [{[2.5, 2.5, 2.5], [3], :f16}]},
    {:arange, [], [start: 2, stop: 7, step: 2], [{[2, 4, 6], [3], :s32}]},
    {:exp, [{[0.0, 1.0], [2], :f32}], [], [{[1.0, 2.718281828], [2], :f32}]},
    {:log, [{[1.0, 2.718281828], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:log1p, [{[0.0, 1.718281828], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:sqrt, [{[4.0, 9.0], [2], :f32}], [], [{[2.0, 3.0], [2], :f32}]},
    {:sin, [{[0.0, 1.5707963], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:cos, [{[0.0, 3.14159265], [2], :f32}], [], [{[1.0, -1.0], [2], :f32}]},
    {:tan, [{[0.0, 0.785398163], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:tanh, [{[0.0, 100.0], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:sinh, [{[0.0, 1.0], [2], :f32}], [], [{[0.0, 1.175201194], [2], :f32}]},
    {:cosh, [{[0.0, 1.0], [2], :f32}], [], [{[1.0, 1.543080635], [2], :f32}]},
    {:asin, [{[0.0, 1.0], [2], :f32}], [], [{[0.0, 1.5707963], [2], :f32}]},
    {:acos, [{[1.0, 0.0], [2], :f32}], [], [{[0.0, 1.5707963], [2], :f32}]},
    {:atan, [{[0.0, 1.0], [2], :f32}], [], [{[0.0, 0.785398163], [2], :f32}]},
    {:asinh, [{[0.0, 1.175201194], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:acosh, [{[1.0, 1.543080635], [2], :f32}], [], [{[0.0, 1.0], [2], :f32}]},
    {:atanh, [{[0.0, 0.5], [2], :f32}], [], [{[0.0, 0.549306144], [2], :f32}]},
    {:erf, [{[0.0, 1.0], [2], :f32}], [], [{[0.0, 0.842700793], [2], :f32}]},
    {:recip, [{[2.0, -4.0], [2], :f32}], [], [{[0.5, -0.25], [2], :f32}]},
    {:floor, [{[1.5, -1.5], [2], :f32}], [], [{[1.0, -2.0], [2], :f32}]},
    {:ceil, [{[1.5, -1.5], [2], :f32}], [], [{[2.0, -1.0], [2], :f32}]},
    {:round, [{[1.4, -1.6], [2], :f32}], [], [{[1.0, -2.0], [2], :f32}]},
    {:trunc, [{[1.7, -1.7], [2], :f32}], [], [{[1.0, -1.0], [2], :f32}]},
    {:sigmoid, [{[0.0], [1], :f32}], [], [{[0.5], [1], :f32}]},
    {:relu, [{[-1.0, 2.0], [2], :f32}], [], [{[0.0, 2.0], [2], :f32}]},
    {:gelu, [{[0.0, 1.0], [2], :f32}], [], [{[0.0, 0.841344746], [2], :f32}]},
    {:is_nan, [{[1.0, @nan], [2], :f32}], [], [{[false, true], [2], :bool}]},
    {:is_inf, [{[:infinity, 1.0], [2], :f32}], [], [{[true, false], [2], :bool}]},
    {:abs, [{[-3, 4], [2], :s32}], [], [{[3, 4], [2], :s32}]},
    {:neg, [{[1.5, -2.0], [2], :f32}], [], [{[-1.5, 2.0], [2], :f32}]},
    {:sign, [{[-2.0, 0.0, 3.0], [3], :f32}], [], [{[-1.0, 0.0, 1.0], [3], :f32}]},
    {:add, [{[1, 2], [2], :s64}, {[10, 20], [2], :s64}], [], [{[11, 22], [2], :s64}]},
    {:sub, [{[1.0, 2.0], [2, 1], :f32}, {[1.0, 2.0], [1, 2], :f32}], [], [{[0.0, -1.0, 1.0, 0.0], [2, 2], :f32}]},
    {:mul, [{[2.0, 3.0], [2], :f32}, {[4.0, 5.0], [2], :f32}], [], [{[8.0, 15.0], [2], :f32}]},
    {:div, [{[7, 9], [2], :s32}, {[2, 3], [2], :s32}], [], [{[3, 3], [2], :s32}]},
    {:remainder, [{[7.0, -7.0], [2], :f32}, {[3.0, 3.0], [2], :f32}], [], [{[1.0, 2.0], [2], :f32}]},
    {:pow, [{[2.0, 9.0], [2], :f32}, {[3.0, 0.5], [2], :f32}], [], [{[8.0, 3.0], [2], :f32}]},
    {:atan2, [{[1.0, 0.0], [2], :f32}, {[1.0, -1.0], [2], :f32}], [], [{[0.785398163, 3.14159265], [2], :f32}]},
    {:equal, [{[1, 2], [2], :s32}, {[1, 3], [2], :s32}], [], [{[true, false], [2], :bool}]},
    {:not_equal, [{[1, 2], [2], :s32}, {[1, 3], [2], :s32}], [], [{[false, true], [2], :bool}]},
    {:greater, [{[1.0, 3.0], [2], :f32}, {[2.0, 2.0], [2], :f32}], [], [{[false, true], [2], :bool}]},
    {:greater_equal, [{[2.0, 1.0], [2], :f32}, {[2.0, 2.0], [2], :f32}], [], [{[true, false], [2], :bool}]},
    {:less, [{[1, 3], [2], :s32}, {[2, 2], [2], :s32}], [], [{[true, false], [2], :bool}]},
    {:less_equal, [{[2, 3], [2], :s32}, {[2, 2], [2], :s32}], [], [{[true, false], [2], :bool}]},
    {:logical_and, [{[true, true, false], [3], :bool}, {[true, false, false], [3], :bool}], [], [{[true, false, false], [3], :bool}]},
    {:logical_or, [{[true, false, false], [3], :bool}, {[false, false, true], [3], :bool}], [], [{[true, false, true], [3], :bool}]},
    {:logical_xor, [{[true, true], [2], :bool}, {[true, false], [2], :bool}], [], [{[false, true], [2], :bool}]},
    {:logical_not, [{[true, false], [2], :bool}], [], [{[false, true], [2], :bool}]},
    {:clamp, [{[-5.0, 0.5, 5.0], [3], :f32}], [min: -1.0, max: 1.0], [{[-1.0, 0.5, 1.0], [3], :f32}]},
    {:where, [{[true, false], [2], :bool}, {[1.0, 2.0], [2], :f32}, {[10.0, 20.0], [2], :f32}], [], [{[1.0, 20.0], [2], :f32}]},
    {:cast, [{[1.7, -2.2], [2], :f32}], [dtype: :s32], [{[1, -2], [2], :s32}]},
    {:sum, [{[1.0, 2.0, 3.0, 4.0], [2, 2], :f32}], [axis: 1], [{[3.0, 7.0], [2, 1], :f32}]},
    {:mean, [{[1.0, 2.0, 3.0, 4.0], [2, 2], :f32}], [], [{[2.5], [1], :f32}]},
    {:prod, [{[1, 2, 3, 4], [4], :s32}], [axis: 0], [{[24], [1], :s32}]},
    {:max, [{[1.0, 5.0, 3.0, 4.0], [2, 2], :f32}], [axis: 0], [{[3.0, 5.0], [1, 2], :f32}]},
    {:min, [{[1.0, 5.0, 3.0, 4.0], [2, 2], :f32}], [axis: -1], [{[1.0, 3.0], [2, 1], :f32}]},
    {:argmax, [{[1.0, 5.0, 3.0], [3], :f32}], [axis: 0], [{[1], [1], :s64}]},
    {:argmin, [{[4, 1, 3], [3], :s32}], [axis: 0], [{[1], [1], :s32}]},
    {:any, [{[false, true, false, false], [2, 2], :bool}], [axis: 1], [{[true, false], [2, 1], :bool}]},
    {:all, [{[1.0, 2.0, 0.0, 1.0], [4], :f32}], [], [{[false], [1], :bool}]},
    {:cumsum, [{[1, 2, 3], [3], :s32}], [axis: 0], [{[1, 3, 6], [3], :s32}]},
    {:cumprod, [{[1.0, 2.0, 3.0], [3], :f32}], [axis: 0], [{[1.0, 2.0, 6.0], [3], :f32}]},
    {:cummax, [{[1.0, 3.0, 2.0], [3], :f32}], [axis: 0], [{[1.0, 3.0, 3.0], [3], :f32}]},
    {:cummin, [{[3, 1, 2], [3], :s32}], [axis: 0], [{[3, 1, 1], [3], :s32}]},
    {:gather, [{[1.0, 2.0, 3.0, 4.0], [2, 2], :f32}, {[1, 0, 0, 0], [2, 2], :s32}], [axis: 1], [{[2.0, 1.0, 3.0, 3.0], [2, 2], :f32}]},
    {:scatter_add, [{[0.0, 0.0, 0.0], [3], :f32}, {[0, 2, 0], [3], :s32}, {[1.0, 2.0, 3.0], [3], :f32}], [axis: 0], [{[4.0, 0.0, 2.0], [3], :f32}]},
    {:select, [{[1, 2, 3, 4, 5, 6], [3, 2], :s32}, {[2, 0], [2], :s32}], [axis: 0], [{[5, 6, 1, 2], [2, 2], :s32}]},
    {:select_add, [{[0.0, 0.0], [2], :f32}, {[1, 1], [2], :s32}, {[1.0, 2.0], [2], :f32}], [axis: 0], [{[0.0, 3.0], [2], :f32}]},
    {:sort, [{[3.0, @nan, 1.0, 2.0], [4], :f32}], [], [{[1.0, 2.0, 3.0, @nan], [4], :f32}]},
    {:argsort, [{[3, 1, 2], [3], :s32}], [descending: true], [{[0, 2, 1], [3], :s32}]},
    {:topk, [{[1.0, 4.0, 2.0, 3.0], [4], :f32}], [k: 2], [{[4.0, 3.0], [2], :f32}]},
    {:argtopk, [{[1.0, 4.0, 2.0, 3.0], [4], :f32}], [k: 2], [{[1, 3], [2], :s64}]},
    {:reshape, [{[1, 2, 3, 4, 5, 6], [2, 3], :s32}], [shape: [3, 2]], [{[1, 2, 3, 4, 5, 6], [3, 2], :s32}]},
    {:permute, [{[1, 2, 3, 4, 5, 6], [2, 3], :s32}], [axes: [1, 0]], [{[1, 4, 2, 5, 3, 6], [3, 2], :s32}]},
    {:transpose, [{[1, 2, 3, 4], [2, 2], :s32}], [axes: [0, 1]], [{[1, 3, 2, 4], [2, 2], :s32}]},
    {:slice, [{[1, 2, 3, 4, 5, 6], [6], :s32}], [start: [1], stop: [6], step: [2]], [{[2, 4, 6], [3], :s32}]},
    {:expand, [{[1.0, 2.0], [1, 2], :f32}], [shape: [2, 2]], [{[1.0, 2.0, 1.0, 2.0], [2, 2], :f32}]},
    {:flip, [{[1, 2, 3], [3], :s32}], [axes: [0]], [{[3, 2, 1], [3], :s32}]},
    {:repeat, [{[1, 2], [2], :s32}], [axis: 0, times: 2], [{[1, 2, 1, 2], [4], :s32}]},
    {:cat, [{[1, 2], [2], :s32}, {[3], [1], :s32}], [axis: 0], [{[1, 2, 3], [3], :s32}]},
    {:matmul, [{[1.0, 2.0, 3.0, 4.0], [2, 2], :f32}, {[5.0, 6.0, 7.0, 8.0], [2, 2], :f32}], [], [{[19.0, 22.0, 43.0, 50.0], [2, 2], :f32}]},
    {:conv, [{[1.0, 2.0, 3.0, 4.0], [1, 1, 4], :f32}, {[1.0, 1.0], [1, 1, 2], :f32}, {[0.5], [1], :f32}], [], [{[3.5, 5.5, 7.5], [1, 1, 3], :f32}]},
    {:max_pool2d, [{[1.0, 2.0, 3.0, 4.0], [1, 1, 2, 2], :f32}], [kernel: 2], [{[4.0], [1, 1, 1, 1], :f32}]},
    {:avg_pool2d, [{[1.0, 2.0, 3.0, 4.0], [1, 1, 2, 2], :f32}], [kernel: 2], [{[2.5], [1, 1, 1, 1], :f32}]},
    {:interpolate, [{[1.0, 2.0], [1, 1, 1, 2], :f32}], [size: [1, 4]], [{[1.0, 1.0, 2.0, 2.0], [1, 1, 1, 4], :f32}]},
    {:attention, [{[1.0, 0.0], [1, 1, 1, 2], :f32}, {[1.0, 0.0, 0.0, 1.0], [1, 1, 2, 2], :f32}, {[1.0, 2.0, 3.0, 4.0], [1, 1, 2, 2], :f32}], [scale: 0.0],
     [{[2.0, 3.0], [1, 1, 1, 2], :f32}]},
    {:softmax, [{[0.0, 0.0], [2], :f32}], [], [{[0.5, 0.5], [2], :f32}]},
    {:log_softmax, [{[0.0, 0.0], [2], :f32}], [], [{[-0.693147181, -0.693147181], [2], :f32}]},
    # Image filters (ExCubecl.Filter; media_test.exs checks them against references).
    {:image_to_float, [{[0, 255, 51], [1, 3, 1], :u8}], [], [{[0.0, 1.0, 0.2], [1, 3, 1], :f32}]},
    {:image_resize, [{[10, 20], [1, 2, 1], :u8}], [size: [1, 4], mode: :nearest], [{[10, 10, 20, 20], [1, 4, 1], :u8}]},
    {:image_crop, [{[1, 2, 3, 4, 5, 6], [2, 3, 1], :u8}], [top: 1, left: 1, height: 1, width: 2], [{[5, 6], [1, 2, 1], :u8}]},
    {:image_pad, [{[1.0], [1, 1, 1], :f32}], [top: 1, value: 0.5], [{[0.5, 1.0], [2, 1, 1], :f32}]},
    {:image_flip, [{[1, 2, 3], [1, 3, 1], :u8}], [], [{[3, 2, 1], [1, 3, 1], :u8}]},
    {:image_rot90, [{[1, 2, 3, 4], [2, 2, 1], :u8}], [k: 1], [{[2, 4, 1, 3], [2, 2, 1], :u8}]},
    {:image_color, [{[255, 255, 255], [1, 1, 3], :u8}], [from: :rgb, to: :gray], [{[255], [1, 1, 1], :u8}]},
    {:image_normalize, [{[255, 0], [1, 1, 2], :u8}], [mean: [0.5, 0.5], std: [0.5, 0.5]], [{[1.0, -1.0], [1, 1, 2], :f32}]},
    {:image_blur, [{[2.0, 2.0, 2.0, 2.0], [2, 2, 1], :f32}], [sigma: 1.0], [{[2.0, 2.0, 2.0, 2.0], [2, 2, 1], :f32}]},
    {:audio_resample, [{[1.0, -1.0], [1, 2], :f32}], [from: 1, to: 2], [{[1.0, -1.0, 1.0, -1.0], [2, 2], :f32}]},
    # Random draws: checked by their range (the values themselves are random).
    {:random_uniform, [], [shape: [64], low: 2.0, high: 3.0], {:range, 2.0, 3.0}},
    {:random_normal, [], [shape: [64], mean: 0.0, std: 1.0], {:range, -10.0, 10.0}},
    {:random_bernoulli, [], [shape: [64], prob: 0.5], {:range, 0.0, 1.0}}
  ]

  # Tested below: their values are checked through a round trip.
  @quantization [:quantize, :dequantize]

  test "every kernel has a case here" do
    # The Nx entries (nx_*) are checked by nx_entries_test.exs and by ExBurn's suite.
    names = ExCubecl.kernels() |> Enum.map(& &1.name) |> Enum.reject(&String.starts_with?(Atom.to_string(&1), "nx_")) |> Enum.sort()
    covered = (@quantization ++ Enum.map(@cases, &elem(&1, 0))) |> Enum.uniq() |> Enum.sort()
    assert names -- covered == [], "kernels without a case: #{inspect(names -- covered)}"
    assert covered -- names == []
  end

  for {name, inputs, opts, expected} <- @cases do
    @name name
    @inputs inputs
    @opts opts
    @expected expected
    test "#{name}" do
      inputs = for {values, shape, dtype} <- @inputs, do: ExCubecl.buffer!(values, shape, dtype)
      outputs = ExCubecl.run_kernel!(@name, inputs, @opts)
      assert_outputs(outputs, @expected)
    end
  end

  # A function rather than a `case` on the attribute: each test's expectation is a literal,
  # and Elixir's type checker warns about the clause that literal can't take.
  defp assert_outputs([out], {:range, lo, hi}) do
    values = ExCubecl.to_list!(out)
    assert length(values) == 64
    assert Enum.all?(values, &(&1 >= lo and &1 <= hi))
  end

  defp assert_outputs(outputs, expected) when is_list(expected) do
    assert length(outputs) == length(expected)

    for {out, {values, shape, dtype}} <- Enum.zip(outputs, expected) do
      assert ExCubecl.shape(out) == {:ok, shape}
      assert ExCubecl.dtype(out) == dtype
      assert_close(ExCubecl.to_list!(out), values)
    end
  end

  defp assert_close(got, want) do
    assert length(got) == length(want), "got #{inspect(got)}, want #{inspect(want)}"

    for {g, w} <- Enum.zip(got, want) do
      cond do
        is_float(w) and is_float(g) -> assert abs(g - w) <= 1.0e-5 + 2.0e-3 * abs(w), "got #{inspect(got)}, want #{inspect(want)}"
        true -> assert g == w, "got #{inspect(got)}, want #{inspect(want)}"
      end
    end
  end

  describe "quantization" do
    test "quantize gives a :q8 buffer whose dequantized values are within half a step" do
      values = [-2.0, -1.0, -0.25, 0.0, 0.1, 0.5, 1.0, 2.0]
      x = ExCubecl.buffer!(values, [2, 4], :f32)

      for opts <- [[], [block_size: 2], [block_size: 4, value: :q8f]] do
        [q] = ExCubecl.run_kernel!(:quantize, [x], opts)
        assert {q.dtype, q.shape} == {:q8, [2, 4]}
        [back] = ExCubecl.run_kernel!(:dequantize, [q])
        assert back.dtype == :f32
        step = 2.0 / 127

        for {g, w} <- Enum.zip(ExCubecl.to_list!(back), values) do
          assert abs(g - w) <= step / 2 + 1.0e-6, "#{inspect(opts)}: got #{g}, want #{w}"
        end
      end
    end

    test "a quantized buffer reads as i8 values then f32 scales" do
      [q] = ExCubecl.run_kernel!(:quantize, [ExCubecl.buffer!([-1.0, 0.5, 1.0, 0.0], [4], :f32)])
      assert <<-127::signed-8, v::signed-8, 127::signed-8, 0::signed-8, scale::float-32-native>> = ExCubecl.read!(q)
      assert v in [63, 64]
      assert_in_delta scale, 1.0 / 127, 1.0e-7
      [h] = ExCubecl.run_kernel!(:dequantize, [q], dtype: :f16)
      assert h.dtype == :f16
    end

    test "bad quantization calls are errors naming the op" do
      x = ExCubecl.buffer!([1.0, 2.0, 3.0], [3], :f32)
      [q] = ExCubecl.run_kernel!(:quantize, [x])
      assert {:error, %ExCubecl.Error{op: "quantize"}} = ExCubecl.run_kernel(:quantize, [x], block_size: 2)
      assert {:error, %ExCubecl.Error{op: "quantize"}} = ExCubecl.run_kernel(:quantize, [x], value: :q4)
      assert {:error, %ExCubecl.Error{op: "quantize"}} = ExCubecl.run_kernel(:quantize, [ExCubecl.buffer!([1], [1], :s32)])
      assert {:error, %ExCubecl.Error{op: "dequantize"}} = ExCubecl.run_kernel(:dequantize, [x])
      assert {:error, %ExCubecl.Error{op: "dequantize"}} = ExCubecl.run_kernel(:dequantize, [q], dtype: :s32)
      assert {:error, %ExCubecl.Error{op: "add", reason: reason}} = ExCubecl.run_kernel(:add, [q, q])
      assert reason =~ "dequantize"
      assert {:error, %ExCubecl.Error{op: "to_list"}} = ExCubecl.to_list(q)
      {:ok, p} = ExCubecl.pipeline()
      assert {:error, %ExCubecl.Error{op: "pipeline_add"}} = ExCubecl.pipeline_add(p, :quantize, [{:input, 0}])
      assert {:ok, true} = ExCubecl.free(q)
      assert {:error, %ExCubecl.Error{op: "dequantize"}} = ExCubecl.run_kernel(:dequantize, [q])
    end
  end
end
