defmodule ExCubecl.Devices do
  @moduledoc false
  # `ExCubecl`'s devices: what this machine and build offer, the default device, memory,
  # synchronisation and the end of the runtime. The docs and specs are `ExCubecl`'s.
  import ExCubecl.Helpers
  alias ExCubecl.Native

  def devices do
    case Native.devices() do
      {:ok, list} -> for {spec, name, kind, api} <- list, do: %{device: spec, name: name, kind: String.to_atom(kind), api: api}
      {:error, _} -> []
    end
  end

  def default_device do
    Application.get_env(:ex_cubecl, :device) || System.get_env("EX_CUBECL_DEVICE") || probed_default()
  end

  defp probed_default do
    case :persistent_term.get({ExCubecl, :default_device}, nil) do
      nil ->
        device = bang(Native.default_device())
        :persistent_term.put({ExCubecl, :default_device}, device)
        device

      device ->
        device
    end
  end

  def device_info do
    device = default_device()
    entry = Enum.find(devices(), %{device: device, name: device, kind: :unknown, api: "unknown"}, &(&1.device == device))
    Map.put(entry, :runtimes, available_backends())
  end

  def device_count, do: length(devices())

  def available_backends, do: Enum.map(Native.runtimes(), &String.to_atom/1)

  def launch_count, do: Native.launch_count()

  def cuda_available?, do: Enum.any?(devices(), &(&1.api == "cuda"))

  def gpu?, do: device_info().kind == :gpu

  def memory_info(opts \\ []) do
    with {:ok, device} <- device_opt("memory_info", opts),
         {:ok, {in_use, reserved, allocs}} <- Native.memory_info(device) do
      {:ok, %{bytes_in_use: in_use, bytes_reserved: reserved, allocations: allocs}}
    else
      error -> error(error)
    end
  end

  def supported_dtypes(opts \\ []) do
    {:ok, device} = device_opt("supported_dtypes", opts)
    device |> Native.supported_dtypes() |> bang() |> Enum.map(&String.to_atom/1)
  end

  def synchronize(opts \\ []) do
    with {:ok, device} <- device_opt("synchronize", opts),
         {:ok, true} <- Native.synchronize(device) do
      :ok
    else
      error -> error(error)
    end
  end

  def put_allocation_limit(bytes) when (is_integer(bytes) and bytes > 0) or is_nil(bytes) do
    true = Native.put_allocation_limit(bytes)
    :ok
  end

  def shutdown do
    case Native.shutdown() do
      {:ok, true} -> :ok
      error -> error(error)
    end
  end

  def version, do: to_string(Application.spec(:ex_cubecl, :vsn) || "0.1.0")
end
