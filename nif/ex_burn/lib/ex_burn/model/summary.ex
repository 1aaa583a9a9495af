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
    def rows(%ExBurn.Model{
          model: %Axon{output: output, nodes: nodes},
          input: input,
          state: state,
          frozen_layers: frozen
        }) do
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
          frozen: MapSet.member?(frozen, name)
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

    @doc """
    The rows of `rows/1` as a Keras/PyTorch-style box (input layers left out), with the
    totals under it:

        ╔══════════════════════════════════════════════════════════╗
        ║                   ExBurn Model Summary                   ║
        ╠══════════════════════════════════════════════════════════╣
        ║  Layer          Type         Output Shape       Params   ║
        ║  hidden1        Dense        [nil, 256]         200960   ║
        ...
        ╠══════════════════════════════════════════════════════════╣
        ║  Total params:     235,146                               ║
        ║  Trainable params: 235,146                               ║
        ╚══════════════════════════════════════════════════════════╝
    """
    @spec table(ExBurn.Model.t()) :: String.t()
    def table(%ExBurn.Model{} = model) do
      rows = model |> rows() |> Enum.reject(&(&1.op == :input))
      header = ["Layer", "Type", "Output Shape", "Params"]

      cells =
        Enum.map(rows, fn r ->
          [
            r.name <> if(r.frozen, do: " (frozen)", else: ""),
            type_name(r.op),
            "[" <> (r.output_shape |> String.trim_leading("{") |> String.trim_trailing("}")) <> "]",
            Integer.to_string(r.parameters)
          ]
        end)

      widths =
        Enum.zip_with([header | cells], fn column -> column |> Enum.map(&String.length/1) |> Enum.max() end)

      line = fn row ->
        row |> Enum.zip(widths) |> Enum.map_join("  ", fn {cell, w} -> String.pad_trailing(cell, w + 1) end)
      end

      %{total: total, trainable: trainable} = counts(model)

      body =
        [line.(header) | Enum.map(cells, line)]

      totals = [
        "Total params:     #{group(total)}",
        "Trainable params: #{group(trainable)}",
        "Frozen params:    #{group(total - trainable)}",
        "Loss: #{inspect(model.loss_fn)}  Optimizer: #{inspect(model.optimizer)}  Device: #{inspect(model.device)} (#{model.device_spec})"
      ]

      inner =
        ([String.length("ExBurn Model Summary") + 4] ++ Enum.map(body ++ totals, &(String.length(&1) + 4)))
        |> Enum.max()

      row = fn text -> "║  " <> String.pad_trailing(text, inner - 2) <> "║" end
      title = String.duplicate(" ", div(inner - 20, 2)) <> "ExBurn Model Summary"
      rule = fn l, r -> l <> String.duplicate("═", inner) <> r end

      Enum.join(
        [rule.("╔", "╗"), "║" <> String.pad_trailing(title, inner) <> "║", rule.("╠", "╣")] ++
          Enum.map(body, row) ++ [rule.("╠", "╣")] ++ Enum.map(totals, row) ++ [rule.("╚", "╝")],
        "\n"
      ) <> "\n"
    end

    # "Dense" for :dense, "Batch norm" ... : the op's name, capitalised.
    defp type_name(op) when is_atom(op),
      do: op |> Atom.to_string() |> String.split("_") |> Enum.map_join("", &String.capitalize/1)

    defp type_name(op), do: inspect(op)

    defp group(n),
      do: n |> Integer.to_string() |> String.reverse() |> String.replace(~r/(\d{3})(?=\d)/, "\\1,") |> String.reverse()

    @doc false
    def counts(model) do
      {_all, bytes} = Params.size(model.state.data)
      {total, _} = Params.size(Params.parameters(model.state))
      {trainable, _} = model.state |> ModelState.trainable_parameters() |> Params.size()
      {state, _} = Params.size(Params.layer_state(model.state))
      %{total: total, trainable: trainable, layer_state: state, bytes: bytes}
    end

    @doc "The facts of `ExBurn.Model.info/1`."
    @spec info(ExBurn.Model.t()) :: map()
    def info(%ExBurn.Model{} = model) do
      %{total: total, trainable: trainable, layer_state: layer_state, bytes: bytes} = counts(model)
      layers = Params.layers(model.state.data)

      %{
        total_params: total,
        trainable_params: trainable,
        frozen_params: total - trainable,
        layer_count: model |> rows() |> Enum.count(&(&1.op != :input)),
        loss_fn: model.loss_fn,
        optimizer: model.optimizer,
        device: model.device,
        memory_bytes: bytes,
        layer_state: layer_state,
        layers: layers,
        frozen_layers: model.frozen_layers,
        op_counts: Axon.get_op_counts(model.model),
        input_shape: shapes(model.input),
        output_shape: shapes(model.output),
        optimizer_opts: model.optimizer_opts,
        weight_decay: model.weight_decay,
        device_spec: model.device_spec,
        precision: model.precision || {:f, 32},
        seed: model.seed
      }
    end

    defp shapes(%Nx.Tensor{shape: shape}), do: put_elem(shape, 0, nil)
    defp shapes(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.map(&shapes/1) |> List.to_tuple()
    defp shapes(%{} = map), do: Map.new(map, fn {k, v} -> {k, shapes(v)} end)
  end
end
