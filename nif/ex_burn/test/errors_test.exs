defmodule ExBurn.ErrorsTest do
  # Bad input for every callback group: an ExBurn.Error naming the op, the shapes and the
  # types; the VM lives and a correct call afterwards still gives the right answer.
  use ExUnit.Case, async: false
  alias ExBurn.Backend, as: B

  defp out(shape, type \\ {:f, 32}), do: %Nx.Tensor{shape: shape, type: type, names: List.duplicate(nil, tuple_size(shape)), data: nil}
  defp t(list, type \\ :f32), do: Nx.tensor(list, type: type)

  defp assert_error(op, fun) do
    e = assert_raise ExBurn.Error, fun
    assert e.op == "Nx.#{op}", "expected op Nx.#{op}, got #{inspect(e)}"
    assert String.starts_with?(Exception.message(e), "Nx.#{op}")
    e
  end

  test "creation and transfers" do
    assert_error(:from_binary, fn -> B.from_binary(out({4}), <<1, 2, 3>>, []) end)
    assert_error(:constant, fn -> B.constant(out({1_000_000, 1_000_000}), 1.0, []) end)
    assert_error(:iota, fn -> B.iota(out({2, 3}), 5, []) end)
    bad_device = assert_raise ExBurn.Error, fn -> B.constant(out({2}), 1.0, device: "nope:0") end
    assert bad_device.reason =~ "nope"
    freed = t([1.0, 2.0])
    assert ExBurn.Tensor.free(freed) == :ok
    assert ExBurn.Tensor.free(freed) == :already_deallocated
    assert_error(:to_binary, fn -> Nx.to_binary(freed) end)
  end

  test "elementwise, shape and indexing callbacks" do
    a = t([[1.0, 2.0, 3.0]])
    assert_error(:add, fn -> B.add(out({2, 2}), a, a) end)
    assert_error(:reshape, fn -> B.reshape(out({7}), a) end)
    assert_error(:transpose, fn -> B.transpose(out({3, 1}), a, [0, 5]) end)
    assert_error(:gather, fn -> B.gather(out({1}), a, t([[0, 0, 0]], :s32), axes: [0, 1, 2]) end)
    assert_error(:slice, fn -> B.slice(out({1, 2}), a, [0, 0], [1, 2], [1]) end)
    assert_error(:concatenate, fn -> B.concatenate(out({2, 3}), [a, t([[1.0, 2.0]])], 0) end)
  end

  test "reductions, windows, dot and conv" do
    a = t([[1.0, 2.0], [3.0, 4.0]])
    assert_error(:sum, fn -> B.sum(out({2}), a, axes: [7], keep_axes: false) end)
    assert_error(:argmax, fn -> B.argmax(out({2}, {:s, 32}), a, axis: 9) end)
    assert_error(:window_sum, fn -> B.window_sum(out({1, 1}), a, {2}, strides: [1], padding: [{0, 0}]) end)
    assert_error(:dot, fn -> B.dot(out({2, 2}), a, [1], [], t([1.0, 2.0, 3.0]), [0], []) end)
    assert_error(:conv, fn -> B.conv(out({1, 1, 1, 1, 1, 1}), Nx.iota({1, 1, 1, 1, 1, 1}, type: :f32), Nx.iota({1, 1, 1, 1, 1, 1}, type: :f32), strides: [1, 1, 1, 1], padding: [{0, 0}, {0, 0}, {0, 0}, {0, 0}], input_dilation: [1, 1, 1, 1], kernel_dilation: [1, 1, 1, 1], feature_group_size: 1, batch_group_size: 1) end)
    # a function that can't be traced runs as Nx.BinaryBackend runs it: its own error reaches
    # the caller, and the VM and the device go on
    assert_raise ArgumentError, "not traceable", fn -> Nx.reduce(a, 0, fn _x, _acc -> raise ArgumentError, "not traceable" end) end
    assert Nx.to_flat_list(Nx.sum(a)) == [10.0]
  end

  test "the VM lives and correct calls still work after bad ones" do
    for _ <- 1..200 do
      assert_raise ExBurn.Error, fn -> B.add(out({5}), t([1.0, 2.0]), t([1.0, 2.0])) end
    end

    assert Nx.to_flat_list(Nx.add(t([1.0, 2.0]), t([10.0, 20.0]))) == [11.0, 22.0]
    assert ExBurn.smoke_test() == :ok
  end
end
