defmodule ExBurn.Autodiff do
  @moduledoc """
  Exact gradients of ordinary Elixir functions of Nx calls, computed eagerly on Burn's tape.

      params = %{w: Nx.iota({3, 2}, type: :f32), b: Nx.tensor([0.1, 0.2])}
      x = Nx.tensor([[1.0, 2.0, 3.0]])

      {loss, grads} =
        ExBurn.Autodiff.value_and_grad(params, fn %{w: w, b: b} ->
          x |> Nx.dot(w) |> Nx.add(b) |> Nx.tanh() |> Nx.sum()
        end)

      grads.w  #=> f32[3][2], the gradient of loss with respect to w

  The function runs eagerly on `ExBurn.Backend`, as written, with any Elixir control flow in
  it: no tracing, no `defn`. The NIF's tensors are Burn `Autodiff` primitives; the params
  are marked as requiring gradients, every op on them is recorded on Burn's tape, and Burn's
  backward pass gives the gradients. They are exact (the derivative of the computation that
  ran), as `Nx.Defn.grad/2` gives them symbolically.

  `params` is any container of tensors (a tensor, tuples, maps, nested). Params of another
  backend are copied to the default device; integer params are cast to floats (their
  gradient is a float tensor, as in `Nx.Defn.grad/2`). A value that isn't a scalar gives the
  gradient of its sum. A param the value doesn't depend on gets a zero gradient. Complex
  params raise `ExBurn.Error`.
  """
  alias Nx.Defn.Composite
  alias Nx.Tensor, as: T
  alias ExCubecl.Native

  @doc """
  The value of `fun.(params)` and its gradient with respect to each tensor of `params`.

      iex> params = %{w: Nx.tensor([1.0, 2.0]), b: Nx.tensor(0.5)}
      iex> {value, grads} = ExBurn.Autodiff.value_and_grad(params, fn %{w: w, b: b} -> Nx.sum(Nx.multiply(w, w)) |> Nx.add(b) end)
      iex> Nx.to_number(value)
      5.5
      iex> {Nx.to_list(grads.w), Nx.to_number(grads.b)}
      {[2.0, 4.0], 1.0}
  """
  @spec value_and_grad(Nx.Container.t(), (Nx.Container.t() -> Nx.Tensor.t())) :: {Nx.Tensor.t(), Nx.Container.t()}
  def value_and_grad(params, fun) when is_function(fun, 1) do
    {tracked, leaves} = Composite.traverse(params, [], fn t, acc -> t |> track() |> then(&{&1, [&1 | acc]}) end)
    leaves = Enum.reverse(leaves)
    value = to_device(fun.(tracked), device(leaves))

    case Native.backward(value.data.ref, Enum.map(leaves, & &1.data.ref)) do
      {:ok, {value_ref, grad_refs}} ->
        {grads, []} = Composite.traverse(tracked, grad_refs, fn t, [ref | refs] -> {%{t | data: %{t.data | ref: ref}}, refs} end)
        {%{value | data: %{value.data | ref: value_ref}}, grads}

      {:error, e} ->
        raise ExBurn.Error.from("ExBurn.Autodiff.value_and_grad", e)
    end
  end

  def value_and_grad(_params, fun), do: raise(ExBurn.Error.new("ExBurn.Autodiff.value_and_grad", "expects a function of one argument", inspect(fun)))

  @doc """
  The gradient of `fun.(params)` with respect to each tensor of `params`.

      iex> ExBurn.Autodiff.grad(Nx.tensor([0.0, 1.0]), &Nx.sum(Nx.exp(&1))) |> Nx.to_list() |> Enum.map(&Float.round(&1, 4))
      [1.0, 2.7183]
  """
  @spec grad(Nx.Container.t(), (Nx.Container.t() -> Nx.Tensor.t())) :: Nx.Container.t()
  def grad(params, fun), do: params |> value_and_grad(fun) |> elem(1)

  # `t` on the device as a float tensor that requires gradients.
  defp track(t) do
    t = Nx.to_tensor(t)

    t =
      case t.type do
        {:c, _} -> raise ExBurn.Error.new("ExBurn.Autodiff.value_and_grad", "complex params are not supported", "#{Nx.Type.to_string(t.type)}#{inspect(t.shape)}")
        {kind, _} when kind in [:f, :bf] -> t
        type -> Nx.as_type(t, Nx.Type.to_floating(type))
      end

    t = to_device(t, nil)

    case Native.require_grad(t.data.ref) do
      {:ok, ref} -> %{t | data: %{t.data | ref: ref}}
      {:error, e} -> raise ExBurn.Error.from("ExBurn.Autodiff.value_and_grad", e)
    end
  end

  defp device([%T{data: %ExBurn.Backend{device: dev}} | _]), do: dev
  defp device([]), do: nil

  defp to_device(%T{data: %ExBurn.Backend{}} = t, _dev), do: t
  defp to_device(%T{} = t, nil), do: Nx.backend_copy(t, ExBurn.Backend)
  defp to_device(%T{} = t, dev), do: Nx.backend_copy(t, {ExBurn.Backend, device: dev})
  defp to_device(number, dev) when is_number(number), do: to_device(Nx.tensor(number, type: :f32), dev)

  defp to_device(other, _dev),
    do: raise(ExBurn.Error.new("ExBurn.Autodiff.value_and_grad", "the function must give a tensor", inspect(other, limit: 5)))
end
