defmodule ExCubecl.Filter do
  @moduledoc """
  Image filters on the device, for one image or a batch: `[h, w, c]` / `[n, h, w, c]` (NHWC,
  the default) or, with `layout: :nchw`, `[c, h, w]` / `[n, c, h, w]`. Images are `:u8`
  (0..255) or float (0.0..1.0); the result has the input's layout, rank and type (`u8`
  results rounded and clamped), except `to_float/2` and `normalize/4`, which give `:f32`.

  Each filter is one kernel of the op table (`image_*` in `ExCubecl.kernels/0`), so it also
  runs in `ExCubecl.capture/2` pipelines and asynchronous commands:

      {:ok, img} = ExCubecl.Media.read("cat.jpg", channels: 3)
      {:ok, small} = ExCubecl.Filter.resize(img, {224, 224}, mode: :bilinear)
      {:ok, x} = ExCubecl.Filter.normalize(small, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])

  Kernel launches, counted on lavapipe for a `[2, 16, 16, 3]` batch (`ExCubecl.launch_count/0`):
  resize and normalise of an f32 image one each (the interpolate kernels, adaptive average
  pooling for `:area`, a depthwise 1x1 convolution with bias for `normalize/4`); `to_float/2`
  two; colour conversion three (a 1x1 convolution with bias); blur eight (edge padding and
  a separable depthwise convolution); pad five; crop none and flip and rotation one (views).
  A `:u8` input adds a cast, a `:u8` output a round, a clamp and a cast; reading an NHWC
  result adds the copy out of the NCHW layout the kernels compute in.

  Tolerances against Nx.BinaryBackend (the tests): float results within 1.0e-5 relative,
  `u8` results within 1 (rounding of values computed in f32).
  """
  alias ExCubecl.{Buffer, Error}

  @type image :: Buffer.t()
  @type size :: {pos_integer(), pos_integer()} | [pos_integer()]

  @doc "A `:u8` image as `:f32` in 0.0..1.0 (`x / 255`). Options: `:scale` (1/255), `:dtype` (`:f32`)."
  @spec to_float(image(), keyword()) :: ExCubecl.result(image())
  def to_float(image, opts \\ []), do: filter(:image_to_float, image, opts)

  @doc """
  Resizes to `{height, width}`. Options: `:mode` (`:bilinear`, the default, `:nearest`,
  `:bicubic` or `:area`), `:align_corners` (false), `:layout`. Half-pixel centres, as
  PyTorch's `interpolate` and `Nx`'s resize in NxImage; `:area` is adaptive average pooling
  (PyTorch's `mode: "area"`).
  """
  @spec resize(image(), size(), keyword()) :: ExCubecl.result(image())
  def resize(image, size, opts \\ [])
  def resize(image, {h, w}, opts), do: filter(:image_resize, image, [size: [h, w]] ++ opts)
  def resize(image, [h, w], opts), do: filter(:image_resize, image, [size: [h, w]] ++ opts)
  def resize(_image, size, _opts), do: {:error, Error.new("image_resize", "a size is {height, width}", inspect(size))}

  @doc "The box of `height` x `width` pixels at `{top, left}` (a view). Options: `:layout`."
  @spec crop(image(), {non_neg_integer(), non_neg_integer()}, size(), keyword()) :: ExCubecl.result(image())
  def crop(image, {top, left}, size, opts \\ []) do
    case size do
      {h, w} -> filter(:image_crop, image, [top: top, left: left, height: h, width: w] ++ opts)
      [h, w] -> filter(:image_crop, image, [top: top, left: left, height: h, width: w] ++ opts)
      other -> {:error, Error.new("image_crop", "a size is {height, width}", inspect(other))}
    end
  end

  @doc "The centre box of `{height, width}` pixels."
  @spec center_crop(image(), size(), keyword()) :: ExCubecl.result(image())
  def center_crop(%Buffer{shape: shape} = image, size, opts \\ []) do
    {h, w} = if is_list(size), do: List.to_tuple(size), else: size
    {ih, iw} = hw(shape, Keyword.get(opts, :layout, :nhwc))
    crop(image, {div(ih - h, 2), div(iw - w, 2)}, {h, w}, opts)
  end

  @doc "Pads with `:value` (0): options `:top`, `:bottom`, `:left`, `:right` (pixels, 0 each), `:layout`."
  @spec pad(image(), keyword()) :: ExCubecl.result(image())
  def pad(image, opts), do: filter(:image_pad, image, opts)

  @doc "Mirrors the image: `direction` `:horizontal` (the default), `:vertical` or `:both` (a view)."
  @spec flip(image(), :horizontal | :vertical | :both, keyword()) :: ExCubecl.result(image())
  def flip(image, direction \\ :horizontal, opts \\ []), do: filter(:image_flip, image, [direction: direction] ++ opts)

  @doc "Rotates by `k` quarter turns counter-clockwise (negative: clockwise), as `np.rot90` (a view)."
  @spec rot90(image(), integer(), keyword()) :: ExCubecl.result(image())
  def rot90(image, k \\ 1, opts \\ []), do: filter(:image_rot90, image, [k: k] ++ opts)

  @doc """
  Colour conversion `from` -> `to`: `:rgb`, `:gray` (BT.601 luma, as PIL's `L`) and `:ycbcr`
  (or `:yuv`: full-range BT.601, as JPEG; chroma offset 128 for `u8`, 0.5 for float images).
  """
  @spec convert_color(image(), :rgb | :gray | :ycbcr | :yuv, :rgb | :gray | :ycbcr | :yuv, keyword()) ::
          ExCubecl.result(image())
  def convert_color(image, from, to, opts \\ []), do: filter(:image_color, image, [from: from, to: to] ++ opts)

  @doc """
  `(x - mean) / std` per channel (a number or one per channel), as `:f32`; a `:u8` image is
  first scaled to 0.0..1.0, as torchvision's `ToTensor` then `Normalize`.
  """
  @spec normalize(image(), number() | [number()], number() | [number()], keyword()) :: ExCubecl.result(image())
  def normalize(image, mean, std, opts \\ []), do: filter(:image_normalize, image, [mean: mean, std: std] ++ opts)

  @doc "Gaussian blur of `sigma` (edges replicated). Options: `:size` (odd taps, default `2 * ceil(3 * sigma) + 1`), `:layout`."
  @spec gaussian_blur(image(), number(), keyword()) :: ExCubecl.result(image())
  def gaussian_blur(image, sigma, opts \\ []), do: filter(:image_blur, image, [sigma: sigma] ++ opts)

  for name <- [:to_float, :pad] do
    @doc "As `#{name}/2`, raising."
    def unquote(:"#{name}!")(image, opts \\ []), do: ExCubecl.bang(unquote(name)(image, opts))
  end

  @doc "As `resize/3`, raising."
  def resize!(image, size, opts \\ []), do: ExCubecl.bang(resize(image, size, opts))
  @doc "As `crop/4`, raising."
  def crop!(image, at, size, opts \\ []), do: ExCubecl.bang(crop(image, at, size, opts))
  @doc "As `center_crop/3`, raising."
  def center_crop!(image, size, opts \\ []), do: ExCubecl.bang(center_crop(image, size, opts))
  @doc "As `flip/3`, raising."
  def flip!(image, direction \\ :horizontal, opts \\ []), do: ExCubecl.bang(flip(image, direction, opts))
  @doc "As `rot90/3`, raising."
  def rot90!(image, k \\ 1, opts \\ []), do: ExCubecl.bang(rot90(image, k, opts))
  @doc "As `convert_color/4`, raising."
  def convert_color!(image, from, to, opts \\ []), do: ExCubecl.bang(convert_color(image, from, to, opts))
  @doc "As `normalize/4`, raising."
  def normalize!(image, mean, std, opts \\ []), do: ExCubecl.bang(normalize(image, mean, std, opts))
  @doc "As `gaussian_blur/3`, raising."
  def gaussian_blur!(image, sigma, opts \\ []), do: ExCubecl.bang(gaussian_blur(image, sigma, opts))

  defp filter(kernel, image, opts) do
    case ExCubecl.run_kernel(kernel, [image], opts) do
      {:ok, [out]} -> {:ok, out}
      {:error, _} = error -> error
    end
  end

  defp hw(shape, :nchw), do: shape |> Enum.take(-2) |> List.to_tuple()
  defp hw(shape, _nhwc), do: shape |> Enum.take(-3) |> Enum.take(2) |> List.to_tuple()
end
