defmodule ExCubecl.Audio do
  @moduledoc """
  Audio files into device buffers and back. WAV, FLAC, MP3 and OGG/Vorbis are decoded on
  the host by Rust's `symphonia` into `{samples, rate}`: `samples` an `:f32` buffer
  `[frames, channels]` (-1.0..1.0, the first audio track), `rate` in Hz. `write/3` writes
  WAV (16-bit PCM, or 32-bit float); `resample/3` runs on the device.

      {:ok, {samples, 44_100}} = ExCubecl.Audio.read("speech.flac")
      {:ok, s16k} = ExCubecl.Audio.resample(samples, 44_100, 16_000)
      :ok = ExCubecl.Audio.write({s16k, 16_000}, "speech.wav")

  Errors are `{:error, %ExCubecl.Error{}}` naming the operation, the reason and the file;
  corrupt files are errors, never crashes.
  """
  alias ExCubecl.{Buffer, Error, Media, Native}

  @type audio :: {Buffer.t(), pos_integer()}

  @doc "The audio of the file at `path`: `{samples, rate}`. Options: `:device`."
  @spec read(Path.t(), keyword()) :: ExCubecl.result(audio())
  def read(path, opts \\ []) do
    ext = path |> to_string() |> Path.extname() |> String.trim_leading(".")

    with {:ok, data} <- Media.read_file("Audio.read", path),
         do: decode_audio("Audio.read", data, if(ext == "", do: nil, else: ext), opts, Path.expand(path))
  end

  @doc "As `read/2`, raising."
  @spec read!(Path.t(), keyword()) :: audio()
  def read!(path, opts \\ []), do: ExCubecl.bang(read(path, opts))

  @doc "The audio in the bytes of a file. Options: `:device`, `:format` (a hint: `:wav`, `:flac`, `:mp3`, `:ogg`)."
  @spec decode(binary(), keyword()) :: ExCubecl.result(audio())
  def decode(data, opts \\ [])

  def decode(data, opts) when is_binary(data),
    do: decode_audio("Audio.decode", data, opts[:format] && to_string(opts[:format]), opts, "binary")

  def decode(other, _opts),
    do: {:error, Error.new("Audio.decode", "expects the bytes of an audio file", inspect(other, limit: 5))}

  @doc "As `decode/2`, raising."
  @spec decode!(binary(), keyword()) :: audio()
  def decode!(data, opts \\ []), do: ExCubecl.bang(decode(data, opts))

  @doc "Writes `{samples, rate}` to `path` as WAV: 16-bit PCM, or 32-bit float with `float: true`."
  @spec write(audio(), Path.t(), keyword()) :: :ok | {:error, Error.t()}
  def write(audio, path, opts \\ []) do
    with {:ok, data} <- encode_audio("Audio.write", audio, opts, Path.expand(path)) do
      case File.write(path, data) do
        :ok ->
          :ok

        {:error, reason} ->
          {:error, Error.new("Audio.write", "cannot write the file: #{:file.format_error(reason)}", Path.expand(path))}
      end
    end
  end

  @doc "As `write/3`, raising."
  @spec write!(audio(), Path.t(), keyword()) :: :ok
  def write!(audio, path, opts \\ []), do: ExCubecl.bang(write(audio, path, opts))

  @doc "The bytes of a WAV file of `{samples, rate}`; options as `write/3`."
  @spec encode(audio(), keyword()) :: ExCubecl.result(binary())
  def encode(audio, opts \\ []), do: encode_audio("Audio.encode", audio, opts, "binary")

  @doc """
  `samples` (`[frames, channels]`, float) from rate `from` to rate `to`, on the device:
  `round(frames * to / from)` frames, linear interpolation at half-sample centres (the
  bilinear interpolate kernel). No low-pass filter: downsampling aliases what lies above
  the new Nyquist frequency.
  """
  @spec resample(Buffer.t(), pos_integer(), pos_integer()) :: ExCubecl.result(Buffer.t())
  def resample(samples, from, to) do
    case ExCubecl.run_kernel(:audio_resample, [samples], from: from, to: to) do
      {:ok, [out]} -> {:ok, out}
      {:error, _} = error -> error
    end
  end

  @doc "As `resample/3`, raising."
  @spec resample!(Buffer.t(), pos_integer(), pos_integer()) :: Buffer.t()
  def resample!(samples, from, to), do: ExCubecl.bang(resample(samples, from, to))

  defp decode_audio(op, data, ext, opts, label) do
    with {:ok, device} <- Media.device_opt(op, opts),
         {:ok, {ref, shape, rate}} <- Media.native(op, Native.audio_decode(data, ext, device, label)) do
      {:ok, {%Buffer{ref: ref, shape: shape, dtype: :f32, device: device}, rate}}
    end
  end

  defp encode_audio(op, {%Buffer{ref: ref}, rate}, opts, label) when is_integer(rate) and rate > 0,
    do: Media.native(op, Native.audio_encode(ref, rate, Keyword.get(opts, :float, false) == true, label))

  defp encode_audio(op, other, _opts, _label),
    do:
      {:error,
       Error.new(
         op,
         "expects {samples, rate}: an f32 buffer [frames, channels] and a positive rate",
         inspect(other, limit: 5)
       )}
end
