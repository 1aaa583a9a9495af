defmodule ExCubecl.Media do
  @moduledoc """
  Image files into device buffers and back: PNG, JPEG, WebP, BMP and GIF (decoded on the
  host by Rust's `image` crate, uploaded once).

  An image is a buffer of shape `[height, width, channels]` (HWC, rows top to bottom, as
  `StbImage.to_nx/1` gives), `:u8` (0..255) or `:f32` (0.0..1.0, scaled on the device).
  Batches of them go through `ExCubecl.Filter`; an `ExBurn.Backend` tensor of the same
  memory is `ExBurn.Media.to_nx/1`.

      {:ok, img} = ExCubecl.Media.read("cat.jpg", channels: 3, type: :f32)
      img.shape
      #=> [480, 640, 3]
      :ok = ExCubecl.Media.write(img, "cat.png")

  Options of `read/2` and `decode/2`:
    * `:channels` - 1 (gray), 2 (gray and alpha), 3 (RGB), 4 (RGBA), or `nil` (the
      default: the file's own);
    * `:type` - `:u8` (the default) or `:f32`;
    * `:device` - where the buffer is made (default: `ExCubecl.default_device/0`).

  Errors are `{:error, %ExCubecl.Error{}}` naming the operation, the reason and the file (or
  `"binary"`); corrupt and truncated files are errors, never crashes.
  """
  alias ExCubecl.{Buffer, Error, Native}

  @type image_opts :: [channels: 1..4 | nil, type: :u8 | :f32, device: String.t()]
  @formats [:png, :jpeg, :webp, :bmp, :gif]

  ## Decoding

  @doc "The image in the file at `path` (its format from its first bytes). See the options above."
  @spec read(Path.t(), image_opts()) :: ExCubecl.result(Buffer.t())
  def read(path, opts \\ []) do
    with {:ok, data} <- read_file("Media.read", path),
         do: decode_image("Media.read", data, opts, Path.expand(path), :image_decode)
  end

  @doc "As `read/2`, raising `ExCubecl.Error`."
  @spec read!(Path.t(), image_opts()) :: Buffer.t()
  def read!(path, opts \\ []), do: ExCubecl.bang(read(path, opts))

  @doc """
  The image in the binary `data` (the bytes of a PNG, JPEG, WebP, BMP or GIF file).

      {:ok, png} = ExCubecl.Media.encode(img, :png)
      {:ok, same} = ExCubecl.Media.decode(png)
  """
  @spec decode(binary(), image_opts()) :: ExCubecl.result(Buffer.t())
  def decode(data, opts \\ [])
  def decode(data, opts) when is_binary(data), do: decode_image("Media.decode", data, opts, "binary", :image_decode)

  def decode(other, _opts),
    do: {:error, Error.new("Media.decode", "expects the bytes of an image file", inspect(other, limit: 5))}

  @doc "As `decode/2`, raising."
  @spec decode!(binary(), image_opts()) :: Buffer.t()
  def decode!(data, opts \\ []), do: ExCubecl.bang(decode(data, opts))

  @doc """
  Every frame of the animated GIF at `path`, each composed on the full canvas, as one buffer
  `[frames, height, width, channels]` (channels default to 4, RGBA); an image of another
  format is one frame. Options as `read/2`.
  """
  @spec read_frames(Path.t(), image_opts()) :: ExCubecl.result(Buffer.t())
  def read_frames(path, opts \\ []) do
    with {:ok, data} <- read_file("Media.read_frames", path),
         do: decode_image("Media.read_frames", data, opts, Path.expand(path), :image_decode_frames)
  end

  @doc "As `read_frames/2`, from the bytes of a file."
  @spec decode_frames(binary(), image_opts()) :: ExCubecl.result(Buffer.t())
  def decode_frames(data, opts \\ [])

  def decode_frames(data, opts) when is_binary(data),
    do: decode_image("Media.decode_frames", data, opts, "binary", :image_decode_frames)

  def decode_frames(other, _opts),
    do: {:error, Error.new("Media.decode_frames", "expects the bytes of an image file", inspect(other, limit: 5))}

  ## Encoding

  @doc """
  Writes the image (`[height, width, channels]`, `:u8`, or `:f32` in 0.0..1.0) to `path`,
  in the format of its extension or of the `:format` option (#{Enum.map_join(@formats, ", ", &inspect/1)}).
  `:quality` (1..100, default 90) sets JPEG's quality. JPEG takes 1 or 3 channels, WebP
  (lossless) and GIF 3 or 4, BMP 1, 3 or 4, PNG 1 to 4.
  """
  @spec write(Buffer.t(), Path.t(), keyword()) :: :ok | {:error, Error.t()}
  def write(image, path, opts \\ []) do
    format = Keyword.get(opts, :format, Path.extname(to_string(path)))

    with {:ok, data} <- encode_image("Media.write", image, format, opts, Path.expand(path)) do
      case File.write(path, data) do
        :ok ->
          :ok

        {:error, reason} ->
          {:error, Error.new("Media.write", "cannot write the file: #{:file.format_error(reason)}", Path.expand(path))}
      end
    end
  end

  @doc "As `write/3`, raising."
  @spec write!(Buffer.t(), Path.t(), keyword()) :: :ok
  def write!(image, path, opts \\ []), do: ExCubecl.bang(write(image, path, opts))

  @doc "The bytes of the image as a file of `format` (#{Enum.map_join(@formats, ", ", &inspect/1)}); options as `write/3`."
  @spec encode(Buffer.t(), atom() | String.t(), keyword()) :: ExCubecl.result(binary())
  def encode(image, format, opts \\ []), do: encode_image("Media.encode", image, format, opts, "binary")

  @doc "As `encode/3`, raising."
  @spec encode!(Buffer.t(), atom() | String.t(), keyword()) :: binary()
  def encode!(image, format, opts \\ []), do: ExCubecl.bang(encode(image, format, opts))

  ## Helpers

  @doc false
  def read_file(op, path) do
    case File.read(path) do
      {:ok, data} ->
        {:ok, data}

      {:error, reason} ->
        {:error, Error.new(op, "cannot read the file: #{:file.format_error(reason)}", Path.expand(to_string(path)))}
    end
  end

  defp decode_image(op, data, opts, label, nif) do
    with {:ok, channels} <- channels_opt(op, opts),
         {:ok, type} <- type_opt(op, opts),
         {:ok, device} <- device_opt(op, opts),
         {:ok, {ref, shape}} <- native(op, apply(Native, nif, [data, channels, device, label])) do
      image = %Buffer{ref: ref, shape: shape, dtype: :u8, device: device}

      case type do
        :u8 -> {:ok, image}
        :f32 -> with {:ok, [f]} <- ExCubecl.run_kernel(:image_to_float, [image]), do: {:ok, f}
      end
    end
  end

  defp encode_image(op, %Buffer{ref: ref}, format, opts, label) do
    quality = Keyword.get(opts, :quality, 90)

    cond do
      not (is_integer(quality) and quality in 1..100) ->
        {:error, Error.new(op, "option :quality must be an integer 1..100", inspect(quality))}

      not (is_atom(format) or is_binary(format)) ->
        {:error, Error.new(op, "a format is one of #{inspect(@formats)}", inspect(format))}

      true ->
        native(op, Native.image_encode(ref, format |> to_string() |> String.trim_leading("."), quality, label))
    end
  end

  defp encode_image(op, other, _format, _opts, _label),
    do: {:error, Error.new(op, "expects an ExCubecl buffer [height, width, channels]", inspect(other, limit: 5))}

  defp channels_opt(op, opts) do
    case Keyword.get(opts, :channels) do
      c when c in [nil, 1, 2, 3, 4] -> {:ok, c}
      other -> {:error, Error.new(op, "option :channels must be 1, 2, 3, 4 or nil", inspect(other))}
    end
  end

  defp type_opt(op, opts) do
    case Keyword.get(opts, :type, :u8) do
      t when t in [:u8, :f32] -> {:ok, t}
      {:u, 8} -> {:ok, :u8}
      {:f, 32} -> {:ok, :f32}
      other -> {:error, Error.new(op, "option :type must be :u8 or :f32", inspect(other))}
    end
  end

  @doc false
  def device_opt(op, opts) do
    case Keyword.get(opts, :device) do
      nil -> {:ok, ExCubecl.default_device()}
      d when is_binary(d) -> {:ok, d}
      d when is_atom(d) -> {:ok, Atom.to_string(d)}
      other -> {:error, Error.new(op, "a device is a string such as \"cuda:0\" or \"wgpu\"", inspect(other))}
    end
  end

  @doc false
  def native(_op, {:ok, value}), do: {:ok, value}
  def native(op, {:error, %{} = e}), do: {:error, %{Error.from(e) | op: op}}
end
