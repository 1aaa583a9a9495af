if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Params do
    @moduledoc """
    Flat parameter names over an `Axon.ModelState`: the nested `data` map
    (`%{"dense_0" => %{"kernel" => t}}`) seen as `%{"dense_0.kernel" => t}`, the keys of a
    path joined with dots. This is the form of `ExBurn.Model.parameters/1`, of
    `ExBurn.Model.update_params/2`, of the model file, and of a Burn record's `"layer.param"`
    names.
    """

    alias Axon.ModelState

    @doc "The flat map `\"layer.param\" => tensor` of every tensor in `data` (parameters and layer state)."
    @spec flatten(map()) :: %{String.t() => Nx.Tensor.t()}
    def flatten(data) when is_map(data),
      do: data |> paths() |> Map.new(fn {name, path} -> {name, get_in(data, path)} end)

    @doc "`{name, path}` for every tensor in `data`, sorted by name."
    @spec paths(map()) :: [{String.t(), [String.t()]}]
    def paths(data) when is_map(data) do
      data
      |> walk([])
      |> Enum.map(fn path -> {Enum.join(path, "."), path} end)
      |> Enum.sort()
    end

    defp walk(%Nx.Tensor{}, acc), do: [Enum.reverse(acc)]
    defp walk(%{__struct__: _}, acc), do: [Enum.reverse(acc)]
    defp walk(%{} = map, acc), do: Enum.flat_map(map, fn {k, v} -> walk(v, [to_string(k) | acc]) end)

    @doc "The layer names of `data` (its top-level keys), sorted."
    @spec layers(map()) :: [String.t()]
    def layers(data) when is_map(data), do: data |> Map.keys() |> Enum.map(&to_string/1) |> Enum.sort()

    @doc """
    `state` with the tensors of `updates` (a flat map, a nested map or a `ModelState`) put in,
    each checked first: a known name, the same shape, cast to the current tensor's type and
    moved to `backend`. Raises `ArgumentError` (naming `fun`) before changing anything.
    """
    @spec put(%ModelState{}, map(), {module(), keyword()}, String.t()) :: %ModelState{}
    def put(%ModelState{data: data} = state, updates, backend, fun) do
      updates = normalize(updates, fun)
      index = Map.new(paths(data))

      checked =
        for {name, tensor} <- updates do
          path =
            Map.get(index, name) ||
              raise ArgumentError,
                    "#{fun}: unknown parameter #{inspect(name)} (parameters: #{Enum.map_join(Map.keys(index), ", ", &inspect/1)})"

          current = get_in(data, path)
          tensor = to_tensor!(tensor, name, fun)

          if tensor.shape != current.shape do
            raise ArgumentError,
                  "#{fun}: parameter #{inspect(name)} has shape #{inspect(current.shape)}, got #{inspect(tensor.shape)}"
          end

          {path, tensor |> Nx.as_type(current.type) |> on_backend(backend)}
        end

      %{state | data: Enum.reduce(checked, data, fn {path, t}, acc -> put_in(acc, path, t) end)}
    end

    @doc "`t` on `backend` (`{ExBurn.Backend, device: dev}`): itself when it is there, else a copy (the original is left alone)."
    @spec on_backend(Nx.Tensor.t(), {module(), keyword()}) :: Nx.Tensor.t()
    def on_backend(%Nx.Tensor{data: data} = t, {ExBurn.Backend, opts} = backend) do
      device = opts[:device]

      case data do
        %ExBurn.Backend{device: ^device} -> t
        _ -> Nx.backend_copy(t, backend)
      end
    end

    defp normalize(%ModelState{data: data}, fun), do: normalize(data, fun)

    defp normalize(%{} = updates, fun) do
      if Enum.all?(updates, fn {_k, v} -> match?(%Nx.Tensor{}, v) end),
        do: Map.new(updates, fn {k, v} -> {to_string(k), v} end),
        else: updates |> nested!(fun) |> flatten()
    end

    defp normalize(other, fun),
      do: raise(ArgumentError, "#{fun}: expected a map of \"layer.param\" => tensor, got #{inspect(other, limit: 5)}")

    defp nested!(map, fun) do
      Map.new(map, fn
        {k, %Nx.Tensor{} = t} ->
          {to_string(k), t}

        {k, %{} = inner} when not is_struct(inner) ->
          {to_string(k), nested!(inner, fun)}

        {k, other} ->
          raise ArgumentError, "#{fun}: parameter #{inspect(k)} is not a tensor: #{inspect(other, limit: 5)}"
      end)
    end

    defp to_tensor!(%Nx.Tensor{} = t, _name, _fun), do: t

    defp to_tensor!(other, name, fun),
      do: raise(ArgumentError, "#{fun}: parameter #{inspect(name)} is not a tensor: #{inspect(other, limit: 5)}")

    @doc "`state` with every tensor mapped by `fun`."
    @spec map(%ModelState{}, (Nx.Tensor.t() -> Nx.Tensor.t())) :: %ModelState{}
    def map(%ModelState{data: data} = state, fun), do: %{state | data: map_data(data, fun)}

    defp map_data(%Nx.Tensor{} = t, fun), do: fun.(t)
    defp map_data(%{__struct__: _} = other, _fun), do: other
    defp map_data(%{} = map, fun), do: Map.new(map, fn {k, v} -> {k, map_data(v, fun)} end)

    @doc """
    The parameters of `state` (trainable and frozen), without the layer state (batch-norm
    statistics, dropout keys): a nested map as `data`.
    """
    @spec parameters(%ModelState{}) :: map()
    def parameters(%ModelState{} = state),
      do: deep_merge(ModelState.trainable_parameters(state), ModelState.frozen_parameters(state))

    @doc "The layer state of `state` (trainable and frozen), without the parameters."
    @spec layer_state(%ModelState{}) :: map()
    def layer_state(%ModelState{} = state),
      do: deep_merge(ModelState.trainable_state(state), ModelState.frozen_state(state))

    defp deep_merge(a, b) do
      Map.merge(a, b, fn
        _k, %{} = x, %{} = y when not is_struct(x) and not is_struct(y) -> deep_merge(x, y)
        _k, _x, y -> y
      end)
    end

    @doc "The number of elements and bytes of the tensors in `data`: `{count, bytes}`."
    @spec size(map()) :: {non_neg_integer(), non_neg_integer()}
    def size(data) do
      data
      |> flatten()
      |> Map.values()
      |> Enum.reduce({0, 0}, fn t, {n, b} -> {n + Nx.size(t), b + Nx.byte_size(t)} end)
    end
  end
end
