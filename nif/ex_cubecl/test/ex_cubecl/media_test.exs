defmodule ExCubecl.MediaTest do
  # ExCubecl.Media, ExCubecl.Audio and ExCubecl.Filter on files the tests make: encode then
  # decode (exact for lossless formats, a PSNR bound for JPEG), corrupt and truncated files
  # (errors naming the file, never a crash), and the filters against references computed
  # here in Elixir. ExBurn's media_test.exs checks a filter pipeline against Nx.BinaryBackend.
  use ExUnit.Case, async: true

  alias ExCubecl.{Audio, Filter, Media}

  @moduletag :tmp_dir

  # A [h, w, c] u8 image with some structure (gradients and a pattern).
  defp pixels(h, w, c),
    do:
      for(
        y <- 0..(h - 1),
        x <- 0..(w - 1),
        k <- 0..(c - 1),
        do: rem(y * 37 + x * 11 + k * 71 + rem(x * y, 7) * 19, 256)
      )

  defp image(h, w, c), do: ExCubecl.buffer!(pixels(h, w, c), [h, w, c], :u8)

  # A smooth image, as photographs are: JPEG's quality bound is about those.
  defp smooth(h, w),
    do: for(y <- 0..(h - 1), x <- 0..(w - 1), k <- 0..2, do: round(127 + 100 * :math.sin(x / 5 + k) * :math.cos(y / 7)))

  defp psnr(a, b) do
    mse = Enum.zip_with(a, b, fn x, y -> (x - y) * (x - y) end) |> Enum.sum() |> Kernel./(length(a))
    if mse == 0, do: :infinity, else: 10 * :math.log10(255 * 255 / mse)
  end

  describe "images" do
    test "lossless formats give back the same pixels" do
      for {format, channels} <- [png: 1, png: 2, png: 3, png: 4, bmp: 3, bmp: 4, webp: 3, webp: 4] do
        img = image(5, 7, channels)
        {:ok, data} = Media.encode(img, format)
        {:ok, back} = Media.decode(data)
        assert {back.shape, back.dtype} == {[5, 7, channels], :u8}, "#{format}, #{channels} channels"
        assert ExCubecl.read!(back) == ExCubecl.read!(img), "#{format}, #{channels} channels"
      end
    end

    test "a GIF of few colours gives back the same pixels, and its frames" do
      values = for y <- 0..5, x <- 0..7, k <- 0..2, do: if(rem(x + y, 3) == 0, do: 200, else: 40 + 60 * k)
      img = ExCubecl.buffer!(values, [6, 8, 3], :u8)
      {:ok, gif} = Media.encode(img, :gif)
      assert ExCubecl.read!(Media.decode!(gif, channels: 3)) == ExCubecl.read!(img)
      {:ok, frames} = Media.decode_frames(gif)
      assert frames.shape == [1, 6, 8, 4]
    end

    test "JPEG is within a PSNR bound, and :f32 is u8 / 255" do
      values = smooth(32, 48)
      img = ExCubecl.buffer!(values, [32, 48, 3], :u8)
      {:ok, jpeg} = Media.encode(img, :jpeg, quality: 95)
      back = Media.decode!(jpeg)
      assert back.shape == [32, 48, 3]
      assert psnr(ExCubecl.to_list!(back), values) > 35.0

      float = Media.decode!(jpeg, type: :f32)
      assert {float.shape, float.dtype} == {[32, 48, 3], :f32}
      for {f, u} <- Enum.zip(ExCubecl.to_list!(float), ExCubecl.to_list!(back)), do: assert(abs(f - u / 255) < 1.0e-6)
    end

    test "files: write/3 by extension, read/2 with channels", %{tmp_dir: dir} do
      img = image(4, 6, 3)

      for ext <- ~w(png bmp webp) do
        path = Path.join(dir, "img.#{ext}")
        assert :ok = Media.write(img, path)
        assert ExCubecl.read!(Media.read!(path)) == ExCubecl.read!(img)
      end

      gray = Media.read!(Path.join(dir, "img.png"), channels: 1)
      rgba = Media.read!(Path.join(dir, "img.png"), channels: 4)
      assert {gray.shape, rgba.shape} == {[4, 6, 1], [4, 6, 4]}
      assert ExCubecl.to_list!(rgba) |> Enum.drop(3) |> Enum.take_every(4) |> Enum.uniq() == [255]
    end

    test "float images encode rounded and clamped" do
      img = ExCubecl.buffer!([0.0, 0.5, 1.0, -1.0, 2.0, 0.2], [1, 2, 3], :f32)
      assert ExCubecl.to_list!(Media.decode!(Media.encode!(img, :png))) == [0, 128, 255, 0, 255, 51]
    end

    test "corrupt, truncated and missing files are errors naming the file", %{tmp_dir: dir} do
      {:ok, png} = Media.encode(image(16, 16, 3), :png)
      truncated = Path.join(dir, "truncated.png")
      File.write!(truncated, binary_part(png, 0, div(byte_size(png), 2)))
      assert {:error, %ExCubecl.Error{op: "Media.read", details: details}} = Media.read(truncated)
      assert details =~ "truncated.png"

      garbage = Path.join(dir, "garbage.jpg")
      File.write!(garbage, <<0xFF, 0xD8, 0xFF, 0xE0>> <> :binary.copy(<<1, 2, 3, 250>>, 64))
      assert {:error, %ExCubecl.Error{reason: reason, details: details}} = Media.read(garbage)
      assert reason =~ "decode" and details =~ "garbage.jpg"

      assert {:error, %ExCubecl.Error{reason: reason}} = Media.decode(:crypto.strong_rand_bytes(200))
      assert reason =~ "not an image"
      assert {:error, %ExCubecl.Error{reason: reason, details: details}} = Media.read(Path.join(dir, "missing.png"))
      assert reason =~ "no such file" and details =~ "missing.png"

      # Every prefix of a small PNG and JPEG: an error or an image, never a crash.
      {:ok, jpeg} = Media.encode(image(8, 8, 3), :jpeg)

      for data <- [png, jpeg], n <- 0..byte_size(data)//7 do
        case Media.decode(binary_part(data, 0, n)) do
          {:ok, %ExCubecl.Buffer{}} -> :ok
          {:error, %ExCubecl.Error{}} -> :ok
        end
      end
    end

    test "bad options and shapes are errors" do
      img = image(2, 2, 3)
      assert {:error, %ExCubecl.Error{reason: reason}} = Media.encode(image(2, 2, 4), :jpeg)
      assert reason =~ "channels"
      assert {:error, %ExCubecl.Error{reason: reason}} = Media.encode(img, :tiff)
      assert reason =~ "unknown image format"
      assert {:error, %ExCubecl.Error{}} = Media.encode(ExCubecl.buffer!([1, 2], [2], :u8), :png)
      assert {:error, %ExCubecl.Error{}} = Media.encode(img, :jpeg, quality: 0)
      assert {:error, %ExCubecl.Error{}} = Media.decode(Media.encode!(img, :png), channels: 5)
      assert {:error, %ExCubecl.Error{}} = Media.decode(Media.encode!(img, :png), type: :f64)
      assert_raise ExCubecl.Error, ~r/Media.decode/, fn -> Media.decode!("nope") end
    end
  end

  describe "filters" do
    # [n, h, w, c] (or [n, c, h, w]) lists from the flat values.
    defp nested(values, [_ | rest]), do: Enum.reduce(Enum.reverse(rest), values, &Enum.chunk_every(&2, &1))

    defp close(got, want, tol) do
      assert length(got) == length(want)

      for {g, w} <- Enum.zip(got, want),
          do: assert(abs(g - w) <= tol, "got #{inspect(got, limit: 20)}, want #{inspect(want, limit: 20)}")
    end

    test "crop, flip and rot90 are the same views in NHWC and NCHW" do
      x = image(5, 6, 2)
      [rows] = nested(ExCubecl.to_list!(x), [1, 5, 6, 2])

      crop = rows |> Enum.slice(1, 3) |> Enum.map(&Enum.slice(&1, 2, 4))
      assert ExCubecl.to_list!(Filter.crop!(x, {1, 2}, {3, 4})) == List.flatten(crop)
      assert ExCubecl.to_list!(Filter.flip!(x)) == List.flatten(Enum.map(rows, &Enum.reverse/1))
      assert ExCubecl.to_list!(Filter.flip!(x, :vertical)) == List.flatten(Enum.reverse(rows))
      # rot90: row i of the result is column (w - 1 - i) of the image.
      rot = for i <- 5..0//-1, do: Enum.map(rows, &Enum.at(&1, i))
      r = Filter.rot90!(x)
      assert {r.shape, ExCubecl.to_list!(r)} == {[6, 5, 2], List.flatten(rot)}
      assert ExCubecl.to_list!(Filter.rot90!(x, 4)) == ExCubecl.to_list!(x)
      assert ExCubecl.to_list!(Filter.rot90!(Filter.rot90!(x, 1), -1)) == ExCubecl.to_list!(x)

      # The same crop of the NCHW batch [1, 2, 5, 6].
      [nchw] =
        ExCubecl.run_kernel!(:permute, [ExCubecl.run_kernel!(:reshape, [x], shape: [1, 5, 6, 2]) |> hd()],
          axes: [0, 3, 1, 2]
        )

      c = Filter.crop!(nchw, {1, 2}, {3, 4}, layout: :nchw)
      [back] = ExCubecl.run_kernel!(:permute, [c], axes: [0, 2, 3, 1])
      assert ExCubecl.to_list!(back) == List.flatten(crop)
    end

    test "resize: nearest and area against Elixir references, bilinear of a constant" do
      x = image(4, 6, 1)
      [rows] = nested(ExCubecl.to_list!(x), [1, 4, 6, 1])
      at = fn y, x -> rows |> Enum.at(y) |> Enum.at(x) |> hd() end

      # nearest: source index floor(i * in / out).
      near = for i <- 0..7, j <- 0..2, do: at.(div(i * 4, 8), div(j * 6, 3))
      assert ExCubecl.to_list!(Filter.resize!(x, {8, 3}, mode: :nearest)) == near

      # area 2x: means of 2x2 blocks (u8: rounded).
      area =
        for i <- 0..1,
            j <- 0..2,
            do: (at.(2 * i, 2 * j) + at.(2 * i + 1, 2 * j) + at.(2 * i, 2 * j + 1) + at.(2 * i + 1, 2 * j + 1)) / 4

      f = Filter.to_float!(x, scale: 1.0)
      close(ExCubecl.to_list!(Filter.resize!(f, {2, 3}, mode: :area)), area, 1.0e-4)

      const = ExCubecl.buffer!(List.duplicate(0.25, 2 * 3 * 4 * 3), [2, 3, 4, 3], :f32)

      for mode <- [:bilinear, :bicubic, :nearest, :area] do
        r = Filter.resize!(const, {5, 7}, mode: mode)
        assert r.shape == [2, 5, 7, 3]
        close(ExCubecl.to_list!(r), List.duplicate(0.25, 2 * 5 * 7 * 3), 1.0e-5)
      end
    end

    test "normalize, colour and blur against Elixir references" do
      x = image(3, 4, 3)
      values = ExCubecl.to_list!(x)
      {mean, std} = {[0.485, 0.456, 0.406], [0.229, 0.224, 0.225]}

      want =
        values
        |> Enum.chunk_every(3)
        |> Enum.flat_map(fn px -> Enum.zip_with([px, mean, std], fn [v, m, s] -> (v / 255 - m) / s end) end)

      n = Filter.normalize!(x, mean, std)
      assert {n.shape, n.dtype} == {[3, 4, 3], :f32}
      close(ExCubecl.to_list!(n), want, 1.0e-4)

      gray = values |> Enum.chunk_every(3) |> Enum.map(fn [r, g, b] -> 0.299 * r + 0.587 * g + 0.114 * b end)
      close(ExCubecl.to_list!(Filter.convert_color!(x, :rgb, :gray)), gray, 0.5 + 1.0e-3)

      # YCbCr and back: within 2 levels (two roundings to u8).
      back = x |> Filter.convert_color!(:rgb, :ycbcr) |> Filter.convert_color!(:yuv, :rgb)
      close(ExCubecl.to_list!(back), values, 2)
      f = Filter.to_float!(x)

      close(
        ExCubecl.to_list!(f |> Filter.convert_color!(:rgb, :ycbcr) |> Filter.convert_color!(:ycbcr, :rgb)),
        ExCubecl.to_list!(f),
        1.0e-5
      )

      g3 = x |> Filter.convert_color!(:rgb, :gray) |> Filter.convert_color!(:gray, :rgb)
      assert g3.shape == [3, 4, 3]

      # Blur of one channel, 5 taps, edges replicated, worked out here.
      img = for(y <- 0..4, x <- 0..5, do: (y * 6 + x) * 1.0 + if(x == 2 and y == 2, do: 30.0, else: 0.0))
      sigma = 0.8
      taps = for i <- -2..2, do: :math.exp(-i * i / (2 * sigma * sigma))
      taps = Enum.map(taps, &(&1 / Enum.sum(taps)))
      px = fn y, x -> Enum.at(img, min(max(y, 0), 4) * 6 + min(max(x, 0), 5)) end
      cols = for y <- 0..4, x <- 0..5, do: Enum.sum(for {t, i} <- Enum.with_index(taps, -2), do: t * px.(y + i, x))
      cpx = fn y, x -> Enum.at(cols, y * 6 + min(max(x, 0), 5)) end
      want = for y <- 0..4, x <- 0..5, do: Enum.sum(for {t, i} <- Enum.with_index(taps, -2), do: t * cpx.(y, x + i))
      b = Filter.gaussian_blur!(ExCubecl.buffer!(img, [5, 6, 1], :f32), sigma, size: 5)
      close(ExCubecl.to_list!(b), want, 1.0e-4)
    end

    test "pad, center_crop, batches and errors" do
      x = ExCubecl.buffer!(Enum.to_list(1..8), [2, 2, 2, 1], :u8)
      p = Filter.pad!(x, top: 1, right: 2, value: 9)
      assert p.shape == [2, 3, 4, 1]
      assert ExCubecl.to_list!(p) |> Enum.take(12) == [9, 9, 9, 9, 1, 2, 9, 9, 3, 4, 9, 9]

      assert Filter.center_crop!(image(6, 8, 3), {2, 4}) |> ExCubecl.to_list!() ==
               ExCubecl.to_list!(Filter.crop!(image(6, 8, 3), {2, 2}, {2, 4}))

      assert {:error, %ExCubecl.Error{op: "image_crop"}} = Filter.crop(x, {1, 1}, {5, 5})
      assert {:error, %ExCubecl.Error{op: "image_resize"}} = Filter.resize(x, {0, 3})
      assert {:error, %ExCubecl.Error{reason: reason}} = Filter.resize(x, {3, 3}, mode: :lanczos)
      assert reason =~ "unknown mode"
      assert {:error, %ExCubecl.Error{}} = Filter.normalize(x, [0.5, 0.5], [1.0, 1.0])
      assert {:error, %ExCubecl.Error{}} = Filter.normalize(x, 0.5, 0.0)
      assert {:error, %ExCubecl.Error{}} = Filter.convert_color(x, :rgb, :gray)
      assert {:error, %ExCubecl.Error{}} = Filter.to_float(ExCubecl.buffer!([1.0], [1, 1, 1], :f32))
      assert {:error, %ExCubecl.Error{}} = Filter.resize(ExCubecl.buffer!([1, 2], [2], :u8), {2, 2})
      assert {:error, %ExCubecl.Error{}} = Filter.gaussian_blur(x, -1.0)
      assert {:error, %ExCubecl.Error{}} = Filter.resize(ExCubecl.buffer!([1, 2, 3, 4], [1, 2, 2, 1], :s32), {2, 2})
    end
  end

  describe "audio" do
    defp tone(frames, channels, rate),
      do:
        for(
          i <- 0..(frames - 1),
          c <- 0..(channels - 1),
          do: 0.5 * :math.sin(2 * :math.pi() * 440 * (c + 1) * i / rate)
        )

    test "WAV round trips: float exact, 16-bit within a step", %{tmp_dir: dir} do
      values = tone(400, 2, 8000)
      samples = ExCubecl.buffer!(values, [400, 2], :f32)
      path = Path.join(dir, "tone.wav")
      assert :ok = Audio.write({samples, 8000}, path, float: true)
      {:ok, {back, 8000}} = Audio.read(path)
      assert {back.shape, back.dtype} == {[400, 2], :f32}
      assert ExCubecl.read!(back) == ExCubecl.read!(samples)

      {:ok, wav16} = Audio.encode({samples, 8000})
      {back16, 8000} = Audio.decode!(wav16)
      close(ExCubecl.to_list!(back16), ExCubecl.to_list!(samples), 1.0 / 16_000)
    end

    # A FLAC file written here: STREAMINFO, then one frame of VERBATIM subframes (16-bit
    # samples as they are), with the frame's CRC-8 and CRC-16, as the format specifies.
    defp flac(channels, rate, samples) do
      import Bitwise
      n = div(length(samples), channels)
      info = <<n::16, n::16, 0::24, 0::24, rate::20, channels - 1::3, 15::5, n::36, 0::128>>
      header = <<0xFFF8::16, 0b0110::4, 0::4, channels - 1::4, 0b100::3, 0::1, 0, n - 1>>

      crc8 = fn bin ->
        for <<b <- bin>>, reduce: 0 do
          acc ->
            Enum.reduce(1..8, bxor(acc, b), fn _, c ->
              if (c &&& 0x80) != 0, do: bxor(c <<< 1, 0x07) &&& 0xFF, else: c <<< 1 &&& 0xFF
            end)
        end
      end

      crc16 = fn bin ->
        for <<b <- bin>>, reduce: 0 do
          acc ->
            Enum.reduce(1..8, bxor(acc, b <<< 8), fn _, c ->
              if (c &&& 0x8000) != 0, do: bxor(c <<< 1, 0x8005) &&& 0xFFFF, else: c <<< 1 &&& 0xFFFF
            end)
        end
      end

      frames = Enum.chunk_every(samples, channels)

      subframes =
        for c <- 0..(channels - 1),
            into: <<>>,
            do: <<0x02>> <> for(f <- frames, into: <<>>, do: <<Enum.at(f, c)::signed-16>>)

      frame = header <> <<crc8.(header)>> <> subframes
      "fLaC" <> <<1::1, 0::7, 34::24>> <> info <> frame <> <<crc16.(frame)::16>>
    end

    test "FLAC decodes to the samples it holds", %{tmp_dir: dir} do
      ints = for i <- 0..199, c <- 0..1, do: round(12_000 * :math.sin(i / (7 + c)))
      path = Path.join(dir, "tone.flac")
      File.write!(path, flac(2, 22_050, ints))
      {:ok, {samples, 22_050}} = Audio.read(path)
      assert {samples.shape, samples.dtype} == {[200, 2], :f32}
      close(ExCubecl.to_list!(samples), Enum.map(ints, &(&1 / 32_768)), 1.0e-6)
      # A flipped bit in the frame fails its CRC: no samples, an error naming the file.
      <<head::binary-size(60), b, rest::binary>> = File.read!(path)
      File.write!(path, head <> <<Bitwise.bxor(b, 1)>> <> rest)
      assert {:error, %ExCubecl.Error{details: details}} = Audio.read(path)
      assert details =~ "tone.flac"
    end

    test "resample on the device" do
      values = tone(80, 1, 8000)
      samples = ExCubecl.buffer!(values, [80, 1], :f32)
      up = Audio.resample!(samples, 8000, 16_000)
      assert up.shape == [160, 1]
      # Half-sample centres: output j samples the input at (j + 0.5) / 2 - 0.5.
      want =
        for j <- 0..159,
            do:
              (
                pos = max((j + 0.5) / 2 - 0.5, 0.0)
                i = trunc(pos)
                f = pos - i
                Enum.at(values, i) * (1 - f) + Enum.at(values, min(i + 1, 79)) * f
              )

      close(ExCubecl.to_list!(up), want, 1.0e-5)
      assert Audio.resample!(samples, 8000, 3000).shape == [30, 1]
      assert {:error, %ExCubecl.Error{}} = Audio.resample(samples, 0, 10)
    end

    test "corrupt and truncated audio are errors naming the file", %{tmp_dir: dir} do
      {:ok, wav} = Audio.encode({ExCubecl.buffer!(tone(64, 1, 8000), [64, 1], :f32), 8000})
      path = Path.join(dir, "header.wav")
      File.write!(path, binary_part(wav, 0, 44))
      assert {:error, %ExCubecl.Error{op: "Audio.read", details: details}} = Audio.read(path)
      assert details =~ "header.wav"
      assert {:error, %ExCubecl.Error{reason: reason}} = Audio.decode(:binary.copy(<<7, 1, 200>>, 100))
      assert reason =~ "not audio"

      for n <- 0..byte_size(wav)//9 do
        case Audio.decode(binary_part(wav, 0, n)) do
          {:ok, {%ExCubecl.Buffer{}, 8000}} -> :ok
          {:error, %ExCubecl.Error{}} -> :ok
        end
      end

      assert {:error, %ExCubecl.Error{}} = Audio.encode({ExCubecl.buffer!([1, 2], [2, 1], :u8), 8000})
      assert {:error, %ExCubecl.Error{}} = Audio.encode({ExCubecl.buffer!([0.1], [1, 1], :f32), 0})
    end
  end
end
