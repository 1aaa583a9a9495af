defmodule ExBurn do
  @moduledoc """
  Nx on the GPU through ExCubecl. Set-up:

      Nx.default_backend(ExBurn.Backend)          # or ExBurn.configure!()
      Nx.iota({2, 3}) |> Nx.multiply(2) |> Nx.sum()

  or in config: `config :nx, default_backend: {ExBurn.Backend, device: :cuda}`.

  Devices: `:gpu` (the best hardware device: CUDA, else a hardware Vulkan or Metal adapter)
  and `:cpu` (Mesa's lavapipe / llvmpipe through wgpu), or ExCubecl's device strings
  (`ExCubecl.devices/0`): `"cuda:0"`, `"wgpu:discrete:0"`, `"wgpu:cpu"`. The default is CUDA,
  then a hardware adapter, then lavapipe; `config :ex_cubecl, device: ...` or
  `EX_CUBECL_DEVICE` override it. `default_device/0` says which kind it is,
  `default_device_spec/0` which device.

  Modules: `ExBurn.Backend` (the Nx backend), `ExBurn.Defn.Compiler`, `ExBurn.Tensor`
  (`%ExBurn.Tensor{}` handles and Nx conversion), `ExBurn.BurnBridge` (direct tensor ops),
  `ExBurn.NifHelper` (the same ops as `{:ok, _}` tuples), `ExBurn.CubeclBridge` (ExCubecl's
  buffers, kernels, pipelines, async commands), `ExBurn.Model`, `ExBurn.Training`,
  `ExBurn.Serving`, `ExBurn.Error`.
  """

  @doc """
  Sets the default Nx backend (of this process) to `ExBurn.Backend`: after it, Nx
  operations run on the device. Options: `:device`, `:gpu` (the best hardware device), `:cpu`
  (the CPU device), or a device string of `ExCubecl.devices/0`; default: the default device.

      iex> ExBurn.configure!()
      :ok
  """
  @spec configure!(keyword()) :: :ok
  def configure!(opts \\ []) do
    opts = ExBurn.Options.validate!("ExBurn.configure!", opts, device: nil)
    spec = if opts[:device], do: device_spec(opts[:device]), else: default_device_spec()
    Nx.default_backend({ExBurn.Backend, device: spec})
    :ok
  end

  @doc """
  The default device for tensor operations: `:gpu` when it is a hardware GPU (CUDA, or a
  Vulkan / Metal / DX12 adapter), `:cpu` when it is the CPU device (Mesa's lavapipe or
  llvmpipe through wgpu). Which device that is: `default_device_spec/0`.

      iex> ExBurn.default_device() in [:gpu, :cpu]
      true
  """
  @spec default_device() :: :cpu | :gpu
  def default_device do
    spec = default_device_spec()

    case Enum.find(devices(), &(&1.device == spec)) do
      %{kind: :gpu} -> :gpu
      %{kind: :cpu} -> :cpu
      # A spec that devices/0 doesn't list as such ("wgpu", "cuda:0"): by its runtime.
      nil -> if String.starts_with?(spec, "cuda") or gpu_available?(), do: :gpu, else: :cpu
    end
  end

  @doc """
  The default device as ExCubecl's device string (`"cuda:0"`, `"wgpu:discrete:0"`,
  `"wgpu:cpu"`): CUDA, then a hardware adapter, then lavapipe, unless
  `config :ex_cubecl, device: ...` or `EX_CUBECL_DEVICE` say otherwise.
  """
  @spec default_device_spec() :: String.t()
  def default_device_spec, do: ExCubecl.default_device()

  @doc """
  The default device's facts: `:device` (`:gpu | :cpu`), `:gpu_available`, `:backend` (the
  runtime: `:cuda` or `:wgpu`), `:available_backends` (the runtimes compiled in), `:name` (the
  adapter), `:api` (`"cuda"`, `"vulkan"`, `"metal"`, ...), `:kind` and `:spec` (the device
  string).

      iex> %{device: _, gpu_available: _, backend: _, available_backends: _} = ExBurn.device_info()
  """
  @spec device_info() :: map()
  def device_info do
    info = ExCubecl.device_info()

    %{
      device: default_device(),
      gpu_available: gpu_available?(),
      backend: if(String.starts_with?(info.device, "cuda"), do: :cuda, else: :wgpu),
      available_backends: ExCubecl.available_backends(),
      name: info.name,
      api: info.api,
      kind: info.kind,
      spec: info.device
    }
  end

  @doc """
  The active compute device's name: its API and adapter, e.g. `"CUDA (CUDA device 0)"`,
  `"Metal (Apple M4)"`, `"Vulkan (llvmpipe (LLVM 15.0.6, 256 bits))"`.
  """
  @spec device_name() :: String.t()
  def device_name do
    %{name: name, api: api} = ExCubecl.device_info()
    "#{api_label(api)} (#{name})"
  end

  # ExCubecl.devices/0, asked of the NIF once (it probes every adapter).
  defp devices do
    case :persistent_term.get({__MODULE__, :devices}, nil) do
      nil ->
        list = ExCubecl.devices()
        if list != [], do: :persistent_term.put({__MODULE__, :devices}, list)
        list

      list ->
        list
    end
  end

  defp api_label("cuda"), do: "CUDA"
  defp api_label("vulkan"), do: "Vulkan"
  defp api_label("metal"), do: "Metal"
  defp api_label("dx12"), do: "DX12"
  defp api_label("gl"), do: "OpenGL"
  defp api_label(other), do: to_string(other)

  @doc "Whether an NVIDIA CUDA GPU is available. `ExBurn.cuda_available?()`"
  @spec cuda_available?() :: boolean()
  def cuda_available?, do: ExCubecl.cuda_available?()

  @doc """
  Whether this machine has a hardware GPU that ExBurn can use (a CUDA device, or a hardware
  Vulkan / Metal / DX12 adapter).

      iex> is_boolean(ExBurn.gpu_available?())
      true
  """
  @spec gpu_available?() :: boolean()
  def gpu_available?, do: Enum.any?(devices(), &(&1.kind == :gpu))

  @doc "As `gpu_available?/0`."
  @spec gpu?() :: boolean()
  def gpu?, do: gpu_available?()

  @doc """
  The number of NIF functions of the native library (0 when it is not loaded); for
  debugging NIF loading.

      iex> ExBurn.nif_function_count() > 0
      true
  """
  @spec nif_function_count() :: non_neg_integer()
  def nif_function_count do
    if nif_loaded?(),
      do: ExCubecl.Native.__info__(:functions) |> Enum.reject(&(&1 == {:load_nif, 0})) |> length(),
      else: 0
  end

  @doc """
  Whether ExBurn can run here: the NIF is loaded and the default device computes a small
  product correctly (`smoke_test/0`).

      iex> ExBurn.available?()
      true
  """
  @spec available?() :: boolean()
  def available?, do: nif_loaded?() and smoke_test() == :ok

  @doc """
  `ExBurn.Tensor.from_nx/2`: `{:ok, %ExBurn.Tensor{}}` of `t` (options: `:device`).

      iex> {:ok, bt} = ExBurn.from_nx(Nx.tensor([[1.0, 2.0], [3.0, 4.0]]))
      iex> {bt.shape, bt.type}
      {[2, 2], :f32}
  """
  @spec from_nx(Nx.Tensor.t(), keyword()) :: {:ok, ExBurn.Tensor.t()} | {:error, String.t()}
  defdelegate from_nx(t, opts \\ []), to: ExBurn.Tensor

  @doc """
  `ExBurn.Tensor.to_nx/1`: `{:ok, nx_tensor}` of an `%ExBurn.Tensor{}`.

      iex> {:ok, bt} = ExBurn.from_nx(Nx.tensor([1, 2, 3]))
      iex> {:ok, t} = ExBurn.to_nx(bt)
      iex> Nx.to_list(t)
      [1, 2, 3]
  """
  @spec to_nx(ExBurn.Tensor.t()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
  defdelegate to_nx(t), to: ExBurn.Tensor

  @doc "`ExBurn.BurnBridge.zeros/3`: an `%ExBurn.Tensor{}` of zeros. `ExBurn.zeros([3, 3], :f32)`"
  @spec zeros([non_neg_integer()], ExBurn.Tensor.burn_type(), keyword()) :: ExBurn.Tensor.t()
  defdelegate zeros(shape, type \\ :f32, opts \\ []), to: ExBurn.BurnBridge

  @doc "`ExBurn.BurnBridge.ones/3`: an `%ExBurn.Tensor{}` of ones. `ExBurn.ones([2, 4], :f32)`"
  @spec ones([non_neg_integer()], ExBurn.Tensor.burn_type(), keyword()) :: ExBurn.Tensor.t()
  defdelegate ones(shape, type \\ :f32, opts \\ []), to: ExBurn.BurnBridge

  @doc """
  `ExBurn.Tensor.free/1`: frees a tensor's device memory now (of an `%ExBurn.Tensor{}` or an
  `Nx.Tensor` on `ExBurn.Backend`).

      iex> {:ok, bt} = ExBurn.from_nx(Nx.tensor([1.0, 2.0]))
      iex> ExBurn.free(bt)
      :ok
  """
  @spec free(ExBurn.Tensor.t() | Nx.Tensor.t()) :: :ok | :already_deallocated
  defdelegate free(t), to: ExBurn.Tensor

  @doc "Whether the NIF is loaded. `ExBurn.nif_loaded?() #=> true`"
  @spec nif_loaded?() :: boolean()
  def nif_loaded? do
    match?([_ | _], ExCubecl.Native.runtimes())
  rescue
    _ -> false
  end

  @doc """
  Runs a small computation on the default device and checks it: `:ok` or `{:error, reason}`.

      iex> ExBurn.smoke_test()
      :ok
  """
  @spec smoke_test() :: :ok | {:error, String.t()}
  def smoke_test do
    t = Nx.iota({4, 4}, backend: {ExBurn.Backend, device: default_device_spec()})
    got = t |> Nx.dot(t) |> Nx.sum() |> Nx.to_number()
    if got == 3920, do: :ok, else: {:error, "iota(4x4) . iota(4x4) summed to #{got}, expected 3920"}
  rescue
    e -> {:error, Exception.message(e)}
  end

  @doc """
  Runs `fun` on `args` asynchronously and gives a reference at once. `fun` is compiled with
  `ExBurn.Defn.Compiler` (a `defn`, a function of Nx calls, or a function that
  `Nx.Defn.jit/2` returned; options as the compiler's) and runs on the device's command
  queue, after the commands queued before it. The caller gets
  `{ExBurn, ref, {:ok, result}}` or `{ExBurn, ref, {:error, %ExBurn.Error{}}}` when it ends,
  or waits for it with `await/2`. A failed call fails alone: the calls after it run.

      ref = ExBurn.async(&MyModel.predict/2, [params, batch])
      # ... other work ...
      {:ok, predictions} = ExBurn.await(ref)
  """
  @spec async(function(), [term()], keyword()) :: reference()
  def async(fun, args, opts \\ []) when is_function(fun, length(args)) do
    caller = self()
    ref = make_ref()

    spawn(fn ->
      ExBurn.Defn.Compiler.run_on_queue()

      result =
        try do
          {:ok, apply(Nx.Defn.jit(fun, [compiler: ExBurn.Defn.Compiler] ++ opts), args)}
        rescue
          e in ExBurn.Error -> {:error, e}
          e -> {:error, ExBurn.Error.new("ExBurn.async", Exception.message(e), inspect(e.__struct__))}
        catch
          kind, reason -> {:error, ExBurn.Error.new("ExBurn.async", "the call ended with #{kind}", inspect(reason, limit: 5))}
        end

      send(caller, {ExBurn, ref, result})
    end)

    ref
  end

  @doc """
  Waits for the call `ref` of `async/3` (at most `timeout` milliseconds): `{:ok, result}`,
  `{:error, %ExBurn.Error{}}`, or `{:error, :timeout}` (the call goes on, and its message
  comes later).
  """
  @spec await(reference(), timeout()) :: {:ok, term()} | {:error, ExBurn.Error.t() | :timeout}
  def await(ref, timeout \\ :infinity) when is_reference(ref) do
    receive do
      {ExBurn, ^ref, result} -> result
    after
      timeout -> {:error, :timeout}
    end
  end

  @doc """
  A summary of the environment: version, device, GPU availability, runtimes.

      iex> ExBurn.summary() =~ "ExBurn"
      true
  """
  @spec summary() :: String.t()
  def summary do
    info = device_info()

    "ExBurn #{version()} on #{info.device} #{info.spec} (#{device_name()}); GPU available: #{info.gpu_available}; " <>
      "runtimes: #{Enum.join(info.available_backends, ", ")}"
  end

  @doc "The version. `ExBurn.version() #=> \"0.1.0\"`"
  @spec version() :: String.t()
  def version, do: to_string(Application.spec(:ex_burn, :vsn) || "0.1.0")

  @doc """
  A device option as ExCubecl's device string: strings as they are; `:gpu` the best hardware
  device (CUDA, else a hardware Vulkan / Metal adapter), `:cpu` the CPU device (lavapipe /
  llvmpipe through wgpu), `:cuda` the first CUDA device, `:wgpu` wgpu's default adapter.
  Raises `ExBurn.Error` naming what is missing where there is no such device.
  """
  @spec device_spec(atom() | String.t()) :: String.t()
  def device_spec(dev) when is_binary(dev), do: dev
  def device_spec(:cuda), do: "cuda:0"
  def device_spec(:wgpu), do: "wgpu"
  def device_spec(:gpu), do: first_of_kind(:gpu, "no GPU: this machine has no CUDA device and no hardware Vulkan, Metal or DX12 adapter")
  def device_spec(:cpu), do: first_of_kind(:cpu, "no CPU device: wgpu finds no software adapter (install Mesa's lavapipe, or llvmpipe)")
  def device_spec(other), do: raise(ExBurn.Error.new("ExBurn", "unknown device #{inspect(other)}", "a device string of ExCubecl.devices/0, or :gpu, :cpu, :cuda, :wgpu"))

  defp first_of_kind(kind, missing) do
    devices = devices()

    case Enum.find(devices, &(&1.kind == kind)) do
      %{device: spec} -> spec
      nil -> raise ExBurn.Error.new("ExBurn", "device #{inspect(kind)}: #{missing}", "devices: #{Enum.map_join(devices, ", ", &"#{&1.device} (#{&1.name})")}")
    end
  end
end
