defmodule ExCubecl.Transcode do
  @moduledoc """
  Video files from device buffers, through FFmpeg's libraries (the NIF's cargo feature
  `video`, as `ExCubecl.Video`): `write/3` encodes a list or stream of frames
  (`[height, width, 3]` `:u8` RGB buffers) to a file; `transcode/3` decodes a video, maps
  each frame on the device and encodes the result.

      frames = ExCubecl.Video.stream("in.mp4") |> Stream.map(&ExCubecl.Filter.flip!(&1))
      :ok = ExCubecl.Transcode.write(frames, "out.mp4", fps: 25)

  The container comes from the path's extension (`.mp4`, `.mkv`, `.avi`...); `:codec` is an
  FFmpeg encoder name: `"mpeg4"` (the default, in every FFmpeg build), `"libx264"` where
  FFmpeg has it, `"ffv1"` (lossless, 4:4:4). Frames are stored as YUV 4:2:0 (4:4:4 for
  ffv1), so even widths and heights are required.
  """
  alias ExCubecl.{Buffer, Error, Media, Native, Video}

  @doc """
  Encodes `frames` (an enumerable of `[height, width, 3]` `:u8` buffers, all of one size) to
  `path`. Options: `:fps` (25), `:codec` (`"mpeg4"`), `:bit_rate` (bits per second for the
  lossy codecs, 4_000_000).
  """
  @spec write(Enumerable.t(), Path.t(), keyword()) :: :ok | {:error, Error.t()}
  def write(frames, path, opts \\ []) do
    path = Path.expand(to_string(path))
    fps = Keyword.get(opts, :fps, 25)
    codec = to_string(Keyword.get(opts, :codec, "mpeg4"))
    bit_rate = Keyword.get(opts, :bit_rate, 4_000_000)

    Enum.reduce_while(frames, nil, fn
      %Buffer{shape: [h, w, 3]} = frame, nil ->
        with {:ok, writer} <-
               Media.native("Transcode.write", Native.video_writer_open(path, w, h, round(fps), codec, bit_rate)),
             :ok <- put(writer, frame) do
          {:cont, writer}
        else
          error -> {:halt, error}
        end

      %Buffer{} = frame, writer when is_reference(writer) ->
        case put(writer, frame) do
          :ok -> {:cont, writer}
          error -> {:halt, error}
        end

      other, _ ->
        {:halt,
         {:error,
          Error.new("Transcode.write", "frames are ExCubecl buffers [height, width, 3] u8", inspect(other, limit: 5))}}
    end)
    |> case do
      nil -> {:error, Error.new("Transcode.write", "no frames to write", path)}
      {:error, _} = error -> error
      writer -> with {:ok, _} <- Media.native("Transcode.write", Native.video_writer_close(writer)), do: :ok
    end
  end

  defp put(writer, %Buffer{ref: ref}) do
    with {:ok, true} <- Media.native("Transcode.write", Native.video_writer_write(writer, ref)), do: :ok
  end

  @doc """
  Decodes the video at `input`, applies `:map` (a function of a frame buffer giving a frame
  buffer, default the identity; e.g. an `ExCubecl.Filter` chain) to each frame on the device,
  and encodes the frames to `output`. Options: `:map`, `:codec`, `:fps` (the input's).
  """
  @spec transcode(Path.t(), Path.t(), keyword()) :: :ok | {:error, Error.t()}
  def transcode(input, output, opts \\ []) do
    with {:ok, info} <- Video.info(input) do
      map = Keyword.get(opts, :map, & &1)
      fps = Keyword.get(opts, :fps, if(info.fps > 0, do: info.fps, else: 25))

      try do
        input |> Video.stream() |> Stream.map(map) |> write(output, Keyword.merge(opts, fps: fps))
      rescue
        e in Error -> {:error, e}
      end
    end
  end
end
