defmodule ExCubecl do
  @moduledoc """
  ExCubecl from Elixir: buffers on a GPU (or Mesa's lavapipe), every kernel of the backend
  by name, devices and memory.

  Sections: buffers, kernels, pipelines (`pipeline/0`, `pipeline_add/4`, `pipeline_run/3`,
  `pipeline_free/1`, `capture/2`), asynchronous commands (`submit/3`, `poll/1`, `wait/2`),
  devices, collectives (`all_reduce/2`).

  Kernels also write into given output buffers, as ExBurn's documents call them:
  `run_kernel/4` (`name, inputs, output, params`), pipelines of such commands
  (`pipeline_add/5`, then `pipeline_run/1`), and `submit/1` of an `ExCubecl.Command`.

  Every function returns `{:ok, value}` or `{:error, %ExCubecl.Error{}}`; the bang forms
  return the value or raise `ExCubecl.Error`, whose message starts with the operation. Bad
  input never crashes the VM: it is checked here and in the NIF, and a panic in Rust is
  caught there.

      iex> a = ExCubecl.buffer!([1.0, 2.0, 3.0], [3], :f32)
      iex> b = ExCubecl.buffer!([10.0, 20.0, 30.0], [3], :f32)
      iex> [c] = ExCubecl.run_kernel!(:add, [a, b])
      iex> ExCubecl.to_list!(c)
      [11.0, 22.0, 33.0]

  ## Devices

  A device is a string: `"cuda:0"`, `"wgpu"` (wgpu's default adapter), `"wgpu:discrete:0"`,
  `"wgpu:integrated:0"`, `"wgpu:cpu"` (lavapipe). The default is the first of `devices/0`
  (CUDA, then a hardware Vulkan or Metal adapter, then lavapipe), overridden by the
  application env (`config :ex_cubecl, device: "wgpu"`) or the environment variable
  `EX_CUBECL_DEVICE`. Functions that make tensors from nothing take a `:device` option.
  """
  # Each section below is implemented in a module of its own (ExCubecl.Buffers, Kernels,
  # Pipelines, Async, Devices, Collectives; the checks they share in ExCubecl.Helpers): here
  # are the docs, specs and bang forms, where users read them.
  alias ExCubecl.{Async, Buffer, Buffers, Collectives, Devices, Error, Helpers, Kernels, Pipeline, Pipelines, Slot}

  @typedoc "Element types: Nx's names, `:bool`, and `:q8` (8-bit quantized, made by the `:quantize` kernel)."
  @type dtype :: :f32 | :f16 | :bf16 | :f64 | :s8 | :s16 | :s32 | :s64 | :u8 | :u16 | :u32 | :u64 | :bool | :q8
  @type result(t) :: {:ok, t} | {:error, Error.t()}

  # ---------------------------------------------------------------------------------------
  # Buffers

  @doc """
  A buffer of `shape` and `dtype` from a binary (the dtype's native layout; bools one byte
  each) or a flat list of numbers (`:nan`, `:infinity`, `:neg_infinity` for floats; `true`
  and `false` for bools). Options: `:device`.

      iex> {:ok, b} = ExCubecl.buffer(<<1::32-native, 2::32-native>>, [2], :s32)
      iex> ExCubecl.shape(b)
      {:ok, [2]}
  """
  @spec buffer(binary() | list(), [non_neg_integer()], dtype(), keyword()) :: result(Buffer.t())
  defdelegate buffer(data, shape, dtype, opts \\ []), to: Buffers

  @doc "As `buffer/4`, raising `ExCubecl.Error`. `ExCubecl.buffer!([1, 2], [2], :s32)`"
  @spec buffer!(binary() | list(), [non_neg_integer()], dtype(), keyword()) :: Buffer.t()
  def buffer!(data, shape, dtype, opts \\ []), do: bang(buffer(data, shape, dtype, opts))

  @doc """
  The buffer's bytes (its dtype's native layout; bools one byte each). A quantized buffer
  (dtype `:q8`, from the `:quantize` kernel) reads as Burn's quantized layout: the i8 values
  in row-major order, then one f32 scale per block (or one for the tensor).

      iex> ExCubecl.read(ExCubecl.buffer!([7], [1], :u8))
      {:ok, <<7>>}
  """
  @spec read(Buffer.t()) :: result(binary())
  defdelegate read(buffer), to: Buffers

  @doc "As `read/1`, raising. `ExCubecl.read!(ExCubecl.buffer!([7], [1], :u8)) #=> <<7>>`"
  @spec read!(Buffer.t()) :: binary()
  def read!(buffer), do: bang(read(buffer))

  @doc """
  The buffer's values as a flat list (NaN and infinities as atoms).

      iex> ExCubecl.to_list(ExCubecl.buffer!([1.5, :nan], [2], :f32))
      {:ok, [1.5, :nan]}
  """
  @spec to_list(Buffer.t()) :: result(list())
  defdelegate to_list(buffer), to: Buffers

  @doc "As `to_list/1`, raising. `ExCubecl.to_list!(ExCubecl.buffer!([1, 2], [2], :s64)) #=> [1, 2]`"
  @spec to_list!(Buffer.t()) :: list()
  def to_list!(buffer), do: bang(to_list(buffer))

  @doc """
  The shape.

      iex> ExCubecl.shape(ExCubecl.buffer!([1, 2, 3, 4], [2, 2], :s32))
      {:ok, [2, 2]}
  """
  @spec shape(Buffer.t()) :: result([non_neg_integer()])
  defdelegate shape(buffer), to: Buffers

  @doc "The dtype. `ExCubecl.dtype(ExCubecl.buffer!([1], [1], :f16)) #=> :f16`"
  @spec dtype(Buffer.t()) :: dtype()
  defdelegate dtype(buffer), to: Buffers

  @doc """
  The size in bytes (of the dtype's native layout; bools one byte each).

      iex> {:ok, a} = ExCubecl.buffer([1.0, 2.0, 3.0], [3], :f32)
      iex> ExCubecl.size(a)
      {:ok, 12}
  """
  @spec size(Buffer.t()) :: result(non_neg_integer())
  defdelegate size(buffer), to: Buffers

  @doc """
  Frees the buffer's device memory now (the garbage collector does it otherwise). Later use
  of the buffer is an error; freeing twice gives `{:ok, false}`.

      iex> b = ExCubecl.buffer!([1.0], [1], :f32)
      iex> ExCubecl.free(b)
      {:ok, true}
      iex> {:error, %ExCubecl.Error{op: "read", reason: "the tensor was freed"}} = ExCubecl.read(b)
  """
  @spec free(Buffer.t()) :: result(boolean())
  defdelegate free(buffer), to: Buffers

  # ---------------------------------------------------------------------------------------
  # Kernels

  @doc """
  Runs the kernel `name` (an atom or string; see `kernels/0`) on `inputs` (buffers on one
  device) with keyword `opts`, giving its output buffers. Kernels without inputs (`:zeros`,
  `:random_uniform`, ...) take a `:device` option.

      iex> x = ExCubecl.buffer!([3.0, 1.0, 2.0], [3], :f32)
      iex> {:ok, [sorted]} = ExCubecl.run_kernel(:sort, [x], axis: 0)
      iex> ExCubecl.to_list!(sorted)
      [1.0, 2.0, 3.0]
  """
  @spec run_kernel(atom() | String.t(), [Buffer.t()], keyword() | Buffer.t()) :: result([Buffer.t()]) | result(Buffer.t())
  defdelegate run_kernel(name, inputs, opts \\ []), to: Kernels

  @doc """
  Runs the kernel `name` on `inputs` and writes its result into the buffer `output`, which
  must have the result's shape, dtype and device; `params` are the kernel's options (a map or
  keyword list). Gives `{:ok, output}`; every holder of `output` sees the new values.

      iex> a = ExCubecl.buffer!([1.0, 2.0], [2], :f32)
      iex> out = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
      iex> {:ok, ^out} = ExCubecl.run_kernel(:add, [a, a], out, %{})
      iex> ExCubecl.to_list!(out)
      [2.0, 4.0]
  """
  @spec run_kernel(atom() | String.t(), [Buffer.t()], Buffer.t(), map() | keyword()) :: result(Buffer.t())
  defdelegate run_kernel(name, inputs, output, params), to: Kernels

  @doc "As `run_kernel/3`, raising. `[y] = ExCubecl.run_kernel!(:exp, [x])`"
  @spec run_kernel!(atom() | String.t(), [Buffer.t()], keyword()) :: [Buffer.t()]
  def run_kernel!(name, inputs, opts \\ []), do: bang(run_kernel(name, inputs, opts))

  @doc """
  Every kernel: `%{name: atom, inputs: description, options: description}`.

      iex> Enum.find(ExCubecl.kernels(), &(&1.name == :matmul)).inputs
      "a, b (float | int)"
  """
  @spec kernels() :: [%{name: atom(), inputs: String.t(), options: String.t()}]
  defdelegate kernels, to: Kernels

  # ---------------------------------------------------------------------------------------
  # Pipelines

  @doc """
  A new, empty pipeline (see `ExCubecl.Pipeline`).

      iex> {:ok, p} = ExCubecl.pipeline()
      iex> {:ok, s} = ExCubecl.pipeline_add(p, :mul, [{:input, 0}, {:input, 0}])
      iex> {:ok, [y]} = ExCubecl.pipeline_run(p, [ExCubecl.buffer!([1.0, 2.0], [2], :f32)], [s])
      iex> ExCubecl.to_list!(y)
      [1.0, 4.0]
  """
  @spec pipeline() :: {:ok, Pipeline.t()}
  defdelegate pipeline, to: Pipelines

  @doc """
  Adds kernel `name` over `inputs` (slots: `{:input, i}` or an earlier step's slot) with
  `opts`; gives the slot of its output. `{:ok, s} = ExCubecl.pipeline_add(p, :exp, [{:input, 0}])`
  """
  @spec pipeline_add(Pipeline.t(), atom() | String.t(), [Pipeline.slot()], keyword() | Buffer.t()) :: result(Pipeline.slot()) | :ok
  defdelegate pipeline_add(pipeline, name, inputs, opts \\ []), to: Pipelines

  @doc """
  Adds a command to the pipeline: kernel `name` over the buffers `inputs`, its result written
  into the buffer `output` (of the result's shape, dtype and device), with the kernel's
  options `params` (a map or keyword list). `pipeline_run/1` runs the commands in the order
  added; a command reads its inputs as the commands before it left them, so
  `pipeline_add(p, :add, [buf, buf], buf)` then `pipeline_add(p, :relu, [buf], buf)` leaves
  `relu(buf + buf)` in `buf`.

      iex> {:ok, p} = ExCubecl.pipeline()
      iex> buf = ExCubecl.buffer!([-1.0, 2.0], [2], :f32)
      iex> :ok = ExCubecl.pipeline_add(p, :add, [buf, buf], buf)
      iex> :ok = ExCubecl.pipeline_add(p, :relu, [buf], buf)
      iex> {:ok, [_, _]} = ExCubecl.pipeline_run(p)
      iex> ExCubecl.to_list!(buf)
      [0.0, 4.0]
  """
  @spec pipeline_add(Pipeline.t(), atom() | String.t(), [Buffer.t()], Buffer.t(), map() | keyword()) :: :ok | {:error, Error.t()}
  defdelegate pipeline_add(pipeline, name, inputs, output, params), to: Pipelines

  @doc "Adds an `ExCubecl.Command` to a pipeline (as `pipeline_add/5`)."
  @spec pipeline_add_struct(Pipeline.t(), ExCubecl.Command.t()) :: :ok | {:error, Error.t()}
  defdelegate pipeline_add_struct(pipeline, command), to: Pipelines

  @doc """
  Runs the commands of `pipeline_add/5` in the order added, writing each result into its
  output buffer, and gives their command ids (one a command, in order): `poll/1` answers
  `:completed` for each, and `wait/1` gives the command's result `[buffer]`. The commands run
  as one pipeline of the backend: the first run captures their launches, later runs replay
  them on the buffers' current values. Like every kernel, they are queued on the device and
  this returns without waiting for them; reading a buffer waits.
  """
  @spec pipeline_run(Pipeline.t()) :: result([pos_integer()])
  defdelegate pipeline_run(pipeline), to: Pipelines

  @doc """
  Runs the pipeline on `inputs` (buffers), giving the buffers at `outputs` (default: those
  `capture/2` recorded). The first run captures the launches; later runs replay them.
  `{:ok, [y]} = ExCubecl.pipeline_run(p, [x], [s])`
  """
  @spec pipeline_run(Pipeline.t(), [Buffer.t()], [Pipeline.slot()] | nil) :: result([Buffer.t()])
  defdelegate pipeline_run(pipeline, inputs, outputs \\ nil), to: Pipelines

  @doc """
  Frees the pipeline's captured launches and buffers, and the commands of `pipeline_add/5`.
  `{:ok, true} = ExCubecl.pipeline_free(p)`
  """
  @spec pipeline_free(Pipeline.t()) :: result(boolean())
  defdelegate pipeline_free(pipeline), to: Pipelines

  @doc """
  Records the kernels that `fun` runs on `n` inputs as a pipeline: `fun` receives `n`
  `ExCubecl.Slot`s, calls `run_kernel/3` on them as on buffers, and returns a list of slots,
  the pipeline's outputs.

      iex> {:ok, p} = ExCubecl.capture(fn [x, y] -> ExCubecl.run_kernel!(:add, [x, y]) end, 2)
      iex> a = ExCubecl.buffer!([1, 2], [2], :s32)
      iex> {:ok, [c]} = ExCubecl.pipeline_run(p, [a, a])
      iex> ExCubecl.to_list!(c)
      [2, 4]
  """
  @spec capture(([Slot.t()] -> [Slot.t()]), non_neg_integer()) :: result(Pipeline.t())
  defdelegate capture(fun, n), to: Pipelines

  # ---------------------------------------------------------------------------------------
  # Asynchronous commands

  @doc """
  Submits a command; gives its id at once. The command is a pipeline replay
  (`submit(pipeline, inputs)`) or a kernel list (`submit([{name, slots, opts}, ...], inputs)`,
  whose last kernel's output is the result; options: `:outputs` (slots), `:device` for lists
  without inputs). Commands of one device run in submission order on its queue's thread;
  the submitting process receives `{:ex_cubecl, id, {:ok, buffers} | {:error, error}}` when
  the command ends.

      iex> x = ExCubecl.buffer!([1.0, 4.0], [2], :f32)
      iex> {:ok, id} = ExCubecl.submit([{:sqrt, [{:input, 0}], []}], [x])
      iex> {:ok, [y]} = ExCubecl.wait(id)
      iex> ExCubecl.to_list!(y)
      [1.0, 2.0]
  """
  @spec submit(Pipeline.t() | [{atom(), [Pipeline.slot()], keyword()}], [Buffer.t()], keyword()) :: result(pos_integer())
  defdelegate submit(work, inputs, opts \\ []), to: Async

  @doc """
  Submits an `ExCubecl.Command`: its kernel runs on its inputs and writes its output buffer
  (as `run_kernel/4`); gives the command's id for `poll/1` and `wait/1` (whose outcome is
  `[output]`). The kernel is queued on the device, as every kernel: this returns without
  waiting for it, and a read of the output waits.

      iex> x = ExCubecl.buffer!([1.0, 4.0], [2], :f32)
      iex> {:ok, id} = ExCubecl.submit(ExCubecl.Command.run_kernel(:sqrt, [x], x))
      iex> {:ok, :completed} = ExCubecl.poll(id)
      iex> {:ok, [^x]} = ExCubecl.wait(id)
      iex> ExCubecl.to_list!(x)
      [1.0, 2.0]
  """
  @spec submit(ExCubecl.Command.t()) :: result(pos_integer())
  defdelegate submit(command), to: Async

  @doc "Where command `id` stands: `{:ok, :pending | :running | :completed | :failed}`. `ExCubecl.poll(id)`"
  @spec poll(pos_integer()) :: result(:pending | :running | :completed | :failed)
  defdelegate poll(id), to: Async

  @doc """
  Waits for command `id` (at most `timeout` ms, `:infinity` by default) and takes its output
  buffers; an error when it failed or did not finish in time. `{:ok, outputs} = ExCubecl.wait(id, 5_000)`
  """
  @spec wait(pos_integer(), timeout()) :: result([Buffer.t()])
  defdelegate wait(id, timeout \\ :infinity), to: Async

  # ---------------------------------------------------------------------------------------
  # Devices

  @doc """
  The devices of this machine that this build can use, best first:
  `%{device: spec, name: adapter, kind: :gpu | :cpu, api: "cuda" | "vulkan" | ...}`.

      iex> [%{device: _, kind: _} | _] = ExCubecl.devices()
  """
  @spec devices() :: [map()]
  defdelegate devices, to: Devices

  @doc """
  The default device: `config :ex_cubecl, device: ...`, else `EX_CUBECL_DEVICE`, else the
  first of `devices/0`.

      iex> is_binary(ExCubecl.default_device())
      true
  """
  @spec default_device() :: String.t()
  defdelegate default_device, to: Devices

  @doc "The default device with its adapter: `%{device:, name:, kind:, api:, runtimes:}`. `ExCubecl.device_info()`"
  @spec device_info() :: map()
  defdelegate device_info, to: Devices

  @doc "How many devices `devices/0` lists. `ExCubecl.device_count() >= 1`"
  @spec device_count() :: non_neg_integer()
  defdelegate device_count, to: Devices

  @doc "The runtimes compiled into the NIF: `[:cuda, :wgpu]`, `[:wgpu]`, ... `ExCubecl.available_backends()`"
  @spec available_backends() :: [atom()]
  defdelegate available_backends, to: Devices

  @doc """
  How many kernels this process has launched so far, on every device, replayed launches
  included: the difference across a call is the launches it made.

      iex> x = ExCubecl.buffer!([1.0, 2.0], [2], :f32)
      iex> before = ExCubecl.launch_count()
      iex> [_y] = ExCubecl.run_kernel!(:exp, [x])
      iex> ExCubecl.launch_count() - before >= 1
      true
  """
  @spec launch_count() :: non_neg_integer()
  defdelegate launch_count, to: Devices

  @doc "Whether a CUDA GPU is usable. `ExCubecl.cuda_available?()`"
  @spec cuda_available?() :: boolean()
  defdelegate cuda_available?, to: Devices

  @doc "Whether the default device is a hardware GPU (not lavapipe). `ExCubecl.gpu?()`"
  @spec gpu?() :: boolean()
  defdelegate gpu?, to: Devices

  @doc """
  Memory of the default device's pools (options: `:device`):
  `%{bytes_in_use:, bytes_reserved:, allocations:}`.

      iex> {:ok, %{bytes_in_use: _, bytes_reserved: _}} = ExCubecl.memory_info()
  """
  @spec memory_info(keyword()) :: result(map())
  defdelegate memory_info(opts \\ []), to: Devices

  @doc "The dtypes the default device (or `:device`) stores and computes. `:f32 in ExCubecl.supported_dtypes()`"
  @spec supported_dtypes(keyword()) :: [dtype()]
  defdelegate supported_dtypes(opts \\ []), to: Devices

  @doc """
  Waits until the device (default or `:device`) has run every queued kernel; an error when
  it failed.

      iex> ExCubecl.synchronize()
      :ok
  """
  @spec synchronize(keyword()) :: :ok | {:error, Error.t()}
  defdelegate synchronize(opts \\ []), to: Devices

  @doc """
  Caps every allocation of this node at `bytes` (`nil` lifts the cap): a tensor larger than
  that is refused as one larger than the device takes is, with an `ExCubecl.Error` naming the
  operation, the shape and the limit. A guard against runaway sizes, and the way to refuse an
  allocation on purpose (in the middle of a training epoch, say) in a test. The cap holds for
  every process of the node: `ExCubecl.put_allocation_limit(1_000_000)`.
  """
  @spec put_allocation_limit(pos_integer() | nil) :: :ok
  defdelegate put_allocation_limit(bytes), to: Devices

  @doc """
  Winds the runtime down, as the VM does by itself when it stops: the asynchronous command
  queues take no more commands and finish those queued, kernel launches stop (a later one is
  an `ExCubecl.Error` saying so), and every device used finishes its queued work. Each step
  waits at most a minute; `{:error, _}` names what did not end in time. Reads, frees and
  `synchronize/1` still work afterwards. There is no way back: call it when the work of the
  node is done.

  The same runs at exit: the NIF registers it with the C library's `atexit`, which
  `System.halt/1`, `System.stop/1` and the end of a script reach (the BEAM does not unload
  NIF libraries when it stops), so that no device thread is still compiling or running a
  kernel while the process tears down its libraries.
  """
  @spec shutdown() :: :ok | {:error, Error.t()}
  defdelegate shutdown, to: Devices

  @doc "The package version. `ExCubecl.version() #=> \"0.1.0\"`"
  @spec version() :: String.t()
  defdelegate version, to: Devices

  # ---------------------------------------------------------------------------------------
  # Collectives

  @doc """
  The all-reduce of `buffers`, one per device (one shape and one float dtype: `:f32`, `:f16`,
  `:bf16` or `:f64`): each result, on its buffer's device, holds the sum (`op`: `:sum`, the
  default) or the mean (`:mean`) of all of them. On CUDA it is NCCL's where NCCL is
  installed; on wgpu the values go through the host (sum in f64, identical on every device).
  Within this process: several processes or hosts join through the Rust API
  (`ex_cubecl::distributed::init`), not from Elixir.

      ExCubecl.all_reduce([a, b], :mean)
      #=> {:ok, [mean_on_a_device, mean_on_b_device]}
  """
  @spec all_reduce([Buffer.t()], :sum | :mean) :: result([Buffer.t()])
  defdelegate all_reduce(buffers, op \\ :sum), to: Collectives

  @doc "As `all_reduce/2`, raising `ExCubecl.Error`."
  @spec all_reduce!([Buffer.t()], :sum | :mean) :: [Buffer.t()]
  def all_reduce!(buffers, op \\ :sum), do: bang(all_reduce(buffers, op))

  @doc """
  The buffer on `device` (a device spec, as `devices/0` lists them): a new buffer on that
  device with the same values, or the buffer itself when it is already there. Between two
  CUDA devices the bytes go device to device (NCCL's peer copy, where NCCL is installed)
  without waiting for the work that computes them; elsewhere through the host.

      iex> b = ExCubecl.buffer!([1.5, 2.5], [2], :f32)
      iex> {:ok, c} = ExCubecl.to_device(b, b.device)
      iex> ExCubecl.to_list(c)
      {:ok, [1.5, 2.5]}
  """
  @spec to_device(Buffer.t(), String.t()) :: result(Buffer.t())
  defdelegate to_device(buffer, device), to: Collectives

  @doc "As `to_device/2`, raising `ExCubecl.Error`."
  @spec to_device!(Buffer.t(), String.t()) :: Buffer.t()
  def to_device!(buffer, device), do: bang(to_device(buffer, device))

  # ---------------------------------------------------------------------------------------
  # Helpers, for the modules beside this one

  @doc false
  defdelegate wrap(ref), to: Helpers

  @doc false
  defdelegate refs(op, inputs), to: Helpers

  @doc false
  defdelegate bang(result), to: Helpers
end
