defmodule ExCubecl.CommandTest do
  use ExUnit.Case, async: true

  test "a failing command between good ones: only it fails, and every message arrives" do
    x = ExCubecl.buffer!([1.0, 4.0, 9.0], [3], :f32)
    {:ok, good1} = ExCubecl.submit([{:sqrt, [{:input, 0}], []}], [x])
    # A reshape to a size the tensor doesn't have fails when the command runs.
    {:ok, bad} = ExCubecl.submit([{:reshape, [{:input, 0}], [shape: [2, 2]]}], [x])
    {:ok, good2} = ExCubecl.submit([{:mul, [{:input, 0}, {:input, 0}], []}, {:neg, [{:step, 0, 0}], []}], [x])

    assert_receive {:ex_cubecl, ^good1, {:ok, [y1]}}, 60_000
    assert_receive {:ex_cubecl, ^bad, {:error, %{op: "command", reason: reason}}}, 60_000
    assert_receive {:ex_cubecl, ^good2, {:ok, [y2]}}, 60_000
    assert reason =~ "reshape"
    assert ExCubecl.to_list!(ExCubecl.Buffer.wrap(y1)) == [1.0, 2.0, 3.0]
    assert ExCubecl.to_list!(ExCubecl.Buffer.wrap(y2)) == [-1.0, -16.0, -81.0]

    assert {:ok, :completed} = ExCubecl.poll(good1)
    assert {:ok, :failed} = ExCubecl.poll(bad)
    assert {:ok, [_]} = ExCubecl.wait(good1, 1_000)
    assert {:error, %ExCubecl.Error{op: "wait"}} = ExCubecl.wait(bad)
    assert {:error, %ExCubecl.Error{}} = ExCubecl.poll(good1)
    assert {:ok, [z]} = ExCubecl.wait(good2)
    assert ExCubecl.to_list!(z) == [-1.0, -16.0, -81.0]
  end

  test "pipeline replays run as commands" do
    {:ok, p} = ExCubecl.capture(fn [a] -> ExCubecl.run_kernel!(:exp, [a]) end, 1)
    a = ExCubecl.buffer!([0.0, 1.0], [2], :f32)
    {:ok, [eager]} = ExCubecl.pipeline_run(p, [a])
    {:ok, id} = ExCubecl.submit(p, [a])
    {:ok, [async]} = ExCubecl.wait(id)
    assert ExCubecl.read!(async) == ExCubecl.read!(eager)
  end

  test "bad commands are errors" do
    assert {:error, %ExCubecl.Error{op: "submit"}} = ExCubecl.submit([], [])
    assert {:error, %ExCubecl.Error{op: "submit"}} = ExCubecl.submit([{:nope, [], []}], [])
    assert {:error, %ExCubecl.Error{op: "poll"}} = ExCubecl.poll(987_654_321)
    assert {:error, %ExCubecl.Error{op: "wait"}} = ExCubecl.wait(-1)
  end
end
