if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Record.Axon do
    @moduledoc """
    Burn parameters (`ExBurn.Record.load/2`) to and from an `Axon.ModelState`, so that a
    model trained in Rust predicts in Axon and back.

        {:ok, burn} = ExBurn.Record.load("digits_mlp.mpk")
        model = Axon.input("x", shape: {nil, 64}) |> Axon.dense(128, activation: :relu)
                |> Axon.dense(64, activation: :relu) |> Axon.dense(10)
        {init_fn, predict_fn} = Axon.build(model)
        state = ExBurn.Record.Axon.to_model_state(burn, init_fn.(Nx.template({1, 64}, :f32), Axon.ModelState.empty()))
        predict_fn.(state, images)

        burn = ExBurn.Record.Axon.from_model_state(state, [{"hidden1", "dense_0"}, {"hidden2", "dense_1"}, {"output", "dense_2"}])
        ExBurn.Record.save("digits_mlp.mpk", burn)

    ## Layers and layouts

    | Burn module (Rust)             | Burn parameters                              | Axon layer                                   | Axon parameters                                  | conversion |
    |--------------------------------|----------------------------------------------|----------------------------------------------|--------------------------------------------------|------------|
    | `Linear`                       | `weight` `[in, out]`, `bias` `[out]`         | `Axon.dense`                                 | `"kernel"` `{in, out}`, `"bias"` `{out}`         | none |
    | `Conv2d`                       | `weight` `[out, in, kh, kw]`, `bias` `[out]` | `Axon.conv`, `channels: :last` (the default) | `"kernel"` `{kh, kw, in, out}`, `"bias"` `{out}` | kernel transposed: axes `[2, 3, 1, 0]` to Axon, `[3, 2, 0, 1]` back |
    | `Conv2d`                       | the same                                     | `Axon.conv`, `channels: :first`              | `"kernel"` `{out, in, kh, kw}`, `"bias"` `{out}` | none (say `channels: :first` in the mapping) |
    | `Conv1d`, `Conv3d`             | `weight` `[out, in, k...]`                   | `Axon.conv` on rank 3 or 5 inputs            | `"kernel"` `{k..., in, out}`                     | as `Conv2d`, for any number of spatial axes |

    A Burn layer is the module path of its parameters (`"hidden1"` for `"hidden1.weight"`
    and `"hidden1.bias"`); its kind comes from the weight's rank (2: `Linear`, 3 or more: a
    convolution), and an Axon layer's from its kernel's rank. A layer without a bias
    (`LinearConfig::with_bias(false)`, `use_bias: false`) has none on either side. Other
    parametrised layers (normalisations, embeddings under other names) are not mapped.

    ## Mapping

    `mapping` pairs Burn module paths with Axon layer names: a list of `{burn_path,
    axon_layer}` or `{burn_path, axon_layer, channels: :first | :last}`. `:auto` (the
    default) pairs, kind by kind, the parametrised layers in order: Burn's in the record's
    order when the params are a list (`ExBurn.Record.read/2`), else sorted by name with
    numbers compared as numbers (`"hidden2"` before `"hidden10"`), and Axon's sorted the same
    way (Axon numbers its layers in the order they are built: `"dense_0"`, `"dense_1"`, ...).
    For `from_model_state/2`, `:auto` names each Burn layer as its Axon layer.

    A shape that doesn't fit, a layer missing on one side or a count of layers that differs
    raises `ExBurn.Error` naming both sides.
    """
    alias Axon.ModelState

    @type burn_params :: %{String.t() => Nx.Tensor.t()} | [{String.t(), Nx.Tensor.t()}]
    @type mapping :: :auto | [{String.t(), String.t()} | {String.t(), String.t(), keyword()}]

    @doc """
    `state` with the parameters of the Axon layers that `mapping` pairs with Burn layers set
    from `burn_params` (converted to Axon's layouts and checked against Axon's shapes; cast
    to Axon's type where it differs). Layers not paired keep their values.
    """
    @spec to_model_state(burn_params(), %ModelState{}, mapping()) :: %ModelState{}
    def to_model_state(burn_params, %ModelState{data: data} = state, mapping \\ :auto) do
      op = "ExBurn.Record.Axon.to_model_state"
      burn = burn_layers(burn_params)
      by_path = Map.new(burn)

      pairs =
        case mapping do
          :auto -> auto_pairs(op, burn, axon_layers(data))
          list when is_list(list) -> explicit_pairs(op, list, by_path, data)
        end

      data =
        Enum.reduce(pairs, data, fn {path, layer, channels}, data ->
          params = Map.fetch!(by_path, path)
          axon = Map.fetch!(data, layer)
          Map.put(data, layer, Map.merge(axon, to_axon(op, path, params, layer, axon, channels)))
        end)

      %{state | data: data}
    end

    @doc """
    The Burn parameters (`%{"hidden1.weight" => tensor, ...}`, for `ExBurn.Record.save/3`) of
    the Axon layers that `mapping` names, converted to Burn's layouts.
    """
    @spec from_model_state(%ModelState{}, mapping()) :: %{String.t() => Nx.Tensor.t()}
    def from_model_state(%ModelState{data: data}, mapping \\ :auto) do
      op = "ExBurn.Record.Axon.from_model_state"

      pairs =
        case mapping do
          :auto -> Enum.map(axon_layers(data), fn {layer, _kind} -> {layer, layer, :last} end)
          list when is_list(list) -> Enum.map(list, &entry(op, &1))
        end

      for {path, layer, channels} <- pairs, reduce: %{} do
        acc ->
          axon =
            Map.get(data, layer) ||
              fail(
                op,
                "Axon has no layer #{inspect(layer)} (mapped from Burn #{inspect(path)})",
                "Axon layers: #{inspect(Map.keys(data))}"
              )

          kernel =
            Map.get(axon, "kernel") ||
              fail(op, "Axon layer #{inspect(layer)} has no \"kernel\"", "its parameters: #{inspect(Map.keys(axon))}")

          acc = Map.put(acc, path <> ".weight", kernel_to_burn(kernel, channels))
          if bias = axon["bias"], do: Map.put(acc, path <> ".bias", bias), else: acc
      end
    end

    ## Pairing

    # [{path, %{"weight" => t, "bias" => t}}] in order: the list's, or natural order of a map.
    defp burn_layers(params) do
      ordered = if is_map(params), do: Enum.sort_by(params, fn {name, _} -> natural(name) end), else: params

      ordered
      |> Enum.reduce({[], %{}}, fn {name, t}, {order, layers} ->
        {path, leaf} = split(to_string(name))
        order = if Map.has_key?(layers, path), do: order, else: [path | order]
        {order, Map.update(layers, path, %{leaf => t}, &Map.put(&1, leaf, t))}
      end)
      |> then(fn {order, layers} -> order |> Enum.reverse() |> Enum.map(&{&1, layers[&1]}) end)
      |> Enum.filter(fn {_path, params} -> match?(%Nx.Tensor{}, params["weight"]) end)
    end

    defp split(name) do
      case String.split(name, ".") |> Enum.split(-1) do
        {[], [leaf]} -> {"", leaf}
        {path, [leaf]} -> {Enum.join(path, "."), leaf}
      end
    end

    # [{layer, kind}] of the Axon layers with a kernel, in natural order of their names.
    defp axon_layers(data) do
      data
      |> Enum.filter(fn {_layer, params} -> is_map(params) and match?(%Nx.Tensor{}, params["kernel"]) end)
      |> Enum.sort_by(fn {layer, _} -> natural(layer) end)
      |> Enum.map(fn {layer, params} -> {layer, kind(params["kernel"])} end)
    end

    defp kind(%Nx.Tensor{shape: shape}) when tuple_size(shape) == 2, do: :dense
    defp kind(%Nx.Tensor{shape: shape}) when tuple_size(shape) >= 3, do: :conv
    defp kind(_), do: :other

    defp auto_pairs(op, burn, axon) do
      burn = Enum.map(burn, fn {path, params} -> {path, kind(params["weight"])} end)

      for kind <- [:dense, :conv], reduce: [] do
        acc ->
          b = for {path, ^kind} <- burn, do: path
          a = for {layer, ^kind} <- axon, do: layer

          if length(b) != length(a) do
            fail(
              op,
              "Burn has #{length(b)} #{kind_name(kind)} layers, Axon #{length(a)}: pass a mapping",
              "Burn: #{inspect(b)}, Axon: #{inspect(a)}"
            )
          end

          acc ++ Enum.zip_with(b, a, &{&1, &2, :last})
      end
    end

    defp explicit_pairs(op, list, burn, data) do
      Enum.map(list, fn e ->
        {path, layer, _} = pair = entry(op, e)

        Map.has_key?(burn, path) ||
          fail(
            op,
            "the Burn params have no layer #{inspect(path)} with a weight (mapped to Axon #{inspect(layer)})",
            "Burn layers: #{inspect(Map.keys(burn))}"
          )

        Map.has_key?(data, layer) ||
          fail(
            op,
            "Axon has no layer #{inspect(layer)} (mapped from Burn #{inspect(path)})",
            "Axon layers: #{inspect(Map.keys(data))}"
          )

        pair
      end)
    end

    defp entry(_op, {path, layer}) when is_binary(path) and is_binary(layer), do: {path, layer, :last}

    defp entry(op, {path, layer, opts}) when is_binary(path) and is_binary(layer) and is_list(opts) do
      case Keyword.get(opts, :channels, :last) do
        c when c in [:first, :last] ->
          {path, layer, c}

        other ->
          fail(op, "channels must be :first or :last, not #{inspect(other)}", "mapping entry for #{inspect(path)}")
      end
    end

    defp entry(op, other),
      do:
        fail(
          op,
          "a mapping entry is {burn_path, axon_layer} or {burn_path, axon_layer, channels: :first | :last}",
          inspect(other)
        )

    defp kind_name(:dense), do: "Linear/dense"
    defp kind_name(:conv), do: "convolution"

    # "dense_10" after "dense_9": digit runs compare as numbers.
    defp natural(name) do
      Regex.split(~r/\d+/, to_string(name), include_captures: true, trim: true)
      |> Enum.map(fn part -> if part =~ ~r/^\d+$/, do: {0, String.to_integer(part)}, else: {1, part} end)
    end

    ## Conversions

    defp to_axon(op, path, params, layer, axon, channels) do
      weight = params["weight"]
      kernel = kernel_to_axon(weight, channels)
      check!(op, path <> ".weight", weight, kernel, layer, "kernel", axon["kernel"])

      case {params["bias"], axon["bias"]} do
        {nil, nil} ->
          %{"kernel" => fit(kernel, axon["kernel"])}

        {bias, %Nx.Tensor{} = target} when is_struct(bias, Nx.Tensor) ->
          check!(op, path <> ".bias", bias, bias, layer, "bias", target)
          %{"kernel" => fit(kernel, axon["kernel"]), "bias" => fit(bias, target)}

        {nil, target} ->
          fail(
            op,
            "Axon layer #{inspect(layer)} has a bias, Burn layer #{inspect(path)} has none",
            "Axon \"bias\" #{describe(target)}"
          )

        {bias, nil} ->
          fail(
            op,
            "Burn layer #{inspect(path)} has a bias, Axon layer #{inspect(layer)} has none",
            "Burn #{inspect(path <> ".bias")} #{describe(bias)}"
          )
      end
    end

    defp check!(op, burn_name, burn, converted, layer, param, target) do
      cond do
        target == nil ->
          fail(
            op,
            "Axon layer #{inspect(layer)} has no #{inspect(param)} for Burn #{inspect(burn_name)}",
            describe(burn)
          )

        converted.shape != target.shape ->
          fail(
            op,
            "Burn #{inspect(burn_name)} #{describe(burn)} doesn't fit Axon #{inspect(layer)} #{inspect(param)} #{describe(target)}",
            "in Axon's layout the Burn tensor is #{describe(converted)}"
          )

        true ->
          :ok
      end
    end

    defp fit(t, %Nx.Tensor{type: type}) when t.type == type, do: t
    defp fit(t, %Nx.Tensor{type: type}), do: Nx.as_type(t, type)

    # Burn's convolution weight [out, in, k...] to Axon's channels-last kernel {k..., in, out}.
    defp kernel_to_axon(%Nx.Tensor{shape: shape} = w, :last) when tuple_size(shape) >= 3 do
      r = tuple_size(shape)
      Nx.transpose(w, axes: Enum.to_list(2..(r - 1)//1) ++ [1, 0])
    end

    defp kernel_to_axon(w, _channels), do: w

    defp kernel_to_burn(%Nx.Tensor{shape: shape} = k, :last) when tuple_size(shape) >= 3 do
      r = tuple_size(shape)
      Nx.transpose(k, axes: [r - 1, r - 2] ++ Enum.to_list(0..(r - 3)//1))
    end

    defp kernel_to_burn(k, _channels), do: k

    defp describe(%Nx.Tensor{} = t),
      do: ExBurn.Backend.type_name(t.type) <> Enum.map_join(Tuple.to_list(t.shape), &"[#{&1}]")

    defp describe(other), do: inspect(other)

    defp fail(op, reason, details), do: raise(ExBurn.Error.new(op, reason, details))
  end
end
