if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Spec do
    @moduledoc """
    What `ExBurn.Model.compile/2` checks and derives about inputs: the input templates of the
    model, and the check of a runtime input against them. (The loss is `ExBurn.Model.Loss`.)
    """

    @doc """
    The input templates of `model`: from the `:input` option (a shape, where `nil` is a batch
    of 1; a tensor or template; or a map of input name to either), else from the shapes the
    model's `Axon.input/2` layers declare. One input gives a template, several a map.
    """
    @spec input!(Axon.t(), term(), Nx.Type.t(), String.t()) :: Nx.Tensor.t() | %{String.t() => Nx.Tensor.t()}
    def input!(model, nil, type, fun) do
      case Axon.get_inputs(model) do
        inputs when map_size(inputs) == 0 ->
          raise ArgumentError, "#{fun}: the model has no Axon.input/2 layer"

        inputs ->
          templates =
            Map.new(inputs, fn
              {name, nil} ->
                raise ArgumentError, "#{fun}: the input #{inspect(name)} declares no shape; give the :input option"

              {name, shape} ->
                {name, template!(shape, type, fun)}
            end)

          single(templates)
      end
    end

    def input!(model, %{} = input, type, fun) when not is_struct(input) do
      names = model |> Axon.get_inputs() |> Map.keys() |> Enum.sort()
      given = input |> Map.keys() |> Enum.map(&to_string/1) |> Enum.sort()

      if names != given,
        do:
          raise(
            ArgumentError,
            "#{fun}: the :input names #{inspect(given)} don't match the model's inputs #{inspect(names)}"
          )

      input |> Map.new(fn {k, v} -> {to_string(k), template!(v, type, fun)} end) |> single()
    end

    def input!(_model, input, type, fun), do: template!(input, type, fun)

    defp single(templates) when map_size(templates) == 1, do: templates |> Map.values() |> hd()
    defp single(templates), do: templates

    defp template!(%Nx.Tensor{} = t, _type, _fun), do: Nx.to_template(t)

    defp template!(shape, type, fun) when is_tuple(shape) and tuple_size(shape) > 0 do
      dims = Tuple.to_list(shape)

      if Enum.all?(dims, &(is_nil(&1) or (is_integer(&1) and &1 > 0))),
        do: Nx.template(dims |> Enum.map(&(&1 || 1)) |> List.to_tuple(), type),
        else: raise(ArgumentError, "#{fun}: invalid input shape #{inspect(shape)}")
    end

    defp template!(other, _type, fun),
      do:
        raise(
          ArgumentError,
          "#{fun}: invalid input #{inspect(other, limit: 5)} (a shape such as {nil, 784}, a tensor or a template)"
        )

    @doc """
    Checks `input` against the templates: a tensor for a tensor template, a map with the
    same names for a map; the same rank and the same sizes after the batch axis (axis 0).
    Raises `ArgumentError` naming `fun`. Gives the batch size.
    """
    @spec check_input!(term(), term(), String.t()) :: non_neg_integer()
    def check_input!(%Nx.Tensor{} = template, %Nx.Tensor{} = input, fun),
      do: check_tensor!(template, input, "input", fun)

    def check_input!(%Nx.Tensor{} = template, number, fun) when is_number(number),
      do: check_input!(template, Nx.tensor(number), fun)

    def check_input!(%{} = templates, %{} = input, fun) when not is_struct(templates) and not is_struct(input) do
      input = Map.new(input, fn {k, v} -> {to_string(k), v} end)

      if Enum.sort(Map.keys(templates)) != Enum.sort(Map.keys(input)),
        do:
          raise(
            ArgumentError,
            "#{fun}: the input names #{inspect(Map.keys(input))} don't match the model's inputs #{inspect(Map.keys(templates))}"
          )

      templates |> Enum.map(fn {name, t} -> check_tensor!(t, Nx.to_tensor(input[name]), inspect(name), fun) end) |> hd()
    end

    def check_input!(templates, input, fun),
      do: raise(ArgumentError, "#{fun}: expected #{describe(templates)}, got #{inspect(input, limit: 5)}")

    defp check_tensor!(template, input, what, fun) do
      if Nx.rank(input) != Nx.rank(template) or tl(Tuple.to_list(input.shape)) != tl(Tuple.to_list(template.shape)) do
        raise ArgumentError,
              "#{fun}: #{what} of shape #{inspect(input.shape)} doesn't match the model's input #{shape_string(template.shape)}"
      end

      elem(input.shape, 0)
    end

    defp describe(%Nx.Tensor{shape: shape}), do: "a tensor of shape #{shape_string(shape)}"
    defp describe(%{} = templates), do: "a map of inputs #{inspect(Map.keys(templates))}"

    @doc "A shape with its batch axis shown as `nil`: `{nil, 784}`."
    @spec shape_string(tuple()) :: String.t()
    def shape_string({}), do: "{}"
    def shape_string(shape), do: shape |> put_elem(0, nil) |> inspect()
  end
end
