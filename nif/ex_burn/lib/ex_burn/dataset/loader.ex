defmodule ExBurn.Dataset.Loader do
  @moduledoc """
  The batches of a data set, of `ExBurn.Dataset.loader/2`: an `Enumerable` of
  `{x_batch, y_batch}`. Each enumeration is one pass (an epoch) and gathers its batches
  lazily, one at a time; `Enum.count/1` gives the number of batches of a pass without
  gathering any. With `shuffle: true` the `k`-th pass (counting from 0, across every process
  that enumerates this loader) is ordered by the seed `seed + k`.
  """

  @enforce_keys [:x, :y, :size, :batch_size, :shuffle, :seed, :drop_last, :passes]
  defstruct @enforce_keys

  @type t :: %__MODULE__{
          x: Nx.Tensor.t(),
          y: Nx.Tensor.t(),
          size: pos_integer(),
          batch_size: pos_integer(),
          shuffle: boolean(),
          seed: integer(),
          drop_last: boolean(),
          passes: :counters.counters_ref()
        }

  @doc "The number of batches of one pass."
  @spec batch_count(t()) :: non_neg_integer()
  def batch_count(%__MODULE__{size: n, batch_size: b, drop_last: true}), do: div(n, b)
  def batch_count(%__MODULE__{size: n, batch_size: b}), do: div(n + b - 1, b)

  @doc """
  The example indices of each batch of a pass, in order: the pass's order chunked into
  batches. Taking a new pass's order advances the loader's pass counter.
  """
  @spec batches(t()) :: [[non_neg_integer()]]
  def batches(%__MODULE__{} = loader) do
    order =
      if loader.shuffle do
        pass = :counters.get(loader.passes, 1)
        :counters.add(loader.passes, 1, 1)
        ExBurn.Dataset.permutation(loader.size, loader.seed + pass)
      else
        Enum.to_list(0..(loader.size - 1))
      end

    order |> Enum.chunk_every(loader.batch_size) |> Enum.take(batch_count(loader))
  end

  @doc false
  def stream(%__MODULE__{x: x, y: y} = loader) do
    Stream.resource(
      fn -> batches(loader) end,
      fn
        [] -> {:halt, []}
        [indices | rest] -> {[{ExBurn.Dataset.gather(x, indices), ExBurn.Dataset.gather(y, indices)}], rest}
      end,
      fn _ -> :ok end
    )
  end

  defimpl Enumerable do
    def count(loader), do: {:ok, ExBurn.Dataset.Loader.batch_count(loader)}
    def member?(_loader, _element), do: {:error, __MODULE__}
    def slice(_loader), do: {:error, __MODULE__}
    def reduce(loader, acc, fun), do: Enumerable.reduce(ExBurn.Dataset.Loader.stream(loader), acc, fun)
  end

  defimpl Inspect do
    def inspect(l, _opts) do
      "#ExBurn.Dataset.Loader<#{l.size} examples, x #{Kernel.inspect(l.x.shape)}, y #{Kernel.inspect(l.y.shape)}, " <>
        "batch_size: #{l.batch_size}, shuffle: #{l.shuffle}, drop_last: #{l.drop_last}>"
    end
  end
end
