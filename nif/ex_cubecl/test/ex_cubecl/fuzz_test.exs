defmodule ExCubecl.FuzzTest do
  # Random bad calls: wrong shapes, dtypes, sizes, indices, axes, options, freed buffers and
  # wrong term types. Each must return an error (never raise from the non-bang API, never
  # crash the VM), and correct calls afterwards must still give the right answers.
  use ExUnit.Case, async: false
  @moduletag timeout: :infinity

  @calls 10_000

  test "#{@calls} random bad calls return errors and leave the device usable" do
    :rand.seed(:exsss, {7, 11, 13})
    good = ExCubecl.buffer!([1.0, 2.0, 3.0, 4.0], [2, 2], :f32)
    ints = ExCubecl.buffer!([0, 1, 1, 0], [2, 2], :s32)
    freed = ExCubecl.buffer!([1.0], [1], :f32)
    {:ok, true} = ExCubecl.free(freed)
    kernels = Enum.map(ExCubecl.kernels(), & &1.name)

    errors =
      for i <- 1..@calls, reduce: 0 do
        acc ->
          result = bad_call(rem(i, 13), good, ints, freed, kernels)

          case result do
            {:error, %ExCubecl.Error{op: op, reason: reason}} when is_binary(op) and is_binary(reason) ->
              acc + 1

            other ->
              flunk("bad call #{i} (kind #{rem(i, 13)}) did not return an error: #{inspect(other, limit: 8)}")
          end
      end

    IO.puts("\nfuzz: #{errors} of #{@calls} bad calls returned {:error, %ExCubecl.Error{}}; the VM lives")
    assert errors == @calls
    [sum] = ExCubecl.run_kernel!(:sum, [good])
    assert ExCubecl.to_list!(sum) == [10.0]
    [prod] = ExCubecl.run_kernel!(:matmul, [good, good])
    assert ExCubecl.to_list!(prod) == [7.0, 10.0, 15.0, 22.0]
  end

  defp bad_call(0, _good, _ints, _freed, _k), do: ExCubecl.buffer(random_bytes(), random_shape(), :f32)
  defp bad_call(1, _good, _ints, _freed, _k), do: ExCubecl.buffer(<<1, 2, 3>>, [1], Enum.random([:f99, :int, "f32", nil, 3]))
  defp bad_call(2, _good, _ints, _freed, _k), do: ExCubecl.buffer([1.0], [Enum.random([-1, -100, 1.5, :a])], :f32)
  defp bad_call(3, good, _ints, _freed, _k),
    do: ExCubecl.run_kernel(Enum.random([:sum, :mean, :argmax, :cumsum, :sort, :softmax, :repeat, :cat]), [good], axis: Enum.random([5, -9, 100]), times: 2)
  defp bad_call(4, good, ints, _freed, _k), do: ExCubecl.run_kernel(Enum.random([:add, :mul, :matmul, :where]), [good, ints])
  defp bad_call(5, good, _ints, freed, k), do: ExCubecl.run_kernel(Enum.random(k), [freed, good])
  defp bad_call(6, _good, _ints, freed, _k), do: Enum.random([ExCubecl.read(freed), ExCubecl.to_list(freed)])
  defp bad_call(7, good, _ints, _freed, _k), do: ExCubecl.run_kernel(Enum.random([:nope, "", :"drop table", 42, {:a}]), [good])
  defp bad_call(8, _good, _ints, _freed, k), do: ExCubecl.run_kernel(Enum.random(k), Enum.random([[1, 2], [:a], "x", [%{}], nil]))

  defp bad_call(9, good, ints, _freed, _k),
    do: ExCubecl.run_kernel(Enum.random([:gather, :select, :scatter_add]), [good, Enum.random([good, ints])], axis: Enum.random([-3, 2, 9]))

  defp bad_call(10, good, _ints, _freed, _k) do
    {kernel, opts} =
      Enum.random([
        {:reshape, [shape: [3, 3]]},
        {:reshape, [shape: :x]},
        {:permute, [axes: [0, 0]]},
        {:slice, [start: [5, 5, 5]]},
        {:slice, [step: [0, 1]]},
        {:expand, [shape: [3]]},
        {:topk, [k: 9]},
        {:conv, [stride: 0]},
        {:clamp, [min: :x, max: 1]},
        {:cast, [dtype: :c64]}
      ])

    ExCubecl.run_kernel(kernel, [good], opts)
  end

  defp bad_call(11, good, _ints, _freed, _k),
    do: ExCubecl.run_kernel(:zeros, [], Enum.random([[shape: [-1], dtype: :f32], [shape: [1_099_511_627_776, 1_073_741_824], dtype: :f32], [shape: [2], dtype: :nope], [dtype: :f32], [shape: [2], dtype: :f32, device: "tpu:0"], [good]]))

  defp bad_call(12, good, _ints, freed, _k) do
    {:ok, p} = ExCubecl.pipeline()

    case :rand.uniform(6) do
      1 -> ExCubecl.pipeline_add(p, :exp, Enum.random([[{:step, 3, 0}], [{:nope, 1}], [:x], "x"]))
      2 -> ExCubecl.pipeline_run(p, [good], [{:input, 0}])
      3 -> ExCubecl.submit(Enum.random([[], [{:exp, :x, []}], [{42, [], []}], :x]), [good])
      4 -> ExCubecl.wait(Enum.random([0, -5, 123_456_789, :x]), 10)
      5 -> ExCubecl.poll(Enum.random([0, 987_654_321, "1"]))
      6 -> ExCubecl.submit([{:exp, [{:input, 0}], []}], [freed])
    end
  end

  defp random_bytes, do: :crypto.strong_rand_bytes(Enum.random([0, 1, 3, 5, 7]))
  defp random_shape, do: Enum.random([[3], [2, 2], [1, 1, 1], [1_099_511_627_776]])
end
