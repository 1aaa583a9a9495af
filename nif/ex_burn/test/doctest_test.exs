defmodule ExBurn.DoctestTest do
  use ExUnit.Case, async: false

  # Nx's own doctests with ExBurn.Backend as the default backend (test_helper.exs sets it).
  # Each entry of the except-list says why it can't pass here; each has a targeted test in
  # doctest_exceptions_test.exs.
  @except []

  doctest Nx, except: @except
end
