if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Layers do
    @moduledoc false
    # ExBurn.Model.freeze/2 and unfreeze/2: the frozen layers as a MapSet of names, also
    # marked in the model state with Axon.ModelState.freeze/2 (so training leaves them alone).

    alias Axon.ModelState
    alias ExBurn.Model.Params

    def freeze(model, layers),
      do:
        put_frozen(model, MapSet.union(model.frozen_layers, MapSet.new(layers!(model, layers, "ExBurn.Model.freeze"))))

    def unfreeze(model, :all), do: put_frozen(model, MapSet.new())

    def unfreeze(model, layers),
      do:
        put_frozen(
          model,
          MapSet.difference(model.frozen_layers, MapSet.new(layers!(model, layers, "ExBurn.Model.unfreeze")))
        )

    defp layers!(model, fun_or_names, fun) do
      known = Params.layers(model.state.data)

      case fun_or_names do
        f when is_function(f, 1) ->
          Enum.filter(known, f)

        names ->
          names = names |> List.wrap() |> Enum.map(&to_string/1)

          case names -- known do
            [] ->
              names

            unknown ->
              raise ArgumentError,
                    "#{fun}: unknown layer(s) #{inspect(unknown)} (layers with parameters: #{inspect(known)})"
          end
      end
    end

    @doc false
    def put_frozen(model, %MapSet{} = frozen) do
      state =
        model.state |> ModelState.unfreeze() |> ModelState.freeze(fn [layer | _] -> MapSet.member?(frozen, layer) end)

      %{model | state: state, frozen_layers: frozen}
    end
  end
end
