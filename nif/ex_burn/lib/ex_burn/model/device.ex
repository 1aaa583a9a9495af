defmodule ExBurn.Model.Device do
  @moduledoc """
  The devices of `ExBurn.Model` and `ExBurn.Training`: `:gpu` or `:cpu` as the documents name
  them, resolved to one of ExCubecl's devices (`ExCubecl.devices/0`).

    * `:gpu` - the best hardware device: a CUDA device, else a hardware Vulkan / Metal / DX12
      adapter through wgpu. Where there is none, `ExBurn.Error` says so and lists the devices
      there are.
    * `:cpu` - the CPU device: a software adapter through wgpu (Mesa's lavapipe or llvmpipe,
      WARP on Windows). Where the NIF has none, `ExBurn.Error` says so.
    * `nil` - the default device (`ExCubecl.default_device/0`: configuration, then
      `EX_CUBECL_DEVICE`, then the best device there is), so that a model compiled without a
      `:device` runs on a GPU where there is one and on the CPU device elsewhere.
    * a device string of `ExCubecl.devices/0` (`"cuda:0"`, `"wgpu:1"`, `"wgpu:cpu"`), or
      `:cuda` / `:wgpu`: that device.

  `resolve!/2` gives `{kind, spec}`: the kind (`:gpu` or `:cpu`, what `ExBurn.Model`'s
  `:device` field holds) and the device string every tensor and compiled call uses.
  """

  @type kind :: :gpu | :cpu
  @type spec :: String.t()

  @doc """
  `{kind, device_string}` for a device option, checked by running a small tensor there.
  Raises `ExBurn.Error` (op `fun`) naming what is missing.
  """
  @spec resolve!(nil | atom() | String.t(), String.t()) :: {kind(), spec()}
  def resolve!(device, fun) do
    spec = spec!(device, fun)
    check!(spec, device, fun)
    {kind_of(spec), spec}
  end

  @doc "The kind (`:gpu` or `:cpu`) of a device string: `:cpu` for a software adapter, `:gpu` otherwise."
  @spec kind_of(spec()) :: kind()
  def kind_of(spec) do
    case Enum.find(devices(), &(&1.device == spec)) do
      %{kind: :cpu} -> :cpu
      %{kind: _} -> :gpu
      nil -> if String.ends_with?(spec, ":cpu"), do: :cpu, else: :gpu
    end
  end

  defp spec!(nil, _fun), do: ExCubecl.default_device()

  defp spec!(:gpu, fun) do
    gpus = Enum.filter(devices(), &(&1.kind == :gpu))

    case Enum.find(gpus, &(&1.api == "cuda")) || List.first(gpus) do
      %{device: spec} ->
        spec

      nil ->
        raise ExBurn.Error.new(
                fun,
                "device: :gpu, but there is no GPU here (no CUDA device and no hardware Vulkan, Metal or DX12 adapter)",
                "devices: #{listing()}; use device: :cpu"
              )
    end
  end

  defp spec!(:cpu, fun) do
    case Enum.find(devices(), &(&1.kind == :cpu)) do
      %{device: spec} ->
        spec

      nil ->
        raise ExBurn.Error.new(
                fun,
                "device: :cpu, but the NIF has no CPU device (no software wgpu adapter such as lavapipe, llvmpipe or WARP)",
                "devices: #{listing()}"
              )
    end
  end

  defp spec!(device, fun) when is_binary(device) or device in [:cuda, :wgpu] do
    ExBurn.device_spec(device)
  rescue
    e in ExBurn.Error -> reraise ExBurn.Error.new(fun, "unknown device #{inspect(device)}", e.details), __STACKTRACE__
  end

  defp spec!(other, fun),
    do:
      raise(
        ExBurn.Error.new(
          fun,
          "unknown device #{inspect(other)}",
          ":gpu, :cpu, or a device string of ExCubecl.devices/0 (#{listing()})"
        )
      )

  defp check!(spec, device, fun) do
    Nx.tensor(0, backend: {ExBurn.Backend, device: spec}) |> Nx.to_binary()
    :ok
  rescue
    e in [ExBurn.Error, ExCubecl.Error] ->
      reraise ExBurn.Error.new(
                fun,
                "the device #{if device in [nil, spec], do: inspect(spec), else: "#{inspect(device)} (#{spec})"} is not available",
                Exception.message(e)
              ),
              __STACKTRACE__
  end

  defp devices, do: ExCubecl.devices()

  defp listing do
    case devices() do
      [] -> "none"
      list -> Enum.map_join(list, ", ", &"#{&1.device} (#{&1.name}, #{&1.kind})")
    end
  end
end
