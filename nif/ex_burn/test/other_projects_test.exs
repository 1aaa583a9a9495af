defmodule ExBurn.OtherProjectsTest do
  # Bugs found by running other projects' code (Axon's, EXLA users') against ExBurn.
  use ExUnit.Case, async: false

  @compiler ExBurn.Defn.Compiler

  defmodule LazyPair do
    # A lazy container whose field `b` must never be realised (Nx's contract: a compiler
    # realises only the inputs a program uses; EXLA does).
    defstruct [:a, :b]

    defimpl Nx.LazyContainer do
      def traverse(%{a: a}, acc, fun) do
        {a, acc} = fun.(Nx.to_template(a), fn -> a end, acc)
        {b, acc} = fun.(Nx.template({2}, :f32), fn -> raise "field b was realised" end, acc)
        {%{a: a, b: b}, acc}
      end
    end
  end

  defp host(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  test "a lazy container's fields that the program doesn't read are never realised" do
    fun = Nx.Defn.jit(fn %{a: a} -> Nx.multiply(a, 2) end, compiler: @compiler)
    input = %LazyPair{a: Nx.tensor([1.0, 2.0])}
    assert Nx.to_list(fun.(input)) == [2.0, 4.0]
    assert Nx.to_list(fun.(%LazyPair{a: Nx.tensor([3.0, 4.0])})) == [6.0, 8.0]
  end

  test "Axon.resize on a u8 image: the u8 input joins the float chain through its conversion" do
    model = Axon.input("x", shape: {nil, 4, 4, 3}) |> Axon.resize({8, 8})
    x = Nx.iota({1, 4, 4, 3}, type: :u8)
    {init_fn, predict_fn} = Axon.build(model, compiler: @compiler)
    got = predict_fn.(init_fn.(Nx.template({1, 4, 4, 3}, :u8), Axon.ModelState.empty()), x)
    {ref_init, ref_predict} = Axon.build(model, compiler: Nx.Defn.Evaluator)

    want =
      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        ref_predict.(ref_init.(Nx.template({1, 4, 4, 3}, :u8), Axon.ModelState.empty()), host(x))
      end)

    assert host(got) == want

    # a float chain fed by a u8 tensor, fused
    chain = Nx.Defn.jit(fn img -> img |> Nx.divide(255) |> Nx.subtract(0.5) |> Nx.multiply(2) |> Nx.exp() end, compiler: @compiler)
    img = Nx.tensor([[0, 128, 255]], type: :u8)
    want = Nx.with_default_backend(Nx.BinaryBackend, fn -> host(img) |> Nx.divide(255) |> Nx.subtract(0.5) |> Nx.multiply(2) |> Nx.exp() end)
    assert Nx.all_close(host(chain.(img)), want, atol: 1.0e-6) |> Nx.to_number() == 1
  end

  test "eager reduce and window_reduce with a function of Elixir arithmetic compute as Nx.BinaryBackend does" do
    sum = fn a, b -> Nx.tensor(Nx.to_number(a) + Nx.to_number(b)) end
    t = Nx.tensor([[1, 2, 3], [4, 5, 6]])
    assert Nx.to_list(Nx.reduce(t, 0, [axes: [1]], sum)) == [6, 15]
    assert Nx.to_list(Nx.window_reduce(t, 0, {1, 2}, sum)) == [[3, 5], [9, 11]]
    assert Nx.reduce(t, 0, [axes: [1]], sum).data.__struct__ == ExBurn.Backend
    # a function that fails on numbers fails as it does on the BinaryBackend
    assert_raise ArithmeticError, fn -> Nx.reduce(t, 0, fn a, b -> a + b end) end
  end

  test "the compiler takes EXLA's :precision option" do
    a = Nx.iota({8, 8}, type: :f32) |> Nx.divide(7)
    want = Nx.dot(host(a), host(a))

    for precision <- [:highest, :high, :default] do
      got = Nx.Defn.jit(&Nx.dot/2, compiler: @compiler, precision: precision).(a, a)
      assert Nx.all_close(host(got), want, rtol: 2.0e-3) |> Nx.to_number() == 1, inspect(precision)
    end

    exact = Nx.Defn.jit(&Nx.dot/2, compiler: @compiler, precision: :highest).(a, a)
    assert Nx.all_close(host(exact), want, rtol: 1.0e-6) |> Nx.to_number() == 1

    assert_raise ExBurn.Error, ~r/precision/, fn -> Nx.Defn.jit(&Nx.dot/2, compiler: @compiler, precision: :fastest).(a, a) end
  end
end
