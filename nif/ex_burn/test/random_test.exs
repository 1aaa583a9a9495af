defmodule ExBurn.RandomTest do
  # Nx.Random through ExBurn.Defn.Compiler: its threefry2x32 generator (two nested `while`
  # loops of u32 adds, shifts and xors) is unrolled at lowering, its constants fold and its
  # integer chains fuse; the bits must be Nx.BinaryBackend's, exactly, since Nx.Random's
  # values are defined by them.
  use ExUnit.Case, async: false
  import Nx.Defn

  @compiler ExBurn.Defn.Compiler

  defn doubling(x), do: while(x, Nx.sum(x) < 100, do: x * 2)

  defn counted(x, n) do
    {_i, x, _n} = while {i = 0, x, n}, i < n, do: {i + 1, x * 2, n}
    x
  end

  defn counted_down(x, n) do
    {_i, x, _n} = while {i = 10, x, n}, i >= n, do: {i - 3, x + 1, n}
    x
  end

  defn long_static(x) do
    {_i, x} = while {i = 0, x}, i < 300, do: {i + 1, x + 1}
    x
  end

  defp cjit(fun, opts \\ []), do: Nx.Defn.jit(fun, [compiler: @compiler] ++ opts)

  defp reference(fun, args) do
    args = Enum.map(args, &Nx.backend_copy(&1, Nx.BinaryBackend))
    Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator), args) end)
  end

  defp host(%Nx.Tensor{} = t), do: Nx.backend_copy(t, Nx.BinaryBackend)
  defp host(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.map(&host/1) |> List.to_tuple()

  # Exactly the reference's tensors (types, shapes and bits).
  defp assert_exact(fun, args) do
    got = host(apply(cjit(fun), args))
    want = reference(fun, args)
    assert got == want
    got
  end

  defp key(seed), do: Nx.Random.key(seed) |> Nx.backend_transfer(ExBurn.Backend)

  # {segments, captured, direct, launches, reads} of the one cached program.
  defp program_info! do
    [{_key, %{ref: ref}}] = :ets.tab2list(ExBurn.Defn.Cache)
    {:ok, info} = ExCubecl.Native.program_info(ref)
    info
  end

  test "the generator's bits: threefry2x32 on odd and even sizes, split and fold_in" do
    for n <- [1, 2, 7, 64, 1000] do
      assert_exact(fn k -> Nx.Random.threefry2x32_20_concat(Nx.iota({2, n}, type: :u32), k) end, [key(42)])
    end

    assert_exact(&Nx.Random.split/1, [key(1701)])
    assert_exact(fn k -> Nx.Random.split(k, parts: 5) end, [key(7)])
    assert_exact(&Nx.Random.fold_in(&1, 19), [key(3)])
    assert_exact(&Nx.Random.fold_in/2, [key(3), Nx.tensor(123_456, type: :u32)])
  end

  test "uniform, randint and shuffle give the reference's values exactly" do
    assert_exact(fn k -> Nx.Random.uniform(k, shape: {32, 1}) end, [key(1)])
    assert_exact(fn k -> Nx.Random.uniform(k, -3.0, 5.0, shape: {3, 5}) end, [key(2)])
    assert_exact(fn k -> Nx.Random.uniform(k, shape: {4}, type: :f16) end, [key(3)])
    assert_exact(fn k -> Nx.Random.randint(k, -10, 10, shape: {17}) end, [key(4)])
    assert_exact(fn k -> Nx.Random.randint(k, 0, 1000, shape: {3, 3}, type: :u32) end, [key(5)])
    assert_exact(fn k, t -> Nx.Random.shuffle(k, t) end, [key(6), Nx.iota({20})])
    assert_exact(fn k, t -> Nx.Random.shuffle(k, t, axis: 1) end, [key(6), Nx.iota({3, 4})])
  end

  test "normal: the reference's values (a float transform of the exact bits)" do
    got = host(cjit(fn k -> Nx.Random.normal(k, shape: {50}) end).(key(8)))
    {want, want_key} = reference(fn k -> Nx.Random.normal(k, shape: {50}) end, [key(8)])
    {got, got_key} = got
    assert got_key == want_key
    assert Nx.all_close(got, want, atol: 1.0e-5, rtol: 1.0e-5) |> Nx.to_number() == 1
  end

  test "a jitted uniform of 32 values: no predicate read, a handful of launches" do
    @compiler.clear_cache()
    fun = cjit(fn k -> Nx.Random.uniform(k, shape: {32, 1}) end)
    first = fun.(key(1))
    {segments, captured, direct, launches, reads} = program_info!()
    assert reads == 0
    assert segments == 1
    assert captured + direct == 1
    # split (threefry of 4 values) and uniform_split (threefry of 32 values) with their
    # bit tricks: integer chains fused, counters, rotations and iotas folded
    k = key(1)
    before = ExCubecl.launch_count()
    second = fun.(k)
    launched = ExCubecl.launch_count() - before
    assert launched <= 16, "#{launched} launches per call (#{launches} captured)"
    assert host(first) == host(second)
  end

  test "a loop whose predicate is data reads it every turn; a counter against an input bound once" do
    @compiler.clear_cache()
    doubling = cjit(&doubling/1)
    assert Nx.to_list(doubling.(Nx.tensor([1.0, 2.0]))) == [64.0, 128.0]
    assert {_, _, _, _, 7} = program_info!()

    @compiler.clear_cache()
    counted = cjit(&counted/2)
    assert Nx.to_list(counted.(Nx.tensor([1.0]), 4)) == [16.0]
    assert Nx.to_list(counted.(Nx.tensor([1.0]), 0)) == [1.0]
    assert {_, _, _, _, 2} = program_info!()

    @compiler.clear_cache()
    down = cjit(&counted_down/2)
    assert host(down.(Nx.tensor([0.0]), 1)) == reference(&counted_down/2, [Nx.tensor([0.0]), Nx.tensor(1)])
    assert {_, _, _, _, 1} = program_info!()
  end

  test "a static loop above the unroll bound repeats its body with no predicate read" do
    @compiler.clear_cache()
    fun = cjit(&long_static/1)
    assert Nx.to_list(fun.(Nx.tensor([1.0]))) == [301.0]
    assert {_, _, _, _, 0} = program_info!()
  end

  test "a dropout model's compiled training step equals the Evaluator's" do
    model =
      Axon.input("x", shape: {nil, 6})
      |> Axon.dense(8, activation: :relu)
      |> Axon.dropout(rate: 0.5)
      |> Axon.dense(3)

    {init_fn, step_fn} = Axon.Loop.train_step(model, &Axon.Losses.mean_squared_error(&1, &2, reduction: :mean), Polaris.Optimizers.sgd(learning_rate: 0.1))
    x = Nx.iota({4, 6}, type: :f32) |> Nx.divide(24)
    y = Nx.iota({4, 3}, type: :f32) |> Nx.divide(12)
    state = Nx.with_default_backend(Nx.BinaryBackend, fn -> Nx.Defn.jit(init_fn, compiler: Nx.Defn.Evaluator).({Nx.backend_copy(x), Nx.backend_copy(y)}, Axon.ModelState.empty()) end)

    want = Nx.with_default_backend(Nx.BinaryBackend, fn -> Nx.Defn.jit(step_fn, compiler: Nx.Defn.Evaluator).({Nx.backend_copy(x), Nx.backend_copy(y)}, state) end)
    got = cjit(step_fn).({x, y}, Nx.backend_transfer(state, ExBurn.Backend))

    # parameters close, the dropout key (u32) advanced exactly as the reference's
    for {path, w} <- flatten(want.model_state.data) do
      g = host(get_in(got.model_state.data, path))
      if Nx.Type.integer?(w.type), do: assert(g == w, inspect(path)), else: assert(Nx.all_close(g, w, atol: 1.0e-5) |> Nx.to_number() == 1, inspect(path))
    end

    assert Nx.all_close(host(got.y_pred), want.y_pred, atol: 1.0e-5) |> Nx.to_number() == 1
  end

  defp flatten(map, prefix \\ []) do
    Enum.flat_map(map, fn
      {k, %Nx.Tensor{} = t} -> [{prefix ++ [k], t}]
      {k, %{} = m} -> flatten(m, prefix ++ [k])
    end)
  end
end
