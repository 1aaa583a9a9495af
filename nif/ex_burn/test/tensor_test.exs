defmodule ExBurn.TensorTest do
  # ExBurn.Tensor as 004's reference documents it: the %ExBurn.Tensor{} struct, the type
  # table, conversions returning {:ok, _} / {:error, String.t()}, batches, free/1.
  use ExUnit.Case, async: true
  alias ExBurn.Tensor, as: BT

  doctest ExBurn.Tensor

  @table [
    {{:f, 32}, :f32},
    {{:f, 64}, :f64},
    {{:f, 16}, :f32},
    {{:bf, 16}, :f32},
    {{:s, 32}, :i32},
    {{:s, 64}, :i64},
    {{:s, 16}, :i32},
    {{:s, 8}, :i32},
    {{:u, 8}, :f32}
  ]

  test "the documented type table, both ways" do
    for {nx, burn} <- @table, do: assert(BT.nx_type_to_burn(nx) == burn, inspect(nx))
    for burn <- [:f32, :f64, :i32, :i64], do: assert(BT.nx_type_to_burn(BT.burn_type_to_nx(burn)) == burn)
    assert_raise ArgumentError, ~r/nx_type_to_burn: \{:c, 64\} has no Burn type/, fn -> BT.nx_type_to_burn({:c, 64}) end
    assert_raise ArgumentError, ~r/unknown Burn type :f16/, fn -> BT.burn_type_to_nx(:f16) end
  end

  test "from_nx converts every type of the table to its Burn type and keeps the values" do
    f64? = :f64 in ExCubecl.supported_dtypes()

    for {nx, burn} <- @table, f64? or nx != {:f, 64} do
      t = Nx.tensor([[1, 2, 3], [4, 5, 6]], type: nx, backend: Nx.BinaryBackend)
      assert {:ok, %BT{ref: ref, shape: [2, 3], type: ^burn} = bt} = BT.from_nx(t)
      assert is_reference(ref) and BT.ref(bt) == ref
      assert {BT.shape(bt), BT.type(bt), BT.rank(bt), BT.numel(bt)} == {[2, 3], burn, 2, 6}
      assert {:ok, back} = BT.to_nx(bt)
      assert back.type == BT.burn_type_to_nx(burn)
      assert back.shape == {2, 3}
      assert Nx.to_list(Nx.as_type(back, :s64)) == [[1, 2, 3], [4, 5, 6]], inspect(nx)
    end
  end

  test "a tensor already on the device is taken without a copy; :device moves it" do
    t = Nx.tensor([1.0, 2.0], backend: {ExBurn.Backend, device: "wgpu:cpu"})
    assert {:ok, bt} = BT.from_nx(t)
    assert bt.ref == t.data.ref
    assert {:ok, %BT{}} = BT.from_nx(Nx.tensor([1.0]), device: :cpu)
    assert {:error, "ExBurn.Tensor.from_nx: " <> _} = BT.from_nx(Nx.tensor([1.0]), device: "nope:0")
  end

  test "from_binary, and its errors" do
    if :f64 in ExCubecl.supported_dtypes() do
      assert {:ok, t} = BT.from_binary(<<1.0::float-64-native, 2.0::float-64-native>>, [2], :f64)
      assert {:ok, %Nx.Tensor{type: {:f, 64}}} = BT.to_nx(t)
    end

    assert {:ok, i} = BT.from_binary(<<-7::64-signed-native>>, [1, 1], :i64)
    assert {:ok, back} = BT.to_nx(i)
    assert Nx.to_list(back) == [[-7]]
    assert {:error, "ExBurn.Tensor.from_binary: " <> reason} = BT.from_binary(<<0, 0, 0>>, [1], :f32)
    assert reason =~ "3 bytes"
    assert {:error, "ExBurn.Tensor.from_binary: expects a binary" <> _} = BT.from_binary(<<0::32>>, [1], :f16)
  end

  test "batches, and the first error of a batch" do
    assert {:ok, [a, b]} = BT.from_nx_batch([Nx.tensor([1.0]), Nx.tensor([[2, 3]])])
    assert {a.shape, b.shape, b.type} == {[1], [1, 2], :i32}
    assert {:ok, [x, y]} = BT.to_nx_batch([a, b])
    assert {Nx.to_list(x), Nx.to_list(y)} == {[1.0], [[2, 3]]}
    assert {:error, "ExBurn.Tensor.from_nx: " <> _} = BT.from_nx_batch([Nx.tensor([1.0]), Nx.tensor(Complex.new(1, 2))])
    assert {:error, "ExBurn.Tensor.to_nx: expects" <> _} = BT.to_nx_batch([a, :nope])
  end

  test "free/1 gives :ok, even twice; the freed tensor reads as an error" do
    {:ok, t} = BT.from_nx(Nx.tensor([1.0, 2.0]))
    assert BT.free(t) == :ok
    assert BT.free(t) == :ok
    assert {:error, "ExBurn.Tensor.to_nx: the tensor was freed" <> _} = BT.to_nx(t)
  end
end
