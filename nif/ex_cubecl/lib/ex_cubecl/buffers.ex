defmodule ExCubecl.Buffers do
  @moduledoc false
  # `ExCubecl`'s buffers: made from host data, read back, described, freed. The docs and
  # specs are `ExCubecl`'s.
  import ExCubecl.Helpers
  alias ExCubecl.{Buffer, Error, Host, Native}

  def buffer(data, shape, dtype, opts \\ []) do
    with :ok <- check_dtype("buffer", dtype),
         :ok <- check_shape("buffer", shape),
         {:ok, device} <- device_opt("buffer", opts),
         {:ok, binary} <- host_binary(data, dtype),
         {:ok, ref} <- Native.buffer(binary, shape, Atom.to_string(dtype), device) do
      wrap(ref)
    else
      error -> error(error)
    end
  end

  def read(buffer), do: with_ref("read", buffer, &Native.read/1)

  def to_list(%Buffer{dtype: :q8} = buffer) do
    {:error, Error.new("to_list", "a quantized buffer has no list form: dequantize it first, or read/1 its bytes", inspect(buffer))}
  end

  def to_list(%Buffer{dtype: dtype} = buffer) do
    with {:ok, bin} <- read(buffer), do: {:ok, Host.decode(bin, dtype)}
  end

  def to_list(other), do: not_a_buffer("to_list", other)

  def shape(%Buffer{shape: shape}), do: {:ok, shape}
  def shape(other), do: not_a_buffer("shape", other)

  def dtype(%Buffer{dtype: dtype}), do: dtype

  def size(%Buffer{dtype: :q8} = buffer), do: with({:ok, bin} <- read(buffer), do: {:ok, byte_size(bin)})
  def size(%Buffer{shape: shape, dtype: dtype}), do: {:ok, numel(shape) * Host.size(dtype)}
  def size(other), do: not_a_buffer("size", other)

  defp numel(shape), do: Enum.reduce(shape, 1, &(&1 * &2))

  def free(buffer), do: with_ref("free", buffer, &Native.free/1)

  defp host_binary(data, _dtype) when is_binary(data), do: {:ok, data}

  defp host_binary(data, dtype) when is_list(data) do
    case Host.encode(List.flatten(data), dtype) do
      {:ok, bin} -> {:ok, bin}
      {:error, why} -> {:error, Error.new("buffer", why, "dtype #{dtype}")}
    end
  end

  defp host_binary(data, _dtype), do: {:error, Error.new("buffer", "data must be a binary or a list of numbers", inspect(data, limit: 5))}
end
