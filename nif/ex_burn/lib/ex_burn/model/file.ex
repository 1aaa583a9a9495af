defmodule ExBurn.Model.File do
  @moduledoc """
  The binary form of ExBurn model files and serialized parameters: a fixed header, then a
  payload whose CRC-32 the header holds. `decode/2` checks everything (magic, version, kind,
  length, checksum, the index against the data) before it builds a single tensor, so a
  truncated, corrupted or foreign binary gives `{:error, %ExBurn.Error{}}` and nothing else.

  ## Layout (version 1; integers big-endian)

  | offset | bytes | field |
  |---|---|---|
  | 0 | 8 | magic `"EXBURNMD"` |
  | 8 | 2 | format version, `1` |
  | 10 | 2 | kind: `1` a model file (`ExBurn.Model.save/2`), `2` parameters only (`ExBurn.Model.serialize_params/1`) |
  | 12 | 4 | CRC-32 (`:erlang.crc32/1`, IEEE 802.3) of the payload |
  | 16 | 8 | payload length in bytes |
  | 24 | n | payload |

  The payload is a 4-byte length `h`, then `h` bytes of index (an Erlang external term,
  `:erlang.term_to_binary/1`, decoded with `:safe`):

      %{
        params: [%{name: "dense_0.kernel", type: {:f, 32}, shape: {2, 4}, offset: 0, size: 32}, ...],
        meta: %{...}   # model files: loss, optimizer and its options, input, frozen layers, precision
      }

  then the tensors' data, one after another at their `offset` (counted from the end of the
  index), each in Nx's binary layout (row-major, the machine's native byte order: little-endian
  on every platform ExCubecl runs on).

  A file may hold further tensors beside the parameters, in named sections: the index's
  `sections` (`%{training: [entries]}`), entries as those of `params`, their data after the
  parameters'. A training checkpoint (`ExBurn.Training.CheckpointCallback`) keeps the optimizer
  state there (`ExBurn.Training.Resume`). `decode/3` leaves them out, so that every reader of
  parameters reads a checkpoint as a model file; `decode_sections/3` gives them.
  """

  @magic "EXBURNMD"
  @version 1
  @kinds %{model: 1, params: 2}
  @header_size 24

  @doc "The format version this module writes."
  @spec version() :: pos_integer()
  def version, do: @version

  @doc """
  The binary of `params` (a map `name => tensor`) and `meta` as a file of `kind` (`:model` or
  `:params`); `sections` (a map `atom => %{name => tensor}`) are further tensors beside the
  parameters.
  """
  @spec encode(%{String.t() => Nx.Tensor.t()}, map(), :model | :params, %{atom() => map()}) :: binary()
  def encode(params, meta, kind, sections \\ %{}) do
    {entries, acc} = entries(params, {[], 0})

    {section_entries, {chunks, _}} =
      Enum.map_reduce(Enum.sort(sections), acc, fn {name, tensors}, acc ->
        {list, acc} = entries(tensors, acc)
        {{name, list}, acc}
      end)

    index = %{params: entries, meta: meta}
    index = if sections == %{}, do: index, else: Map.put(index, :sections, Map.new(section_entries))
    index = :erlang.term_to_binary(index)
    payload = IO.iodata_to_binary([<<byte_size(index)::32>>, index | Enum.reverse(chunks)])

    <<@magic, @version::16, Map.fetch!(@kinds, kind)::16, :erlang.crc32(payload)::32, byte_size(payload)::64,
      payload::binary>>
  end

  # The index entries of `tensors`, their data prepended to the chunks, from `offset` on.
  defp entries(tensors, {chunks, offset}) do
    tensors
    |> Enum.sort_by(&elem(&1, 0))
    |> Enum.map_reduce({chunks, offset}, fn {name, t}, {chunks, offset} ->
      bin = Nx.to_binary(t)
      entry = %{name: name, type: t.type, shape: t.shape, offset: offset, size: byte_size(bin)}
      {entry, {[bin | chunks], offset + byte_size(bin)}}
    end)
  end

  @doc """
  `{:ok, {params, meta}}` from a binary of `encode/3` of `kind`, the tensors on
  `Nx.BinaryBackend`; or `{:error, %ExBurn.Error{}}` (op `fun`) saying what is wrong.
  """
  @spec decode(binary(), :model | :params, String.t()) ::
          {:ok, {%{String.t() => Nx.Tensor.t()}, map()}} | {:error, ExBurn.Error.t()}
  def decode(binary, kind, fun) when is_binary(binary) do
    with {:ok, payload} <- header(binary, Map.fetch!(@kinds, kind)),
         {:ok, index, data} <- index(payload),
         {:ok, params} <- tensors(index.params, data) do
      {:ok, {params, Map.get(index, :meta, %{})}}
    else
      {:error, reason, details} -> {:error, ExBurn.Error.new(fun, reason, details)}
    end
  end

  def decode(other, _kind, fun), do: {:error, ExBurn.Error.new(fun, "expected a binary", inspect(other, limit: 5))}

  @doc """
  `decode/3` with the file's sections: `{:ok, {params, meta, sections}}`, `sections` a map
  `atom => %{name => tensor}` (empty for a file without them), checked as the parameters are.
  """
  @spec decode_sections(binary(), :model | :params, String.t()) ::
          {:ok, {%{String.t() => Nx.Tensor.t()}, map(), %{atom() => map()}}} | {:error, ExBurn.Error.t()}
  def decode_sections(binary, kind, fun) when is_binary(binary) do
    with {:ok, payload} <- header(binary, Map.fetch!(@kinds, kind)),
         {:ok, index, data} <- index(payload),
         {:ok, params} <- tensors(index.params, data),
         {:ok, sections} <- sections(Map.get(index, :sections, %{}), data) do
      {:ok, {params, Map.get(index, :meta, %{}), sections}}
    else
      {:error, reason, details} -> {:error, ExBurn.Error.new(fun, reason, details)}
    end
  end

  def decode_sections(other, kind, fun), do: decode(other, kind, fun)

  defp sections(sections, data) when is_map(sections) do
    Enum.reduce_while(sections, {:ok, %{}}, fn
      {name, entries}, {:ok, acc} when is_atom(name) and is_list(entries) ->
        case tensors(entries, data) do
          {:ok, tensors} -> {:cont, {:ok, Map.put(acc, name, tensors)}}
          error -> {:halt, error}
        end

      {name, _}, _ ->
        {:halt, {:error, "the file's index has an invalid section", inspect(name, limit: 5)}}
    end)
  end

  defp sections(other, _data), do: {:error, "the file's index has invalid sections", inspect(other, limit: 5)}

  defp header(<<@magic, version::16, kind::16, crc::32, length::64, payload::binary>>, want_kind) do
    cond do
      version != @version ->
        {:error, "unsupported format version #{version}", "this ExBurn reads version #{@version}"}

      kind != want_kind ->
        {:error, "the file holds #{kind_name(kind)}, not #{kind_name(want_kind)}", ""}

      byte_size(payload) < length ->
        {:error, "the file is truncated", "payload of #{byte_size(payload)} bytes, the header says #{length}"}

      byte_size(payload) > length ->
        {:error, "the file has #{byte_size(payload) - length} bytes after its payload", ""}

      :erlang.crc32(payload) != crc ->
        {:error, "checksum mismatch: the file is corrupted", "CRC-32 #{:erlang.crc32(payload)}, the header says #{crc}"}

      true ->
        {:ok, payload}
    end
  end

  defp header(<<@magic, _::binary>> = bin, _kind) when byte_size(bin) < @header_size,
    do: {:error, "the file is truncated", "#{byte_size(bin)} bytes, shorter than the #{@header_size}-byte header"}

  defp header(bin, _kind),
    do:
      {:error, "not an ExBurn model file",
       "it doesn't start with #{inspect(@magic)} (#{inspect(binary_part(bin, 0, min(8, byte_size(bin))))})"}

  defp kind_name(1), do: "a model"
  defp kind_name(2), do: "parameters"
  defp kind_name(n), do: "an unknown kind #{n}"

  defp index(<<length::32, index::binary-size(length), data::binary>>) do
    case safe_term(index) do
      %{params: params} = index when is_list(params) -> {:ok, index, data}
      _ -> {:error, "the file's index is not readable", ""}
    end
  end

  defp index(_payload), do: {:error, "the file's index is truncated", ""}

  defp safe_term(bin) do
    :erlang.binary_to_term(bin, [:safe])
  rescue
    ArgumentError -> nil
  end

  defp tensors(entries, data) do
    Enum.reduce_while(entries, {:ok, %{}}, fn entry, {:ok, acc} ->
      case tensor(entry, data) do
        {:ok, name, t} -> {:cont, {:ok, Map.put(acc, name, t)}}
        error -> {:halt, error}
      end
    end)
  end

  defp tensor(%{name: name, type: type, shape: shape, offset: offset, size: size}, data)
       when is_binary(name) and is_tuple(shape) and is_integer(offset) and is_integer(size) and offset >= 0 and
              size >= 0 do
    with {:ok, type} <- valid_type(type),
         true <-
           Enum.all?(Tuple.to_list(shape), &(is_integer(&1) and &1 >= 0)) ||
             {:error, "parameter #{inspect(name)} has an invalid shape", inspect(shape)},
         true <-
           size == Enum.reduce(Tuple.to_list(shape), 1, &(&1 * &2)) * div(elem(type, 1), 8) ||
             {:error, "parameter #{inspect(name)}: its size doesn't match its shape and type",
              "#{size} bytes for #{inspect(type)}#{inspect(shape)}"},
         true <-
           offset + size <= byte_size(data) || {:error, "parameter #{inspect(name)} lies past the end of the data", ""} do
      {:ok, name,
       data |> binary_part(offset, size) |> Nx.from_binary(type, backend: Nx.BinaryBackend) |> Nx.reshape(shape)}
    end
  end

  defp tensor(entry, _data), do: {:error, "the file's index has an invalid entry", inspect(entry, limit: 5)}

  defp valid_type({:f, bits} = type) when bits in [16, 32, 64], do: {:ok, type}
  defp valid_type({:bf, 16} = type), do: {:ok, type}
  defp valid_type({kind, bits} = type) when kind in [:s, :u] and bits in [8, 16, 32, 64], do: {:ok, type}
  defp valid_type(type), do: {:error, "unsupported tensor type in the file", inspect(type)}
end
