defmodule ExBurn.Defn.Cse do
  @moduledoc false
  # Common subexpressions of a lowered program: within a block, an Nx entry (`nx_*`, pure
  # functions of their inputs and options: Nx's random numbers come from explicit keys) run
  # again on the same inputs with the same options is dropped, and its readers read the first
  # one. Gradients built by
  # `Nx.Defn.grad` repeat such work: an optimizer's bias correction `1 - b^t` once per
  # parameter, its step count `t + 1` once per use.

  @doc false
  # The blocks of a program (`{nparams, instructions, outputs}`) without repeated entries.
  def blocks(blocks), do: Enum.map(blocks, &block/1)

  defp block({nparams, instrs, outputs}) do
    {kept, map, _seen, _count} =
      instrs
      |> Enum.with_index()
      |> Enum.reduce({[], %{}, %{}, 0}, fn {instr, i}, {kept, map, seen, count} ->
        instr = rename_instr(instr, map)

        case instr do
          {:op, "nx_" <> _ = kernel, inputs, opts, _label} when is_map_key(seen, {kernel, inputs, opts}) ->
            {kept, Map.put(map, i, Map.fetch!(seen, {kernel, inputs, opts})), seen, count}

          {:op, "nx_" <> _ = kernel, inputs, opts, _label} ->
            {[instr | kept], Map.put(map, i, count), Map.put(seen, {kernel, inputs, opts}, count), count + 1}

          _ ->
            {[instr | kept], Map.put(map, i, count), seen, count + 1}
        end
      end)

    {nparams, Enum.reverse(kept), Enum.map(outputs, &rename(&1, map))}
  end

  defp rename_instr({:op, kernel, inputs, opts, label}, map), do: {:op, kernel, Enum.map(inputs, &rename(&1, map)), opts, label}
  defp rename_instr({:cond, inputs, clauses, last}, map), do: {:cond, Enum.map(inputs, &rename(&1, map)), clauses, last}
  defp rename_instr({:while, initial, pred, body}, map), do: {:while, Enum.map(initial, &rename(&1, map)), pred, body}
  defp rename_instr({:repeat, inputs, times, body}, map), do: {:repeat, Enum.map(inputs, &rename(&1, map)), times, body}
  defp rename_instr({:hook, id, inputs}, map), do: {:hook, id, Enum.map(inputs, &rename(&1, map))}
  defp rename_instr({:call, id, inputs, outputs}, map), do: {:call, id, Enum.map(inputs, &rename(&1, map)), outputs}

  defp rename({:value, i, k}, map), do: {:value, Map.fetch!(map, i), k}
  defp rename(slot, _map), do: slot
end
