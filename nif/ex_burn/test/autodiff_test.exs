defmodule ExBurn.AutodiffTest do
  # ExBurn.Autodiff's eager gradients on Burn's tape against Nx.Defn.grad: symbolic, through
  # ExBurn.Defn.Compiler, and on Nx.BinaryBackend with the Evaluator.
  use ExUnit.Case, async: false

  alias ExBurn.Autodiff

  doctest ExBurn.Autodiff

  defp rand(shape, seed), do: Nx.Random.uniform(Nx.Random.key(seed), -1.0, 1.0, shape: shape) |> elem(0)

  # Nx.Defn.value_and_grad of `fun.(params, data)` on `params` through `compiler` (`data` an
  # argument of the jitted function: Nx refuses device tensors captured in a grad's closure).
  defp symbolic(params, data, fun, compiler, backend) do
    copy = &Nx.Defn.Composite.traverse(&1, fn t -> Nx.backend_copy(t, backend) end)

    Nx.with_default_backend(backend, fn ->
      Nx.Defn.jit(fn p, d -> Nx.Defn.value_and_grad(p, &fun.(&1, d)) end, compiler: compiler).(copy.(params), copy.(data))
    end)
  end

  defp close(a, b, tol) do
    {a, b} = {Nx.backend_copy(a, Nx.BinaryBackend), Nx.backend_copy(b, Nx.BinaryBackend)}
    assert {a.type, a.shape} == {b.type, b.shape}
    assert Nx.all_close(a, b, atol: tol, rtol: tol) |> Nx.to_number() == 1, "#{inspect(a)} vs #{inspect(b)}"
  end

  defp same_grads(params, data, fun, tol \\ 1.0e-4) do
    {value, grads} = Autodiff.value_and_grad(params, &fun.(&1, data))

    for {compiler, backend} <- [{ExBurn.Defn.Compiler, ExBurn.Backend}, {Nx.Defn.Evaluator, Nx.BinaryBackend}] do
      {want_value, want_grads} = symbolic(params, data, fun, compiler, backend)
      close(value, want_value, tol)
      Enum.zip_with(Nx.Defn.Composite.flatten_list([grads]), Nx.Defn.Composite.flatten_list([want_grads]), &close(&1, &2, tol))
    end

    grads
  end

  test "an MLP with softmax cross-entropy, params in a nested map" do
    x = rand({8, 5}, 1)
    labels = Nx.tensor([0, 2, 1, 1, 0, 2, 2, 1]) |> Nx.new_axis(1) |> Nx.equal(Nx.iota({1, 3})) |> Nx.as_type(:f32)
    params = %{dense1: %{w: rand({5, 4}, 2), b: rand({4}, 3)}, dense2: %{w: rand({4, 3}, 4), b: rand({3}, 5)}}

    loss = fn %{dense1: d1, dense2: d2}, {x, labels} ->
      logits = x |> Nx.dot(d1.w) |> Nx.add(d1.b) |> Nx.max(0) |> Nx.dot(d2.w) |> Nx.add(d2.b)
      log_probs = Nx.subtract(logits, Nx.logsumexp(logits, axes: [1], keep_axes: true))
      log_probs |> Nx.multiply(labels) |> Nx.sum() |> Nx.negate() |> Nx.divide(8)
    end

    grads = same_grads(params, {x, labels}, loss)
    assert grads.dense1.w.shape == {5, 4} and grads.dense2.b.shape == {3}
  end

  test "a convolution, a reduction window and a tuple of params" do
    image = rand({1, 2, 6, 6}, 6)
    params = {rand({3, 2, 3, 3}, 7), rand({3}, 8)}

    same_grads(params, image, fn {k, b}, image ->
      image |> Nx.conv(k, padding: :same) |> Nx.add(Nx.reshape(b, {1, 3, 1, 1})) |> Nx.window_max({1, 1, 2, 2}, strides: [1, 1, 2, 2]) |> Nx.mean()
    end)
  end

  test "indexing, slicing, concatenation and elementwise math" do
    same_grads(rand({6, 4}, 9), Nx.tensor([0, 2, 2, 5]), fn t, idx ->
      a = Nx.take(t, idx)
      b = t |> Nx.slice([1, 1], [3, 2]) |> Nx.exp()
      Nx.concatenate([Nx.flatten(a), Nx.flatten(b)]) |> Nx.sin() |> Nx.pow(2) |> Nx.sum()
    end)
  end

  test "Elixir control flow in the function is just Elixir" do
    grads = Autodiff.grad(Nx.tensor([1.0, 2.0]), fn t -> Enum.reduce(1..3, t, fn _, acc -> Nx.multiply(acc, t) end) |> Nx.sum() end)
    assert Nx.to_flat_list(grads) == [4.0, 32.0]
  end

  test "integer params, a param the value doesn't use, a non-scalar value" do
    grads = Autodiff.grad({Nx.tensor([1, 2, 3]), Nx.tensor([5.0])}, fn {a, _unused} -> Nx.multiply(a, a) end)
    assert {Nx.to_flat_list(elem(grads, 0)), Nx.to_flat_list(elem(grads, 1))} == {[2.0, 4.0, 6.0], [0.0]}
    assert elem(grads, 0).type == {:f, 32}
  end

  test "params of another backend, and the value is detached from the tape" do
    {value, grad} = Autodiff.value_and_grad(Nx.tensor(3.0, backend: Nx.BinaryBackend), &Nx.multiply(&1, &1))
    assert {Nx.to_number(value), Nx.to_number(grad)} == {9.0, 6.0}
    assert Nx.to_number(Nx.add(value, 1)) == 10.0
  end

  test "bad input raises ExBurn.Error naming the function" do
    assert_raise ExBurn.Error, ~r/value_and_grad: complex params/, fn -> Autodiff.grad(Nx.tensor(Complex.new(1, 1)), & &1) end
    assert_raise ExBurn.Error, ~r/value_and_grad: the function must give a tensor/, fn -> Autodiff.grad(Nx.tensor(1.0), fn _ -> :nope end) end
    assert_raise ExBurn.Error, ~r/value_and_grad: .*float tensor/, fn -> Autodiff.grad(Nx.tensor(1.0), fn t -> Nx.as_type(t, :s32) end) end
  end
end
