defmodule ExCubecl.AllocationLimitTest do
  # ExCubecl.put_allocation_limit/1: an allocation over the cap is refused with an error
  # naming the op, the size and the limit; smaller ones go on; lifted, the refused call works.
  # Not async: the cap holds for the whole node.
  use ExUnit.Case, async: false

  setup do
    on_exit(fn -> ExCubecl.put_allocation_limit(nil) end)
  end

  test "an allocation over the limit is refused by name; lifting the limit lets it through" do
    x = ExCubecl.buffer!(Enum.map(1..1024, &(&1 / 1024)), [1024], :f32)
    small = ExCubecl.buffer!([0.0, 1.0], [2], :f32)
    assert :ok = ExCubecl.put_allocation_limit(1024)

    assert {:error, %ExCubecl.Error{op: "exp", reason: reason}} = ExCubecl.run_kernel(:exp, [x])
    assert reason =~ "needs 4096 bytes, more than the allocation limit"
    assert reason =~ "(1024 bytes)"
    assert {:error, %ExCubecl.Error{op: "buffer"}} = ExCubecl.buffer(Enum.map(1..512, &(&1 * 1.0)), [512], :f32)
    assert {:ok, [y]} = ExCubecl.run_kernel(:exp, [small])
    assert ExCubecl.to_list!(y) |> Enum.map(&Float.round(&1, 4)) == [1.0, 2.7183]

    assert :ok = ExCubecl.put_allocation_limit(nil)
    assert {:ok, [z]} = ExCubecl.run_kernel(:exp, [x])
    assert ExCubecl.shape(z) == {:ok, [1024]}
    assert_raise FunctionClauseError, fn -> ExCubecl.put_allocation_limit(0) end
  end
end
