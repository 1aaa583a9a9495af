defmodule ExBurn.LinAlgExceptionsTest do
  # One targeted test per cause of linalg_doctest_test.exs's except-list.
  use ExUnit.Case, async: false

  defp on_both(fun, inputs) do
    want = Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, inputs) end)
    got = Nx.with_default_backend(ExBurn.Backend, fn -> apply(fun, Enum.map(inputs, &Nx.backend_copy(&1, ExBurn.Backend))) end)
    {got, want}
  end

  defp flat(%Nx.Tensor{} = t), do: t |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.to_flat_list()
  defp flat(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.flat_map(&flat/1)

  test "f64: a device without f64 raises ExBurn.Error" do
    if :f64 in ExCubecl.supported_dtypes() do
      assert Nx.to_number(Nx.LinAlg.determinant(Nx.tensor([[2.0, 0.0], [0.0, 3.0]], type: :f64))) == 6.0
    else
      assert_raise ExBurn.Error, fn -> Nx.LinAlg.determinant(Nx.tensor([[2.0, 0.0], [0.0, 3.0]], type: :f64)) end
    end
  end

  test "precision, precision_lavapipe: the decompositions within f32 rounding of BinaryBackend" do
    a = Nx.tensor([[1, 3, 2, 1], [2, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1]], type: :f32, backend: Nx.BinaryBackend)
    b = Nx.tensor([-3, 0, 4, -2], type: :f32, backend: Nx.BinaryBackend)
    spd = Nx.tensor([[6.0, 3.0, 4.0], [3.0, 6.0, 5.0], [4.0, 5.0, 10.0]], backend: Nx.BinaryBackend)

    cases = [
      {&Nx.LinAlg.solve/2, [a, b]},
      {&Nx.LinAlg.norm/1, [Nx.tensor([3.0, 4.0], backend: Nx.BinaryBackend)]},
      {&Nx.LinAlg.pinv/1, [Nx.tensor([[1.0, 2.0], [3.0, 4.0]], backend: Nx.BinaryBackend)]},
      {&Nx.LinAlg.invert/1, [a]},
      {&Nx.LinAlg.determinant/1, [a]},
      {&Nx.LinAlg.cholesky/1, [spd]},
      {&Nx.LinAlg.qr/1, [spd]},
      {&Nx.LinAlg.lu/1, [a]},
      {&Nx.LinAlg.matrix_power(&1, 3), [spd]},
      {&Nx.LinAlg.svd/1, [spd]}
    ]

    for {fun, inputs} <- cases do
      {got, want} = on_both(fun, inputs)

      for {g, w} <- Enum.zip(flat(got), flat(want)) do
        assert abs(g - w) <= 1.0e-4 * (1 + abs(w)), "#{inspect(fun)}: #{g} vs #{w}"
      end
    end
  end
end
