defmodule ExBurn.DoctestExceptionsTest do
  # One targeted test per cause of doctest_test.exs's except-list: what the excluded doctests
  # would show, checked as it is on this device.
  use ExUnit.Case, async: false

  defp computes?(type), do: type in ExCubecl.supported_dtypes()

  test "f64: a device without f64 raises, naming the type and the device" do
    if computes?(:f64) do
      assert Nx.to_flat_list(Nx.add(Nx.tensor([1.5], type: :f64), 1)) == [2.5]
    else
      e = assert_raise ExBurn.Error, fn -> Nx.tensor([1.5], type: :f64) end
      assert e.reason =~ "f64"
      assert e.details != ""
    end
  end

  test "precision, precision_cuda: atan2, exp and log within a few ULP of BinaryBackend" do
    x = Nx.tensor([[1, 2], [3, 4], [5, 6]], backend: Nx.BinaryBackend)
    cases = [
      {fn a -> Nx.phase(Nx.complex(a, 2)) end, 4.0e-6},
      {fn a -> Nx.atan2(a, 1) end, 4.0e-6},
      {fn a -> Nx.atan2(1, a) end, 4.0e-6},
      {fn a -> Nx.logsumexp(a, axes: [1]) end, 2.0e-6}
    ]

    for {fun, tol} <- cases do
      want = fun.(x) |> Nx.to_flat_list()
      got = x |> Nx.backend_copy(ExBurn.Backend) |> fun.() |> Nx.to_flat_list()
      for {g, w} <- Enum.zip(got, want), do: assert(abs(g - w) <= tol * abs(w), "#{g} vs #{w}")
    end
  end

  test "precision_f64: where glibc's f64 result is a ulp off, ours is the correctly rounded one" do
    if computes?(:f64) do
      # {function, argument, the correctly rounded value (200-bit mpmath, rounded to f64)}
      cases = [
        {:sinh, 2.0, 3.6268604078470186},
        {:acosh, 2.0, 1.3169578969248168},
        {:atanh, 0.5, 0.5493061443340549},
        {:erfc, 2.0, 0.004677734981047266},
        {:erfc, 3.0, 2.209049699858544e-5},
        {:expm1, 1.0, 1.7182818284590453}
      ]

      for {op, x, exact} <- cases do
        assert Nx.to_number(apply(Nx, op, [Nx.tensor(x, type: :f64)])) == exact, "#{op}(#{x})"
        # BinaryBackend's (the host libm's) is within a ulp of it
        binary = Nx.to_number(apply(Nx, op, [Nx.tensor(x, type: :f64, backend: Nx.BinaryBackend)]))
        assert abs(binary - exact) <= 2.3e-16 * abs(exact), "#{op}(#{x}): BinaryBackend #{binary}"
      end

      # BinaryBackend's f64 erf_inv is Giles' f32 approximation; ours is exact here
      exact = 0.08885599049425769
      assert Nx.to_number(Nx.erf_inv(Nx.tensor(0.1, type: :f64))) == exact
      binary = Nx.to_number(Nx.erf_inv(Nx.tensor(0.1, type: :f64, backend: Nx.BinaryBackend)))
      assert abs(binary - exact) > 1.0e-9 * exact and abs(binary - exact) < 1.0e-6 * exact
    else
      assert_raise ExBurn.Error, fn -> Nx.tensor([0.5], type: :f64) end
    end
  end
end
