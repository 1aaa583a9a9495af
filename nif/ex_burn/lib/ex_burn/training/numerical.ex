defmodule ExBurn.Training.Numerical do
  @moduledoc """
  Finite-difference gradients, computed on the device as a check of the exact ones
  (`grad_method: :numerical | :numerical_batch` of `ExBurn.Training`; exact gradients,
  `Nx.Defn.value_and_grad/3`, are the default and what training should use).

    * `:numerical` - central differences, `(L(w + e) - L(w - e)) / 2e` per scalar parameter:
      `2N` loss evaluations, error `O(e^2)`.
    * `:numerical_batch` - one-sided differences, `(L(w + e) - L(w)) / e`: `N + 1`
      evaluations, error `O(e)`.

  `gradients/5` traces into the caller's compiled call: one `while` loop per parameter
  tensor, whose body perturbs one element (selected by an `iota` mask, so the parameters never
  leave the device) and evaluates the loss. `e` is `:epsilon` (default `1.0e-5`). In f32
  (7 significant digits) a central difference with that step would carry a rounding error of
  about `1e-7 * |L| / e`, so the differences are taken in f64 where the device has it
  (`precision/1`: CUDA, Vulkan with 64-bit floats, lavapipe): the parameters, inputs and
  targets are cast up for the check and the gradients cast back to the parameters' types.
  Where the device has no f64 (Metal), they are taken in the parameters' type, and a step
  of `1.0e-3` suits f32 better.
  """

  import Nx.Defn

  @methods [:numerical, :numerical_batch]

  @doc "The finite-difference methods."
  def methods, do: @methods

  @doc "The type finite differences are taken in on `device`: `{:f, 64}` where it has f64, else `nil` (the parameters' own)."
  @spec precision(String.t()) :: Nx.Type.t() | nil
  def precision(device) do
    if :f64 in ExCubecl.supported_dtypes(device: device), do: {:f, 64}
  rescue
    _ -> nil
  end

  @doc """
  The gradient of `loss_at.(params, rest)` with respect to every tensor of `params` (a nested
  map), as a map of the same shape. `rest` is a container of the other tensors the loss needs
  (the model state, the batch); `loss_at` must be a function of those two alone. With
  `precision` (a float type), every float tensor of both is cast to it first.
  """
  @spec gradients(
          map(),
          term(),
          (map(), term() -> Nx.Tensor.t()),
          :numerical | :numerical_batch,
          number(),
          Nx.Type.t() | nil
        ) ::
          map()
  def gradients(params, rest, loss_at, method, epsilon, precision \\ nil) when method in @methods do
    up = fn t -> if precision && Nx.Type.float?(Nx.type(t)), do: Nx.as_type(t, precision), else: t end
    original = params
    params = Nx.Defn.Composite.traverse(params, up)
    rest = Nx.Defn.Composite.traverse(rest, up)
    base = if method == :numerical_batch, do: loss_at.(params, rest), else: Nx.tensor(0.0)

    params
    |> ExBurn.Model.Params.paths()
    |> Enum.reduce(original, fn {_name, path}, grads ->
      p = get_in(params, path)

      g =
        element_loop(Nx.reshape(p, {Nx.size(p)}), params, rest, base,
          loss_at: loss_at,
          path: path,
          shape: Nx.shape(p),
          method: method,
          epsilon: epsilon
        )

      put_in(grads, path, g |> Nx.reshape(Nx.shape(p)) |> Nx.as_type(Nx.type(get_in(original, path))))
    end)
  end

  @doc false
  # The gradient of one parameter tensor (`flat`, flattened): a `while` over its elements,
  # each perturbed in turn; public only so that `gradients/5` traces into it.
  defn element_loop(flat, params, rest, base, opts \\ []) do
    k = Nx.size(flat)
    zero = Nx.broadcast(Nx.tensor(0, type: Nx.type(flat)), {k})

    {_i, g, _flat, _params, _rest, _base} =
      while {i = 0, g = zero, flat, params, rest, base}, i < k do
        mask = Nx.iota({k}) == i
        d = difference(flat, mask, params, rest, base, opts)
        {i + 1, g + mask * d, flat, params, rest, base}
      end

    g
  end

  # The finite difference at the element `mask` selects.
  deftransformp difference(flat, mask, params, rest, base, opts) do
    eps = opts[:epsilon]
    type = Nx.type(flat)
    step = mask |> Nx.as_type(type) |> Nx.multiply(eps)
    at = fn w -> opts[:loss_at].(put_in(params, opts[:path], Nx.reshape(w, opts[:shape])), rest) end

    case opts[:method] do
      :numerical ->
        Nx.subtract(at.(Nx.add(flat, step)), at.(Nx.subtract(flat, step))) |> Nx.divide(2 * eps) |> Nx.as_type(type)

      :numerical_batch ->
        Nx.subtract(at.(Nx.add(flat, step)), base) |> Nx.divide(eps) |> Nx.as_type(type)
    end
  end
end
