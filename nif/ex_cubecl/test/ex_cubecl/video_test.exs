defmodule ExCubecl.VideoTest do
  # ExCubecl.Video and ExCubecl.Transcode: a short generated video written and read back
  # (mpeg4 within a PSNR bound, ffv1 within a few levels), metadata, seeking, a transcode
  # with a device filter, and bad files. In a NIF built without the `video` feature: the
  # error that says how to build with it.
  use ExUnit.Case, async: true

  alias ExCubecl.Video

  @moduletag :tmp_dir

  if ExCubecl.Native.video_available() do
    alias ExCubecl.{Filter, Transcode}
    @frames 12

    # Frame i: a smooth pattern that moves i pixels right, [24, 32, 3] u8 (smooth, as camera
    # frames are: 4:2:0 chroma keeps them).
    defp frame(i) do
      values =
        for y <- 0..23, x <- 0..31, k <- 0..2, do: round(127 + 100 * :math.sin((x + i) / 4 + k) * :math.cos(y / 6))

      ExCubecl.buffer!(values, [24, 32, 3], :u8)
    end

    defp psnr(a, b) do
      {a, b} = {ExCubecl.to_list!(a), ExCubecl.to_list!(b)}
      mse = Enum.zip_with(a, b, fn x, y -> (x - y) * (x - y) end) |> Enum.sum() |> Kernel./(length(a))
      if mse == 0, do: 99.0, else: 10 * :math.log10(255 * 255 / mse)
    end

    test "a generated video round trips, with metadata, seeking and a transcode", %{tmp_dir: dir} do
      frames = for i <- 0..(@frames - 1), do: frame(i)

      for {codec, ext, bound} <- [{"ffv1", "mkv", 40.0}, {"mpeg4", "avi", 30.0}] do
        path = Path.join(dir, "clip.#{ext}")
        assert :ok = Transcode.write(frames, path, fps: 10, codec: codec)
        assert {:ok, %{width: 32, height: 24, fps: fps}} = Video.info(path)
        assert_in_delta fps, 10.0, 0.01
        back = path |> Video.stream() |> Enum.to_list()
        assert length(back) == @frames, codec
        assert Enum.all?(back, &(&1.shape == [24, 32, 3] and &1.dtype == :u8))
        for {a, b} <- Enum.zip(frames, back), do: assert(psnr(a, b) > bound, "#{codec}: #{psnr(a, b)} dB")

        {:ok, f5} = Video.frame_at(path, 0.5)
        assert psnr(f5, Enum.at(frames, 5)) > bound
      end

      # A transcode with a filter on the device: every frame mirrored.
      src = Path.join(dir, "clip.mkv")
      dst = Path.join(dir, "flipped.mkv")
      assert :ok = Transcode.transcode(src, dst, codec: "ffv1", map: &Filter.flip!(&1))
      flipped = dst |> Video.stream() |> Enum.take(2)
      assert psnr(hd(flipped), Filter.flip!(hd(frames))) > 40.0
    end

    test "bad files and frames are errors naming the file", %{tmp_dir: dir} do
      junk = Path.join(dir, "junk.mp4")
      File.write!(junk, :binary.copy(<<0, 1, 2, 3>>, 100))
      assert {:error, %ExCubecl.Error{op: "Video.open", details: details}} = Video.open(junk)
      assert details =~ "junk.mp4"
      assert {:error, %ExCubecl.Error{}} = Video.open(Path.join(dir, "missing.mp4"))

      assert {:error, %ExCubecl.Error{}} =
               Transcode.write([frame(0), ExCubecl.buffer!([1], [1, 1, 1], :u8)], Path.join(dir, "bad.avi"))

      assert {:error, %ExCubecl.Error{reason: reason}} =
               Transcode.write([frame(0)], Path.join(dir, "x.avi"), codec: "no-such-codec")

      assert reason =~ "no encoder"
      assert {:error, %ExCubecl.Error{}} = Transcode.write([], Path.join(dir, "empty.avi"))
    end
  else
    test "a NIF without the video feature says how to build it", %{tmp_dir: dir} do
      assert {:error, %ExCubecl.Error{op: "Video.open", reason: reason, details: details}} =
               Video.open(Path.join(dir, "a.mp4"))

      assert reason =~ "without the `video` feature"
      assert details =~ "EX_CUBECL_FEATURES"
      refute Video.available?()
    end
  end
end
