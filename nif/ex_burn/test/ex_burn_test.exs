defmodule ExBurnTest do
  # The top-level calls of the seed's integration guide (README, "The seed's integration
  # guide in ExBurn"): device queries, configuration, moving tensors, creation.
  use ExUnit.Case, async: false

  doctest ExBurn
  doctest ExBurn.Tensor

  test "device queries agree with each other" do
    assert ExBurn.available?()
    assert is_boolean(ExBurn.gpu?())
    assert ExBurn.default_device() in Enum.map(ExCubecl.devices(), & &1.device)
    assert ExBurn.device_info().device == ExBurn.default_device()
    assert ExBurn.gpu?() == (ExBurn.device_info().kind == :gpu)
  end

  test "configure! makes ExBurn.Backend this process's default backend" do
    previous = Nx.default_backend()

    try do
      assert {ExBurn.Backend, [device: dev]} = ExBurn.configure!(device: :cpu)
      assert dev == "wgpu:cpu"
      assert %ExBurn.Backend{device: "wgpu:cpu"} = Nx.iota({2}).data
      assert_raise ArgumentError, fn -> ExBurn.configure!(gpu: true) end
      assert_raise ExBurn.Error, ~r/unknown device :tpu/, fn -> ExBurn.configure!(device: :tpu) end
    after
      Nx.default_backend(previous)
    end
  end

  test "from_nx and to_nx move tensors and keep their values" do
    t = Nx.tensor([[1.5, -2.0], [0.25, 8.0]], type: :f32, backend: Nx.BinaryBackend)
    on_device = ExBurn.from_nx(t)
    assert %ExBurn.Backend{} = on_device.data
    back = ExBurn.to_nx(on_device)
    assert %Nx.BinaryBackend{} = back.data
    assert Nx.to_binary(back) == Nx.to_binary(t)
    assert back.type == {:f, 32} and back.shape == {2, 2}
  end

  test "zeros and ones take a shape, a type and a device" do
    z = ExBurn.zeros({2, 3})
    assert %ExBurn.Backend{} = z.data
    assert {z.shape, z.type} == {{2, 3}, {:f, 32}}
    assert Nx.to_flat_list(z) == List.duplicate(0.0, 6)

    o = ExBurn.ones({4}, type: :s64, device: :cpu)
    assert {o.type, o.data.device} == {{:s, 64}, "wgpu:cpu"}
    assert Nx.to_flat_list(o) == [1, 1, 1, 1]

    assert Nx.to_number(ExBurn.zeros({}, type: :u8)) == 0
  end

  test "zeros and ones refuse a bad shape or option, naming the function" do
    assert_raise ArgumentError, ~r/ExBurn.Tensor.zeros: the shape must be a tuple/, fn -> ExBurn.zeros([2, 3]) end
    assert_raise ArgumentError, ~r/ExBurn.Tensor.ones: the shape must be a tuple/, fn -> ExBurn.ones(3) end
    assert_raise ArgumentError, fn -> ExBurn.zeros({2}, dtype: :f32) end
  end
end
