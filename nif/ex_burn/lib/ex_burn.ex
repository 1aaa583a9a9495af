defmodule ExBurn do
  @moduledoc """
  Nx on the GPU through ExCubecl. Set-up:

      Nx.default_backend(ExBurn.Backend)          # or ExBurn.configure!()
      Nx.iota({2, 3}) |> Nx.multiply(2) |> Nx.sum()

  or in config: `config :nx, default_backend: {ExBurn.Backend, device: :cuda}`.

  Devices are ExCubecl's (`ExCubecl.devices/0`): `"cuda:0"`, `"wgpu"` (a hardware Vulkan or
  Metal adapter), `"wgpu:cpu"` (Mesa's lavapipe). The default is CUDA, then a hardware
  adapter, then lavapipe; `config :ex_cubecl, device: ...` or `EX_CUBECL_DEVICE` override it.
  """

  @doc """
  Makes `ExBurn.Backend` the default Nx backend of this process (options: `:device`, a
  device string or `:cuda` / `:wgpu` / `:cpu`). Gives the backend tuple set.

      iex> ExBurn.configure!() |> elem(0)
      ExBurn.Backend
  """
  @spec configure!(keyword()) :: {module(), keyword()}
  def configure!(opts \\ []) do
    opts = Keyword.validate!(opts, [:device])
    backend = {ExBurn.Backend, Keyword.update(opts, :device, default_device(), &device_spec/1)}
    Nx.default_backend(backend)
    backend
  end

  @doc "The default device string. `ExBurn.default_device() #=> \"wgpu:cpu\"` on a machine without a GPU"
  @spec default_device() :: String.t()
  def default_device, do: ExCubecl.default_device()

  @doc "The default device's facts: `%{device: _, name: _, api: _, kind: :gpu | :cpu}`."
  @spec device_info() :: map()
  def device_info, do: ExCubecl.device_info()

  @doc "The default device's adapter name. `ExBurn.device_name() #=> \"NVIDIA H100 80GB HBM3\"`"
  @spec device_name() :: String.t()
  def device_name, do: device_info().name

  @doc "Whether a CUDA device is present."
  @spec cuda_available?() :: boolean()
  def cuda_available?, do: ExCubecl.cuda_available?()

  @doc "Whether the default device is a GPU (not lavapipe)."
  @spec gpu?() :: boolean()
  def gpu?, do: ExCubecl.gpu?()

  @doc """
  Whether ExBurn can run here: the NIF is loaded and the default device computes a small
  product correctly (`smoke_test/0`).

      iex> ExBurn.available?()
      true
  """
  @spec available?() :: boolean()
  def available?, do: nif_loaded?() and smoke_test() == :ok

  @doc "`ExBurn.Tensor.from_nx/2`: `t` on `ExBurn.Backend` (options: `:device`)."
  @spec from_nx(Nx.Tensor.t(), keyword()) :: Nx.Tensor.t()
  defdelegate from_nx(t, opts \\ []), to: ExBurn.Tensor

  @doc "`ExBurn.Tensor.to_nx/1`: `t` on `Nx.BinaryBackend`."
  @spec to_nx(Nx.Tensor.t()) :: Nx.Tensor.t()
  defdelegate to_nx(t), to: ExBurn.Tensor

  @doc "`ExBurn.Tensor.zeros/2`: zeros of `shape` on the device (options: `:type`, `:device`)."
  @spec zeros(tuple(), keyword()) :: Nx.Tensor.t()
  defdelegate zeros(shape, opts \\ []), to: ExBurn.Tensor

  @doc "`ExBurn.Tensor.ones/2`: ones of `shape` on the device (options: `:type`, `:device`)."
  @spec ones(tuple(), keyword()) :: Nx.Tensor.t()
  defdelegate ones(shape, opts \\ []), to: ExBurn.Tensor

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
    t = Nx.iota({4, 4}, backend: {ExBurn.Backend, device: default_device()})
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

  @doc "A one-line summary: version, device, runtimes."
  @spec summary() :: String.t()
  def summary do
    info = device_info()
    "ExBurn #{version()} on #{info.device} (#{info.name}); runtimes: #{Enum.join(ExCubecl.available_backends(), ", ")}"
  end

  @doc "The version. `ExBurn.version() #=> \"0.1.0\"`"
  @spec version() :: String.t()
  def version, do: to_string(Application.spec(:ex_burn, :vsn) || "0.1.0")

  @doc false
  # A device option as a device string: strings as they are, :cuda / :wgpu / :cpu as the
  # first device of that kind.
  def device_spec(dev) when is_binary(dev), do: dev
  def device_spec(:cuda), do: "cuda:0"
  def device_spec(:wgpu), do: "wgpu"
  def device_spec(:cpu), do: "wgpu:cpu"
  def device_spec(other), do: raise(ExBurn.Error.new("ExBurn", "unknown device #{inspect(other)}", "a device string of ExCubecl.devices/0, or :cuda, :wgpu, :cpu"))
end
