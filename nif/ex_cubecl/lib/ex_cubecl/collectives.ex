defmodule ExCubecl.Collectives do
  @moduledoc false
  # `ExCubecl`'s collectives: the all-reduce of buffers on several devices, and copies
  # between devices. The docs and specs are `ExCubecl`'s.
  import ExCubecl.Helpers
  alias ExCubecl.{Buffer, Error, Native}

  def all_reduce(buffers, op \\ :sum)

  def all_reduce(buffers, op) when op in [:sum, :mean] do
    with {:ok, refs} <- refs("all_reduce", buffers),
         {:ok, out} <- Native.all_reduce(refs, Atom.to_string(op)) do
      wrap_all(out)
    else
      error -> error(error)
    end
  end

  def all_reduce(_buffers, op), do: {:error, Error.new("all_reduce", "op must be :sum or :mean", inspect(op))}

  def to_device(%Buffer{ref: ref, device: device} = buffer, device) when is_reference(ref), do: {:ok, buffer}

  def to_device(%Buffer{ref: ref}, device) when is_reference(ref) and is_binary(device) do
    with {:ok, out} <- Native.to_device(ref, device) do
      wrap(out)
    else
      error -> error(error)
    end
  end

  def to_device(%Buffer{}, device), do: {:error, Error.new("to_device", "the device must be a device spec string", inspect(device))}
  def to_device(other, _device), do: not_a_buffer("to_device", other)
end
