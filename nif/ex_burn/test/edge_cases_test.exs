defmodule ExBurn.EdgeCasesTest do
  # Where Nx's semantics have edges: ExBurn follows BinaryBackend (NaN ties of argmax and
  # argmin, singular systems) or differs as its module docs say (out-of-range indices, negative
  # shift amounts). Each case is checked both ways, so that a change on either side shows.
  use ExUnit.Case, async: false

  defp binary(fun), do: Nx.with_default_backend(Nx.BinaryBackend, fun)
  defp ours(fun), do: Nx.with_default_backend(ExBurn.Backend, fun) |> Nx.backend_copy(Nx.BinaryBackend)

  test "argmax and argmin with several NaNs give the last NaN, whatever the tie-break, as BinaryBackend" do
    x = [1.0, :nan, 3.0, :nan, 2.0]
    m = [[:nan, 1.0, :nan], [2.0, 2.0, 1.0]]

    for fun <- [
          fn -> Nx.argmax(Nx.tensor(x)) end,
          fn -> Nx.argmax(Nx.tensor(x), tie_break: :high) end,
          fn -> Nx.argmin(Nx.tensor(x)) end,
          fn -> Nx.argmin(Nx.tensor(m), axis: 1, tie_break: :high) end,
          fn -> Nx.argmax(Nx.tensor(m), axis: 1) end
        ] do
      assert Nx.to_flat_list(ours(fun)) == Nx.to_flat_list(binary(fun))
    end

    assert Nx.to_number(ours(fn -> Nx.argmax(Nx.tensor(x)) end)) == 3
  end

  test "triangular_solve and solve of a singular matrix raise ArgumentError, as BinaryBackend" do
    for fun <- [
          fn -> Nx.LinAlg.triangular_solve(Nx.tensor([[1.0, 0.0], [2.0, 0.0]]), Nx.tensor([1.0, 2.0])) end,
          fn -> Nx.LinAlg.triangular_solve(Nx.tensor([[[1.0, 0.0], [2.0, 3.0]], [[0.0, 0.0], [1.0, 1.0]]]), Nx.tensor([[1.0, 2.0], [1.0, 1.0]])) end,
          fn -> Nx.LinAlg.solve(Nx.tensor([[1.0, 2.0], [2.0, 4.0]]), Nx.tensor([1.0, 2.0])) end
        ] do
      assert_raise ArgumentError, "can't solve for singular matrix", fn -> binary(fun) end
      assert_raise ArgumentError, "can't solve for singular matrix", fn -> ours(fun) end
    end

    # a regular one still solves
    fun = fn -> Nx.LinAlg.triangular_solve(Nx.tensor([[1.0, 0.0], [2.0, 4.0]]), Nx.tensor([1.0, 2.0])) end
    assert Nx.to_flat_list(ours(fun)) == Nx.to_flat_list(binary(fun))
  end

  test "out-of-range indices are clamped (BinaryBackend raises)" do
    # (made inside each function, on the backend it runs with)
    t = fn -> Nx.tensor([1, 2, 3]) end
    idx = fn -> Nx.tensor([[5], [-1], [1]]) end

    cases = [
      {fn -> Nx.gather(t.(), idx.()) end, [3, 1, 2]},
      {fn -> Nx.take(t.(), Nx.tensor([5, -1, 1])) end, [3, 1, 2]},
      {fn -> Nx.indexed_add(t.(), idx.(), Nx.tensor([10, 20, 30])) end, [21, 32, 13]},
      {fn -> Nx.indexed_put(t.(), idx.(), Nx.tensor([10, 20, 30])) end, [20, 30, 10]}
    ]

    for {fun, want} <- cases do
      assert_raise ArgumentError, ~r/out of bounds/, fn -> binary(fun) end
      assert Nx.to_flat_list(ours(fun)) == want
    end
  end

  test "negative shift amounts shift everything out (BinaryBackend raises)" do
    left = fn -> Nx.left_shift(Nx.tensor([8, 8, -8]), Nx.tensor([-1, 2, -2])) end
    right = fn -> Nx.right_shift(Nx.tensor([8, 8, -8]), Nx.tensor([-1, 2, -2])) end
    assert_raise ArgumentError, ~r/cannot left shift by -1/, fn -> binary(left) end
    assert_raise ArgumentError, ~r/cannot right shift by -1/, fn -> binary(right) end
    assert Nx.to_flat_list(ours(left)) == [0, 32, 0]
    assert Nx.to_flat_list(ours(right)) == [0, 2, -1]
  end
end
