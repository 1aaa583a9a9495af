defmodule ExCubecl.DocumentedTest do
  # ExCubecl's calls as ExBurn's documents make them (004: "Using ExCubecl for GPU Buffers",
  # ExCubecl.run_kernel/4; 000-002: pipeline/0 + pipeline_add/5 + pipeline_run/1,
  # submit/1 + poll/1 + wait/1): kernels that write into given output buffers.
  use ExUnit.Case, async: true

  test "004's 'Using ExCubecl for GPU Buffers', as written" do
    {:ok, a} = ExCubecl.buffer([1.0, 2.0, 3.0], [3], :f32)
    {:ok, b} = ExCubecl.buffer([4.0, 5.0, 6.0], [3], :f32)

    {:ok, [3]} = ExCubecl.shape(a)
    {:ok, 12} = ExCubecl.size(a)

    {:ok, data} = ExCubecl.read(a)

    assert data == <<1.0::float-32-native, 2.0::float-32-native, 3.0::float-32-native>>
    assert {:ok, 12} = ExCubecl.size(b)
    assert {:ok, 2} = ExCubecl.size(ExCubecl.buffer!([true, false], [2], :bool))
    assert {:ok, 32} = ExCubecl.size(ExCubecl.buffer!(Enum.to_list(1..4), [2, 2], :s64))
    assert {:error, %ExCubecl.Error{op: "shape"}} = ExCubecl.shape(:nope)
    assert {:error, %ExCubecl.Error{op: "size"}} = ExCubecl.size(:nope)
  end

  test "run_kernel/4 writes the result into the output buffer; every holder sees it" do
    a = ExCubecl.buffer!([1.0, 4.0, 9.0], [3], :f32)
    out = ExCubecl.buffer!([0.0, 0.0, 0.0], [3], :f32)
    same = out
    assert {:ok, ^out} = ExCubecl.run_kernel(:sqrt, [a], out, %{})
    assert ExCubecl.to_list!(same) == [1.0, 2.0, 3.0]
    # params as a map (atom or string keys) or a keyword list; run_kernel/3 with an output buffer
    m = ExCubecl.buffer!([[1.0, 5.0], [7.0, 2.0]], [2, 2], :f32)
    col = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
    sums = ExCubecl.buffer!([0.0, 0.0], [1, 2], :f32)
    assert {:ok, ^sums} = ExCubecl.run_kernel(:sum, [m], sums, %{axis: 0})
    assert ExCubecl.to_list!(sums) == [8.0, 7.0]
    maxes = ExCubecl.buffer!([0, 0], [2, 1], :s64)
    assert {:ok, ^maxes} = ExCubecl.run_kernel(:argmax, [m], maxes, %{"axis" => 1})
    assert ExCubecl.to_list!(maxes) == [1, 0]
    assert {:ok, ^col} = ExCubecl.run_kernel(:relu, [ExCubecl.buffer!([-1.0, 3.0], [2], :f32)], col)
    assert ExCubecl.to_list!(col) == [0.0, 3.0]
  end

  test "run_kernel/4's errors: the output's shape, dtype or device, a freed output, bad params" do
    a = ExCubecl.buffer!([1.0, 2.0], [2], :f32)
    assert {:error, %ExCubecl.Error{op: "add", reason: "the output buffer must have the result's shape, dtype and device", details: d}} =
             ExCubecl.run_kernel(:add, [a, a], ExCubecl.buffer!([0.0], [1], :f32), %{})

    assert d =~ "[1]" and d =~ "[2]"
    assert {:error, %ExCubecl.Error{reason: "the output buffer must have" <> _}} = ExCubecl.run_kernel(:add, [a, a], ExCubecl.buffer!([0, 0], [2], :s32), [])
    freed = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
    {:ok, true} = ExCubecl.free(freed)
    assert {:error, %ExCubecl.Error{reason: "the tensor was freed"}} = ExCubecl.run_kernel(:add, [a, a], freed, %{})
    top = ExCubecl.buffer!([0.0], [1], :f32)
    assert {:ok, ^top} = ExCubecl.run_kernel(:topk, [a], top, k: 1)
    assert ExCubecl.to_list!(top) == [2.0]
    assert {:error, %ExCubecl.Error{op: "add", reason: "the output must be an ExCubecl buffer"}} = ExCubecl.run_kernel(:add, [a, a], :out, %{})
    assert {:error, %ExCubecl.Error{reason: "kernel params are a map or keyword list"}} = ExCubecl.run_kernel(:add, [a, a], a, 3)
    # the values are untouched by the failed calls
    assert ExCubecl.to_list!(a) == [1.0, 2.0]
  end

  test "pipeline/0 + pipeline_add/5 + pipeline_run/1: commands in order, results in their outputs, replays" do
    {:ok, p} = ExCubecl.pipeline()
    x = ExCubecl.buffer!([1.0, -2.0], [2], :f32)
    y = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
    z = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
    :ok = ExCubecl.pipeline_add(p, :mul, [x, x], y)
    :ok = ExCubecl.pipeline_add(p, "neg", [y], z, %{})
    :ok = ExCubecl.pipeline_add_struct(p, ExCubecl.Command.run_kernel(:add, [z, x], x))
    {:ok, [i1, i2, i3]} = ExCubecl.pipeline_run(p)
    # y = x*x; z = -y; x = z + x
    assert ExCubecl.to_list!(y) == [1.0, 4.0]
    assert ExCubecl.to_list!(z) == [-1.0, -4.0]
    assert ExCubecl.to_list!(x) == [0.0, -6.0]
    for id <- [i1, i2, i3], do: assert({:ok, :completed} = ExCubecl.poll(id))
    assert {:ok, [r2]} = ExCubecl.wait(i2)
    assert ExCubecl.to_list!(r2) == [-1.0, -4.0]
    launches = ExCubecl.launch_count()
    {:ok, [_, _, _]} = ExCubecl.pipeline_run(p)
    assert ExCubecl.launch_count() - launches >= 3
    assert ExCubecl.to_list!(x) == [0.0, -42.0]
    # A command added after a run: the next run has it.
    :ok = ExCubecl.pipeline_add(p, :abs, [x], x)
    {:ok, [_, _, _, _]} = ExCubecl.pipeline_run(p)
    assert ExCubecl.to_list!(x) == [0.0, 1806.0]
    assert {:ok, true} = ExCubecl.pipeline_free(p)
    assert {:error, %ExCubecl.Error{op: "pipeline_run", reason: "the pipeline has no commands"}} = ExCubecl.pipeline_run(p)
  end

  test "pipeline_add/5's errors" do
    {:ok, p} = ExCubecl.pipeline()
    a = ExCubecl.buffer!([1.0], [1], :f32)
    assert {:error, %ExCubecl.Error{reason: "unknown kernel \"nope\""}} = ExCubecl.pipeline_add(p, :nope, [a], a)
    assert {:error, %ExCubecl.Error{reason: "inputs must be ExCubecl buffers"}} = ExCubecl.pipeline_add(p, :exp, [:x], a, %{})
    assert {:error, %ExCubecl.Error{reason: "the output must be an ExCubecl buffer"}} = ExCubecl.pipeline_add(p, :exp, [a], :out, %{})
    assert {:error, %ExCubecl.Error{reason: "expects a pipeline"}} = ExCubecl.pipeline_add(:p, :exp, [a], a, %{})
    assert {:error, %ExCubecl.Error{reason: "expects an %ExCubecl.Command{}"}} = ExCubecl.pipeline_add_struct(p, :cmd)
    # a bad kernel option fails at the run, naming the kernel
    :ok = ExCubecl.pipeline_add(p, :sum, [a], a, %{axis: 5})
    assert {:error, %ExCubecl.Error{}} = ExCubecl.pipeline_run(p)
  end

  test "submit/1 of a command, poll/1, wait/1" do
    a = ExCubecl.buffer!([3.0, -4.0], [2], :f32)
    out = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
    {:ok, id} = ExCubecl.submit(ExCubecl.Command.run_kernel(:abs, [a], out))
    assert {:ok, :completed} = ExCubecl.poll(id)
    assert {:ok, [^out]} = ExCubecl.wait(id)
    assert ExCubecl.to_list!(out) == [3.0, 4.0]
    assert {:error, %ExCubecl.Error{op: "wait"}} = ExCubecl.wait(id)
    assert {:error, %ExCubecl.Error{op: "poll"}} = ExCubecl.poll(id)
    assert {:error, %ExCubecl.Error{op: "abs"}} = ExCubecl.submit(ExCubecl.Command.run_kernel(:abs, [a], ExCubecl.buffer!([0.0], [1], :f32)))
    assert {:error, %ExCubecl.Error{op: "submit"}} = ExCubecl.submit("some_command")
  end
end
