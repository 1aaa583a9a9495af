defmodule ExBurn.RecordTest do
  # Burn's record files (ExBurn.Record) and their mapping to Axon (ExBurn.Record.Axon). The
  # fixture test/fixtures/burn_mlp.mpk is the digits job's Mlp written by Burn's recorder
  # (examples/tests/record_exchange.rs, `elixir_fixture_is_burns_mlp`), every value
  # ((7k + 13p) mod 97 - 48) / 256 for element k of the p-th parameter.
  use ExUnit.Case, async: true

  doctest ExBurn.Record

  alias ExBurn.Record

  @fixture Path.expand("fixtures/burn_mlp.mpk", __DIR__)
  @mlp [{"hidden1", {64, 128}}, {"hidden2", {128, 64}}, {"output", {64, 10}}]

  # A fresh folder per test outside the project (ExUnit's :tmp_dir tag writes under tmp/).
  setup do
    dir = Path.join(System.tmp_dir!(), "ex_burn_record_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf(dir) end)
    %{tmp_dir: dir}
  end

  defp bits(t), do: {t.type, t.shape, Nx.to_binary(t)}

  # The fixture's values of parameter `p` of `shape`, on the BinaryBackend.
  defp formula(p, shape) do
    k = Nx.iota({Nx.size(shape)}, type: :s32, backend: Nx.BinaryBackend)

    Nx.remainder(Nx.add(Nx.multiply(k, 7), 13 * p), 97)
    |> Nx.subtract(48)
    |> Nx.as_type(:f32)
    |> Nx.divide(256)
    |> Nx.reshape(shape)
  end

  defp axon_mlp do
    Axon.input("x", shape: {nil, 64})
    |> Axon.dense(128, activation: :relu)
    |> Axon.dense(64, activation: :relu)
    |> Axon.dense(10)
  end

  defp init(model, template) do
    {init_fn, _} = Axon.build(model)
    init_fn.(template, Axon.ModelState.empty())
  end

  describe "load and save" do
    test "a record Burn wrote loads with its names, shapes, metadata and values" do
      {:ok, %{metadata: metadata, params: params}} = Record.read(@fixture)

      assert metadata == %{
               float: "f32",
               int: "i32",
               format:
                 "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
               version: "0.21.0",
               settings: "FullPrecisionSettings"
             }

      expected =
        Enum.flat_map(@mlp, fn {layer, {_, out} = w} -> [{layer <> ".weight", w}, {layer <> ".bias", {out}}] end)

      assert Enum.map(params, fn {name, t} -> {name, t.shape} end) == expected

      for {{name, t}, p} <- Enum.with_index(params) do
        assert %ExBurn.Backend{} = t.data
        assert bits(t) == bits(formula(p, t.shape)), name
      end

      # The sums the Rust generator prints.
      assert Nx.to_number(Nx.sum(Nx.as_type(elem(hd(params), 1), :f64))) == -0.5703125
      {:ok, map} = Record.load(@fixture)
      assert Map.keys(map) |> Enum.sort() == Enum.map(expected, &elem(&1, 0)) |> Enum.sort()
    end

    test "save then load is bit-exact in every type the device holds", %{tmp_dir: dir} do
      device = ExBurn.default_device_spec()
      {:ok, supported} = ExCubecl.Native.supported_dtypes(device)
      key = Nx.Random.key(7)

      params =
        for type <- [:f32, :f64, :f16, :bf16, :s8, :s16, :s32, :s64, :u8, :u16, :u32, :u64],
            Atom.to_string(type) in supported,
            into: %{} do
          t =
            case Nx.Type.normalize!(type) do
              {:f, _} -> Nx.Random.normal(key, shape: {3, 5}, type: type) |> elem(0)
              {_, _} -> Nx.iota({2, 3, 2}, type: type, backend: Nx.BinaryBackend) |> Nx.multiply(11)
            end

          {"layers.#{type}.weight", t}
        end

      special = Nx.tensor([:nan, :infinity, :neg_infinity, -0.0, 1.0e-40], type: :f32, backend: Nx.BinaryBackend)

      params =
        Map.merge(params, %{
          "edge.special" => special,
          "edge.scalar" => Nx.tensor(2.5, backend: Nx.BinaryBackend)
        })

      path = Path.join(dir, "all.mpk")
      assert :ok = Record.save(path, params)
      assert {:ok, loaded} = Record.load(path)
      assert Map.keys(loaded) |> Enum.sort() == Map.keys(params) |> Enum.sort()
      assert map_size(params) >= 8, "f32, f64, f16 and the integers at least: #{inspect(supported)}"

      for {name, t} <- params, do: assert(bits(loaded[name]) == bits(t), name)

      # Saving the loaded params again, with the metadata read, gives the same record.
      {:ok, %{metadata: metadata}} = Record.read(path)
      again = Path.join(dir, "again.mpk")
      assert :ok = Record.save(again, loaded, metadata: metadata)
      {:ok, reloaded} = Record.load(again)
      for {name, t} <- params, do: assert(bits(reloaded[name]) == bits(t), name)
      assert File.ls!(dir) |> Enum.sort() == ["again.mpk", "all.mpk"], "no temporary file is left"
    end

    test "a missing, truncated or foreign file is an error naming it", %{tmp_dir: dir} do
      missing = Path.join(dir, "missing.mpk")
      assert {:error, %ExBurn.Error{} = e} = Record.load(missing)
      assert Exception.message(e) =~ "ExBurn.Record.load"
      assert Exception.message(e) =~ missing
      assert Exception.message(e) =~ "no such file"
      assert_raise ExBurn.Error, ~r/no such file/, fn -> Record.load!(missing) end

      bytes = File.read!(@fixture)

      for cut <- [1, 100, 200, div(byte_size(bytes), 2), byte_size(bytes) - 1] do
        path = Path.join(dir, "cut_#{cut}.mpk")
        File.write!(path, binary_part(bytes, 0, cut))
        assert {:error, %ExBurn.Error{} = e} = Record.load(path)
        assert Exception.message(e) =~ path
        assert Exception.message(e) =~ ~r/truncated|ends at byte/
      end

      for {name, contents} <- [{"empty", ""}, {"json", ~s({"metadata": {}})}, {"text", "hello"}] do
        path = Path.join(dir, name)
        File.write!(path, contents)
        assert {:error, %ExBurn.Error{} = e} = Record.load(path), name
        assert Exception.message(e) =~ path
      end
    end

    test "an unsupported dtype, or one the device can't hold, is an error naming the parameter", %{tmp_dir: dir} do
      path = Path.join(dir, "w.mpk")
      :ok = Record.save(path, %{"layer.w" => Nx.tensor([1.0, 2.0], type: :f16), "layer.v" => Nx.tensor([3.0])})
      bytes = File.read!(path)

      # Burn's dtype names are length-prefixed strings: "F32" (0xa3) becomes a name Burn doesn't have.
      File.write!(path, String.replace(bytes, <<0xA3, "F32">>, <<0xA6, "Flex64">>))
      assert {:error, e} = Record.load(path)
      assert Exception.message(e) =~ ~s(parameter "layer.v": unsupported dtype "Flex64")

      # "F16" becomes "BF16" (the same size): it loads where the device computes in bf16.
      File.write!(path, String.replace(bytes, <<0xA3, "F16">>, <<0xA4, "BF16">>))
      {:ok, supported} = ExCubecl.Native.supported_dtypes(ExBurn.default_device_spec())

      if "bf16" in supported do
        assert {:ok, %{"layer.w" => %Nx.Tensor{type: {:bf, 16}}}} = Record.load(path)
      else
        assert {:error, e} = Record.load(path)
        assert Exception.message(e) =~ ~s(parameter "layer.w": the device does not support dtype bf16)
      end
    end

    test "saving refuses what Burn can't hold and leaves no file", %{tmp_dir: dir} do
      path = Path.join(dir, "bad.mpk")
      assert {:error, e} = Record.save(path, %{"a.b" => Nx.tensor([Complex.new(1, 2)])})
      assert Exception.message(e) =~ "complex"
      assert {:error, e} = Record.save(path, %{"a" => Nx.tensor([1.0]), "a.b" => Nx.tensor([1.0])})
      assert Exception.message(e) =~ "ExBurn.Record.save"
      assert {:error, e} = Record.save(path, [{"a..b", Nx.tensor([1.0])}])
      assert Exception.message(e) =~ "bad parameter name"
      assert {:error, e} = Record.save(path, %{"a" => Nx.tensor([1.0])}, metadata: %{colour: "red"})
      assert Exception.message(e) =~ "unknown metadata field"
      assert {:error, e} = Record.save(Path.join([dir, "no", "such", "dir.mpk"]), %{"a" => Nx.tensor([1.0])})
      assert Exception.message(e) =~ "no such file"
      assert File.ls!(dir) == []
    end
  end

  describe "Axon" do
    test "an MLP's model state to Burn params and back is identical" do
      state = init(axon_mlp(), Nx.template({1, 64}, :f32))
      mapping = Enum.zip_with(Enum.map(@mlp, &elem(&1, 0)), ["dense_0", "dense_1", "dense_2"], &{&1, &2})

      burn = Record.Axon.from_model_state(state, mapping)

      assert Enum.sort(Map.keys(burn)) ==
               ~w(hidden1.bias hidden1.weight hidden2.bias hidden2.weight output.bias output.weight)

      assert burn["hidden1.weight"].shape == {64, 128}

      for auto <- [false, true] do
        back =
          if auto, do: Record.Axon.to_model_state(burn, state), else: Record.Axon.to_model_state(burn, state, mapping)

        for {layer, params} <- state.data, {name, t} <- params do
          assert bits(back.data[layer][name]) == bits(t), "#{layer} #{name}"
        end
      end

      # :auto both ways: Burn layers named as Axon's.
      assert Map.keys(Record.Axon.from_model_state(state)) |> Enum.sort() ==
               ~w(dense_0.bias dense_0.kernel dense_1.bias dense_1.kernel dense_2.bias dense_2.kernel)
               |> Enum.map(&String.replace(&1, "kernel", "weight"))
               |> Enum.sort()
    end

    test "an Axon MLP with Burn's params predicts x·W + b with relu" do
      model = axon_mlp()
      {:ok, burn} = Record.load(@fixture)
      state = Record.Axon.to_model_state(burn, init(model, Nx.template({1, 64}, :f32)))
      x = Nx.iota({4, 64}, type: :f32) |> Nx.remainder(9) |> Nx.subtract(4) |> Nx.divide(4)

      {_, predict_fn} = Axon.build(model)
      got = predict_fn.(state, x)

      layer = fn x, name -> x |> Nx.dot(burn[name <> ".weight"]) |> Nx.add(burn[name <> ".bias"]) end
      relu = &Nx.max(&1, 0)
      hand = x |> layer.("hidden1") |> relu.() |> layer.("hidden2") |> relu.() |> layer.("output")
      assert bits(got) == bits(hand)

      # And on Nx.BinaryBackend, in f64: the same to f32's rounding.
      host = fn name -> Nx.backend_copy(burn[name], Nx.BinaryBackend) |> Nx.as_type(:f64) end
      layer64 = fn x, name -> x |> Nx.dot(host.(name <> ".weight")) |> Nx.add(host.(name <> ".bias")) end
      x64 = Nx.backend_copy(x, Nx.BinaryBackend) |> Nx.as_type(:f64)
      want = x64 |> layer64.("hidden1") |> relu.() |> layer64.("hidden2") |> relu.() |> layer64.("output")

      assert Nx.all_close(Nx.backend_copy(got, Nx.BinaryBackend) |> Nx.as_type(:f64), want, atol: 1.0e-5, rtol: 1.0e-5)
             |> Nx.to_number() == 1
    end

    test "a conv kernel is transposed to Axon's channels-last layout and back" do
      model =
        Axon.input("x", shape: {nil, 8, 8, 1})
        |> Axon.conv(8, kernel_size: 3, padding: :same, activation: :relu)
        |> Axon.conv(16, kernel_size: 3, padding: :same)
        |> Axon.flatten()
        |> Axon.dense(10)

      state = init(model, Nx.template({1, 8, 8, 1}, :f32))
      assert state.data["conv_1"]["kernel"].shape == {3, 3, 8, 16}
      mapping = [{"conv1", "conv_0"}, {"conv2", "conv_1"}, {"output", "dense_0"}]
      burn = Record.Axon.from_model_state(state, mapping)
      assert burn["conv2.weight"].shape == {16, 8, 3, 3}
      k = Nx.backend_copy(state.data["conv_1"]["kernel"], Nx.BinaryBackend)
      w = Nx.backend_copy(burn["conv2.weight"], Nx.BinaryBackend)
      assert Nx.to_number(w[[5, 2, 0, 1]]) == Nx.to_number(k[[0, 1, 2, 5]])

      back = Record.Axon.to_model_state(burn, state)
      for {layer, params} <- state.data, {name, t} <- params, do: assert(bits(back.data[layer][name]) == bits(t))

      first = Record.Axon.from_model_state(state, [{"conv1", "conv_0", channels: :first}])
      assert first["conv1.weight"].shape == {3, 3, 1, 8}
    end

    test "ExBurn.Model imports a Burn record and exports one Burn reads back the same", %{tmp_dir: dir} do
      model = ExBurn.Model.compile(axon_mlp(), seed: 3)
      {:ok, imported} = ExBurn.Model.import_params(model, @fixture)
      burn = Record.load!(@fixture)

      for {{path, _shape}, i} <- Enum.with_index(@mlp) do
        layer = "dense_#{i}"
        assert bits(imported.state.data[layer]["kernel"]) == bits(burn[path <> ".weight"])
        assert bits(imported.state.data[layer]["bias"]) == bits(burn[path <> ".bias"])
      end

      x = Nx.iota({2, 64}, type: :f32) |> Nx.divide(64)
      path = Path.join(dir, "exported.mpk")
      mapping = for {{burn, _}, i} <- Enum.with_index(@mlp), do: {burn, "dense_#{i}"}
      assert :ok = ExBurn.Model.export(imported, path, mapping)
      assert Map.new(Record.load!(path), fn {k, v} -> {k, bits(v)} end) == Map.new(burn, fn {k, v} -> {k, bits(v)} end)
      {:ok, again} = ExBurn.Model.import_params(ExBurn.Model.compile(axon_mlp(), seed: 4), path, mapping)
      {{:ok, a}, {:ok, b}} = {ExBurn.Model.predict(again, x), ExBurn.Model.predict(imported, x)}
      assert bits(a) == bits(b)

      assert {:error, "ExBurn.Model.import_params: cannot read" <> _} =
               ExBurn.Model.import_params(model, Path.join(dir, "missing.mpk"))
    end

    test "a shape that doesn't fit names both sides" do
      {:ok, burn} = Record.load(@fixture)

      small =
        Axon.input("x", shape: {nil, 64})
        |> Axon.dense(100, activation: :relu)
        |> Axon.dense(64, activation: :relu)
        |> Axon.dense(10)

      state = init(small, Nx.template({1, 64}, :f32))

      e = assert_raise ExBurn.Error, fn -> Record.Axon.to_model_state(burn, state) end

      assert Exception.message(e) =~
               ~s(Burn "hidden1.weight" f32[64][128] doesn't fit Axon "dense_0" "kernel" f32[64][100])

      two = Axon.input("x", shape: {nil, 64}) |> Axon.dense(10)
      e = assert_raise ExBurn.Error, fn -> Record.Axon.to_model_state(burn, init(two, Nx.template({1, 64}, :f32))) end
      assert Exception.message(e) =~ "Burn has 3 Linear/dense layers, Axon 1"

      e = assert_raise ExBurn.Error, fn -> Record.Axon.to_model_state(burn, state, [{"hidden9", "dense_0"}]) end
      assert Exception.message(e) =~ ~s(no layer "hidden9")
    end
  end
end
