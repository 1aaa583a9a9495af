if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Summary do
    @moduledoc """
    The layers of a compiled model in graph order: name, op, output shape (traced by Axon
    with the model's input templates, nothing runs on the device) and parameter count, as a
    list of rows (`rows/1`) or a text table (`table/1`). Axon's own `Axon.Display.as_table/2`
    needs the `table_rex` package; this needs nothing.
    """

    alias Axon.ModelState
    alias ExBurn.Model.{Params, Spec}

    @doc """
    One map per layer: `%{name, op, output_shape, parameters, state, bytes, frozen}`
    (`parameters` and `state` are element counts; `bytes` covers both).
    """
    @spec rows(ExBurn.Model.t()) :: [map()]
    def rows(%ExBurn.Model{model: %Axon{output: output, nodes: nodes}, input: input, state: state, frozen: frozen}) do
      params = Params.parameters(state)
      layer_state = Params.layer_state(state)

      output
      |> in_order(nodes, {MapSet.new(), []})
      |> elem(1)
      |> Enum.reverse()
      |> Enum.reduce({[], %{}}, fn %Axon.Node{id: id, op_name: op, name: name_fn}, {rows, counts} ->
        name = name_fn.(op, counts)
        {count, param_bytes} = params |> Map.get(name, %{}) |> layer_size()
        {state_count, state_bytes} = layer_state |> Map.get(name, %{}) |> layer_size()
        output = Axon.get_output_shape(%Axon{output: id, nodes: nodes}, input)

        row = %{
          name: name,
          op: op,
          output_shape: output_shape(output),
          parameters: count,
          state: state_count,
          bytes: param_bytes + state_bytes,
          frozen: name in frozen
        }

        {[row | rows], Map.update(counts, op, 1, &(&1 + 1))}
      end)
      |> elem(0)
      |> Enum.reverse()
    end

    # The nodes parents first, in the order Axon's compiler names them (`dense_0` before `dense_1`).
    defp in_order(id, nodes, {seen, order} = acc) do
      if MapSet.member?(seen, id) do
        acc
      else
        node = Map.fetch!(nodes, id)
        {seen, order} = Enum.reduce(node.parent, {MapSet.put(seen, id), order}, &in_order(&1, nodes, &2))
        {seen, [node | order]}
      end
    end

    defp layer_size(%Nx.Tensor{} = t), do: {Nx.size(t), Nx.byte_size(t)}
    defp layer_size(%{} = data), do: Params.size(data)

    defp output_shape(%Nx.Tensor{shape: shape}), do: Spec.shape_string(shape)
    defp output_shape(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.map_join(", ", &output_shape/1)
    defp output_shape(%{} = map), do: Enum.map_join(map, ", ", fn {k, v} -> "#{k}: #{output_shape(v)}" end)
    defp output_shape(other), do: inspect(other)

    @doc "The rows of `rows/1` as a text table, with the totals under it."
    @spec table(ExBurn.Model.t()) :: String.t()
    def table(%ExBurn.Model{} = model) do
      rows = rows(model)
      header = ["Layer", "Op", "Output shape", "Parameters", "State", "Frozen"]

      cells =
        Enum.map(
          rows,
          &[
            &1.name,
            to_string(&1.op),
            &1.output_shape,
            Integer.to_string(&1.parameters),
            Integer.to_string(&1.state),
            if(&1.frozen, do: "yes", else: "")
          ]
        )

      widths = Enum.zip_with([header | cells], fn column -> column |> Enum.map(&String.length/1) |> Enum.max() end)

      line = fn row ->
        row
        |> Enum.zip(widths)
        |> Enum.map_join(" | ", fn {cell, w} -> String.pad_trailing(cell, w) end)
        |> String.trim_trailing()
      end

      rule = Enum.map_join(widths, "-+-", &String.duplicate("-", &1))
      {_all, bytes} = Params.size(model.state.data)
      {total, _} = Params.size(Params.parameters(model.state))
      {trainable, _} = model.state |> ModelState.trainable_parameters() |> Params.size()
      {state, _} = Params.size(Params.layer_state(model.state))

      Enum.join(
        [line.(header), rule | Enum.map(cells, line)] ++
          [
            rule,
            "Total parameters: #{total}; trainable: #{trainable}; frozen: #{total - trainable}; layer state: #{state}; #{bytes} bytes",
            "Loss: #{inspect(model.loss)}; optimizer: #{inspect(model.optimizer)}; device: #{model.device}"
          ],
        "\n"
      ) <> "\n"
    end
  end
end
