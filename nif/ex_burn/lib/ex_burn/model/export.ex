if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Export do
    @moduledoc """
    `ExBurn.Model.export/3` and `import_params/3`: a model's parameters in a portable file.

      * `:elixir_terms` - `:erlang.term_to_binary/2` (compressed) of
        `%{format: "ex_burn/params", version: 1, params: %{name => %{type: "f32", shape: [2, 3], data: binary}}}`,
        the data in Nx's binary layout (row-major, little-endian).
      * `:json` - `{"format": "ex_burn/params", "version": 1, "params": {name: {"type": "f32",
        "shape": [2, 3], "data": [..numbers..]}}}`, with `"NaN"`, `"Infinity"` and `"-Infinity"`
        as strings. Needs Elixir 1.18's `JSON` module.
      * `:burn` - a Burn record (`ExBurn.Record`), converted by an `ExBurn.Record.Axon` mapping.

    `import_params/3` recognises the format from the file's first bytes: `{` for JSON, the
    Erlang term tag 131, the `"EXBURNMD"` magic of `ExBurn.Model.save/2`'s files, else a Burn
    record. Parameters that are not the model's, or of another shape, give an error and
    nothing changes.
    """

    alias ExBurn.Model

    @format "ex_burn/params"
    @formats [:elixir_terms, :json, :burn]

    @doc false
    def export(model, path, opts) do
      fun = "ExBurn.Model.export"
      {format, mapping} = format_opts!(opts, fun)

      case format do
        :burn ->
          case ExBurn.Record.save(path, ExBurn.Record.Axon.from_model_state(model.state, mapping)) do
            :ok -> :ok
            {:error, e} -> {:error, message(fun, e)}
          end

        :elixir_terms ->
          write(path, :erlang.term_to_binary(document(model, &Nx.to_binary/1), compressed: 6), fun)

        :json ->
          json!(fun)
          write(path, apply(JSON, :encode!, [document(model, &json_data/1)]), fun)
      end
    end

    @doc false
    def import(model, path, opts) do
      fun = "ExBurn.Model.import_params"
      {format, mapping} = format_opts!(opts, fun)

      with {:ok, params} <- read(path, format, mapping, model, fun) do
        try do
          {:ok, %{model | state: ExBurn.Model.Params.put(model.state, params, Model.backend(model), fun)}}
        rescue
          e in ArgumentError -> {:error, message(fun, e)}
        end
      end
    end

    defp format_opts!(opts, fun) do
      if Keyword.keyword?(opts) do
        opts = Model.options!(opts, [:format, :mapping], fun)
        format = Keyword.get(opts, :format, :elixir_terms)

        unless format in @formats,
          do:
            raise(
              ArgumentError,
              "#{fun}: unknown :format #{inspect(format)} (formats: #{Enum.map_join(@formats, ", ", &inspect/1)})"
            )

        {format, Keyword.get(opts, :mapping, :auto)}
      else
        # export(model, path, mapping): today's form, a Burn record.
        {:burn, opts}
      end
    end

    defp document(model, data_fun) do
      params =
        Map.new(Model.parameters(model), fn {name, t} ->
          {name, %{"type" => Nx.Type.to_string(t.type), "shape" => Tuple.to_list(t.shape), "data" => data_fun.(t)}}
        end)

      %{"format" => @format, "version" => 1, "params" => params}
    end

    defp json_data(t) do
      t
      |> Nx.to_flat_list()
      |> Enum.map(fn
        :nan -> "NaN"
        :infinity -> "Infinity"
        :neg_infinity -> "-Infinity"
        x -> x
      end)
    end

    defp write(path, binary, fun) do
      with :ok <- File.mkdir_p(Path.dirname(path)),
           :ok <- File.write(path, binary) do
        :ok
      else
        {:error, reason} -> {:error, "#{fun}: cannot write #{path} (#{:file.format_error(reason)})"}
      end
    end

    # The parameters in the file, by name, on Nx.BinaryBackend.
    # :elixir_terms (the default) recognises the format from the contents; :json and :burn insist.
    defp read(path, format, mapping, model, fun) do
      with {:ok, binary} <- file(path, fun) do
        cond do
          format == :burn -> burn(path, mapping, model, fun)
          format == :json -> json(binary, fun)
          String.starts_with?(binary, "EXBURNMD") -> model_file(path, fun)
          json?(binary) -> json(binary, fun)
          ours?(binary) -> terms(binary, fun)
          true -> burn(path, mapping, model, fun)
        end
      end
    end

    defp ours?(<<131, _::binary>> = binary), do: match?(%{"format" => @format}, safe_term(binary))
    defp ours?(_binary), do: false

    defp file(path, fun) do
      case File.read(path) do
        {:ok, binary} -> {:ok, binary}
        {:error, reason} -> {:error, "#{fun}: cannot read #{path} (#{:file.format_error(reason)})"}
      end
    end

    defp json?(binary), do: String.trim_leading(binary) |> String.starts_with?("{")

    defp terms(binary, fun) do
      case safe_term(binary) do
        %{"format" => @format, "params" => params} when is_map(params) ->
          tensors(params, fn data, type -> if is_binary(data), do: Nx.from_binary(data, type) end, fun)

        _ ->
          {:error, "#{fun}: not an ExBurn parameter file (Erlang terms of another shape)"}
      end
    end

    defp safe_term(binary) do
      :erlang.binary_to_term(binary, [:safe])
    rescue
      ArgumentError -> nil
    end

    defp json(binary, fun) do
      json!(fun)

      case apply(JSON, :decode, [binary]) do
        {:ok, %{"format" => @format, "params" => params}} when is_map(params) ->
          tensors(params, &json_tensor/2, fun)

        {:ok, _other} ->
          {:error, "#{fun}: not an ExBurn parameter file (JSON of another shape)"}

        {:error, reason} ->
          {:error, "#{fun}: the JSON is not readable (#{inspect(reason)})"}
      end
    end

    defp json_tensor(data, type) when is_list(data) do
      data
      |> Enum.map(fn
        "NaN" -> :nan
        "Infinity" -> :infinity
        "-Infinity" -> :neg_infinity
        x -> x
      end)
      |> Nx.tensor(type: type, backend: Nx.BinaryBackend)
    end

    defp json_tensor(_data, _type), do: nil

    defp tensors(params, decode, fun) do
      Enum.reduce_while(params, {:ok, %{}}, fn {name, entry}, {:ok, acc} ->
        with %{"type" => type, "shape" => shape, "data" => data} <- entry,
             {:ok, type} <- parse_type(type),
             true <- is_list(shape) and Enum.all?(shape, &(is_integer(&1) and &1 >= 0)),
             %Nx.Tensor{} = flat <- decode.(data, type),
             true <- Nx.size(flat) == Enum.product(shape) do
          {:cont, {:ok, Map.put(acc, name, Nx.reshape(flat, List.to_tuple(shape)))}}
        else
          _ -> {:halt, {:error, "#{fun}: parameter #{inspect(name)} in the file is malformed"}}
        end
      end)
    end

    defp parse_type(string) when is_binary(string) do
      case Regex.run(~r/^(f|bf|s|u)(\d+)$/, string) do
        [_, kind, bits] -> {:ok, Nx.Type.normalize!({String.to_existing_atom(kind), String.to_integer(bits)})}
        _ -> :error
      end
    rescue
      _ -> :error
    end

    defp parse_type(_), do: :error

    defp model_file(path, fun) do
      case ExBurn.Model.Store.read_params(path, fun) do
        {:ok, params} -> {:ok, params}
        {:error, e} -> {:error, Exception.message(e)}
      end
    end

    defp burn(path, mapping, model, fun) do
      case ExBurn.Record.read(path, device: model.device_spec) do
        {:ok, %{params: params}} ->
          try do
            state = ExBurn.Record.Axon.to_model_state(params, model.state, mapping)
            {:ok, ExBurn.Model.Params.flatten(state.data)}
          rescue
            e in [ArgumentError, ExBurn.Error] -> {:error, message(fun, e)}
          end

        {:error, e} ->
          {:error, message(fun, e)}
      end
    end

    defp json!(fun) do
      unless Code.ensure_loaded?(JSON),
        do: raise(ArgumentError, "#{fun}: format: :json needs Elixir 1.18 or later (its JSON module)")
    end

    defp message(fun, %{__exception__: true} = e) do
      m = Exception.message(e)
      if String.starts_with?(m, fun), do: m, else: "#{fun}: #{m}"
    end

    defp message(fun, other), do: "#{fun}: #{inspect(other)}"
  end
end
