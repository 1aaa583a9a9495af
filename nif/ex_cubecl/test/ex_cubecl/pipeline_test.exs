defmodule ExCubecl.PipelineTest do
  use ExUnit.Case, async: true

  test "a replay is bit-equal to eager execution" do
    x = ExCubecl.buffer!(Enum.map(1..64, &(:math.sin(&1) * 3.0)), [8, 8], :f32)
    w = ExCubecl.buffer!(Enum.map(1..64, &(:math.cos(&1) * 0.5)), [8, 8], :f32)

    eager = fn x, w ->
      [h] = ExCubecl.run_kernel!(:matmul, [x, w])
      [a] = ExCubecl.run_kernel!(:tanh, [h])
      [s] = ExCubecl.run_kernel!(:softmax, [a], axis: -1)
      [m] = ExCubecl.run_kernel!(:sum, [s], axis: 0)
      m
    end

    {:ok, p} = ExCubecl.capture(fn [x, w] -> [eager.(x, w)] end, 2)

    for k <- 1..3 do
      xk = ExCubecl.buffer!(Enum.map(1..64, &(:math.sin(&1 * k) * 3.0)), [8, 8], :f32)
      {:ok, [replayed]} = ExCubecl.pipeline_run(p, [xk, w])
      assert ExCubecl.read!(replayed) == ExCubecl.read!(eager.(xk, w))
    end

    assert {:ok, true} = ExCubecl.pipeline_free(p)
    assert {:error, %ExCubecl.Error{reason: "the pipeline was freed"}} = ExCubecl.pipeline_run(p, [x, w])
  end

  test "pipelines built step by step, and their errors" do
    {:ok, p} = ExCubecl.pipeline()
    {:ok, s1} = ExCubecl.pipeline_add(p, :mul, [{:input, 0}, {:input, 1}])
    {:ok, s2} = ExCubecl.pipeline_add(p, :add, [s1, {:input, 0}])
    assert {:error, %ExCubecl.Error{op: "pipeline_add"}} = ExCubecl.pipeline_add(p, :nope, [s2])
    assert {:error, %ExCubecl.Error{op: "pipeline_add"}} = ExCubecl.pipeline_add(p, :exp, [{:step, 9, 0}])
    a = ExCubecl.buffer!([1, 2], [2], :s32)
    b = ExCubecl.buffer!([3, 4], [2], :s32)
    {:ok, [c]} = ExCubecl.pipeline_run(p, [a, b], [s2])
    assert ExCubecl.to_list!(c) == [4, 10]
    {:ok, [c]} = ExCubecl.pipeline_run(p, [b, a], [s2])
    assert ExCubecl.to_list!(c) == [6, 12]
    wrong = ExCubecl.buffer!([1, 2, 3], [3], :s32)
    assert {:error, %ExCubecl.Error{op: "pipeline_run"}} = ExCubecl.pipeline_run(p, [wrong, wrong], [s2])
    assert {:error, %ExCubecl.Error{op: "pipeline_add"}} = ExCubecl.pipeline_add(p, :exp, [s2])
  end
end
