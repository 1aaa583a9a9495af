# Nx's own defn test files, from the Nx sources that the test set-up unpacks, with
# ExBurn.Backend as the default backend and ExBurn.Defn.Compiler as the default compiler,
# adapted as ExBurn.NxSuite says. The files that test the
# expression builder itself (expr, tree, template_diff) rather than results are left out.
# Where Nx's test sources are absent (Nx from Hex), one line says so. EXBURN_NX_FILES (a
# comma-separated subset of the files below) runs fewer, e.g. while working on the compiler.
files = [
  "nx/defn_test.exs",
  "nx/defn/grad_test.exs",
  "nx/defn/kernel_test.exs",
  "nx/defn/composite_test.exs",
  "nx/defn/evaluator_test.exs",
  "nx/defn/token_test.exs",
  "nx/defn/compiler_test.exs",
  "nx/defn/graph_test.exs",
  "nx/defn/runtime_call_evaluator_test.exs"
]

files =
  case System.get_env("EXBURN_NX_FILES") do
    nil -> files
    subset -> String.split(subset, ",", trim: true)
  end

# The except-list: tests left out (tagged :nx_except), by cause. Against 602 tests of these
# files passing on Nx.Defn.Evaluator with Nx.BinaryBackend (the :distributed ones excluded).
grad = "nx/defn/grad_test.exs"
evaluator = "nx/defn/evaluator_test.exs"

# Nx itself refuses a tensor of any backend but Nx.BinaryBackend captured in the closure of a
# grad (Nx.Shared.pick_struct raises before any compiler runs); EXLA's and Torchx's fail alike
closure =
  [{grad, "test conv rule computes gradient of kernel when image is a constant closure variable"}] ++
    for name <- [
          "composed: sigmoid(x @ w + b) (exercises composed chain with captures)",
          "conv with vectorized (exercises conv grad)",
          "dot with captured matrix (exercises concrete tensor handling)",
          "grad of non-vectorized target with vectorized capture",
          "mixed: vectorized x * non-vectorized y (exercises broadcast_vectors)",
          "non-vectorized input, vectorized output",
          "supports combination of vectorized and non-vectorized tensors",
          "supports combination of vectorized and non-vectorized tensors over composed function",
          "vectorized grad through Nx.LinAlg.triangular_solve with captured a",
          "window_scatter_max/min with vectorized inputs"
        ],
        do: {grad, "test vectorization " <> name}

# two device tensors of equal values are different terms: a doctest compares them with ===,
# a test matches two results of different expressions to one variable ({x, x} = ...)
identity = [
  {"nx/defn/composite_test.exs", "doctest Nx.Defn.Composite.flatten_list/2 (3)"},
  {grad, "test metadata computes custom grad"}
]

# the device's f32 exp, log, tanh, pow and sums are a few ULP from BinaryBackend's, and these
# tests compare f32 results with == (eager ExBurn.Backend gives the same values as the
# compiler: the cause is the math, not the compilation)
precision =
  [{evaluator, "test decompositions qr"}] ++
    for name <- [
          "cholesky computes grad for composed {2,2}-tensor",
          "concatenate computes grad for powers of a {2, 2}-tensor",
          "gather computes gradient",
          "pad computes with pad value from tensor",
          "reverse computes gradient",
          "sort computes gradient",
          "sort computes gradient along axis",
          "take computes gradient",
          "take_along_axis computes gradient",
          "window_scatter_min/max grad_composed_window_scatter_max"
        ],
        do: {grad, "test " <> name}

lists = [closure: closure, identity: identity, precision: precision]

except =
  Enum.reduce(lists, %{}, fn {cause, entries}, acc ->
    Enum.reduce(entries, acc, fn {file, name}, acc -> Map.update(acc, file, %{name => cause}, &Map.put(&1, name, cause)) end)
  end)

case ExBurn.NxSuite.tests_dir() do
  nil ->
    IO.puts("nx defn suite: not run: the Nx dependency has no test sources (Hex packages ship lib/ only; the offline sources have them)")

  dir ->
    ExBurn.NxSuite.load!(dir, files, [{Nx.Defn.Evaluator, ExBurn.Defn.Compiler}], except)
end
