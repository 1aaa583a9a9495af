defmodule ExBurn.CubeclBridge do
  @moduledoc """
  GPU compute through ExCubecl: contexts on a device, buffers, the kernels of the op table by
  name, pipelines of kernel commands and asynchronous commands. ExCubecl buffers (opaque
  handles, freed when garbage-collected) hold GPU memory throughout.

  Backends: `:cuda` (NVIDIA), `:metal` (Apple), `:vulkan` (Android, Linux, Windows; also
  Mesa's lavapipe, the CPU device), `:wgpu` (wgpu's default adapter), and `:gpu` / `:cpu` (the
  best hardware device / the CPU device, as `ExBurn.device_spec/1`). `:rocm` and `:webgpu`
  are not compiled into this build: `init/2` says so.

      if ExBurn.CubeclBridge.available?() do
        {:ok, ctx} = ExBurn.CubeclBridge.init(:metal)
        caps = ExBurn.CubeclBridge.device_capabilities(ctx)
        {:ok, buf} = ExBurn.CubeclBridge.allocate_gpu(ctx, [4, 4], :f32)
        {:ok, result} = ExBurn.CubeclBridge.execute(ctx, :add, [buf, buf])
        {:ok, pid} = ExBurn.CubeclBridge.pipeline()
        :ok = ExBurn.CubeclBridge.pipeline_add(pid, :add, [buf, buf], buf)
        :ok = ExBurn.CubeclBridge.pipeline_add(pid, :relu, [buf], buf)
        {:ok, commands} = ExBurn.CubeclBridge.pipeline_run(pid)
        :ok = ExBurn.CubeclBridge.pipeline_free(pid)
      end

  Errors are `{:error, message}`, the message starting with the function.
  """

  alias ExCubecl.Buffer

  @type backend :: :cuda | :metal | :vulkan | :wgpu | :rocm | :gpu | :cpu
  @typedoc "A context: the backend asked for and the device it chose."
  @type context :: %{backend: backend(), device: String.t(), name: String.t(), kind: :gpu | :cpu, api: String.t()}
  @type buffer :: Buffer.t()
  @type kernel :: atom() | String.t()
  @type pipeline_id :: ExCubecl.Pipeline.t()
  @type command_id :: pos_integer()

  ## Availability and devices

  @doc "Whether a hardware GPU device is available through ExCubecl (CUDA, Vulkan, Metal, DX12)."
  @spec available?() :: boolean()
  def available?, do: ExBurn.nif_loaded?() and ExBurn.gpu_available?()

  @doc """
  The backends usable on this machine: `:cuda` with an NVIDIA GPU, `:metal` on Apple,
  `:vulkan` where a Vulkan adapter (hardware or lavapipe) exists, `:dx12` / `:gl` for such
  adapters, and `:wgpu` with any wgpu adapter.
  """
  @spec available_backends() :: [backend() | :dx12 | :gl]
  def available_backends do
    devices = ExCubecl.devices()
    apis = devices |> Enum.map(&api_backend(&1.api)) |> Enum.uniq()
    wgpu = if Enum.any?(devices, &String.starts_with?(&1.device, "wgpu")), do: [:wgpu], else: []
    apis ++ wgpu
  end

  defp api_backend("cuda"), do: :cuda
  defp api_backend("metal"), do: :metal
  defp api_backend("vulkan"), do: :vulkan
  defp api_backend("dx12"), do: :dx12
  defp api_backend("gl"), do: :gl
  defp api_backend(other), do: String.to_atom(String.downcase(other))

  @doc "Whether an NVIDIA CUDA GPU is available."
  @spec cuda_available?() :: boolean()
  def cuda_available?, do: ExCubecl.cuda_available?()

  @doc "The number of hardware GPU devices: `{:ok, n}`."
  @spec device_count() :: {:ok, non_neg_integer()} | {:error, term()}
  def device_count, do: {:ok, Enum.count(ExCubecl.devices(), &(&1.kind == :gpu))}

  @doc """
  A human-readable summary of the default device.

      IO.puts(ExBurn.CubeclBridge.device_summary())
  """
  @spec device_summary() :: String.t()
  def device_summary do
    info = ExCubecl.device_info()
    "#{info.name} (#{info.api}, #{info.kind}, #{info.device}); runtimes: #{Enum.join(info.runtimes, ", ")}"
  end

  @doc "The kernel names of the op table: `{:ok, names}`."
  @spec kernels() :: {:ok, [String.t()]} | {:error, term()}
  def kernels, do: {:ok, Enum.map(ExCubecl.kernels(), &Atom.to_string(&1.name))}

  @doc "The element types the default device stores and computes."
  @spec supported_dtypes() :: [atom()]
  def supported_dtypes, do: ExCubecl.supported_dtypes()

  @doc "ExCubecl's version."
  @spec version() :: String.t()
  def version, do: ExCubecl.version()

  ## Contexts

  @doc """
  Initializes a compute context on a device of `backend` (`:cuda`, `:metal`, `:vulkan`,
  `:wgpu`, `:gpu`, `:cpu`; `opts` reserved): `{:ok, context}`, or `{:error, reason}` naming
  what is missing.
  """
  @spec init(backend(), keyword()) :: {:ok, context()} | {:error, String.t()}
  def init(backend, opts \\ [])

  def init(backend, opts) when is_atom(backend) and is_list(opts) do
    devices = ExCubecl.devices()

    case pick(backend, devices) do
      {:ok, %{device: spec, name: name, kind: kind, api: api}} ->
        {:ok, %{backend: backend, device: spec, name: name, kind: kind, api: api}}

      {:error, why} ->
        {:error, "init: #{why} (devices: #{Enum.map_join(devices, ", ", &"#{&1.device} #{&1.api} #{&1.kind}")})"}
    end
  end

  def init(backend, _opts), do: {:error, "init: a backend is one of :cuda, :metal, :vulkan, :wgpu, :gpu, :cpu; got #{inspect(backend)}"}

  defp pick(:cuda, devices), do: first(devices, &(&1.api == "cuda"), "no CUDA device")
  defp pick(:metal, devices), do: first(devices, &(&1.api == "metal"), "no Metal adapter")
  defp pick(:vulkan, devices), do: first(devices, &(&1.api == "vulkan"), "no Vulkan adapter")
  defp pick(:gpu, devices), do: first(devices, &(&1.kind == :gpu), "no GPU (no CUDA device, no hardware Vulkan, Metal or DX12 adapter)")
  defp pick(:cpu, devices), do: first(devices, &(&1.kind == :cpu), "no CPU device (no lavapipe / llvmpipe adapter)")

  defp pick(:wgpu, devices) do
    # wgpu's own choice: its first adapter, hardware before software.
    first(devices, &String.starts_with?(&1.device, "wgpu"), "no wgpu adapter")
  end

  defp pick(:rocm, _devices), do: {:error, "ROCm is not compiled into this build (runtimes: #{Enum.join(ExCubecl.available_backends(), ", ")})"}
  defp pick(other, _devices), do: {:error, "unknown backend #{inspect(other)}: one of :cuda, :metal, :vulkan, :wgpu, :gpu, :cpu"}

  defp first(devices, fun, missing) do
    case Enum.find(devices, fun) do
      nil -> {:error, missing}
      device -> {:ok, device}
    end
  end

  @doc "Destroys the context: waits for its device's queued work. Buffers stay valid (the GC frees them)."
  @spec destroy(context()) :: :ok
  def destroy(%{device: device}) do
    _ = ExCubecl.synchronize(device: device)
    :ok
  end

  @doc """
  The context's device capabilities: `%{backend:, device:, name:, kind:, api:, dtypes:,
  f64:, runtimes:}`.
  """
  @spec device_capabilities(context()) :: map()
  def device_capabilities(%{device: device} = ctx) do
    dtypes = ExCubecl.supported_dtypes(device: device)

    Map.take(ctx, [:backend, :device, :name, :kind, :api])
    |> Map.merge(%{dtypes: dtypes, f64: :f64 in dtypes, runtimes: ExCubecl.available_backends()})
  end

  @doc "Waits until every operation queued on the context's device has run."
  @spec synchronize(context()) :: :ok
  def synchronize(%{device: device}) do
    case ExCubecl.synchronize(device: device) do
      :ok -> :ok
      {:error, e} -> raise ExBurn.Error.from("ExBurn.CubeclBridge.synchronize", e)
    end
  end

  ## Memory

  @doc """
  Memory of the default device's pools: `{:ok, %{total:, used:, free:}}` in bytes, where
  `total` is what ExCubecl holds reserved on the device, `used` what live buffers take, and
  `free` the rest of the reservation (wgpu does not tell a device's total memory).
  """
  @spec memory_info() :: {:ok, map()} | {:error, term()}
  def memory_info, do: memory(ExBurn.default_device_spec())

  defp memory(device) do
    case ExCubecl.memory_info(device: device) do
      {:ok, %{bytes_in_use: used, bytes_reserved: reserved}} -> {:ok, %{total: reserved, used: used, free: max(reserved - used, 0)}}
      {:error, e} -> {:error, "memory_info: #{Exception.message(e)}"}
    end
  end

  @doc "The memory held on the context's device, in bytes (0 where it cannot be read)."
  @spec memory_total(context()) :: non_neg_integer()
  def memory_total(%{device: device}) do
    case memory(device) do
      {:ok, %{total: total}} -> total
      {:error, _} -> 0
    end
  end

  @doc "The memory live buffers take on the context's device, in bytes (0 where it cannot be read)."
  @spec memory_used(context()) :: non_neg_integer()
  def memory_used(%{device: device}) do
    case memory(device) do
      {:ok, %{used: used}} -> used
      {:error, _} -> 0
    end
  end

  ## Buffers

  @doc "A buffer of zeros of `shape` and `type` (`:f32`, `:s32`, ...; Burn's `:i32` / `:i64` too) on the context's device."
  @spec allocate_gpu(context(), [non_neg_integer()], atom()) :: {:ok, buffer()} | {:error, String.t()}
  def allocate_gpu(%{device: device}, shape, type) do
    with {:ok, dtype} <- dtype(type, "allocate_gpu") do
      case ExCubecl.run_kernel(:zeros, [], shape: shape, dtype: Atom.to_string(dtype), device: device) do
        {:ok, [buffer]} -> {:ok, buffer}
        {:error, e} -> {:error, "allocate_gpu: #{Exception.message(e)}"}
      end
    end
  end

  @doc "Copies an Nx tensor to a new buffer on the context's device: `{:ok, buffer}`."
  @spec host_to_device(context(), Nx.Tensor.t()) :: {:ok, buffer()} | {:error, String.t()}
  def host_to_device(%{device: device}, %Nx.Tensor{type: type, shape: shape} = t) do
    with {:ok, dtype} <- dtype(Nx.Type.to_string(type) |> String.to_atom(), "host_to_device") do
      case ExCubecl.buffer(Nx.to_binary(t), Tuple.to_list(shape), dtype, device: device) do
        {:ok, buffer} -> {:ok, buffer}
        {:error, e} -> {:error, "host_to_device: #{Exception.message(e)}"}
      end
    end
  end

  def host_to_device(_ctx, other), do: {:error, "host_to_device: expects an Nx tensor, got #{inspect(other, limit: 5)}"}

  @doc "Copies a buffer to the host as an Nx tensor (`Nx.BinaryBackend`; bools as u8): `{:ok, tensor}`."
  @spec device_to_host(context(), buffer()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
  def device_to_host(_ctx, %Buffer{shape: shape, dtype: dtype} = buffer) when dtype != :q8 do
    case ExCubecl.read(buffer) do
      {:ok, bin} ->
        type = if dtype == :bool, do: {:u, 8}, else: Nx.Type.normalize!(dtype)
        {:ok, bin |> Nx.from_binary(type, backend: Nx.BinaryBackend) |> Nx.reshape(List.to_tuple(shape))}

      {:error, e} ->
        {:error, "device_to_host: #{Exception.message(e)}"}
    end
  end

  def device_to_host(_ctx, other), do: {:error, "device_to_host: expects an ExCubecl buffer of a plain dtype, got #{inspect(other, limit: 5)}"}

  @doc "Frees a buffer's device memory now (the garbage collector does it otherwise)."
  @spec free(context(), buffer()) :: :ok
  def free(_ctx, %Buffer{} = buffer) do
    _ = ExCubecl.free(buffer)
    :ok
  end

  @doc "The buffer's dtype as a string: `{:ok, \"f32\"}`."
  @spec buffer_dtype(buffer()) :: {:ok, String.t()} | {:error, term()}
  def buffer_dtype(%Buffer{dtype: dtype}), do: {:ok, Atom.to_string(dtype)}
  def buffer_dtype(other), do: {:error, "buffer_dtype: expects an ExCubecl buffer, got #{inspect(other, limit: 5)}"}

  @doc "The buffer's raw bytes: `{:ok, binary}`."
  @spec buffer_read(buffer()) :: {:ok, binary()} | {:error, term()}
  def buffer_read(buffer), do: ExCubecl.read(buffer)

  @doc "The buffer's raw bytes, raising `ExCubecl.Error`."
  @spec buffer_read!(buffer()) :: binary()
  def buffer_read!(buffer), do: ExCubecl.read!(buffer)

  @doc "The buffer's shape: `{:ok, shape}`."
  @spec buffer_shape(buffer()) :: {:ok, [non_neg_integer()]} | {:error, term()}
  def buffer_shape(buffer), do: ExCubecl.shape(buffer)

  @doc "The buffer's size in bytes: `{:ok, bytes}`."
  @spec buffer_size(buffer()) :: {:ok, non_neg_integer()} | {:error, term()}
  def buffer_size(buffer), do: ExCubecl.size(buffer)

  ## Kernels

  @doc """
  Verifies that `kernel` is one of the op table's kernels (they are compiled by ExCubecl for
  the device on first use) and gives a reference for it: `{:ok, reference}`.
  """
  @spec compile_kernel(context(), kernel(), keyword()) :: {:ok, reference()} | {:error, String.t()}
  def compile_kernel(_ctx, kernel, _opts \\ []) do
    if Enum.any?(ExCubecl.kernels(), &(to_string(&1.name) == to_string(kernel))),
      do: {:ok, make_ref()},
      else: {:error, "compile_kernel: unknown kernel #{inspect(kernel)} (see kernels/0)"}
  end

  @doc """
  Runs `kernel` on the buffers `args` on the context's device; `opts` are the kernel's
  options (`ExCubecl.kernels/0`; `:axis` for `:softmax`, ...). Gives `{:ok, result_buffer}`
  (the first output of a kernel with several).
  """
  @spec execute(context(), kernel(), [buffer()], keyword()) :: {:ok, buffer()} | {:error, String.t()}
  def execute(%{device: device}, kernel, args, opts \\ []) do
    opts = if args == [], do: Keyword.put_new(opts, :device, device), else: opts

    case ExCubecl.run_kernel(kernel, args, opts) do
      {:ok, [result | _]} -> {:ok, result}
      {:ok, []} -> {:error, "execute: kernel #{inspect(kernel)} gave no output"}
      {:error, e} -> {:error, "execute: #{Exception.message(e)}"}
    end
  end

  ## Pipelines

  @doc "A new pipeline for multi-kernel execution: `{:ok, pipeline_id}`."
  @spec pipeline() :: {:ok, pipeline_id()} | {:error, term()}
  def pipeline, do: ExCubecl.pipeline()

  @doc """
  Adds a kernel command to a pipeline: `kernel` over the buffers `inputs`, its result written
  into the buffer `output`, with the kernel's `params` (default `%{}`). See
  `ExCubecl.pipeline_add/5`.
  """
  @spec pipeline_add(pipeline_id(), atom(), [buffer()], buffer(), map()) :: :ok | {:error, term()}
  def pipeline_add(pipeline_id, kernel, inputs, output, params \\ %{}), do: ExCubecl.pipeline_add(pipeline_id, kernel, inputs, output, params)

  @doc "Adds a pre-built `%ExCubecl.Command{}` to a pipeline."
  @spec pipeline_add_struct(pipeline_id(), ExCubecl.Command.t()) :: :ok | {:error, term()}
  def pipeline_add_struct(pipeline_id, command), do: ExCubecl.pipeline_add_struct(pipeline_id, command)

  @doc "Runs every command of the pipeline and gives their command ids: `{:ok, ids}`."
  @spec pipeline_run(pipeline_id()) :: {:ok, [command_id()]} | {:error, term()}
  def pipeline_run(pipeline_id), do: ExCubecl.pipeline_run(pipeline_id)

  @doc "Frees a pipeline and its resources."
  @spec pipeline_free(pipeline_id()) :: :ok | {:error, term()}
  def pipeline_free(pipeline_id) do
    case ExCubecl.pipeline_free(pipeline_id) do
      {:ok, _} -> :ok
      error -> error
    end
  end

  ## Asynchronous commands

  @doc "Submits a command for asynchronous execution: `{:ok, command_id}` (see `ExCubecl.submit/1`)."
  @spec async_submit(ExCubecl.Command.t()) :: {:ok, command_id()} | {:error, term()}
  def async_submit(command), do: ExCubecl.submit(command)

  @doc "Where a command stands: `{:ok, :pending | :running | :completed | :failed}`."
  @spec async_poll(command_id()) :: {:ok, :pending | :running | :completed | :failed} | {:error, term()}
  def async_poll(command_id), do: ExCubecl.poll(command_id)

  @doc "Blocks until the command completes; gives its output buffers: `{:ok, buffers}`."
  @spec async_wait(command_id()) :: {:ok, [buffer()]} | {:error, term()}
  def async_wait(command_id), do: ExCubecl.wait(command_id)

  ## Helpers

  @dtypes [:f32, :f16, :bf16, :f64, :s8, :s16, :s32, :s64, :u8, :u16, :u32, :u64, :bool]

  defp dtype(:i32, _fun), do: {:ok, :s32}
  defp dtype(:i64, _fun), do: {:ok, :s64}
  defp dtype(type, _fun) when type in @dtypes, do: {:ok, type}
  defp dtype(type, fun), do: {:error, "#{fun}: unknown type #{inspect(type)} (#{Enum.map_join(@dtypes, ", ", &inspect/1)}, :i32, :i64)"}
end
