defmodule ExCubecl.Buffer do
  @moduledoc """
  A tensor on a device: a reference to the NIF resource that holds it, with its shape, dtype
  and device (cached, so that reading them needs no NIF call).

  The device memory is freed when the BEAM garbage-collects the last reference to the
  resource, or at once with `ExCubecl.free/1`; any use of a freed buffer is an error.
  """
  @enforce_keys [:ref, :shape, :dtype, :device]
  defstruct [:ref, :shape, :dtype, :device]

  @type t :: %__MODULE__{ref: reference(), shape: [non_neg_integer()], dtype: ExCubecl.dtype(), device: String.t()}

  @doc false
  def wrap(ref) do
    with {:ok, shape} <- ExCubecl.Native.shape(ref),
         {:ok, dtype} <- ExCubecl.Native.dtype(ref),
         {:ok, device} <- ExCubecl.Native.device(ref) do
      %__MODULE__{ref: ref, shape: shape, dtype: String.to_atom(dtype), device: device}
    end
  end

  defimpl Inspect do
    def inspect(%{shape: shape, dtype: dtype, device: device}, _opts) do
      "#ExCubecl.Buffer<#{dtype}#{inspect(shape)} on #{device}>"
    end
  end
end
