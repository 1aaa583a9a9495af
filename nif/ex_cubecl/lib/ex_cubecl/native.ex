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

  def devices, do: err()
  def default_device, do: err()
  def runtimes, do: err()
  def launch_count, do: err()
  def buffer(_data, _shape, _dtype, _device), do: err()
  def read(_tensor), do: err()
  def shape(_tensor), do: err()
  def dtype(_tensor), do: err()
  def device(_tensor), do: err()
  def free(_tensor), do: err()
  def assign(_dst, _src), do: err()
  def kernels, do: err()
  def run_kernel(_name, _inputs, _opts, _device), do: err()
  def synchronize(_device), do: err()
  def all_reduce(_tensors, _op), do: err()
  def memory_info(_device), do: err()
  def supported_dtypes(_device), do: err()
  def pipeline_new, do: err()
  def pipeline_add(_pipeline, _name, _inputs, _opts), do: err()
  def pipeline_run(_pipeline, _inputs, _outputs), do: err()
  def pipeline_free(_pipeline), do: err()
  def submit_pipeline(_pipeline, _inputs), do: err()
  def submit_kernels(_calls, _inputs, _outputs, _device), do: err()
  def poll(_id), do: err()
  def wait(_id, _timeout_ms), do: err()
  def require_grad(_tensor), do: err()
  def backward(_value, _params), do: err()
  def program_new(_blocks, _consts, _params, _device), do: err()
  def program_run(_program, _inputs), do: err()
  def program_run_normal(_program, _inputs, _max_us), do: err()
  def program_resume(_session, _results), do: err()
  def program_submit(_program, _inputs), do: err()
  def program_abort(_session), do: err()
  def program_info(_program), do: err()
  def record_load(_path, _device), do: err()
  def record_save(_path, _metadata, _params), do: err()
  def shutdown, do: err()
  def file_replace(_path, _data), do: err()
  def put_allocation_limit(_bytes), do: err()
  def image_decode(_data, _channels, _device, _label), do: err()
  def image_decode_frames(_data, _channels, _device, _label), do: err()
  def image_encode(_tensor, _format, _quality, _label), do: err()
  def audio_decode(_data, _extension, _device, _label), do: err()
  def audio_encode(_tensor, _rate, _float, _label), do: err()
  def video_available, do: err()
  def video_open(_path), do: err()
  def video_next(_reader, _device), do: err()
  def video_seek(_reader, _seconds), do: err()
  def video_close(_reader), do: err()
  def video_writer_open(_path, _width, _height, _fps, _codec, _bit_rate), do: err()
  def video_writer_write(_writer, _frame), do: err()
  def video_writer_close(_writer), do: err()
end
