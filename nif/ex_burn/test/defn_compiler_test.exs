defmodule ExBurn.Defn.CompilerTest do
  # ExBurn.Defn.Compiler against Nx.Defn.Evaluator on Nx.BinaryBackend: every Expr node type,
  # control flow with predicates on the device, hooks, the cache, errors.
  use ExUnit.Case, async: false
  import Nx.Defn

  @compiler ExBurn.Defn.Compiler

  defp cjit(fun, opts \\ []), do: Nx.Defn.jit(fun, [compiler: @compiler] ++ opts)

  # The Evaluator's result on BinaryBackend, from the same arguments copied there.
  defp reference(fun, args) do
    args = Enum.map(args, &Nx.backend_copy(&1, Nx.BinaryBackend))
    Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator), args) end)
  end

  defp assert_same(fun, args, opts \\ []) do
    got = apply(cjit(fun), args)
    want = reference(fun, args)
    compare(got, want, opts)
    got
  end

  defp compare(%Nx.Tensor{} = got, %Nx.Tensor{} = want, opts) do
    assert got.data.__struct__ == ExBurn.Backend
    assert {got.type, got.shape} == {want.type, want.shape}
    got = Nx.backend_copy(got, Nx.BinaryBackend)
    want = Nx.backend_copy(want, Nx.BinaryBackend)

    if Nx.Type.float?(want.type) or Nx.Type.complex?(want.type),
      do: assert(Nx.all_close(got, want, atol: opts[:atol] || 1.0e-5, rtol: opts[:rtol] || 1.0e-5, equal_nan: true) |> Nx.to_number() == 1, "got #{inspect(got)}, want #{inspect(want)}"),
      else: assert(got == want)
  end

  defp compare(got, want, opts) when is_tuple(got), do: Enum.zip_with(Tuple.to_list(got), Tuple.to_list(want), &compare(&1, &2, opts))
  defp compare(%{} = got, %{} = want, opts), do: Enum.each(want, fn {k, v} -> compare(Map.fetch!(got, k), v, opts) end)

  defp rand(shape, seed \\ 1), do: Nx.Random.uniform(Nx.Random.key(seed), -2.0, 2.0, shape: shape) |> elem(0)

  ## Node types

  defn add_scaled(a, b), do: a + b * 2.5 - 1
  defn with_tensor(a), do: a * Nx.tensor([1.0, 2.0, 3.0])
  defn pair(a, b), do: {a * b, {Nx.sum(a), b - a}}
  defn as_map(a), do: %{double: a * 2, neg: -a}
  defn metadata_node(a), do: stop_grad(a * 2) + a
  defn reduce_node(a), do: Nx.reduce(a, 0.0, [axes: [1]], &Nx.add/2)
  defn window_node(a), do: Nx.window_reduce(a, :neg_infinity, {2}, fn x, acc -> max(x, acc) end)
  defn cumulative_block(a), do: Nx.cumulative_sum(a, axis: 1)
  defn default_block(a), do: Nx.logsumexp(a, axes: [1])
  defn determinant(a), do: Nx.LinAlg.determinant(a)

  test "parameters, constants and arithmetic" do
    assert_same(&add_scaled/2, [rand({3, 4}), rand({3, 4}, 2)])
  end

  test "integer and unsigned types" do
    assert_same(&add_scaled/2, [Nx.iota({2, 3}, type: :s32), Nx.iota({2, 3}, type: :s32)])
    assert_same(fn a, b -> Nx.add(Nx.bitwise_xor(a, b), 3) end, [Nx.iota({5}, type: :u8), Nx.tensor([1, 2, 3, 4, 5], type: :u8)])
  end

  test "tensors in the graph are constants of the program" do
    assert_same(&with_tensor/1, [rand({2, 3})])
  end

  test "tuples, nested tuples and maps" do
    assert_same(&pair/2, [rand({2, 2}), rand({2, 2}, 3)])
    assert_same(&as_map/1, [rand({3})])
  end

  test "metadata" do
    assert_same(&metadata_node/1, [rand({4})])
  end

  test "reduce and window_reduce with a function" do
    assert_same(&reduce_node/1, [rand({3, 5})])
    assert_same(&window_node/1, [rand({6})])
  end

  defn fold_rows(a), do: Nx.reduce(a, 1.0, [axes: [1]], fn x, acc -> acc * 2 + x end)
  defn fold_all(a), do: Nx.reduce(a, 0, fn x, acc -> acc - x * x end)
  defn fold_keep(a), do: Nx.reduce(a, 0.5, [axes: [0, 2], keep_axes: true], fn x, acc -> Nx.max(acc, x) - 0.25 end)
  defn fold_windows(a), do: Nx.window_reduce(a, 0.0, {2, 2}, [strides: [1, 2], padding: [{1, 0}, {0, 1}], window_dilations: [1, 1]], fn x, acc -> acc * 0.5 + x end)

  test "reduce and window_reduce with functions that are not associative: folded in BinaryBackend's order" do
    assert_same(&fold_rows/1, [rand({3, 4})])
    assert_same(&fold_all/1, [Nx.iota({2, 3}, type: :s32)])
    assert_same(&fold_keep/1, [rand({2, 3, 2})])
    assert_same(&fold_windows/1, [rand({3, 4})])
  end

  test "blocks: native and default implementations" do
    assert_same(&cumulative_block/1, [rand({2, 5})])
    assert_same(&default_block/1, [rand({3, 4})])
    assert_same(&determinant/1, [Nx.tensor([[2.0, 1.0], [1.0, 3.0]])])
  end

  test "inputs from another backend are copied to the device" do
    got = cjit(&add_scaled/2).(Nx.tensor([1.0, 2.0], backend: Nx.BinaryBackend), Nx.tensor([3.0, 4.0], backend: Nx.BinaryBackend))
    assert Nx.to_flat_list(got) == [7.5, 11.0]
  end

  ## Control flow

  defn clamp_sign(x) do
    if Nx.sum(x) > 0 do
      x * 2
    else
      -x
    end
  end

  defn three_way(x, y) do
    cond do
      Nx.sum(x) > 10 -> {x + y, x}
      Nx.sum(y) > 0 -> {x - y, y * 2}
      true -> {x * y, x + 1}
    end
  end

  defn count_to(x) do
    {i, acc} =
      while {i = 0, acc = x}, i < 5 do
        {i + 1, acc * 2}
      end

    {i, acc}
  end

  defn nested(x) do
    while {x, i = 0}, i < 3 do
      x = if Nx.sum(x) > 0, do: x - 1, else: x + 10
      {x, i + 1}
    end
  end

  defn device_predicate(x) do
    while x, Nx.reduce_max(x) < 100, do: x * 3
  end

  test "cond with a predicate computed on the device" do
    assert_same(&clamp_sign/1, [Nx.tensor([1.0, 2.0])])
    assert_same(&clamp_sign/1, [Nx.tensor([-1.0, -2.0])])
  end

  test "cond with several clauses and tuple results" do
    for {x, y} <- [{[20.0, 1.0], [1.0, 1.0]}, {[1.0, 1.0], [1.0, 1.0]}, {[1.0, 1.0], [-5.0, 1.0]}] do
      assert_same(&three_way/2, [Nx.tensor(x), Nx.tensor(y)])
    end
  end

  test "while loops, nested control flow and device-valued loop predicates" do
    assert_same(&count_to/1, [Nx.tensor([1.0, 2.0])])
    assert_same(&nested/1, [Nx.tensor([0.5, -2.0])])
    assert_same(&device_predicate/1, [Nx.tensor([1.0, 2.0])])
  end

  ## Hooks

  defn hooked(x) do
    y = hook(x * 2, :doubled)
    z = hook(y + 1, fn t -> send(self(), {:anonymous, t}) end)
    z * 3
  end

  defn hooked_loop(x) do
    while {x, i = 0}, i < 3 do
      {hook(x + 1, :turn), i + 1}
    end
  end

  test "hooks run their functions with the hooked values" do
    pid = self()
    got = cjit(&hooked/1, hooks: %{doubled: &send(pid, {:doubled, &1})}).(Nx.tensor([1.0, 2.0]))
    assert Nx.to_flat_list(got) == [9.0, 15.0]
    assert_received {:doubled, doubled}
    assert Nx.to_flat_list(doubled) == [2.0, 4.0]
    assert_received {:anonymous, anon}
    assert Nx.to_flat_list(anon) == [3.0, 5.0]
  end

  test "a hook in a loop runs once per turn" do
    pid = self()
    cjit(&hooked_loop/1, hooks: %{turn: &send(pid, {:turn, Nx.to_number(&1)})}).(Nx.tensor(0.0))
    assert_received {:turn, 1.0}
    assert_received {:turn, 2.0}
    assert_received {:turn, 3.0}
  end

  ## Runtime calls

  defn call_in_loop(x) do
    while {x, i = 0}, i < 3 do
      {Nx.runtime_call(x, x, [by: 2], &__MODULE__.scale/2), i + 1}
    end
  end

  def scale(t, opts), do: Nx.multiply(t, opts[:by])
  def bad_shape(t, _opts), do: Nx.concatenate([t, t])
  def fails(_t, _opts), do: raise(ArgumentError, "no")

  test "runtime calls run their function in the middle of the run, in loops too" do
    got = cjit(&call_in_loop/1).(Nx.tensor([1.0, 3.0]))
    assert Nx.to_flat_list(elem(got, 0)) == [8.0, 24.0]
    assert_same(&call_in_loop/1, [Nx.tensor([1.0, 3.0])])
  end

  test "a failing runtime call raises, and the program runs again afterwards" do
    fun = cjit(fn x -> Nx.runtime_call(x, x, [], &__MODULE__.fails/2) |> Nx.add(1) end)
    assert_raise ArgumentError, "no", fn -> fun.(Nx.tensor([1.0])) end
    assert_raise ArgumentError, "no", fn -> fun.(Nx.tensor([1.0])) end

    mismatch = cjit(fn x -> Nx.runtime_call(x, x, [], &__MODULE__.bad_shape/2) end)
    assert_raise ExBurn.Error, ~r/doesn't match the output template/, fn -> mismatch.(Nx.tensor([1.0])) end
    assert Nx.to_flat_list(cjit(&call_in_loop/1).(Nx.tensor([1.0])) |> elem(0)) == [8.0]
  end

  ## Gradients

  defn loss(w, x), do: Nx.sum(Nx.tanh(Nx.dot(x, w)) ** 2)
  defn loss_grad(w, x), do: value_and_grad(w, &loss(&1, x))

  test "gradients through the compiler" do
    assert_same(&loss_grad/2, [rand({4, 3}), rand({5, 4}, 9)], atol: 1.0e-4)
  end

  ## Compilation, cache and replay

  test "Nx.Defn.compile/3 and the global default compiler" do
    compiled = Nx.Defn.compile(&add_scaled/2, [Nx.template({2}, :f32), Nx.template({2}, :f32)], compiler: @compiler)
    assert Nx.to_flat_list(compiled.(Nx.tensor([1.0, 2.0]), Nx.tensor([0.0, 1.0]))) == [0.0, 3.5]

    previous = Nx.Defn.global_default_options(compiler: @compiler)

    try do
      assert Nx.to_flat_list(add_scaled(Nx.tensor([1.0]), Nx.tensor([2.0]))) == [5.0]
    after
      Nx.Defn.global_default_options(previous)
    end
  end

  test "a cached program runs in exactly one NIF call" do
    fun = cjit(&add_scaled/2)
    a = Nx.backend_copy(Nx.tensor([1.0, 2.0]), ExBurn.Backend)
    b = Nx.backend_copy(Nx.tensor([3.0, 4.0]), ExBurn.Backend)
    fun.(a, b)
    calls = with_normal_us(0, fn -> count_nif_calls(fn -> fun.(a, b) end) end)
    assert calls == [{:program_run, 1}]
  end

  # Application env :normal_scheduler_us set to `us` while `fun` runs.
  defp with_normal_us(us, fun) do
    previous = Application.get_env(:ex_burn, :normal_scheduler_us)
    Application.put_env(:ex_burn, :normal_scheduler_us, us)

    try do
      fun.()
    after
      if previous, do: Application.put_env(:ex_burn, :normal_scheduler_us, previous), else: Application.delete_env(:ex_burn, :normal_scheduler_us)
    end
  end

  test "a short run goes on the normal scheduler, a first or slower one on a dirty one" do
    @compiler.clear_cache()
    fun = cjit(&add_scaled/2)
    {a, b} = {Nx.backend_copy(Nx.tensor([1.0, 2.0]), ExBurn.Backend), Nx.backend_copy(Nx.tensor([3.0, 4.0]), ExBurn.Backend)}
    # the first run has no time to go by: dirty, whatever the limit
    assert with_normal_us(1_000_000_000, fn -> count_nif_calls(fn -> fun.(a, b) end) end) |> Keyword.take([:program_run, :program_run_normal]) ==
             [program_run: 1, program_run_normal: 1]

    # a run of the program has taken less than 1,000 s: normal; more than 1 µs: dirty
    assert with_normal_us(1_000_000_000, fn -> count_nif_calls(fn -> fun.(a, b) end) end) == [program_run_normal: 1]
    assert with_normal_us(1, fn -> count_nif_calls(fn -> fun.(a, b) end) end) == [program_run: 1, program_run_normal: 1]
    assert with_normal_us(0, fn -> count_nif_calls(fn -> fun.(a, b) end) end) == [program_run: 1]
    # every path gives the same result
    for us <- [1_000_000_000, 1, 0], do: assert(with_normal_us(us, fn -> Nx.to_flat_list(fun.(a, b)) end) == [7.5, 11.0])

    # more than 64 KiB to upload from the host: dirty
    big = Nx.iota({20_000}, type: :f32, backend: Nx.BinaryBackend)
    calls = with_normal_us(1_000_000_000, fn -> fun.(big, big) && count_nif_calls(fn -> fun.(big, big) end) end)
    assert Keyword.take(calls, [:program_run, :program_run_normal]) == [program_run: 1, program_run_normal: 1]
    assert Nx.to_number(fun.(big, big)[19_999]) == 19_999 * 3.5 - 1
  end

  test "concurrent calls of one program on the normal scheduler and dirty ones agree" do
    fun = cjit(&add_scaled/2)
    a = Nx.backend_copy(Nx.iota({64}, type: :f32), ExBurn.Backend)
    fun.(a, a)

    results =
      with_normal_us(1_000_000_000, fn ->
        1..8
        |> Task.async_stream(fn i -> for(_ <- 1..25, do: Nx.to_flat_list(fun.(a, Nx.multiply(a, i)))) |> Enum.uniq() end, timeout: 60_000)
        |> Enum.map(fn {:ok, r} -> r end)
      end)

    for {[r], i} <- Enum.with_index(results, 1), do: assert(r == Enum.map(0..63, &(&1 + 2.5 * &1 * i - 1)))
  end

  defn long_chain(x), do: x |> Nx.sin() |> Nx.multiply(2) |> Nx.cos() |> Nx.add(1) |> Nx.exp() |> Nx.subtract(3) |> Nx.abs() |> Nx.sqrt()

  # A loop whose trip count is an input: it runs as a loop, its predicate read each turn.
  defn chain_loop(x, n) do
    {_i, acc, _n} = while {i = 0, acc = x, n}, i < n, do: {i + 1, long_chain(acc), n}
    acc
  end

  # A loop of 3 turns known when the graph is lowered: unrolled into the block around it.
  defn static_chain_loop(x) do
    {_i, acc} = while {i = 0, acc = x}, i < 3, do: {i + 1, long_chain(acc)}
    acc
  end

  # {segments, captured, direct, launches, reads} of the one cached program after `fun`'s calls.
  defp program_info! do
    [{_key, %{ref: ref}}] = :ets.tab2list(ExBurn.Defn.Cache)
    {:ok, info} = ExCubecl.Native.program_info(ref)
    info
  end

  test "the first call captures the program's segments, later calls replay them" do
    @compiler.clear_cache()
    # unfused, so that the body is 8 launches (fused, it is one: ExBurn.Defn.FuseTest)
    fun = cjit(&chain_loop/2, fuse: false)
    first = fun.(Nx.tensor([1.0, 2.0]), 3)
    # the main block computes the trip count (`i < n`, n an input: read once per call, not
    # once per turn) and repeats the body (8 launches on 2 values), each block one replay
    {segments, captured, direct, launches, 1} = program_info!()
    assert {segments, captured, direct} == {2, 2, 0}
    assert launches >= 9
    compare(fun.(Nx.tensor([1.0, 2.0]), 3), first, [])
    compare(fun.(Nx.tensor([3.0, 4.0]), 5), reference(&chain_loop/2, [Nx.tensor([3.0, 4.0]), Nx.tensor(5)]), [])
    compare(fun.(Nx.tensor([3.0, 4.0]), -2), reference(&chain_loop/2, [Nx.tensor([3.0, 4.0]), Nx.tensor(-2)]), [])
    assert program_info!() == {segments, captured, direct, launches, 4}
  end

  test "a loop with a trip count known at lowering is unrolled: one segment, no predicate read" do
    @compiler.clear_cache()
    fun = cjit(&static_chain_loop/1, fuse: false)
    compare(fun.(Nx.tensor([1.0, 2.0])), reference(&static_chain_loop/1, [Nx.tensor([1.0, 2.0])]), [])
    # (24 ops, some of them more than one launch unfused)
    assert {1, 1, 0, launches, 0} = program_info!()
    assert launches >= 24
    # fused, the three turns' chains are one launch
    @compiler.clear_cache()
    fused = cjit(&static_chain_loop/1)
    compare(fused.(Nx.tensor([3.0, 4.0])), reference(&static_chain_loop/1, [Nx.tensor([3.0, 4.0])]), [])
    assert {1, 1, 0, 1, 0} = program_info!()
  end

  test "a jitted Nx.add replays its one launch, reading its inputs and writing its output in place" do
    @compiler.clear_cache()
    add = cjit(&Nx.add/2)

    launches =
      for i <- 1..3 do
        {a, b} = {Nx.tensor([i, 2.0]), Nx.tensor([1.0, i])}
        before = ExCubecl.launch_count()
        result = add.(a, b)
        launched = ExCubecl.launch_count() - before
        compare(result, Nx.add(Nx.backend_copy(a, Nx.BinaryBackend), Nx.backend_copy(b, Nx.BinaryBackend)), [])
        launched
      end

    # the first call captures (copying the inputs in and the output out); the replays bind
    # the caller's inputs and a fresh output: no copy launches
    assert program_info!() == {1, 1, 0, 1, 0}
    assert tl(launches) == [1, 1]
  end

  test "a function called again reuses its program until the cache drops one" do
    @compiler.clear_cache()
    fun = cjit(&add_scaled/2)
    args = [Nx.tensor([1.0, 2.0]), Nx.tensor([3.0, 4.0])]
    first = apply(fun, args)
    assert @compiler.cache_size() == 1
    compare(apply(fun, args), first, [])
    compare(apply(fun, [Nx.tensor([1.0]), Nx.tensor([2.0])]), reference(&add_scaled/2, [Nx.tensor([1.0]), Nx.tensor([2.0])]), [])
    assert @compiler.cache_size() == 2
    @compiler.clear_cache()
    # the process's last program is not run from memory after the cache dropped it: the call
    # compiles and caches again
    compare(apply(fun, [Nx.tensor([1.0]), Nx.tensor([2.0])]), reference(&add_scaled/2, [Nx.tensor([1.0]), Nx.tensor([2.0])]), [])
    assert @compiler.cache_size() == 1
  end

  test "clear_cache/0 empties the cache" do
    cjit(&add_scaled/2).(Nx.tensor([1.0]), Nx.tensor([1.0]))
    assert @compiler.cache_size() > 0
    @compiler.clear_cache()
    assert @compiler.cache_size() == 0
  end

  ## Errors

  test "an unknown option raises naming it" do
    assert_raise ExBurn.Error, ~r/unknown option\(s\) :bogus/, fn -> cjit(&add_scaled/2, bogus: 1).(Nx.tensor(1.0), Nx.tensor(1.0)) end
  end

  test "options that Nx.Serving and Axon.build pass on are accepted" do
    assert Nx.to_number(cjit(&add_scaled/2, batch_keys: [:default], mode: :inference, seed: 1).(Nx.tensor(1.0), Nx.tensor(2.0))) == 5.0
  end

  test "a template argument the function never reads runs; one it reads raises as on the Evaluator" do
    unused = cjit(fn _x, y -> Nx.add(y, 1) end)
    assert Nx.to_number(unused.(Nx.template({2}, :f32), Nx.tensor(1.0))) == 2.0
    assert_raise RuntimeError, "cannot perform operations on a Nx.TemplateBackend tensor", fn -> cjit(&Nx.add(&1, 1)).(Nx.template({2}, :f32)) end
  end

  test "an unsupported construct raises naming it" do
    assert_raise ExBurn.Error, ~r/sharding/, fn -> @compiler.__shard_jit__(nil, nil, [], nil, [], []) end
  end

  test "a failing program raises naming the instruction and its Expr op" do
    # a result larger than any device buffer
    fun = fn x -> x |> Nx.add(1) |> Nx.broadcast({1_000_000, 1_000_000}) end
    assert_raise ExBurn.Error, ~r/Nx.broadcast: instruction \d+ of block 0/, fn -> cjit(fun).(Nx.tensor([1.0])) end
  end

  # The calls of ExCubecl.Native functions that `fun` makes: [{name, count}].
  defp count_nif_calls(fun) do
    :erlang.trace_pattern({ExCubecl.Native, :_, :_}, true, [:call_count])

    try do
      fun.()

      for {name, arity} <- ExCubecl.Native.__info__(:functions),
          {:call_count, n} = :erlang.trace_info({ExCubecl.Native, name, arity}, :call_count),
          is_integer(n) and n > 0,
          do: {name, n}
    after
      :erlang.trace_pattern({ExCubecl.Native, :_, :_}, false, [:call_count])
    end
  end
end
