defmodule ExCubecl.Native do
  @moduledoc """
  The NIF stubs of ExCubecl's one native library (`native/ex_cubecl_nif`).

  Every function returns `{:ok, value}` or `{:error, %{op: op, reason: reason, details: details}}`
  (a panic in Rust is caught and becomes such an error). Call `ExCubecl` instead: it checks
  terms before they reach the NIF and raises `ExCubecl.Error` from its bang forms.

  Scheduling: the NIFs that launch kernels (`buffer/4`, `run_kernel/4`, `pipeline_run/3`,
  `program_new/4`, `program_run/2`, `program_resume/2`, `program_submit/2`, `require_grad/1`,
  `backward/2`) run
  on dirty CPU schedulers, those that wait for the device (`read/1`, `synchronize/1`,
  `memory_info/1`, `supported_dtypes/1`, `devices/0`, `default_device/0`, `wait/2`,
  `program_abort/1`, `shutdown/0`, and `record_load/2`, `record_save/3` and `file_replace/2`, which read and write
  files, and the media codecs `image_decode/4`, `image_decode_frames/4`, `image_encode/4`,
  `audio_decode/4`, `audio_encode/4`, and the `video_*` NIFs but `video_available/0`) on dirty IO
  schedulers. The NIFs that touch no device (`shape/1`, `dtype/1`, `device/1`, `free/1`, `assign/2`,
  `kernels/0`, `runtimes/0`, `launch_count/0`, `put_allocation_limit/1`, `pipeline_new/0`, `pipeline_add/4`, `pipeline_free/1`, `poll/1`,
  `program_info/1`)
  and the submissions (`submit_*`, which queue and return) stay on normal schedulers:
  `bench/call_overhead.exs` measures them in microseconds (8 µs for `shape/1` in a debug
  build on lavapipe), far under the ~1 ms a normal scheduler may be held.
  `program_run_normal/3` runs a program on the normal scheduler only where its last run took
  less host time than the caller allows, and answers `:dirty` (having done nothing) otherwise:
  `ExBurn.Defn.Compiler` then calls `program_run/2`.
  """
  # The library: built from source (`priv/libex_cubecl_nif.so`) or precompiled
  # (rustler_precompiled); see ExCubecl.Native.Loader.
  use ExCubecl.Native.Loader

  defp err, do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `{:ok, [{spec, name, kind, api}]}` of this machine's devices, best first
  (`ExCubecl.devices/0`).
  """
  def devices, do: err()

  @doc "`{:ok, spec}`: the default device's spec (`ExCubecl.default_device/0`)."
  def default_device, do: err()

  @doc "The runtimes compiled into this build (`\"cuda\"`, `\"wgpu\"`), as strings; not a tuple."
  def runtimes, do: err()

  @doc """
  How many kernels this process has launched so far, on every device (replayed launches
  included); not a tuple (`ExCubecl.launch_count/0`).
  """
  def launch_count, do: err()

  @doc """
  `{:ok, tensor}`: a tensor on `device` from the host bytes `data` of `shape` and `dtype` (a
  string: `"f32"`, `"s64"`, ...); `ExCubecl.buffer/3`.
  """
  def buffer(_data, _shape, _dtype, _device), do: err()

  @doc "`{:ok, binary}`: the tensor's bytes, after the device has computed them."
  def read(_tensor), do: err()

  @doc """
  `{:ok, tensor}`: the tensor on `device` (itself when it is there), device to device where
  the runtime copies between its devices; `ExCubecl.to_device/2`.
  """
  def to_device(_tensor, _device), do: err()

  @doc "`{:ok, shape}`: the tensor's shape as a list."
  def shape(_tensor), do: err()

  @doc "`{:ok, dtype}`: the tensor's dtype as a string."
  def dtype(_tensor), do: err()

  @doc "`{:ok, spec}`: the spec of the device the tensor lives on."
  def device(_tensor), do: err()

  @doc "Frees the tensor's device memory now: `{:ok, false}` when it was freed before."
  def free(_tensor), do: err()

  @doc """
  Writes `src`'s value into `dst` (a kernel's result into a given output buffer): both have one
  shape, dtype and device; `dst`'s holders see the new value from then on.
  """
  def assign(_dst, _src), do: err()

  @doc """
  `[{name, inputs, options}]` of every kernel, as strings; not a tuple (`ExCubecl.kernels/0`
  parses them).
  """
  def kernels, do: err()

  @doc """
  Runs kernel `name` on `inputs` with the keyword options `opts` (kernels without inputs run on
  `device`): `{:ok, [{tensor, shape, dtype}]}`, one per output (`ExCubecl.run_kernel/3`).
  """
  def run_kernel(_name, _inputs, _opts, _device), do: err()

  @doc """
  Waits for every queued kernel of `device`: `{:ok, true}`, or the device's failure as an error.
  """
  def synchronize(_device), do: err()

  @doc """
  The all-reduce of `tensors` (one per device, one shape and float type) with `op` (`"sum"` or
  `"mean"`): `{:ok, results}`, one per tensor on its device.
  """
  def all_reduce(_tensors, _op), do: err()

  @doc """
  `{:ok, {bytes_in_use, bytes_reserved, allocations}}` of `device`'s memory pools
  (`ExCubecl.memory_info/1`).
  """
  def memory_info(_device), do: err()

  @doc "`{:ok, dtypes}`: the dtypes `device` stores and computes in, as strings."
  def supported_dtypes(_device), do: err()

  @doc "A new, empty pipeline (`ExCubecl.pipeline/0`); not a tuple."
  def pipeline_new, do: err()

  @doc """
  Adds kernel `name` over `inputs` (slots: `{:input, i}` or `{:step, j, k}`) with `opts` to the
  pipeline: `{:ok, index}` of the step.
  """
  def pipeline_add(_pipeline, _name, _inputs, _opts), do: err()

  @doc """
  Runs the pipeline on `inputs` (capturing it on the first run, replaying it after): `{:ok,
  tensors}` at the slots `outputs`.
  """
  def pipeline_run(_pipeline, _inputs, _outputs), do: err()

  @doc "Frees the pipeline's captured launches and buffers."
  def pipeline_free(_pipeline), do: err()

  @doc """
  Queues a replay of a captured pipeline on `inputs`: `{:ok, id}` of the command at once
  (`ExCubecl.submit/2`).
  """
  def submit_pipeline(_pipeline, _inputs), do: err()

  @doc """
  Queues a kernel list `[{name, input_slots, opts}]` over `inputs` on `device`, giving the
  values at `outputs` when it runs: `{:ok, id}` of the command at once.
  """
  def submit_kernels(_calls, _inputs, _outputs, _device), do: err()

  @doc "`{:ok, status}` of command `id`: `\"pending\"`, `\"running\"`, `\"completed\"` or `\"failed\"`."
  def poll(_id), do: err()

  @doc """
  Waits for command `id` (at most `timeout_ms`; forever for a negative value): `{:ok, tensors}`,
  its outputs.
  """
  def wait(_id, _timeout_ms), do: err()

  @doc """
  `{:ok, leaf}`: a tensor of the same data that requires gradients (a leaf of Burn's tape);
  `tensor` is left as it is (`ExBurn.Autodiff`).
  """
  def require_grad(_tensor), do: err()

  @doc """
  Runs the backward pass from `value` (the gradient of its sum where it isn't a scalar): `{:ok,
  {detached_value, gradients}}`, one gradient per tensor of `params` (zeros where `value`
  doesn't depend on it).
  """
  def backward(_value, _params), do: err()

  @doc """
  `{:ok, program}` from `ExBurn.Defn.Compiler`'s terms: its blocks, the device tensors it holds
  as constants, the `{shape, dtype}` of each input, and its device.
  """
  def program_new(_blocks, _consts, _params, _device), do: err()

  @doc """
  Runs a program on `inputs`: `{:ok, {:done, outputs, events}}`, or `{:ok, {:call, id, tensors,
  events, session}}` where a runtime call needs Elixir (`program_resume/2` continues).
  """
  def program_run(_program, _inputs), do: err()

  @doc """
  As `program_run/2` on the calling (normal) scheduler, for a program whose last run took less
  than `max_us` microseconds of host time; `{:ok, :dirty}`, having done nothing, where the run
  belongs on a dirty scheduler (the caller then calls `program_run/2`).
  """
  def program_run_normal(_program, _inputs, _max_us), do: err()

  @doc """
  Continues a run that waits on a runtime call with the call's `results`; gives what
  `program_run/2` gives.
  """
  def program_resume(_session, _results), do: err()

  @doc """
  Queues a run of the program on `inputs` on its device's command queue: `{:ok, id}` at once;
  the caller gets `{:ex_cubecl, id, result}` when it ends.
  """
  def program_submit(_program, _inputs), do: err()

  @doc """
  Ends a run that waits on a runtime call (the call failed in Elixir): `{:ok, false}` where it
  had ended.
  """
  def program_abort(_session), do: err()

  @doc """
  `{:ok, {segments, captured, direct, launches, reads}}`: the program's segments, those captured
  as pipelines, those that run their ops, the captured launches, and the predicates its runs
  have read from the device.
  """
  def program_info(_program), do: err()

  @doc """
  Reads Burn's record file at `path` onto `device`: `{:ok, {metadata, [{name, tensor, shape,
  dtype}]}}` (`ExBurn.Record.load/2`).
  """
  def record_load(_path, _device), do: err()

  @doc """
  Writes `params` (`[{name, tensor}]`) to `path` as Burn's recorder would, `metadata` overriding
  Burn's own fields: `{:ok, path}` (`ExBurn.Record.save/3`).
  """
  def record_save(_path, _metadata, _params), do: err()

  @doc """
  Winds the runtime down (command queues drained, launches stopped, every device's work
  finished), as at exit (`ExCubecl.shutdown/0`).
  """
  def shutdown, do: err()

  @doc """
  Replaces the file at `path` with `data` atomically: a temporary file in the same folder,
  flushed, renamed over `path`, the folder flushed (`ExBurn.AtomicFile.write/2`).
  """
  def file_replace(_path, _data), do: err()

  @doc """
  Sets the process's allocation limit in bytes (`nil` lifts it): larger allocations are refused,
  naming the op; gives `true` (`ExCubecl.put_allocation_limit/1`).
  """
  def put_allocation_limit(_bytes), do: err()

  @doc "`{:ok, {tensor, [h, w, c]}}`: an image file's bytes decoded onto `device` as HWC `u8` (`channels` `nil` keeps the file's); `label` names the file in errors."
  def image_decode(_data, _channels, _device, _label), do: err()

  @doc "`{:ok, {tensor, [n, h, w, c]}}`: every frame of an image file's bytes (an animated GIF's), decoded onto `device` as `u8`."
  def image_decode_frames(_data, _channels, _device, _label), do: err()

  @doc "`{:ok, binary}`: an HWC `u8` tensor encoded as `format` (`\"png\"`, `\"jpeg\"`, ...; `quality` for JPEG)."
  def image_encode(_tensor, _format, _quality, _label), do: err()

  @doc "`{:ok, {tensor, [frames, channels], rate}}`: an audio file's bytes decoded to `f32` samples on `device` (`extension` a hint of the format, or `nil`)."
  def audio_decode(_data, _extension, _device, _label), do: err()

  @doc "`{:ok, binary}`: `{frames, channels}` `f32` samples as a WAV file at `rate` (32-bit float where `float`, else 16-bit)."
  def audio_encode(_tensor, _rate, _float, _label), do: err()

  @doc "Whether this build has the `video` feature (FFmpeg); not a tuple."
  def video_available, do: err()

  @doc "`{:ok, {reader, width, height, fps, frames, duration, codec}}`: a video file opened for decoding."
  def video_open(_path), do: err()

  @doc "`{:ok, {tensor, [h, w, 3], seconds}}` (an HWC `u8` frame on `device` and its time) or `{:ok, nil}` at the end: the reader's next frame."
  def video_next(_reader, _device), do: err()

  @doc "Moves the reader to the frame at `seconds`."
  def video_seek(_reader, _seconds), do: err()

  @doc "Closes the reader."
  def video_close(_reader), do: err()

  @doc "`{:ok, writer}`: a video file opened for encoding frames of `width` x `height` at `fps` with `codec` and `bit_rate`."
  def video_writer_open(_path, _width, _height, _fps, _codec, _bit_rate), do: err()

  @doc "Encodes one HWC `u8` frame."
  def video_writer_write(_writer, _frame), do: err()

  @doc "Flushes the encoder and closes the file."
  def video_writer_close(_writer), do: err()
end
