defmodule ExBurn.MediaTest do
  # Image files into ExBurn.Backend tensors: the device pipeline (decode, resize, normalise,
  # colour, crop, flip) against the same steps in Nx on Nx.BinaryBackend, from the same
  # decoded pixels; the tensors are ExBurn.Backend tensors that Nx computes on.
  use ExUnit.Case, async: true

  alias ExCubecl.{Filter, Media}

  @moduletag :tmp_dir

  # Resampling weights of one axis, half-pixel centres (PyTorch's align_corners: false):
  # {lower index, upper index, weight of the upper}.
  defp linear_axis(inn, out) do
    for j <- 0..(out - 1) do
      pos = max((j + 0.5) * inn / out - 0.5, 0.0)
      i0 = min(trunc(pos), inn - 1)
      {i0, min(i0 + 1, inn - 1), pos - i0}
    end
  end

  defp bilinear_axis(t, axis, out) do
    {lo, hi, f} =
      linear_axis(elem(Nx.shape(t), axis), out)
      |> Enum.reduce({[], [], []}, fn {a, b, w}, {as, bs, ws} -> {[a | as], [b | bs], [w | ws]} end)

    {lo, hi, f} = {Enum.reverse(lo), Enum.reverse(hi), Enum.reverse(f)}
    shape = Tuple.duplicate(1, tuple_size(Nx.shape(t))) |> put_elem(axis, out)
    f = Nx.tensor(f, type: :f32, backend: Nx.BinaryBackend) |> Nx.reshape(shape)
    a = Nx.take(t, Nx.tensor(lo, backend: Nx.BinaryBackend), axis: axis)
    b = Nx.take(t, Nx.tensor(hi, backend: Nx.BinaryBackend), axis: axis)
    Nx.add(Nx.multiply(a, Nx.subtract(1.0, f)), Nx.multiply(b, f))
  end

  defp reference(pixels, {h, w}, mean, std) do
    pixels
    |> Nx.as_type(:f32)
    |> bilinear_axis(0, h)
    |> bilinear_axis(1, w)
    |> Nx.divide(255.0)
    |> Nx.subtract(Nx.tensor(mean, backend: Nx.BinaryBackend))
    |> Nx.divide(Nx.tensor(std, backend: Nx.BinaryBackend))
  end

  defp assert_all_close(a, b, tol) do
    diff =
      Nx.subtract(Nx.backend_copy(a, Nx.BinaryBackend), Nx.backend_copy(b, Nx.BinaryBackend))
      |> Nx.abs()
      |> Nx.reduce_max()
      |> Nx.to_number()

    assert diff <= tol, "max difference #{diff} > #{tol}"
  end

  test "decode, resize and normalise on the device equal Nx.BinaryBackend's", %{tmp_dir: dir} do
    pixels = for y <- 0..11, x <- 0..16, k <- 0..2, do: rem(y * 29 + x * 13 + k * 50 + rem(x * y, 5) * 21, 256)
    reference_pixels = Nx.tensor(pixels, type: :u8, backend: Nx.BinaryBackend) |> Nx.reshape({12, 17, 3})
    path = Path.join(dir, "img.png")
    :ok = Media.write(ExBurn.Media.from_nx(Nx.backend_copy(reference_pixels, ExBurn.Backend)), path)

    {mean, std} = {[0.485, 0.456, 0.406], [0.229, 0.224, 0.225]}

    for size <- [{8, 8}, {24, 30}, {5, 17}] do
      got = ExBurn.Media.read_batch!([path, path], size: size, mean: mean, std: std)
      assert Nx.shape(got) == {2, elem(size, 0), elem(size, 1), 3}
      assert %ExBurn.Backend{} = got.data
      want = reference(reference_pixels, size, mean, std)
      assert_all_close(got[0], want, 1.0e-4)
      assert_all_close(got[1], want, 1.0e-4)
    end

    # Files of other sizes are filtered one by one.
    other = Path.join(dir, "other.bmp")
    :ok = Media.write(Media.decode!(Media.encode!(Filter.crop!(Media.read!(path), {0, 0}, {9, 13}), :png)), other)
    mixed = ExBurn.Media.read_batch!([path, other], size: {8, 8}, mean: mean, std: std)
    assert Nx.shape(mixed) == {2, 8, 8, 3}
    assert_all_close(mixed[0], reference(reference_pixels, {8, 8}, mean, std), 1.0e-4)
    assert_all_close(mixed[1], reference(Nx.slice(reference_pixels, [0, 0, 0], [9, 13, 3]), {8, 8}, mean, std), 1.0e-4)
  end

  test "a filter chain on an NHWC batch equals Nx's, and the tensors are ExBurn.Backend's" do
    pixels = for i <- 0..(2 * 6 * 8 * 3 - 1), do: rem(i * 37, 256)
    ref = Nx.tensor(pixels, type: :u8, backend: Nx.BinaryBackend) |> Nx.reshape({2, 6, 8, 3})
    x = ExBurn.Media.from_nx(Nx.backend_copy(ref, ExBurn.Backend))

    # crop, mirror, quarter turn, gray (u8, rounded), to float.
    got =
      x
      |> Filter.crop!({1, 2}, {4, 5})
      |> Filter.flip!(:horizontal)
      |> Filter.rot90!(1)
      |> Filter.convert_color!(:rgb, :gray)
      |> Filter.to_float!()
      |> ExBurn.Media.to_nx()

    want =
      ref
      |> Nx.slice([0, 1, 2, 0], [2, 4, 5, 3])
      # flip: W reversed; rot90 (np.rot90): W reversed again, then H and W swapped.
      |> Nx.reverse(axes: [2])
      |> Nx.reverse(axes: [2])
      |> Nx.transpose(axes: [0, 2, 1, 3])
      |> Nx.as_type(:f32)
      |> Nx.dot([3], Nx.tensor([0.299, 0.587, 0.114], backend: Nx.BinaryBackend), [0])
      |> Nx.round()
      |> Nx.new_axis(3)
      |> Nx.divide(255.0)

    assert Nx.shape(got) == {2, 5, 4, 1}
    assert_all_close(got, want, 1.0 / 255 + 1.0e-6)
    # Nx computes on it as on any ExBurn.Backend tensor.
    assert_in_delta Nx.to_number(Nx.sum(got)), Nx.to_number(Nx.sum(want)), 0.05
  end
end
