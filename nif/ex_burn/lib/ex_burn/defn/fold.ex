defmodule ExBurn.Defn.Fold do
  @moduledoc false
  # `Nx.reduce` and `Nx.window_reduce` with any function, for ExBurn.Defn.Lower: the node is
  # rewritten as an equivalent Nx.Defn.Expr graph in which a `while` loop folds the function
  # over the elements one at a time, in Nx.BinaryBackend's order (for each output position,
  # the reduced elements in row-major order, starting from the accumulator), and the lowering
  # then lowers that graph like any other. One turn per element: this is for functions that
  # are not one of Nx's associative ops, which run as one kernel instead.
  alias Nx.Defn.{Composite, Expr, Tree}
  alias Nx.Tensor, as: T

  @doc false
  # The graph of a `:reduce` node.
  def reduce(%T{data: %Expr{args: [tensor, acc, opts, fun]}} = out) do
    rank = tuple_size(tensor.shape)
    axes = opts[:axes] || Enum.to_list(0..(rank - 1)//1)
    kept = Enum.to_list(0..(rank - 1)//1) -- axes
    k = Enum.reduce(kept, 1, &(elem(tensor.shape, &1) * &2))
    n = Enum.reduce(axes, 1, &(elem(tensor.shape, &1) * &2))
    table = tensor |> Nx.transpose(axes: kept ++ axes) |> Nx.reshape({k, n})
    table |> fold(acc, fun, out.type) |> Nx.reshape(out.shape)
  end

  @doc false
  # The graph of a `:window_reduce` node: the padded tensor's windows gathered along a last
  # axis (one strided slice per window position), then folded along it.
  def window_reduce(%T{data: %Expr{args: [tensor, acc, window, opts, fun]}} = out) do
    rank = tuple_size(tensor.shape)
    padding = opts[:padding] || List.duplicate({0, 0}, rank)
    strides = per_axis(opts[:strides], rank)
    dilations = per_axis(opts[:window_dilations], rank)
    padded = Nx.pad(tensor, Nx.as_type(acc, tensor.type), Enum.map(padding, fn {lo, hi} -> {lo, hi, 0} end))
    out_dims = Tuple.to_list(out.shape)
    lengths = Enum.zip_with(out_dims, strides, fn o, s -> max(o - 1, 0) * s + 1 end)

    slices =
      for offset <- positions(Tuple.to_list(window)) do
        starts = Enum.zip_with(offset, dilations, &(&1 * &2))
        Nx.slice(padded, starts, lengths, strides: strides)
      end

    size = Tuple.product(out.shape)
    slices |> Nx.stack(axis: -1) |> Nx.reshape({size, length(slices)}) |> fold(acc, fun, out.type) |> Nx.reshape(out.shape)
  end

  defp per_axis(nil, rank), do: List.duplicate(1, rank)
  defp per_axis(n, rank) when is_integer(n), do: List.duplicate(n, rank)
  defp per_axis(list, _rank), do: list

  # Every index of a box of `dims`, in row-major order.
  defp positions([]), do: [[]]
  defp positions([d | rest]), do: for(i <- 0..(d - 1)//1, tail <- positions(rest), do: [i | tail])

  # Folds the scalar function `fun` (a `:fun` node of two parameters) along each row of
  # `table` ({k, n}), from `acc`: a vector {k} of `type`.
  defp fold(%T{shape: {k, n}} = table, acc, fun, type) do
    context = make_ref()
    zero = Expr.tensor(Nx.tensor(0, type: :s32, backend: Nx.BinaryBackend))
    initial = {zero, acc |> Nx.as_type(type) |> Nx.broadcast({k}), table}
    {arg, _} = Composite.traverse(initial, 0, fn t, i -> {Expr.parameter(t, context, i), i + 1} end)
    {j, accs, rows} = arg
    {row, col} = {Nx.quotient(j, n), Nx.remainder(j, n)}
    x = rows |> Nx.slice([row, col], [1, 1]) |> Nx.reshape({}) |> Nx.as_type(type)
    a = accs |> Nx.slice([row], [1]) |> Nx.reshape({})
    r = fun |> apply_fun([x, a], context) |> Nx.as_type(type)
    body = {Nx.add(j, 1), Nx.put_slice(accs, [row], Nx.reshape(r, {1})), rows}
    {_j, folded, _rows} = Expr.while(initial, context, arg, Nx.less(j, k * n), body)
    folded
  end

  # The body of `fun` with its parameters replaced by `args`: a copy of its nodes (new ids,
  # the loop's context), each once.
  defp apply_fun(%T{data: %Expr{op: :fun, args: [_params, body, _mfa]}}, args, context) do
    args = args |> Enum.with_index(&{&2, &1}) |> Map.new()
    {result, _memo} = Composite.traverse(body, %{}, &substitute(&1, &2, args, context))
    result
  end

  defp substitute(%T{data: %Expr{op: :parameter, args: [i]}}, memo, args, _context), do: {Map.fetch!(args, i), memo}
  defp substitute(%T{data: %Expr{op: op}} = t, memo, _args, _context) when op in [:constant, :tensor], do: {t, memo}

  defp substitute(%T{data: %Expr{id: id}} = t, memo, args, context) do
    case memo do
      %{^id => copy} ->
        {copy, memo}

      %{} ->
        {new_args, memo} = Tree.apply_args(t, :scope, memo, &substitute(&1, &2, args, context))
        copy = Tree.put_args(t, new_args)
        copy = %{copy | data: %{copy.data | context: context}}
        {copy, Map.put(memo, id, copy)}
    end
  end
end
