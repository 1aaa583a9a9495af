defmodule ExBurnTest do
  # The top-level module as the seed documents it (004's ExBurn reference, README "Checking GPU
  # Availability", 003's calls through ExBurn): device queries, configuration, moving tensors.
  use ExUnit.Case, async: false

  doctest ExBurn
  doctest ExBurn.Error

  test "device queries agree with each other and with ExCubecl's devices" do
    assert ExBurn.available?()
    devices = ExCubecl.devices()
    gpu? = Enum.any?(devices, &(&1.kind == :gpu))
    assert ExBurn.gpu_available?() == gpu?
    assert ExBurn.gpu?() == gpu?
    assert ExBurn.default_device() in [:gpu, :cpu]
    assert ExBurn.default_device_spec() in Enum.map(devices, & &1.device)
    kind = Enum.find(devices, &(&1.device == ExBurn.default_device_spec())).kind
    assert ExBurn.default_device() == kind

    # README: "full map with :device, :gpu_available, :backend, :available_backends"
    info = ExBurn.device_info()
    assert %{device: device, gpu_available: ^gpu?, backend: backend, available_backends: backends} = info
    assert device == ExBurn.default_device()
    assert backend in [:cuda, :wgpu] and backend in backends
    assert info.spec == ExBurn.default_device_spec()

    assert is_boolean(ExBurn.cuda_available?())
    assert ExBurn.device_name() =~ ~r/^\w+ \(.+\)$/
    assert ExBurn.device_name() =~ info.name
    assert ExBurn.nif_loaded?()
    assert ExBurn.nif_function_count() == length(ExCubecl.Native.__info__(:functions)) - 1
    assert ExBurn.version() == "0.1.0"
    assert ExBurn.summary() =~ "ExBurn 0.1.0"
    assert ExBurn.summary() =~ ExBurn.default_device_spec()
  end

  test ":gpu and :cpu name the best hardware device and the CPU device, or an error says what is missing" do
    devices = ExCubecl.devices()

    case Enum.find(devices, &(&1.kind == :cpu)) do
      nil -> assert_raise ExBurn.Error, ~r/device :cpu: no CPU device/, fn -> ExBurn.device_spec(:cpu) end
      cpu -> assert ExBurn.device_spec(:cpu) == cpu.device
    end

    case Enum.find(devices, &(&1.kind == :gpu)) do
      nil -> assert_raise ExBurn.Error, ~r/device :gpu: no GPU: this machine has no CUDA device and no hardware/, fn -> ExBurn.device_spec(:gpu) end
      gpu -> assert ExBurn.device_spec(:gpu) == gpu.device
    end

    assert_raise ExBurn.Error, ~r/unknown device :tpu/, fn -> ExBurn.device_spec(:tpu) end
  end

  test "the smoke test, as the documents run it" do
    # 004: ExBurn.smoke_test/0's example
    said =
      case ExBurn.smoke_test() do
        :ok -> "ExBurn is working!"
        {:error, message} -> "ExBurn error: " <> message
      end

    assert said == "ExBurn is working!"
  end

  test "configure! makes ExBurn.Backend this process's default backend, with :device" do
    previous = Nx.default_backend()

    try do
      # 004, "Basic Tensor Operations"
      assert :ok = ExBurn.configure!()
      a = Nx.tensor([1.0, 2.0, 3.0])
      b = Nx.tensor([4.0, 5.0, 6.0])
      assert %ExBurn.Backend{} = a.data
      assert Nx.to_list(Nx.add(a, b)) == [5.0, 7.0, 9.0]
      assert Nx.to_list(Nx.multiply(a, b)) == [4.0, 10.0, 18.0]
      m = Nx.tensor([[1.0, 2.0], [3.0, 4.0]])
      assert Nx.to_list(Nx.transpose(m)) == [[1.0, 3.0], [2.0, 4.0]]

      # 003: configure!(device: :gpu), here with the devices this machine has.
      for kind <- [:gpu, :cpu], Enum.any?(ExCubecl.devices(), &(&1.kind == kind)) do
        assert :ok = ExBurn.configure!(device: kind)
        assert Nx.iota({2}).data.device == ExBurn.device_spec(kind)
      end

      assert :ok = ExBurn.configure!(device: "wgpu:cpu")
      assert %ExBurn.Backend{device: "wgpu:cpu"} = Nx.iota({2}).data
      assert_raise ExBurn.Error, ~r/ExBurn.configure!: unknown option\(s\) :gpu/, fn -> ExBurn.configure!(gpu: true) end
      assert_raise ExBurn.Error, ~r/unknown device :tpu/, fn -> ExBurn.configure!(device: :tpu) end
    after
      Nx.default_backend(previous)
    end
  end

  test "from_nx and to_nx give {:ok, _} (003's from_nx/to_nx), zeros and ones Burn tensors" do
    t = Nx.tensor([[1.5, -2.0], [0.25, 8.0]], type: :f32, backend: Nx.BinaryBackend)
    assert {:ok, %ExBurn.Tensor{shape: [2, 2], type: :f32} = bt} = ExBurn.from_nx(t)
    assert {:ok, back} = ExBurn.to_nx(bt)
    assert %Nx.BinaryBackend{} = back.data
    assert Nx.to_binary(back) == Nx.to_binary(t)

    # 003: bt = zeros([3, 3], :f32); bt = ones([2, 4], :f32)
    assert %ExBurn.Tensor{shape: [3, 3], type: :f32} = z = ExBurn.zeros([3, 3], :f32)
    assert %ExBurn.Tensor{shape: [2, 4], type: :f32} = o = ExBurn.ones([2, 4], :f32)
    assert {:ok, zn} = ExBurn.to_nx(z)
    assert Nx.to_flat_list(zn) == List.duplicate(0.0, 9)
    assert {:ok, on} = ExBurn.to_nx(o)
    assert Nx.to_flat_list(on) == List.duplicate(1.0, 8)

    # 003's troubleshooting: free/1 on intermediate tensors
    assert :ok = ExBurn.free(o)
    assert {:error, "ExBurn.Tensor.to_nx: the tensor was freed" <> _} = ExBurn.to_nx(o)
    assert_raise ExBurn.Error, ~r/zeros: .*unknown Burn type :f8/, fn -> ExBurn.zeros([2], :f8) end
    assert {:error, "ExBurn.Tensor.from_nx: expects an Nx tensor" <> _} = ExBurn.from_nx([1, 2])
  end
end
