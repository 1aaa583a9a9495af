defmodule ExBurn.Tensor do
  @moduledoc """
  Burn tensors as Elixir values, and their conversion to and from Nx.

  An `%ExBurn.Tensor{}` holds the NIF reference of a tensor on a device (the same resource
  that `ExBurn.Backend` tensors and `ExCubecl` buffers hold), its shape as a list and its Burn
  element type; shape and type are tracked in Elixir, so reading them needs no NIF call.
  `ExBurn.BurnBridge` and `ExBurn.NifHelper` compute on them. The device memory is freed when
  the garbage collector drops the last reference, or at once with `free/1`.

  ## Type mapping

  | Nx type | Burn type |
  |---------|-----------|
  | `{:f, 32}` | `:f32` |
  | `{:f, 64}` | `:f64` |
  | `{:f, 16}` | `:f32` |
  | `{:bf, 16}` | `:f32` |
  | `{:s, 32}` | `:i32` |
  | `{:s, 64}` | `:i64` |
  | `{:s, 16}` | `:i32` |
  | `{:s, 8}` | `:i32` |
  | `{:u, 8}` | `:f32` |

  Beyond the table: `{:u, 16}` and the sub-byte integers go to `:i32`, `{:u, 32}` and
  `{:u, 64}` to `:i64` (u64 values above 2^63 - 1 wrap), the 8-bit floats to `:f32`.
  `from_nx/1` converts the values to the Burn type; `to_nx/1` gives the Burn type's Nx type.
  Complex tensors have no Burn type: `from_nx/1` gives an error.

      iex> {:ok, t} = ExBurn.Tensor.from_nx(Nx.tensor([[1, 2, 3]]))
      iex> {ExBurn.Tensor.shape(t), ExBurn.Tensor.type(t), ExBurn.Tensor.rank(t), ExBurn.Tensor.numel(t)}
      {[1, 3], :i32, 2, 3}
      iex> {:ok, back} = ExBurn.Tensor.to_nx(t)
      iex> Nx.to_list(back)
      [[1, 2, 3]]
  """
  @enforce_keys [:ref, :shape, :type]
  defstruct [:ref, :shape, :type]

  @typedoc "Burn element type tag"
  @type burn_type :: :f32 | :f64 | :i32 | :i64

  @typedoc "NIF tensor reference"
  @type t :: %__MODULE__{ref: reference(), shape: [non_neg_integer()], type: burn_type()}

  alias ExCubecl.Native

  @burn_types [:f32, :f64, :i32, :i64]

  ## Types

  @doc """
  Converts an Nx type tuple to a Burn type tag (see the module's table). Raises
  `ArgumentError` for a type with no Burn type (complex).

      iex> ExBurn.Tensor.nx_type_to_burn({:f, 16})
      :f32
      iex> ExBurn.Tensor.nx_type_to_burn({:s, 64})
      :i64
  """
  @spec nx_type_to_burn(Nx.Type.t()) :: burn_type()
  def nx_type_to_burn({:f, 64}), do: :f64
  def nx_type_to_burn({:f, _}), do: :f32
  def nx_type_to_burn({:bf, 16}), do: :f32
  def nx_type_to_burn({:s, 64}), do: :i64
  def nx_type_to_burn({:s, _}), do: :i32
  def nx_type_to_burn({:u, 8}), do: :f32
  def nx_type_to_burn({:u, bits}) when bits in [2, 4, 16], do: :i32
  def nx_type_to_burn({:u, bits}) when bits in [32, 64], do: :i64

  def nx_type_to_burn(type),
    do: raise(ArgumentError, "ExBurn.Tensor.nx_type_to_burn: #{inspect(type)} has no Burn type (Burn types: f32, f64, i32, i64)")

  @doc """
  Converts a Burn type tag back to an Nx type tuple.

      iex> ExBurn.Tensor.burn_type_to_nx(:i32)
      {:s, 32}
  """
  @spec burn_type_to_nx(burn_type()) :: Nx.Type.t()
  def burn_type_to_nx(:f32), do: {:f, 32}
  def burn_type_to_nx(:f64), do: {:f, 64}
  def burn_type_to_nx(:i32), do: {:s, 32}
  def burn_type_to_nx(:i64), do: {:s, 64}

  def burn_type_to_nx(type),
    do: raise(ArgumentError, "ExBurn.Tensor.burn_type_to_nx: unknown Burn type #{inspect(type)} (Burn types: :f32, :f64, :i32, :i64)")

  ## Conversion

  @doc """
  Converts an `Nx.Tensor` (of any backend) into an `%ExBurn.Tensor{}` on the device: the
  data goes to the NIF as one flat binary (a tensor already on `ExBurn.Backend`'s device and
  of a Burn type is taken as it is, without a copy). Options: `:device` (`:gpu`, `:cpu` or a
  device string; default: the tensor's own device, else `ExBurn.default_device_spec/0`).
  Gives `{:ok, tensor}` or `{:error, reason}`.

      iex> {:ok, t} = ExBurn.Tensor.from_nx(Nx.tensor([1.0, 2.0]))
      iex> t.type
      :f32
  """
  @spec from_nx(Nx.Tensor.t(), keyword()) :: {:ok, t()} | {:error, String.t()}
  def from_nx(tensor, opts \\ [])

  def from_nx(%Nx.Tensor{type: type} = t, opts) when is_list(opts) do
    guard("ExBurn.Tensor.from_nx", fn ->
      burn = nx_type_to_burn(type)
      target = burn_type_to_nx(burn)
      t = if type == target, do: t, else: Nx.as_type(t, target)

      dev =
        case {opts[:device], t.data} do
          {nil, %ExBurn.Backend{device: dev}} -> dev
          {nil, _} -> ExBurn.default_device_spec()
          {dev, _} -> ExBurn.device_spec(dev)
        end

      on_device =
        case t.data do
          %ExBurn.Backend{device: ^dev} -> t
          _ -> Nx.backend_copy(t, {ExBurn.Backend, device: dev})
        end

      %__MODULE__{ref: on_device.data.ref, shape: Tuple.to_list(t.shape), type: burn}
    end)
  end

  def from_nx(other, _opts), do: {:error, "ExBurn.Tensor.from_nx: expects an Nx tensor, got #{inspect(other, limit: 5)}"}

  @doc """
  Converts an `%ExBurn.Tensor{}` back into an `Nx.Tensor` on the host (`Nx.BinaryBackend`):
  reads the raw data from the NIF and reshapes it. Gives `{:ok, tensor}` or
  `{:error, reason}` (a freed tensor, say).
  """
  @spec to_nx(t()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
  def to_nx(%__MODULE__{ref: ref, shape: shape, type: type}) do
    case Native.read(ref) do
      {:ok, bin} ->
        {:ok, bin |> Nx.from_binary(burn_type_to_nx(type), backend: Nx.BinaryBackend) |> Nx.reshape(List.to_tuple(shape))}

      {:error, e} ->
        {:error, "ExBurn.Tensor.to_nx: #{e.reason} (#{e.details})"}
    end
  end

  def to_nx(other), do: {:error, "ExBurn.Tensor.to_nx: expects an %ExBurn.Tensor{}, got #{inspect(other, limit: 5)}"}

  @doc """
  Creates a Burn tensor from raw binary data (native byte order: 4 bytes an element for
  `:f32` and `:i32`, 8 for `:f64` and `:i64`), a shape and a type. Option: `:device`.

      iex> {:ok, t} = ExBurn.Tensor.from_binary(<<1::32-native, 2::32-native>>, [2], :i32)
      iex> {:ok, back} = ExBurn.Tensor.to_nx(t)
      iex> Nx.to_list(back)
      [1, 2]
  """
  @spec from_binary(binary(), [non_neg_integer()], burn_type(), keyword()) :: {:ok, t()} | {:error, String.t()}
  def from_binary(data, shape, type, opts \\ [])

  def from_binary(data, shape, type, opts) when is_binary(data) and is_list(shape) and type in @burn_types do
    guard("ExBurn.Tensor.from_binary", fn ->
      dev = if opts[:device], do: ExBurn.device_spec(opts[:device]), else: ExBurn.default_device_spec()

      case Native.buffer(data, shape, dtype_name(type), dev) do
        {:ok, ref} -> %__MODULE__{ref: ref, shape: shape, type: type}
        {:error, e} -> raise ExBurn.Error.from("ExBurn.Tensor.from_binary", e)
      end
    end)
  end

  def from_binary(data, shape, type, _opts),
    do:
      {:error,
       "ExBurn.Tensor.from_binary: expects a binary, a shape list and a Burn type (:f32, :f64, :i32, :i64), got #{inspect({data, shape, type}, limit: 5)}"}

  @doc "Batch converts a list of Nx tensors: `{:ok, tensors}` or the first error."
  @spec from_nx_batch([Nx.Tensor.t()], keyword()) :: {:ok, [t()]} | {:error, String.t()}
  def from_nx_batch(tensors, opts \\ []) when is_list(tensors), do: map_ok(tensors, &from_nx(&1, opts))

  @doc "Batch converts a list of Burn tensors to Nx tensors: `{:ok, tensors}` or the first error."
  @spec to_nx_batch([t()]) :: {:ok, [Nx.Tensor.t()]} | {:error, String.t()}
  def to_nx_batch(tensors) when is_list(tensors), do: map_ok(tensors, &to_nx/1)

  ## Facts

  @doc "Returns the shape. `ExBurn.Tensor.shape(t) #=> [2, 3]`"
  @spec shape(t()) :: [non_neg_integer()]
  def shape(%__MODULE__{shape: shape}), do: shape

  @doc "Returns the Burn element type. `ExBurn.Tensor.type(t) #=> :f32`"
  @spec type(t()) :: burn_type()
  def type(%__MODULE__{type: type}), do: type

  @doc "Returns the rank (number of dimensions)."
  @spec rank(t()) :: non_neg_integer()
  def rank(%__MODULE__{shape: shape}), do: length(shape)

  @doc "Returns the total number of elements."
  @spec numel(t()) :: non_neg_integer()
  def numel(%__MODULE__{shape: shape}), do: Enum.reduce(shape, 1, &(&1 * &2))

  @doc "Returns the NIF reference of the tensor."
  @spec ref(t()) :: reference()
  def ref(%__MODULE__{ref: ref}), do: ref

  @doc """
  Frees the underlying Rust tensor now (the garbage collector does it otherwise); later use
  of it is an error. Freeing twice is fine. An `Nx.Tensor` on `ExBurn.Backend` is freed as
  `Nx.backend_deallocate/1` does (`:ok`, or `:already_deallocated`).

      iex> {:ok, t} = ExBurn.Tensor.from_nx(Nx.tensor([1.0]))
      iex> ExBurn.Tensor.free(t)
      :ok
      iex> {:error, "ExBurn.Tensor.to_nx: the tensor was freed" <> _} = ExBurn.Tensor.to_nx(t)
  """
  @spec free(t() | Nx.Tensor.t()) :: :ok | :already_deallocated
  def free(%__MODULE__{ref: ref}) do
    Native.free(ref)
    :ok
  end

  def free(%Nx.Tensor{} = t), do: Nx.backend_deallocate(t)

  ## Helpers (for ExBurn.BurnBridge and ExBurn.CubeclBridge)

  @doc false
  # The tensor as an `Nx.Tensor` on `ExBurn.Backend`, on the same resource (no copy).
  def to_backend(%__MODULE__{ref: ref, shape: shape, type: type}) do
    dev =
      case Native.device(ref) do
        {:ok, dev} -> dev
        {:error, e} -> raise ExBurn.Error.from("ExBurn.Tensor", e)
      end

    %Nx.Tensor{
      data: %ExBurn.Backend{ref: ref, device: dev},
      shape: List.to_tuple(shape),
      type: burn_type_to_nx(type),
      names: List.duplicate(nil, length(shape))
    }
  end

  @doc false
  # An `ExBurn.Backend` tensor as a Burn tensor: cast to its Burn type where it has another.
  def from_backend(%Nx.Tensor{type: type} = t) do
    burn = nx_type_to_burn(type)
    target = burn_type_to_nx(burn)
    t = if type == target, do: t, else: Nx.as_type(t, target)
    %__MODULE__{ref: t.data.ref, shape: Tuple.to_list(t.shape), type: burn}
  end

  @doc false
  # A bare NIF reference as a Burn tensor (its shape and type asked of the NIF).
  def from_ref(ref) when is_reference(ref) do
    with {:ok, shape} <- Native.shape(ref),
         {:ok, dtype} <- Native.dtype(ref),
         {:ok, type} <- burn_type_of_dtype(dtype) do
      {:ok, %__MODULE__{ref: ref, shape: shape, type: type}}
    else
      {:error, %{reason: reason}} -> {:error, "the reference's tensor: #{reason}"}
      {:error, reason} -> {:error, reason}
    end
  end

  @doc false
  def dtype_name(:f32), do: "f32"
  def dtype_name(:f64), do: "f64"
  def dtype_name(:i32), do: "s32"
  def dtype_name(:i64), do: "s64"

  @doc false
  def burn_type_of_dtype(dtype) when dtype in ["f32", :f32], do: {:ok, :f32}
  def burn_type_of_dtype(dtype) when dtype in ["f64", :f64], do: {:ok, :f64}
  def burn_type_of_dtype(dtype) when dtype in ["s32", :s32], do: {:ok, :i32}
  def burn_type_of_dtype(dtype) when dtype in ["s64", :s64], do: {:ok, :i64}
  def burn_type_of_dtype(dtype), do: {:error, "dtype #{dtype} is no Burn type (f32, f64, s32, s64)"}

  # `fun`'s value as {:ok, value}; an exception as {:error, message}.
  defp guard(op, fun) do
    {:ok, fun.()}
  rescue
    e ->
      message = Exception.message(e)
      {:error, if(String.starts_with?(message, op <> ":"), do: message, else: "#{op}: #{message}")}
  end

  defp map_ok(list, fun) do
    Enum.reduce_while(list, {:ok, []}, fn x, {:ok, acc} ->
      case fun.(x) do
        {:ok, v} -> {:cont, {:ok, [v | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, values} -> {:ok, Enum.reverse(values)}
      error -> error
    end
  end
end
