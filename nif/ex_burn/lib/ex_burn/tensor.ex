defmodule ExBurn.Tensor do
  @moduledoc """
  Nx tensors on and off the device: `from_nx/1` moves a tensor of any backend to
  `ExBurn.Backend` (on the default device, or the one given), `to_nx/1` brings it back to
  `Nx.BinaryBackend`; both have forms for lists of tensors. `free/1` frees the device memory
  at once (the garbage collector does it otherwise).

      iex> t = ExBurn.Tensor.from_nx(Nx.tensor([1, 2, 3]))
      iex> {ExBurn.Tensor.shape(t), ExBurn.Tensor.type(t), ExBurn.Tensor.numel(t)}
      {{3}, {:s, 32}, 3}
      iex> ExBurn.Tensor.to_nx(t) |> Nx.to_list()
      [1, 2, 3]
  """

  @doc "`t` on `ExBurn.Backend` (options: `:device`)."
  @spec from_nx(Nx.Tensor.t(), keyword()) :: Nx.Tensor.t()
  def from_nx(%Nx.Tensor{} = t, opts \\ []), do: Nx.backend_copy(t, {ExBurn.Backend, opts})

  @doc "`t` on `Nx.BinaryBackend`."
  @spec to_nx(Nx.Tensor.t()) :: Nx.Tensor.t()
  def to_nx(%Nx.Tensor{} = t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  @doc """
  A tensor of zeros of `shape` on `ExBurn.Backend` (options: `:type`, default `{:f, 32}`;
  `:device`).

      iex> ExBurn.Tensor.zeros({2, 2}, type: :s32) |> Nx.to_flat_list()
      [0, 0, 0, 0]
  """
  @spec zeros(tuple(), keyword()) :: Nx.Tensor.t()
  def zeros(shape, opts \\ []), do: filled(0, shape, opts, "zeros")

  @doc """
  A tensor of ones of `shape` on `ExBurn.Backend` (options as `zeros/2`).

      iex> ExBurn.Tensor.ones({3}) |> Nx.to_flat_list()
      [1.0, 1.0, 1.0]
  """
  @spec ones(tuple(), keyword()) :: Nx.Tensor.t()
  def ones(shape, opts \\ []), do: filled(1, shape, opts, "ones")

  defp filled(value, shape, opts, _fun) when is_tuple(shape) do
    opts = Keyword.validate!(opts, [:device, type: {:f, 32}])
    backend = {ExBurn.Backend, Keyword.take(opts, [:device])}
    value |> Nx.tensor(type: opts[:type], backend: backend) |> Nx.broadcast(shape)
  end

  defp filled(_value, shape, _opts, fun),
    do: raise(ArgumentError, "ExBurn.Tensor.#{fun}: the shape must be a tuple such as {2, 3}, got #{inspect(shape)}")

  @doc "`from_nx/2` of each tensor."
  @spec from_nx_batch([Nx.Tensor.t()], keyword()) :: [Nx.Tensor.t()]
  def from_nx_batch(tensors, opts \\ []), do: Enum.map(tensors, &from_nx(&1, opts))

  @doc "`to_nx/1` of each tensor."
  @spec to_nx_batch([Nx.Tensor.t()]) :: [Nx.Tensor.t()]
  def to_nx_batch(tensors), do: Enum.map(tensors, &to_nx/1)

  @doc "The shape. `ExBurn.Tensor.shape(Nx.iota({2, 3})) #=> {2, 3}`"
  @spec shape(Nx.Tensor.t()) :: tuple()
  def shape(%Nx.Tensor{shape: shape}), do: shape

  @doc "The type. `ExBurn.Tensor.type(Nx.tensor(1.0)) #=> {:f, 32}`"
  @spec type(Nx.Tensor.t()) :: Nx.Type.t()
  def type(%Nx.Tensor{type: type}), do: type

  @doc "The rank. `ExBurn.Tensor.rank(Nx.iota({2, 3})) #=> 2`"
  @spec rank(Nx.Tensor.t()) :: non_neg_integer()
  def rank(%Nx.Tensor{shape: shape}), do: tuple_size(shape)

  @doc "The number of elements. `ExBurn.Tensor.numel(Nx.iota({2, 3})) #=> 6`"
  @spec numel(Nx.Tensor.t()) :: non_neg_integer()
  def numel(%Nx.Tensor{} = t), do: Nx.size(t)

  @doc "Frees the device memory of `t` now: `:ok`, or `:already_deallocated`."
  @spec free(Nx.Tensor.t()) :: :ok | :already_deallocated
  def free(%Nx.Tensor{} = t), do: Nx.backend_deallocate(t)
end
