defmodule ExCubecl.Video do
  @moduledoc """
  Frames of video files as device buffers, through FFmpeg's libraries (the NIF's cargo
  feature `video`; `available?/0` says whether this build has it, and every function of a
  build without it returns an error that says how to build with it).

  A frame is a buffer `[height, width, 3]` `:u8` (RGB), ready for `ExCubecl.Filter`:

      {:ok, video} = ExCubecl.Video.open("clip.mp4")
      {video.width, video.height, video.fps}
      ExCubecl.Video.stream("clip.mp4")
      |> Stream.map(&ExCubecl.Filter.resize!(&1, {224, 224}))
      |> Enum.take(16)
      {:ok, frame} = ExCubecl.Video.frame_at("clip.mp4", 1.5)

  Errors are `{:error, %ExCubecl.Error{}}` naming the operation, the reason and the file.
  """
  alias ExCubecl.{Buffer, Error, Media, Native}

  @enforce_keys [:ref, :path, :width, :height, :fps, :frames, :duration, :codec]
  defstruct @enforce_keys

  @typedoc "An open video: `frames` is the container's count (0 where it gives none), `duration` seconds (0.0 where unknown)."
  @type t :: %__MODULE__{
          ref: reference(),
          path: String.t(),
          width: pos_integer(),
          height: pos_integer(),
          fps: float(),
          frames: non_neg_integer(),
          duration: float(),
          codec: String.t()
        }

  @doc "Whether this build of the NIF reads and writes video (cargo feature `video`)."
  @spec available?() :: boolean()
  def available?, do: Native.video_available()

  @doc "Opens the video file at `path` (its first video stream)."
  @spec open(Path.t()) :: ExCubecl.result(t())
  def open(path) do
    path = Path.expand(to_string(path))

    with {:ok, {ref, w, h, fps, frames, duration, codec}} <- Media.native("Video.open", Native.video_open(path)) do
      {:ok,
       %__MODULE__{
         ref: ref,
         path: path,
         width: w,
         height: h,
         fps: fps,
         frames: frames,
         duration: duration,
         codec: codec
       }}
    end
  end

  @doc "The metadata of the video at `path`: `%{width, height, fps, frames, duration, codec}`."
  @spec info(Path.t()) :: ExCubecl.result(map())
  def info(path) do
    with {:ok, video} <- open(path) do
      close(video)
      {:ok, video |> Map.from_struct() |> Map.drop([:ref, :path])}
    end
  end

  @doc "The next frame of `video`, `:eof` after the last. Options: `:device`."
  @spec next_frame(t(), keyword()) :: ExCubecl.result(Buffer.t()) | :eof
  def next_frame(%__MODULE__{ref: ref}, opts \\ []) do
    with {:ok, device} <- Media.device_opt("Video.next_frame", opts) do
      case Media.native("Video.next_frame", Native.video_next(ref, device)) do
        {:ok, nil} -> :eof
        {:ok, {frame, shape, _seconds}} -> {:ok, %Buffer{ref: frame, shape: shape, dtype: :u8, device: device}}
        error -> error
      end
    end
  end

  @doc "Moves `video` so that its next frame is the first at or after `seconds`."
  @spec seek(t(), number()) :: :ok | {:error, Error.t()}
  def seek(%__MODULE__{ref: ref}, seconds) when is_number(seconds) do
    with {:ok, true} <- Media.native("Video.seek", Native.video_seek(ref, seconds * 1.0)), do: :ok
  end

  @doc "Closes `video` (also done when it is garbage-collected)."
  @spec close(t()) :: :ok
  def close(%__MODULE__{ref: ref}) do
    Native.video_close(ref)
    :ok
  end

  @doc """
  The frames of the video at `path` as a lazy `Stream` of buffers, decoded one at a time as
  the stream is consumed. Options: `:device`. Raises `ExCubecl.Error` where the file can't
  be read.
  """
  @spec stream(Path.t(), keyword()) :: Enumerable.t()
  def stream(path, opts \\ []) do
    Stream.resource(
      fn -> ExCubecl.bang(open(path)) end,
      fn video ->
        case next_frame(video, opts) do
          {:ok, frame} -> {[frame], video}
          :eof -> {:halt, video}
          {:error, e} -> raise e
        end
      end,
      &close/1
    )
  end

  @doc "The first frame at or after `seconds` of the video at `path`. Options: `:device`."
  @spec frame_at(Path.t(), number(), keyword()) :: ExCubecl.result(Buffer.t())
  def frame_at(path, seconds, opts \\ []) do
    with {:ok, video} <- open(path) do
      try do
        with :ok <- seek(video, seconds) do
          case next_frame(video, opts) do
            :eof -> {:error, Error.new("Video.frame_at", "the video ends before #{seconds} s", video.path)}
            other -> other
          end
        end
      after
        close(video)
      end
    end
  end
end
