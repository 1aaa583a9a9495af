defmodule ExBurn.ConformanceTest do
  # Every callback group of ExBurn.Backend against Nx.BinaryBackend, on seeded random inputs
  # and edge cases (rank 0, NaN and infinities, integer extremes and overflow, broadcasting,
  # names, vectorized tensors), in every type the device computes. (Nx 0.13 refuses size-0
  # dimensions when a shape is made, so no callback ever sees one.)
  # Integers must match exactly; floats to a tolerance of their precision, and the math
  # functions to a few units in the last place (see `accuracy/2`), with NaN where
  # BinaryBackend has NaN.
  use ExUnit.Case, async: false

  # Every type the device computes, f64 included: lavapipe compiles each kernel (f64 ones carry
  # the software math functions) in seconds, so groups take minutes there.
  @moduletag timeout: 900_000

  @seed 20_261_123
  @ints [{:s, 8}, {:s, 16}, {:s, 32}, {:s, 64}, {:u, 8}, {:u, 16}, {:u, 32}, {:u, 64}]
  @floats [{:f, 16}, {:f, 32}, {:bf, 16}, {:f, 64}]

  setup_all do
    :rand.seed(:exsss, @seed)
    supported = ExCubecl.supported_dtypes()
    types = Enum.filter(@ints ++ @floats, &(String.to_atom(Nx.Type.to_string(&1)) in supported))
    {:ok, types: types, floats: Enum.filter(types, &Nx.Type.float?/1), ints: Enum.filter(types, &Nx.Type.integer?/1)}
  end

  # Each test draws its inputs from the seed (a test runs in a process of its own).
  setup do
    :rand.seed(:exsss, @seed)
    :ok
  end

  # ---------------------------------------------------------------------------------------
  # Inputs

  # A random tensor on BinaryBackend of `shape` and `type`; `range` bounds the values.
  # Nx 0.13 has no size-0 dimensions (it refuses them when a shape is made).
  defp rand(shape, type, range \\ nil),
    do: shape |> Tuple.product() |> values(type, range) |> Nx.tensor(type: type, backend: Nx.BinaryBackend) |> Nx.reshape(shape)

  defp values(n, {k, _}, {lo, hi}) when k in [:f, :bf], do: for(_ <- 1..n, do: lo + :rand.uniform() * (hi - lo))
  defp values(n, {k, _}, nil) when k in [:f, :bf], do: for(_ <- 1..n, do: :rand.uniform() * 6 - 3)
  defp values(n, _int, {lo, hi}), do: for(_ <- 1..n, do: lo + :rand.uniform(hi - lo + 1) - 1)
  defp values(n, int, nil), do: for(_ <- 1..n, do: int_in(int))

  defp int_in({:u, _}), do: :rand.uniform(100) - 1
  defp int_in({:s, _}), do: :rand.uniform(100) - 50

  # Floats with NaN, infinities, zeros of both signs and halves (rounding).
  defp specials(type),
    do: Nx.tensor([:nan, :infinity, :neg_infinity, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 1.0e-3, -7.25], type: type, backend: Nx.BinaryBackend)

  # The extremes of an integer type and their neighbours.
  defp extremes({_, _} = type) do
    %{min: lo, max: hi} = %{min: Nx.Constants.min_finite(type, backend: Nx.BinaryBackend) |> Nx.to_number(), max: Nx.Constants.max_finite(type, backend: Nx.BinaryBackend) |> Nx.to_number()}
    Nx.tensor([lo, lo + 1, -1 |> max(lo), 0, 1, hi - 1, hi], type: type, backend: Nx.BinaryBackend)
  end

  defp device(t), do: Nx.backend_copy(t, ExBurn.Backend)

  # ---------------------------------------------------------------------------------------
  # Comparison

  # `fun` on BinaryBackend, and on ExBurn (inputs copied there; the default backend of each
  # run is that backend, so that constants `fun` makes land there too) eagerly and, for the
  # first case of each op and type (the label's first two words), also compiled by
  # ExBurn.Defn.Compiler (`compiled: false` where `fun` can't be traced); each compared with
  # BinaryBackend's. (The compiler runs the very callbacks eager calls run, so the cases it
  # could get wrong differ by op and options, not by input values.)
  defp check(label, fun, inputs, opts \\ []) do
    want = Nx.with_default_backend(Nx.BinaryBackend, fn -> reference(fun, inputs, opts[:f32_reference]) end)
    on_device = Enum.map(inputs, &device/1)
    got = Nx.with_default_backend(ExBurn.Backend, fn -> apply(fun, on_device) end)
    compare(label, got, want, opts)

    key = label |> String.split(" ") |> Enum.take(2)
    seen = Process.get(:compiled, MapSet.new())

    if Keyword.get(opts, :compiled, true) and not MapSet.member?(seen, key) do
      Process.put(:compiled, MapSet.put(seen, key))
      compiled = Nx.with_default_backend(ExBurn.Backend, fn -> apply(Nx.Defn.jit(fun, compiler: ExBurn.Defn.Compiler), on_device) end)
      compare(label <> " (compiled)", compiled, want, opts)
    end

    Process.put(:checked, Process.get(:checked, 0) + 1)
  end

  # BinaryBackend's result; with `f32_reference`, of the inputs in f32, rounded to their type
  # (sums and products of f16 and bf16 accumulate in f32 here, in the type in BinaryBackend,
  # whose every partial sum rounds: 12 values within ±3 drift by up to 0.02 in f16).
  defp reference(fun, inputs, true), do: fun |> apply(Enum.map(inputs, &Nx.as_type(&1, :f32))) |> Nx.as_type(hd(inputs).type)
  defp reference(fun, inputs, _), do: apply(fun, inputs)

  defp compare(label, got, want, opts) when is_tuple(want) do
    for {g, w} <- Enum.zip(Tuple.to_list(got), Tuple.to_list(want)), do: compare(label, g, w, opts)
  end

  defp compare(label, %Nx.Tensor{} = got, %Nx.Tensor{} = want, opts) do
    assert got.shape == want.shape, "#{label}: shape #{inspect(got.shape)}, BinaryBackend #{inspect(want.shape)}"
    assert got.type == want.type, "#{label}: type #{inspect(got.type)}, BinaryBackend #{inspect(want.type)}"
    assert got.names == want.names, "#{label}: names"
    g = got |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.to_flat_list()
    w = Nx.to_flat_list(want)
    tol = opts[:tol] || tolerance(want.type)
    within? = if ulps = opts[:ulps], do: &(ulps(&1, &2, want.type) <= ulps), else: &close?(&1, &2, tol)

    for {a, b} <- Enum.zip(g, w) do
      assert within?.(a, b), "#{label}: got #{inspect(got, limit: 20)}\nBinaryBackend #{inspect(want, limit: 20)}"
    end
  end

  # The distance of two floats of `type` in units in the last place of the type: the
  # difference of their bits read as sign and magnitude. NaN only matches NaN, infinities
  # themselves.
  defp ulps(a, a, _type), do: 0
  defp ulps(a, b, {:bf, 16}) when is_float(a) and is_float(b), do: abs(ordered(a, 32) - ordered(b, 32)) / 65_536
  defp ulps(a, b, {:f, size}) when is_float(a) and is_float(b), do: abs(ordered(a, size) - ordered(b, size))
  defp ulps(_, _, _), do: :infinity

  defp ordered(x, size) do
    <<s::1, m::size(size - 1)>> = <<x::float-size(size)>>
    if s == 1, do: -m, else: m
  end

  defp tolerance({:f, 16}), do: 2.0e-3
  # bf16 has 8 significant bits; sums accumulate in f32 here and in bf16 in BinaryBackend.
  defp tolerance({:bf, 16}), do: 4.0e-2
  defp tolerance({:f, 32}), do: 2.0e-5
  defp tolerance({:f, 64}), do: 1.0e-12
  defp tolerance(_), do: 0

  defp close?(a, a, _), do: true
  defp close?(%Complex{re: ar, im: ai}, %Complex{re: br, im: bi}, tol), do: close?(ar, br, tol) and close?(ai, bi, tol)
  defp close?(a, b, tol) when is_float(a) and is_float(b), do: abs(a - b) <= tol * (1 + abs(b))
  defp close?(a, b, tol) when is_number(a) and is_number(b) and tol > 0, do: abs(a - b) <= tol * (1 + abs(b))
  defp close?(_, _, _), do: false

  defp report(group) do
    n = Process.get(:checked, 0)
    IO.puts("\nconformance #{group}: #{n} callback x type x case combinations checked against Nx.BinaryBackend")
    assert n > 0
  end

  # ---------------------------------------------------------------------------------------
  # Elementwise

  @float_unary [
    exp: nil, expm1: nil, log: {0.1, 5}, log1p: {-0.9, 5}, sigmoid: nil, cos: nil, sin: nil, tan: {-1.2, 1.2},
    cosh: nil, sinh: nil, tanh: nil, acos: {-1, 1}, asin: {-1, 1}, atan: nil, acosh: {1, 5}, asinh: nil,
    atanh: {-0.9, 0.9}, sqrt: {0, 9}, rsqrt: {0.1, 9}, cbrt: nil, erf: nil, erfc: {-1, 2}, erf_inv: {-0.9, 0.9}
  ]

  # In units in the last place of the type: ours are within 4 ULP of the exact value in f32
  # (math_f32.rs), 2 in f64 (math_f64.rs), and f16 and bf16 round f32 results; BinaryBackend's
  # are the host's f64 functions rounded to the type (glibc's within 2 ulp in f64). Its
  # erf_inv is Giles' f32 approximation in every type (about 1e-7 off in f64) and its expm1
  # `exp(x) - 1`, which loses the relative precision near 0 that ours keeps.
  defp accuracy(:erf_inv, {:f, 64}), do: [tol: 2.0e-7]
  defp accuracy(:expm1, type), do: [tol: 10 * tolerance(type)]
  defp accuracy(_op, {:f, 64}), do: [ulps: 4]
  defp accuracy(_op, {:f, 32}), do: [ulps: 5]
  defp accuracy(_op, _half), do: [ulps: 1]

  test "unary math on every float type and on integers", %{floats: floats, ints: ints} do
    for {op, range} <- @float_unary, type <- floats, shape <- [{}, {7}, {2, 3}] do
      check("#{op} #{inspect(type)} #{inspect(shape)}", &apply(Nx, op, [&1]), [rand(shape, type, range)], accuracy(op, type))
    end

    for op <- [:exp, :sin, :sqrt, :sigmoid], type <- ints do
      check("#{op} #{inspect(type)}", &apply(Nx, op, [&1]), [rand({5}, type, {0, 4})])
    end

    report("unary math")
  end

  test "unary ops: abs, negate, sign, rounding, bits, NaN tests", %{floats: floats, ints: ints} do
    for op <- [:abs, :negate, :sign, :ceil, :floor, :round, :is_nan, :is_infinity, :real, :imag], type <- floats do
      # sign(NaN) is NaN and sign(-inf) is -1 here, as in EXLA (BinaryBackend gives 1.0 for
      # both): see the backend's module docs; the non-finite values are left out for sign.
      # BinaryBackend raises on ceil, floor and round of NaN and infinities.
      specials = if op in [:sign, :ceil, :floor, :round], do: Nx.slice(specials(type), [3], [9]), else: specials(type)
      check("#{op} #{inspect(type)} specials", &apply(Nx, op, [&1]), [specials])
      check("#{op} #{inspect(type)} random", &apply(Nx, op, [&1]), [rand({3, 4}, type)])
    end

    for op <- [:abs, :negate, :sign, :bitwise_not, :count_leading_zeros, :population_count, :ceil, :floor, :round, :is_nan], type <- ints do
      check("#{op} #{inspect(type)} extremes", &apply(Nx, op, [&1]), [extremes(type)])
      check("#{op} #{inspect(type)} random", &apply(Nx, op, [&1]), [rand({2, 5}, type)])
    end

    report("unary ops")
  end

  @arith [:add, :subtract, :multiply, :divide, :pow, :remainder, :atan2, :min, :max]
  @compare [:equal, :not_equal, :greater, :less, :greater_equal, :less_equal, :logical_and, :logical_or, :logical_xor]

  test "binary ops with broadcasting and type promotion", %{types: types, floats: floats, ints: ints} do
    shapes = [{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 4}}, {{}, {2, 3}}]

    for op <- @arith ++ @compare, type <- types, {sa, sb} <- shapes do
      {a, b} =
        case op do
          :pow when type in [{:f, 16}, {:bf, 16}, {:f, 32}, {:f, 64}] -> {rand(sa, type, {0.1, 3}), rand(sb, type, {-2, 2})}
          :pow -> {rand(sa, type, {0, 3}), rand(sb, type, {0, 3})}
          # BinaryBackend raises on integer division by zero.
          op when op in [:remainder, :divide] -> {rand(sa, type), rand(sb, type, if(Nx.Type.float?(type), do: {0.5, 4}, else: {1, 9}))}
          _ -> {rand(sa, type), rand(sb, type)}
        end

      check("#{op} #{inspect(type)} #{inspect(sa)} #{inspect(sb)}", &apply(Nx, op, [&1, &2]), [a, b])
    end

    # (BinaryBackend raises on division by a float zero.)
    for op <- @arith -- [:pow, :divide, :remainder], type <- floats do
      check("#{op} #{inspect(type)} specials", &apply(Nx, op, [&1, &2]), [specials(type), Nx.reverse(specials(type))])
    end

    # Negative operands of remainder and quotient: the dividend's sign, truncation.
    for op <- [:remainder, :quotient], type <- ints, match?({:s, _}, type) do
      a = Nx.tensor([-7, 7, -7, 7, -1, 0], type: type, backend: Nx.BinaryBackend)
      b = Nx.tensor([2, -2, -2, 2, 3, 5], type: type, backend: Nx.BinaryBackend)
      check("#{op} #{inspect(type)} signs", &apply(Nx, op, [&1, &2]), [a, b])
    end

    # Integer overflow wraps as BinaryBackend's.
    for op <- [:add, :subtract, :multiply], type <- ints do
      check("#{op} #{inspect(type)} overflow", &apply(Nx, op, [&1, &2]), [extremes(type), extremes(type)])
    end

    for op <- [:bitwise_and, :bitwise_or, :bitwise_xor], type <- ints do
      check("#{op} #{inspect(type)}", &apply(Nx, op, [&1, &2]), [extremes(type), Nx.reverse(extremes(type))])
    end

    for op <- [:left_shift, :right_shift], {_, bits} = type <- ints do
      check("#{op} #{inspect(type)}", &apply(Nx, op, [&1, &2]), [extremes(type), rand({7}, type, {0, bits - 1})])
    end

    # Mixed types: Nx promotes, the backend computes in the promoted type.
    for {ta, tb} <- [{{:s, 8}, {:u, 8}}, {{:s, 32}, {:f, 32}}, {{:u, 8}, {:f, 16}}, {{:s, 16}, {:s, 64}}],
        ta in types and tb in types,
        op <- [:add, :multiply, :greater, :max] do
      check("#{op} #{inspect(ta)} #{inspect(tb)}", &apply(Nx, op, [&1, &2]), [rand({4}, ta), rand({4}, tb)])
    end

    check("names", &Nx.add(&1, &2), [Nx.rename(rand({2, 3}, {:f, 32}), [:x, :y]), rand({3}, {:f, 32})])
    report("binary ops")
  end

  # ---------------------------------------------------------------------------------------
  # Shapes and indexing

  test "shape ops", %{types: types} do
    for type <- types do
      t = rand({2, 3, 4}, type)
      check("reshape #{inspect(type)}", &Nx.reshape(&1, {4, 6}), [t])
      check("transpose #{inspect(type)}", &Nx.transpose(&1, axes: [2, 0, 1]), [t])
      check("broadcast #{inspect(type)}", &Nx.broadcast(&1, {5, 2, 3, 4}), [t])
      check("broadcast axes #{inspect(type)}", &Nx.broadcast(&1, {3, 5, 2}, axes: [0, 2]), [rand({3, 2}, type)])
      check("pad #{inspect(type)}", &Nx.pad(&1, 7, [{1, -1, 0}, {-1, 2, 1}, {0, 0, 2}]), [t])
      check("reverse #{inspect(type)}", &Nx.reverse(&1, axes: [0, 2]), [t])
      check("slice #{inspect(type)}", &Nx.slice(&1, [0, 1, 1], [2, 2, 3], strides: [1, 1, 2]), [t])
      check("slice clamped #{inspect(type)}", &Nx.slice(&1, [1, 2, 3], [1, 2, 2]), [t])
      check("put_slice #{inspect(type)}", &Nx.put_slice(&1, [0, 2, 1], &2), [t, rand({2, 2, 2}, type)])
      check("concatenate #{inspect(type)}", &Nx.concatenate([&1, &2], axis: 1), [t, rand({2, 1, 4}, type)])
      check("stack #{inspect(type)}", &Nx.stack([&1, &2], axis: 1), [t, rand({2, 3, 4}, type)])
      check("squeeze #{inspect(type)}", &Nx.squeeze/1, [rand({1, 3, 1}, type)])
      check("select #{inspect(type)}", &Nx.select(&1, &2, &3), [rand({3, 4}, {:u, 8}, {0, 1}), rand({3, 4}, type), rand({4}, type)])
      check("clip #{inspect(type)}", &Nx.clip(&1, 1, 20), [rand({3, 4}, type)])

      for to <- types do
        check("as_type #{inspect(type)} -> #{inspect(to)}", &Nx.as_type(&1, to), [rand({6}, type)])
      end
    end

    for type <- types, Nx.Type.float?(type), to <- types, Nx.Type.integer?(to) do
      check("as_type specials #{inspect(type)} -> #{inspect(to)}", &Nx.as_type(&1, to), [Nx.tensor([:nan, :infinity, :neg_infinity, 2.7, -2.7], type: type, backend: Nx.BinaryBackend)])
    end

    report("shape ops")
  end

  test "indexing, sorting and top_k", %{types: types} do
    for type <- types do
      t = rand({4, 5}, type)
      check("gather #{inspect(type)}", &Nx.gather(&1, &2), [t, Nx.tensor([[0, 1], [3, 4], [2, 2]], backend: Nx.BinaryBackend)])
      check("gather axes #{inspect(type)}", &Nx.gather(&1, &2, axes: [1]), [t, Nx.tensor([[4], [0]], backend: Nx.BinaryBackend)])
      check("take #{inspect(type)}", &Nx.take(&1, &2, axis: 1), [t, Nx.tensor([[4, 0], [1, 1]], backend: Nx.BinaryBackend)])
      check("take_along_axis #{inspect(type)}", &Nx.take_along_axis(&1, &2, axis: 1), [t, rand({4, 3}, {:s, 32}, {0, 4})])
      idx = Nx.tensor([[0, 1], [3, 4], [2, 2]], backend: Nx.BinaryBackend)
      check("indexed_add #{inspect(type)}", &Nx.indexed_add(&1, &2, &3), [t, idx, rand({3}, type)])
      check("indexed_put #{inspect(type)}", &Nx.indexed_put(&1, &2, &3), [t, Nx.tensor([[0, 1], [3, 4]], backend: Nx.BinaryBackend), rand({2}, type)])

      for dir <- [:asc, :desc] do
        ties = rand({3, 6}, type, if(Nx.Type.float?(type), do: {0, 2}, else: {0, 2})) |> Nx.round() |> Nx.as_type(type)
        check("sort #{dir} #{inspect(type)}", &Nx.sort(&1, axis: 1, direction: dir), [ties])
        check("argsort #{dir} #{inspect(type)}", &Nx.argsort(&1, axis: 1, direction: dir, stable: true), [ties])
      end

      check("top_k #{inspect(type)}", &Nx.top_k(&1, k: 3), [rand({2, 6}, type)])
    end

    for type <- types, Nx.Type.float?(type) do
      check("sort NaN #{inspect(type)}", &Nx.sort(&1, direction: :desc), [specials(type)])
      check("argmax NaN #{inspect(type)}", &Nx.argmax/1, [specials(type)])
    end

    report("indexing")
  end

  # ---------------------------------------------------------------------------------------
  # Reductions, windows, cumulative ops

  test "reductions", %{types: types} do
    for type <- types, op <- [:sum, :product, :reduce_max, :reduce_min, :all, :any], opts <- [[], [axes: [1]], [axes: [0, 2], keep_axes: true]] do
      range = if op == :product, do: {1, 2}, else: nil
      half_sum? = op in [:sum, :product] and type in [{:f, 16}, {:bf, 16}]
      check("#{op} #{inspect(type)} #{inspect(opts)}", &apply(Nx, op, [&1, opts]), [rand({2, 3, 2}, type, range)], f32_reference: half_sum?)
    end

    for type <- types, op <- [:argmax, :argmin], opts <- [[], [axis: 1], [axis: 0, tie_break: :high], [axis: 1, keep_axis: true]] do
      ties = rand({3, 4}, type, {0, 2})
      check("#{op} #{inspect(type)} #{inspect(opts)}", &apply(Nx, op, [&1, opts]), [ties])
    end

    for type <- types, Nx.Type.float?(type), op <- [:reduce_max, :reduce_min, :sum] do
      check("#{op} #{inspect(type)} NaN", &apply(Nx, op, [&1]), [specials(type)])
      rows = specials(type) |> Nx.reshape({3, 4})
      check("#{op} #{inspect(type)} NaN by rows", &apply(Nx, op, [&1, [axes: [1]]]), [rows])
      check("#{op} #{inspect(type)} NaN by columns", &apply(Nx, op, [&1, [axes: [0]]]), [rows])
    end

    check("reduce with add", &Nx.reduce(&1, 10, [axes: [1]], fn x, acc -> Nx.add(x, acc) end), [rand({3, 4}, {:s, 32})])
    # functions that are not associative: folded element by element, in BinaryBackend's order
    fold = fn x, acc -> acc |> Nx.multiply(2) |> Nx.subtract(x) end
    check("reduce with a fold", &Nx.reduce(&1, 1, [axes: [0]], fold), [rand({4, 3}, {:s, 32})])
    check("reduce with a fold f32", &Nx.reduce(&1, 0.5, [axes: [1], keep_axes: true], fold), [rand({2, 5}, {:f, 32})])
    check("window_reduce with a fold", &Nx.window_reduce(&1, 0.0, {2, 2}, [strides: [2, 1], padding: :same], fold), [rand({4, 3}, {:f, 32})])
    report("reductions")
  end

  test "windows and cumulative ops", %{types: types} do
    for type <- types, op <- [:window_sum, :window_max, :window_min, :window_product] do
      t = rand({1, 4, 5}, type, if(op == :window_product, do: {1, 2}, else: nil))
      check("#{op} #{inspect(type)}", &apply(Nx, op, [&1, {1, 2, 2}]), [t])
      check("#{op} #{inspect(type)} strided", &apply(Nx, op, [&1, {1, 2, 3}, [strides: [1, 2, 1], padding: [{0, 0}, {1, 1}, {0, 2}], window_dilations: [1, 1, 2]]]), [t])
    end

    for type <- types, op <- [:window_scatter_max, :window_scatter_min] do
      t = rand({4, 6}, type)
      # BinaryBackend's window scatter passes the source through f32 precision.
      check("#{op} #{inspect(type)}", &apply(Nx, op, [&1, &2, 0, {2, 3}, [strides: [2, 3]]]), [t, rand({2, 2}, type)], tol: max(tolerance(type), 1.0e-7))
    end

    # Ties (the last extreme of a window in row-major order takes the source value), windows
    # that overlap (a position sums what every window it is the extreme of sends it) and padding.
    ties = Nx.tensor([[1, 3, 3, 0, 2, 2], [3, 1, 3, 2, 2, 0], [0, 0, 1, 1, 3, 3], [2, 2, 2, 2, 2, 2]], backend: Nx.BinaryBackend)

    for type <- types, op <- [:window_scatter_max, :window_scatter_min] do
      t = Nx.as_type(ties, type)
      tol = max(tolerance(type), 1.0e-7)
      check("#{op} #{inspect(type)} ties", &apply(Nx, op, [&1, &2, 0, {2, 3}, [strides: [2, 3]]]), [t, rand({2, 2}, type)], tol: tol)
      check("#{op} #{inspect(type)} overlapping", &apply(Nx, op, [&1, &2, 0, {2, 2}, [strides: [1, 2]]]), [t, rand({3, 3}, type)], tol: tol)
      check("#{op} #{inspect(type)} padded", &apply(Nx, op, [&1, &2, 0, {3, 3}, [strides: [2, 2], padding: :same]]), [t, rand({2, 3}, type)], tol: tol)
      # Windows that tile the padded input, with an init other than 0.
      check("#{op} #{inspect(type)} tiled padded", &apply(Nx, op, [&1, &2, 2, {3, 2}, [strides: [3, 2], padding: [{1, 1}, {0, 0}]]]), [t, rand({2, 3}, type)], tol: tol)
    end

    for type <- types, op <- [:cumulative_sum, :cumulative_product, :cumulative_max, :cumulative_min], opts <- [[axis: 1], [axis: 0, reverse: true]] do
      check("#{op} #{inspect(type)} #{inspect(opts)}", &apply(Nx, op, [&1, opts]), [rand({3, 4}, type, if(op == :cumulative_product, do: {1, 2}, else: nil))])
    end

    report("windows")
  end

  # ---------------------------------------------------------------------------------------
  # Complex tensors

  defp crand(shape, type, range \\ nil) do
    part = {:f, div(elem(type, 1), 2)}
    Nx.complex(rand(shape, part, range), rand(shape, part, range))
  end

  # c64 always; c128 where the device computes f64 (its parts).
  defp complex_types, do: [{:c, 64}] ++ if(:f64 in ExCubecl.supported_dtypes(), do: [{:c, 128}], else: [])

  # Every complex callback, with the `Complex` library's formulas and branch cuts: random
  # inputs in all four quadrants, and points on and beside the cuts of log, sqrt and the
  # inverse functions (the real axis beyond ±1, the imaginary axis beyond ±i).
  @complex_unary ~w(exp expm1 log log1p sqrt rsqrt cbrt sigmoid sin cos tan sinh cosh tanh asin acos atan asinh acosh atanh abs real imag conjugate negate is_nan is_infinity)a

  test "complex tensors (c64, and c128 where the device computes f64)" do
    for type <- complex_types() do
      t = inspect(type)
      tol = if type == {:c, 64}, do: 1.0e-4, else: 1.0e-10
      a = crand({3, 4}, type)
      b = crand({4}, type)

      for op <- [:add, :subtract, :multiply, :divide, :equal, :not_equal] do
        check("#{op} #{t}", &apply(Nx, op, [&1, &2]), [a, b], tol: tol)
      end

      pos = crand({4}, type, {0.5, 2})
      check("pow #{t}", &Nx.pow(&1, &2), [pos, crand({4}, type, {0.1, 1})], tol: tol)
      check("pow #{t} of zero", &Nx.pow(&1, &2), [Nx.multiply(pos, 0), Nx.tensor([0, 1, 2, 0], type: type, backend: Nx.BinaryBackend)], tol: tol)
      check("real-complex mix #{t}", &Nx.multiply(&1, &2), [rand({3, 4}, {:f, 32}), a], tol: tol)

      cuts = Nx.complex(Nx.tensor([1.5, -1.5, -1.5, 0.0, 0.0, 0.0, 2.0, -2.0], type: elem(type, 1) |> div(2) |> then(&{:f, &1})), Nx.tensor([0.0, 0.0, 1.0e-3, 1.5, -1.5, 1.0e-3, 1.0e-3, -1.0e-3], type: {:f, div(elem(type, 1), 2)}))

      for op <- @complex_unary, input <- [crand({}, type, {-1.5, 1.5}), crand({3, 4}, type, {-1.5, 1.5}), cuts] do
        check("#{op} #{t} #{inspect(input.shape)}", &apply(Nx, op, [&1]), [Nx.backend_copy(input, Nx.BinaryBackend)], tol: tol)
      end

      check("sum #{t}", &Nx.sum(&1, axes: [1]), [a], tol: tol)
      check("product #{t}", &Nx.product(&1, axes: [1]), [a], tol: tol)
      check("product #{t} all, kept", &Nx.product(&1, keep_axes: true), [crand({3, 5}, type, {0.5, 1.5})], tol: tol)
      check("cumulative_sum #{t}", &Nx.cumulative_sum(&1, axis: 1), [a], tol: tol)
      check("cumulative_product #{t}", &Nx.cumulative_product(&1, axis: 1), [a], tol: tol)
      check("cumulative_product #{t} reverse", &Nx.cumulative_product(&1, axis: 0, reverse: true), [a], tol: tol)
      check("dot #{t}", &Nx.dot/2, [a, crand({4, 2}, type)], tol: tol)
      check("conv #{t}", &Nx.conv(&1, &2, padding: :same), [crand({1, 2, 5}, type), crand({3, 2, 3}, type)], tol: tol)
      check("transpose/slice/concat #{t}", &(&1 |> Nx.transpose() |> Nx.slice([1, 0], [2, 3]) |> then(fn x -> Nx.concatenate([x, x]) end)), [a])
      check("as_type #{t}", &Nx.as_type(&1, type), [rand({5}, {:s, 32})])

      lower = Nx.add(Nx.multiply(crand({3, 3}, type), Nx.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], backend: Nx.BinaryBackend)), Nx.eye(3, backend: Nx.BinaryBackend) |> Nx.multiply(4))

      for opts <- [[], [transform_a: :transpose], [transform_a: :conjugate], [left_side: false], [lower: false, transform_a: :transpose]] do
        check("triangular_solve #{t} #{inspect(opts)}", &Nx.LinAlg.triangular_solve(&1, &2, opts), [lower, crand({3}, type)], tol: tol)
      end

      # The Nx.LinAlg blocks run Nx's default implementations on complex matrices, made of
      # the callbacks above.
      m = crand({3, 3}, type)
      herm = Nx.add(Nx.dot(m, Nx.conjugate(Nx.transpose(m))), Nx.multiply(Nx.eye(3, backend: Nx.BinaryBackend), 3))

      for {name, fun, inputs} <- [
            {"cholesky", &Nx.LinAlg.cholesky/1, [herm]},
            {"qr", &Nx.LinAlg.qr/1, [m]},
            {"lu", &Nx.LinAlg.lu/1, [herm]},
            {"solve", &Nx.LinAlg.solve/2, [herm, crand({3}, type)]},
            {"invert", &Nx.LinAlg.invert/1, [herm]},
            {"determinant", &Nx.LinAlg.determinant/1, [herm]}
          ] do
        check("#{name} #{t}", fun, inputs, tol: 10 * tol)
      end

      for n <- [4, 5, 8] do
        x = rand({2, n}, {:f, div(elem(type, 1), 2)})
        check("fft #{t} #{n}", &Nx.fft/1, [Nx.as_type(x, type)], tol: tol)
        check("ifft #{t} #{n}", &Nx.ifft/1, [Nx.complex(x, x)], tol: tol)
        check("fft #{t} length #{n}", &Nx.fft(&1, length: 6), [Nx.as_type(x, type)], tol: tol)
      end
    end

    report("complex")
  end

  # ---------------------------------------------------------------------------------------
  # Linear algebra and creation

  test "dot, conv, triangular_solve", %{types: types, floats: floats} do
    for type <- types do
      check("dot #{inspect(type)}", &Nx.dot/2, [rand({3, 4}, type), rand({4, 2}, type)])
      check("dot vector #{inspect(type)}", &Nx.dot/2, [rand({4}, type), rand({4}, type)])
      check("dot batched #{inspect(type)}", &Nx.dot(&1, [2], [0], &2, [1], [0]), [rand({2, 3, 4}, type), rand({2, 4, 5}, type)])
      check("dot axes #{inspect(type)}", &Nx.dot(&1, [0], &2, [1]), [rand({4, 3}, type), rand({2, 4}, type)])
      check("dot transposed right #{inspect(type)}", &Nx.dot(&1, [1], &2, [1]), [rand({3, 4}, type), rand({5, 4}, type)])
    end

    for type <- floats do
      x = rand({2, 4, 5, 5}, type)
      check("conv #{inspect(type)}", &Nx.conv(&1, &2), [x, rand({3, 4, 3, 3}, type)], tol: 10 * tolerance(type))
      check("conv strided padded dilated #{inspect(type)}", &Nx.conv(&1, &2, strides: [2, 1], padding: [{1, 2}, {0, 1}], input_dilation: [1, 2], kernel_dilation: [2, 1]), [x, rand({3, 4, 2, 2}, type)], tol: 10 * tolerance(type))
      check("conv feature groups #{inspect(type)}", &Nx.conv(&1, &2, feature_group_size: 2), [x, rand({4, 2, 3, 3}, type)], tol: 10 * tolerance(type))
      # Padding on both sides goes to the kernel, the rest (one-sided, negative) to a pad.
      check("conv padded both sides strided dilated grouped #{inspect(type)}", &Nx.conv(&1, &2, padding: [{2, 2}, {1, 1}], strides: [2, 1], kernel_dilation: [1, 2], feature_group_size: 2), [x, rand({4, 2, 3, 3}, type)], tol: 10 * tolerance(type))
      check("conv one-sided and negative padding #{inspect(type)}", &Nx.conv(&1, &2, padding: [{2, 1}, {-1, 0}]), [x, rand({3, 4, 2, 2}, type)], tol: 10 * tolerance(type))
      check("conv batch groups #{inspect(type)}", &Nx.conv(&1, &2, batch_group_size: 2), [x, rand({4, 4, 3, 3}, type)], tol: 10 * tolerance(type))
      check("conv permuted #{inspect(type)}", &Nx.conv(&1, &2, input_permutation: [0, 3, 1, 2], output_permutation: [0, 3, 1, 2]), [rand({2, 5, 5, 4}, type), rand({3, 4, 3, 3}, type)], tol: 10 * tolerance(type))
      check("conv 1d #{inspect(type)}", &Nx.conv(&1, &2, padding: :same), [rand({1, 2, 7}, type), rand({3, 2, 3}, type)], tol: 10 * tolerance(type))

      a = Nx.add(Nx.multiply(rand({3, 3}, type, {0.1, 1}), Nx.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], type: type, backend: Nx.BinaryBackend)), Nx.eye(3, type: type, backend: Nx.BinaryBackend))
      check("triangular_solve #{inspect(type)}", &Nx.LinAlg.triangular_solve(&1, &2), [a, rand({3, 2}, type)], tol: 50 * tolerance(type))
      check("triangular_solve upper transposed #{inspect(type)}", &Nx.LinAlg.triangular_solve(&1, &2, lower: false, transform_a: :transpose), [Nx.transpose(a), rand({3}, type)], tol: 50 * tolerance(type))
      check("triangular_solve right #{inspect(type)}", &Nx.LinAlg.triangular_solve(&1, &2, left_side: false), [a, rand({2, 3}, type)], tol: 50 * tolerance(type))
    end

    report("linear algebra")
  end

  test "decompositions: Cholesky, LU, QR and solve run natively and match Nx's own", %{floats: floats} do
    for type <- Enum.filter(floats, &(&1 in [{:f, 32}, {:f, 64}])) do
      tol = 200 * tolerance(type)
      x = rand({2, 4, 4}, type, {-1, 1})
      spd = Nx.add(Nx.dot(x, [2], [0], x, [2], [0]), Nx.multiply(4, Nx.eye(4, type: type, backend: Nx.BinaryBackend)))
      check("cholesky batched #{inspect(type)}", &Nx.LinAlg.cholesky/1, [spd], tol: tol)
      check("lu #{inspect(type)}", &Nx.LinAlg.lu/1, [rand({4, 4}, type)], tol: tol)
      check("lu batched #{inspect(type)}", &Nx.LinAlg.lu/1, [rand({2, 3, 3}, type)], tol: tol)
      check("lu zero pivot #{inspect(type)}", &Nx.LinAlg.lu/1, [Nx.tensor([[0, 1, 2], [0, 3, 4], [0, 5, 7]], type: type, backend: Nx.BinaryBackend)], tol: tol)
      check("qr square #{inspect(type)}", &Nx.LinAlg.qr/1, [rand({4, 4}, type)], tol: tol)
      check("qr tall #{inspect(type)}", &Nx.LinAlg.qr/1, [rand({5, 3}, type)], tol: tol)
      check("qr tall complete #{inspect(type)}", &Nx.LinAlg.qr(&1, mode: :complete), [rand({5, 3}, type)], tol: tol)
      check("qr wide #{inspect(type)}", &Nx.LinAlg.qr/1, [rand({3, 5}, type)], tol: tol)
      check("qr batched #{inspect(type)}", &Nx.LinAlg.qr/1, [rand({2, 4, 3}, type)], tol: tol)
      a = Nx.add(rand({2, 4, 4}, type, {-1, 1}), Nx.multiply(5, Nx.eye(4, type: type, backend: Nx.BinaryBackend)))
      check("solve vector #{inspect(type)}", &Nx.LinAlg.solve/2, [a[0], rand({4}, type)], tol: tol)
      check("solve matrix #{inspect(type)}", &Nx.LinAlg.solve/2, [a[1], rand({4, 2}, type)], tol: tol)
      check("solve batched #{inspect(type)}", &Nx.LinAlg.solve/2, [a, rand({2, 4, 3}, type)], tol: tol)
    end

    check("lu of integers (p keeps the type)", &Nx.LinAlg.lu/1, [rand({3, 3}, {:s, 32}, {-5, 5})], tol: 1.0e-4)

    # Natively, never through the default implementation (the block's `fun`).
    t = device(rand({3, 3}, {:f, 32}))
    spd = Nx.add(Nx.dot(t, Nx.transpose(t)), Nx.multiply(3, Nx.eye(3, backend: ExBurn.Backend)))
    refuse = fn _struct, _a -> flunk("the default implementation ran") end
    refuse2 = fn _struct, _a, _b -> flunk("the default implementation ran") end
    l = ExBurn.Backend.block(%Nx.Block.LinAlg.Cholesky{}, spd, [spd], refuse)
    assert Nx.to_flat_list(Nx.subtract(Nx.dot(l, Nx.transpose(l)), spd)) |> Enum.all?(&(abs(&1) < 1.0e-4))
    {p, l, u} = ExBurn.Backend.block(%Nx.Block.LinAlg.LU{}, {t, t, t}, [t], refuse)
    assert Nx.to_flat_list(Nx.subtract(Nx.dot(p, Nx.dot(l, u)), t)) |> Enum.all?(&(abs(&1) < 1.0e-4))
    {q, r} = ExBurn.Backend.block(%Nx.Block.LinAlg.QR{}, {t, t}, [t], refuse)
    assert Nx.to_flat_list(Nx.subtract(Nx.dot(q, r), t)) |> Enum.all?(&(abs(&1) < 1.0e-4))
    b = device(rand({3}, {:f, 32}))
    x = ExBurn.Backend.block(%Nx.Block.LinAlg.Solve{}, b, [spd, b], refuse2)
    assert Nx.to_flat_list(Nx.subtract(Nx.dot(spd, x), b)) |> Enum.all?(&(abs(&1) < 1.0e-4))

    report("decompositions")
  end

  test "spectral blocks: fft2, ifft2, rfft and irfft run natively and match Nx's own" do
    x = rand({2, 4, 6}, {:f, 32})
    tol = 50 * tolerance({:f, 32})
    check("fft2", &Nx.fft2/1, [x], tol: tol)
    # BinaryBackend's fft along an axis other than the last, with a length, differs from
    # numpy's (Nx 0.13.1); the reference here transforms last axes only.
    last_axes = fn t ->
      t |> Nx.fft(length: 8) |> Nx.transpose(axes: [1, 2, 0]) |> Nx.fft(length: 3) |> Nx.transpose(axes: [2, 0, 1])
    end

    want = Nx.with_default_backend(Nx.BinaryBackend, fn -> last_axes.(x) end)
    compare("fft2 lengths axes", Nx.fft2(device(x), lengths: [3, 8], axes: [0, 2]), want, tol: tol)
    check("ifft2", &Nx.ifft2/1, [Nx.fft2(x)], tol: tol)
    check("rfft", &Nx.rfft/1, [x], tol: tol)
    check("rfft odd length, axis", &Nx.rfft(&1, length: 5, axis: 1), [x], tol: tol)
    check("irfft", &Nx.irfft/1, [Nx.rfft(x)], tol: tol)
    check("irfft odd length", &Nx.irfft(&1, length: 7), [Nx.rfft(x)], tol: tol)
    check("irfft length 3", &Nx.irfft(&1, length: 3), [Nx.rfft(x)], tol: tol)

    # Natively, never through the default implementation (the block's `fun`).
    t = device(x)
    out = Nx.template({2, 4, 4}, {:c, 64})
    refuse = fn _struct, _t -> flunk("the default implementation ran") end
    got = ExBurn.Backend.block(%Nx.Block.RFFT{length: 6, axis: 2}, out, [t], refuse)
    compare("rfft block", got, Nx.rfft(x), tol: tol)

    report("spectral blocks")
  end

  test "creation and transfers", %{types: types} do
    for type <- types do
      check("iota #{inspect(type)}", fn -> Nx.iota({2, 3}, type: type, axis: 1, backend: backend()) end, [])
      check("iota flat #{inspect(type)}", fn -> Nx.iota({2, 3}, type: type, backend: backend()) end, [])
      check("eye #{inspect(type)}", fn -> Nx.eye({2, 3, 4}, type: type, backend: backend()) end, [])
      check("constant #{inspect(type)}", fn -> Nx.broadcast(Nx.tensor(3, type: type, backend: backend()), {2, 2}) end, [])
      t = rand({3, 2}, type)
      # (transfers and to_batched don't exist inside defn)
      check("round trip #{inspect(type)}", &Nx.backend_transfer(&1, Nx.BinaryBackend), [t], compiled: false)
      check("to_batched #{inspect(type)}", fn x -> x |> Nx.to_batched(2, leftover: :repeat) |> Enum.to_list() |> List.to_tuple() end, [t], compiled: false)
    end

    check("vectorized", fn x -> x |> Nx.vectorize(:rows) |> Nx.multiply(2) |> Nx.sum() |> Nx.devectorize() end, [rand({3, 4}, {:f, 32})])
    report("creation")
  end

  defp backend, do: Nx.default_backend()
end
