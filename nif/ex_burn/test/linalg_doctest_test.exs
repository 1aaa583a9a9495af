defmodule ExBurn.LinAlgDoctestTest do
  # Nx.LinAlg's doctests with ExBurn.Backend as the default backend. The decompositions run
  # their default implementations (made of this backend's callbacks); the except-list names
  # single doctests by cause, and linalg_exceptions_test.exs checks each cause.
  use ExUnit.Case, async: false
  import ExBurn.Doctests
  require Nx.LinAlg

  # the device has no f64 arithmetic (lavapipe)
  @f64 [
    "Nx.LinAlg.triangular_solve/3 (27)",
    "Nx.LinAlg.triangular_solve/3 (31)",
    "Nx.LinAlg.triangular_solve/3 (32)",
    "Nx.LinAlg.triangular_solve/3 (41)",
    "Nx.LinAlg.triangular_solve/3 (42)",
    "Nx.LinAlg.solve/2 (44)"
  ]

  # complex ops ExBurn doesn't run on the device yet (reductions and comparisons of c64)
  @c64 [
    "Nx.LinAlg.norm/2 (22)",
    "Nx.LinAlg.triangular_solve/3 (35)",
    "Nx.LinAlg.determinant/1 (99)",
    "Nx.LinAlg.determinant/1 (100)"
  ]

  # the decompositions' f32 arithmetic on lavapipe (its division, square root and pow are
  # accurate to a few ULP) prints other last digits than BinaryBackend's; one near-singular
  # matrix is judged singular
  @precision [
    "Nx.LinAlg.cholesky/1 (4)",
    "Nx.LinAlg.cholesky/1 (5)",
    "Nx.LinAlg.cholesky/1 (7)",
    "Nx.LinAlg.triangular_solve/3 (26)",
    "Nx.LinAlg.triangular_solve/3 (29)",
    "Nx.LinAlg.triangular_solve/3 (40)",
    "Nx.LinAlg.solve/2 (43)",
    "Nx.LinAlg.solve/2 (46)",
    "Nx.LinAlg.pinv/2 (67)",
    "Nx.LinAlg.pinv/2 (68)",
    "Nx.LinAlg.lu/1 (79)",
    "Nx.LinAlg.matrix_power/2 (85)",
    "Nx.LinAlg.matrix_power/2 (87)",
    "Nx.LinAlg.least_squares/3 (106)",
    "Nx.LinAlg.least_squares/3 (107)",
    "Nx.LinAlg.least_squares/3 (108)"
  ]

  computes? = fn type -> type in ExCubecl.supported_dtypes() end
  lavapipe? = ExBurn.device_info().kind == :cpu

  @except @c64 ++ if(computes?.(:f64), do: [], else: @f64) ++ if(lavapipe?, do: @precision, else: [])

  doctest_except(Nx.LinAlg, @except)
end
