if Code.ensure_loaded?(Polaris) do
  defmodule ExBurn.Training.Accumulate do
    @moduledoc """
    Gradient accumulation as a Polaris combinator: `wrap(optimizer, n)` sums the gradients of
    `n` consecutive steps and applies `optimizer` to their mean on every `n`-th step; on the
    other steps the updates are zero and the optimizer's state stays as it was. Everything is
    tensor selects on the step count, so a training step stays one compiled call with no
    branch read back from the device (optax's `MultiSteps` does the same).

    State: `{%{sum: gradients so far, count: steps since the last update}, optimizer state}`.
    """

    alias Nx.Defn.Composite

    @doc "The optimizer `{init_fn, update_fn}` applied once every `n` steps to the mean gradient."
    @spec wrap({function(), function()}, pos_integer()) :: {function(), function()}
    def wrap({init_fn, update_fn}, n) when is_integer(n) and n >= 1 do
      init = fn params ->
        sum = Composite.traverse(params, &Nx.broadcast(Nx.tensor(0, type: Nx.type(&1)), Nx.shape(&1)))
        {%{sum: sum, count: Nx.tensor(0)}, init_fn.(params)}
      end

      update = fn grads, {%{sum: sum, count: count}, inner}, params ->
        sum = zip(sum, grads, &Nx.add/2)
        count = Nx.remainder(Nx.add(count, 1), n)
        apply? = Nx.equal(count, 0)
        mean = Composite.traverse(sum, &Nx.divide(&1, n))
        {updates, new_inner} = update_fn.(mean, inner, params)

        updates = Composite.traverse(updates, &Nx.select(apply?, &1, Nx.tensor(0, type: Nx.type(&1))))
        inner = zip(new_inner, inner, &Nx.select(apply?, &1, &2))
        sum = Composite.traverse(sum, &Nx.select(apply?, Nx.tensor(0, type: Nx.type(&1)), &1))
        {updates, {%{sum: sum, count: count}, inner}}
      end

      {init, update}
    end

    # `fun` on the leaves of two containers of the same structure.
    defp zip(left, right, fun) do
      {merged, []} =
        Composite.traverse(left, Composite.flatten_list([right]), fn x, [y | rest] -> {fun.(x, y), rest} end)

      merged
    end
  end
end
