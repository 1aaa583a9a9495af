defmodule ExBurn.Media do
  @moduledoc """
  Image files as `Nx` tensors on `ExBurn.Backend`: `ExCubecl.Media` decodes them into device
  buffers and `ExCubecl.Filter` resizes and normalises them on the device; this module gives
  the same device memory as Nx tensors (no copy) and back.

      images = ExBurn.Media.read_batch!(paths, size: {32, 32}, channels: 3,
                                        mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5])
      {n, 32, 32, 3} = Nx.shape(images)

  See the guide "Images from files into a classifier" (`guides/06_images.md`).
  """
  alias ExCubecl.{Buffer, Filter, Media}

  @doc """
  The buffer as an `Nx.Tensor` on `ExBurn.Backend`, on the same device memory (`:u8` is
  `{:u, 8}`, `:f32` `{:f, 32}`...).
  """
  @spec to_nx(Buffer.t()) :: Nx.Tensor.t()
  def to_nx(%Buffer{ref: ref, shape: shape, dtype: dtype, device: device}) do
    %Nx.Tensor{
      data: %ExBurn.Backend{ref: ref, device: device},
      shape: List.to_tuple(shape),
      type: Nx.Type.normalize!(dtype),
      names: List.duplicate(nil, length(shape))
    }
  end

  @doc """
  The tensor as an `ExCubecl.Buffer` for `ExCubecl.Filter` and `ExCubecl.Media.write/3`: the
  same memory for an `ExBurn.Backend` tensor, a copy onto the default device otherwise.
  """
  @spec from_nx(Nx.Tensor.t()) :: Buffer.t()
  def from_nx(%Nx.Tensor{data: %ExBurn.Backend{ref: ref, device: device}, shape: shape, type: type}),
    do: %Buffer{ref: ref, shape: Tuple.to_list(shape), dtype: dtype(type), device: device}

  def from_nx(%Nx.Tensor{} = t), do: t |> Nx.backend_copy(ExBurn.Backend) |> from_nx()

  defp dtype({:u, 8}), do: :u8
  defp dtype(type), do: type |> Nx.Type.to_string() |> String.to_atom()

  @doc """
  The image file at `path` as a `{height, width, channels}` tensor on `ExBurn.Backend`;
  options of `ExCubecl.Media.read/2` (`:channels`, `:type`, `:device`). Raises
  `ExCubecl.Error` naming the file.
  """
  @spec read!(Path.t(), keyword()) :: Nx.Tensor.t()
  def read!(path, opts \\ []), do: path |> Media.read!(opts) |> to_nx()

  @doc """
  The image files at `paths` as one `{n, height, width, channels}` `f32` batch: each decoded
  (`:channels`, default 3), scaled to 0.0..1.0, resized to `:size` (`{height, width}`,
  required; `:mode`, default `:bilinear`; in f32, so no rounding between the steps) and
  normalised with `:mean` and `:std` (default 0.0 and 1.0), on the device. Files of one size
  are filtered as one batch.
  """
  @spec read_batch!([Path.t()], keyword()) :: Nx.Tensor.t()
  def read_batch!([_ | _] = paths, opts) do
    size = Keyword.fetch!(opts, :size)
    channels = Keyword.get(opts, :channels, 3)
    {mean, std} = {Keyword.get(opts, :mean, 0.0), Keyword.get(opts, :std, 1.0)}
    mode = Keyword.get(opts, :mode, :bilinear)
    images = for path <- paths, do: Media.read!(path, Keyword.take(opts, [:device]) ++ [channels: channels])
    filters = &(&1 |> Filter.to_float!() |> Filter.resize!(size, mode: mode) |> Filter.normalize!(mean, std))

    # Images of one size are filtered as one batch (three kernel calls in all); others one
    # by one.
    batch =
      case Enum.uniq_by(images, & &1.shape) do
        [_] -> images |> Enum.map(&reshape/1) |> cat() |> filters.()
        _ -> images |> Enum.map(&(&1 |> filters.() |> reshape())) |> cat()
      end

    to_nx(batch)
  end

  defp cat(images), do: ExCubecl.run_kernel!(:cat, images, axis: 0) |> hd()

  defp reshape(%Buffer{shape: shape} = img), do: ExCubecl.run_kernel!(:reshape, [img], shape: [1 | shape]) |> hd()
end
