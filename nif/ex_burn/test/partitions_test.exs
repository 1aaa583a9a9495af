defmodule ExBurn.PartitionsTest do
  # `ExBurn.Defn.Compiler.__partitions_options__/1`: the option lists `Nx.Serving` gets for
  # `partitions: true`, one per device.
  use ExUnit.Case, async: true

  alias ExBurn.Defn.Compiler

  defp devices(parts), do: Enum.map(parts, &Keyword.fetch!(&1, :device))

  test "one option list per named device, the other options kept" do
    parts = Compiler.__partitions_options__(device: ["wgpu", :cpu], fuse: false, max_concurrency: 1)
    assert devices(parts) == ["wgpu", "wgpu:cpu"]
    assert Enum.all?(parts, &(&1[:fuse] == false and not Keyword.has_key?(&1, :max_concurrency)))
  end

  test ":max_concurrency partitions on each device" do
    assert devices(Compiler.__partitions_options__(device: ["wgpu", "wgpu:cpu"], max_concurrency: 2)) ==
             ["wgpu", "wgpu", "wgpu:cpu", "wgpu:cpu"]
  end

  test "one named device, or EXLA's client and device id, is one partition" do
    assert devices(Compiler.__partitions_options__(device: :cpu)) == ["wgpu:cpu"]
    assert [[device: "wgpu:cpu"]] = Compiler.__partitions_options__(client: :host)
    assert [[device: "cuda:1"]] = Compiler.__partitions_options__(client: :cuda, device_id: 1)
  end

  test "by default every GPU of the default device's runtime, else the default device" do
    default = ExBurn.default_device_spec()
    runtime = default |> String.split(":") |> hd()
    gpus = for %{kind: :gpu, device: d} <- ExCubecl.devices(), hd(String.split(d, ":")) == runtime, do: d
    assert devices(Compiler.__partitions_options__([])) == if(gpus == [], do: [default], else: gpus)
  end

  test "Nx.Serving with partitions: true runs a partition on each named device" do
    serving = Nx.Serving.jit(&Nx.multiply(&1, 2), compiler: Compiler, device: ["wgpu", "wgpu:cpu"])
    name = :"partitions_#{System.unique_integer([:positive])}"
    start_supervised!({Nx.Serving, serving: serving, name: name, batch_size: 2, partitions: true})
    results =
      1..4
      |> Task.async_stream(fn i -> Nx.Serving.batched_run(name, Nx.Batch.stack([Nx.tensor([i * 1.0, 1.0])])) end)
      |> Enum.map(fn {:ok, t} -> Nx.to_flat_list(t) end)
    assert results == [[2.0, 2.0], [4.0, 2.0], [6.0, 2.0], [8.0, 2.0]]
  end
end
