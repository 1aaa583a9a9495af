defmodule ExBurn.LinAlgDoctestTest do
  # Nx.LinAlg's doctests with ExBurn.Backend as the default backend. Cholesky, LU, QR and
  # solve run as native blocks, the other decompositions their default implementations (made
  # of this backend's callbacks); the except-list names single doctests by cause, and
  # linalg_exceptions_test.exs checks each cause.
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

  # the last printed f32 digit differs from BinaryBackend's, on every device: our matrix
  # products and reductions sum in another order than BinaryBackend's left-to-right loops
  @precision [
    "Nx.LinAlg.cholesky/1 (5)",
    "Nx.LinAlg.triangular_solve/3 (26)",
    "Nx.LinAlg.triangular_solve/3 (29)",
    "Nx.LinAlg.solve/2 (43)",
    "Nx.LinAlg.solve/2 (46)",
    "Nx.LinAlg.pinv/2 (67)",
    "Nx.LinAlg.lu/1 (79)",
    "Nx.LinAlg.matrix_power/2 (87)",
    "Nx.LinAlg.least_squares/3 (107)"
  ]

  # lavapipe only: its f32 division and square root are a few ULP off, and the one-step
  # correction that rounds them elsewhere needs a fused multiply-add, which lavapipe does as a
  # multiply and an add (3 / 1.4142135 gives 2.1213202, not 2.1213205); one near-singular
  # matrix is judged singular
  @precision_lavapipe [
    "Nx.LinAlg.cholesky/1 (4)",
    "Nx.LinAlg.cholesky/1 (7)",
    "Nx.LinAlg.pinv/2 (68)",
    "Nx.LinAlg.matrix_power/2 (85)",
    "Nx.LinAlg.least_squares/3 (106)",
    "Nx.LinAlg.least_squares/3 (108)"
  ]

  computes? = fn type -> type in ExCubecl.supported_dtypes() end
  lavapipe? = ExBurn.device_info().kind == :cpu

  # (each list read once here, so that none is "set but never used" on any device)
  {f64, precision_lavapipe} = {@f64, @precision_lavapipe}

  @except @precision ++
            if(computes?.(:f64), do: [], else: f64) ++
            if(lavapipe?, do: precision_lavapipe, else: [])

  @doc false
  def except, do: @except

  doctest_except(Nx.LinAlg, @except)
end
