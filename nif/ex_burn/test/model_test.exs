defmodule ExBurn.ModelTest do
  # ExBurn.Model against Axon on Nx.BinaryBackend: initialisation, inference, parameters,
  # the file format (round trips and damaged files), precision, freezing, devices, errors.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  alias ExBurn.Model

  @dir Path.join(System.tmp_dir!(), "ex_burn_model_test_#{System.unique_integer([:positive])}")

  setup_all do
    File.mkdir_p!(@dir)
    on_exit(fn -> File.rm_rf!(@dir) end)
    {:ok, model: Model.compile(mlp(), loss: :cross_entropy, optimizer: :adam, learning_rate: 0.01, seed: 7)}
  end

  defp mlp do
    Axon.input("x", shape: {nil, 3})
    |> Axon.dense(4, activation: :tanh, name: "hidden")
    |> Axon.dense(2, activation: :softmax, name: "out")
  end

  defp x, do: Nx.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 0.0], [0.1, 0.2, 0.3], [3.0, -0.5, 1.0]])

  defp binary(t), do: Nx.backend_copy(t, Nx.BinaryBackend)
  defp bytes(params), do: Map.new(params, fn {k, t} -> {k, {t.type, t.shape, Nx.to_binary(t)}} end)

  defp close?(a, b, atol \\ 1.0e-5),
    do: Nx.all_close(binary(a), binary(b), atol: atol, rtol: 1.0e-5) |> Nx.to_number() == 1

  # Axon's own initialisation and inference on Nx.BinaryBackend, from the same graph and seed.
  defp axon_reference(params, input) do
    Nx.with_default_backend(Nx.BinaryBackend, fn ->
      state = Axon.ModelState.new(Map.new(params, fn {k, v} -> {k, Map.new(v, fn {p, t} -> {p, binary(t)} end)} end))
      Axon.predict(mlp(), state, binary(input))
    end)
  end

  defp path(name), do: Path.join(@dir, name)

  describe "compile/2" do
    test "initialises the parameters with Axon's initialisers and the seed", %{model: model} do
      {init, _} = Axon.build(mlp(), seed: 7)

      want =
        Nx.with_default_backend(Nx.BinaryBackend, fn -> init.(Nx.template({1, 3}, :f32), Axon.ModelState.empty()) end)

      got = Model.parameters(model)

      assert Map.keys(got) |> Enum.sort() == ["hidden.bias", "hidden.kernel", "out.bias", "out.kernel"]
      for {name, t} <- ExBurn.Model.Params.flatten(want.data), do: assert(close?(got[name], t, 1.0e-6), name)
      assert %ExBurn.Backend{device: device} = got["hidden.kernel"].data
      assert device == model.device

      other = Model.compile(mlp(), seed: 8)
      refute Nx.to_binary(Model.parameters(other)["hidden.kernel"]) == Nx.to_binary(got["hidden.kernel"])
    end

    test "bad arguments raise naming the function and the value" do
      assert_raise ArgumentError, ~r/ExBurn.Model.compile: unknown loss :hinge/, fn ->
        Model.compile(mlp(), loss: :hinge)
      end

      assert_raise ArgumentError, ~r/ExBurn.Model.compile: unknown optimizer :lbfgs/, fn ->
        Model.compile(mlp(), optimizer: :lbfgs)
      end

      assert_raise ArgumentError, ~r/ExBurn.Model.compile: unknown option\(s\) :epochs/, fn ->
        Model.compile(mlp(), epochs: 3)
      end

      assert_raise ArgumentError, ~r/unknown option\(s\) :momentum for the :adam optimizer/, fn ->
        Model.compile(mlp(), optimizer: {:adam, momentum: 0.9})
      end

      assert_raise ArgumentError, ~r/invalid :learning_rate for the :sgd optimizer: -1/, fn ->
        Model.compile(mlp(), optimizer: :sgd, learning_rate: -1)
      end

      assert_raise ArgumentError, ~r/unknown loss option\(s\) \[:sparse\]/, fn ->
        Model.compile(mlp(), loss: :mse, loss_opts: [sparse: true])
      end

      assert_raise ArgumentError, ~r/expected an %Axon\{\} model/, fn -> Model.compile(:not_a_model) end
      assert_raise ArgumentError, ~r/invalid input shape \{nil, -3\}/, fn -> Model.compile(mlp(), input: {nil, -3}) end

      assert_raise ArgumentError, ~r/the input "x" declares no shape/, fn ->
        Model.compile(Axon.input("x") |> Axon.dense(2))
      end

      assert_raise ExBurn.Error, ~r/ExBurn.Model.compile: unknown device :tpu/, fn ->
        Model.compile(mlp(), device: :tpu)
      end
    end
  end

  describe "inference" do
    test "forward/2 and predict/3 give Axon's outputs, in batches too", %{model: model} do
      want = axon_reference(model.state.data, x())
      assert close?(Model.forward(model, x()), want)
      assert close?(Model.predict(model, x()), want)
      batched = Model.predict(model, x(), batch_size: 2)
      assert batched.shape == {5, 2}
      assert close?(batched, want)
    end

    test "a second predict with the same shapes replays the cached program", %{model: model} do
      Model.predict(model, x())
      size = ExBurn.Defn.Compiler.cache_size()
      Model.predict(model, Nx.add(x(), 1))
      assert ExBurn.Defn.Compiler.cache_size() == size
    end

    test "wrong inputs raise naming the function", %{model: model} do
      assert_raise ArgumentError,
                   ~r/ExBurn.Model.predict: input of shape \{5, 4\} doesn't match the model's input \{nil, 3\}/,
                   fn -> Model.predict(model, Nx.iota({5, 4}, type: :f32)) end

      assert_raise ArgumentError, ~r/ExBurn.Model.forward: input of shape \{3\} doesn't match/, fn ->
        Model.forward(model, Nx.iota({3}, type: :f32))
      end

      assert_raise ArgumentError,
                   ~r/ExBurn.Model.forward: expected a tensor of shape \{nil, 3\}, got \[1, 2, 3\]/,
                   fn -> Model.forward(model, [1, 2, 3]) end

      assert_raise ArgumentError, ~r/ExBurn.Model.predict: :batch_size must be a positive integer, got 0/, fn ->
        Model.predict(model, x(), batch_size: 0)
      end

      assert_raise ArgumentError, ~r/ExBurn.Model.predict: unknown option\(s\) :mode/, fn ->
        Model.predict(model, x(), mode: :train)
      end
    end
  end

  describe "inspection" do
    test "summary/1 lists the layers in order with output shapes and parameter counts", %{model: model} do
      summary = Model.summary(model)
      lines = String.split(summary, "\n")

      assert Enum.find_index(lines, &(&1 =~ ~r/^hidden\s+\| dense\s+\| \{nil, 4\}\s+\| 16\b/)) <
               Enum.find_index(lines, &(&1 =~ ~r/^out\s+\| dense\s+\| \{nil, 2\}\s+\| 10\b/))

      assert summary =~ ~r/^x\s+\| input\s+\| \{nil, 3\}\s+\| 0/m
      assert summary =~ "Total parameters: 26; trainable: 26; frozen: 0; layer state: 0; 104 bytes"
    end

    test "info/1", %{model: model} do
      info = Model.info(model)

      assert %{parameters: 26, trainable_parameters: 26, frozen_parameters: 0, bytes: 104, layers: ["hidden", "out"]} =
               info

      assert %{
               input_shape: {nil, 3},
               output_shape: {nil, 2},
               loss: :cross_entropy,
               optimizer: :adam,
               precision: {:f, 32},
               seed: 7
             } = info

      assert info.optimizer_opts[:learning_rate] == 0.01
      assert info.op_counts == %{input: 1, dense: 2, tanh: 1, softmax: 1}
      assert inspect(model) =~ "#ExBurn.Model<parameters: 26, loss: :cross_entropy, optimizer: :adam"
    end
  end

  describe "layer state" do
    test "batch-norm statistics and dropout keys are state, initialised for training" do
      model =
        Axon.input("x", shape: {nil, 3})
        |> Axon.dense(8, name: "d")
        |> Axon.batch_norm(name: "bn")
        |> Axon.dropout(rate: 0.5, name: "drop")
        |> Model.compile(seed: 1)

      assert %{parameters: 48, layer_state: 18, trainable_parameters: 48, bytes: 264} = Model.info(model)

      assert model |> Model.parameters() |> Map.keys() |> Enum.sort() ==
               ~w(bn.beta bn.gamma bn.mean bn.var d.bias d.kernel drop.key)

      assert Model.summary(model) =~ ~r/^bn\s+\| batch_norm \| \{nil, 8\}\s+\| 16\s+\| 16/m
      assert Model.summary(model) =~ ~r/^drop\s+\| dropout\s+\| \{nil, 8\}\s+\| 0\s+\| 2/m
      assert Model.predict(model, x()).shape == {5, 8}
    end
  end

  describe "parameters" do
    test "update_params/2 takes flat names, nested maps and model states, checked", %{model: model} do
      bias = Nx.tensor([1.0, 2.0, 3.0, 4.0])
      updated = Model.update_params(model, %{"hidden.bias" => bias})
      assert Nx.to_list(binary(Model.parameters(updated)["hidden.bias"])) == [1.0, 2.0, 3.0, 4.0]

      assert Nx.to_binary(Model.parameters(updated)["out.kernel"]) ==
               Nx.to_binary(Model.parameters(model)["out.kernel"])

      nested = Model.update_params(model, %{"out" => %{"bias" => Nx.tensor([5, 6])}})
      assert %Nx.Tensor{type: {:f, 32}} = got = Model.parameters(nested)["out.bias"]
      assert Nx.to_list(binary(got)) == [5.0, 6.0]

      from_state = Model.update_params(model, updated.state)
      assert bytes(Model.parameters(from_state)) == bytes(Model.parameters(updated))

      assert_raise ArgumentError,
                   ~r/ExBurn.Model.update_params: parameter "hidden.bias" has shape \{4\}, got \{3\}/,
                   fn -> Model.update_params(model, %{"hidden.bias" => Nx.tensor([1.0, 2.0, 3.0])}) end

      assert_raise ArgumentError, ~r/ExBurn.Model.update_params: unknown parameter "hidden.gamma"/, fn ->
        Model.update_params(model, %{"hidden.gamma" => bias})
      end

      assert_raise ArgumentError, ~r/ExBurn.Model.update_params: parameter "out" is not a tensor: 3/, fn ->
        Model.update_params(model, %{"out" => 3, "x" => bias})
      end
    end
  end

  describe "files" do
    test "save/2 then load/2 is bit-exact, with the model's settings", %{model: model} do
      model = Model.freeze(model, "hidden")
      assert :ok = Model.save(model, path("model.exburn"))

      assert {:ok, loaded} = Model.load(path("model.exburn"), mlp())
      assert bytes(Model.parameters(loaded)) == bytes(Model.parameters(model))

      assert {loaded.loss, loaded.optimizer, loaded.optimizer_opts, loaded.frozen, loaded.seed} ==
               {model.loss, model.optimizer, model.optimizer_opts, ["hidden"], 7}

      assert close?(Model.predict(loaded, x()), Model.predict(model, x()), 0.0)

      fresh = Model.compile(mlp(), loss: :mse, seed: 99)
      assert {:ok, into} = Model.load(path("model.exburn"), fresh)
      assert bytes(Model.parameters(into)) == bytes(Model.parameters(model))
      assert into.loss == :mse
    end

    test "a damaged, truncated, foreign or mismatched file is an error, never a model", %{model: model} do
      :ok = Model.save(model, path("good.exburn"))
      good = File.read!(path("good.exburn"))
      size = byte_size(good)

      damaged = fn name, bin -> File.write!(path(name), bin) && Model.load(path(name), mlp()) end

      flip = fn bin, at ->
        <<pre::binary-size(at), b, rest::binary>> = bin
        <<pre::binary, Bitwise.bxor(b, 0xFF), rest::binary>>
      end

      assert {:error, %ExBurn.Error{op: "ExBurn.Model.load", reason: "checksum mismatch: the file is corrupted"}} =
               damaged.("flip_data.exburn", flip.(good, size - 3))

      assert {:error, %ExBurn.Error{reason: "checksum mismatch" <> _}} = damaged.("flip_index.exburn", flip.(good, 40))

      assert {:error, %ExBurn.Error{reason: "the file is truncated"}} =
               damaged.("cut.exburn", binary_part(good, 0, size - 10))

      assert {:error, %ExBurn.Error{reason: "the file is truncated"}} =
               damaged.("cut_header.exburn", binary_part(good, 0, 12))

      assert {:error, %ExBurn.Error{reason: "the file has 1 bytes after its payload"}} =
               damaged.("long.exburn", good <> "!")

      assert {:error, %ExBurn.Error{reason: "not an ExBurn model file"}} =
               damaged.("foreign.exburn", "PK\x03\x04 not a model at all")

      assert {:error, %ExBurn.Error{reason: "not an ExBurn model file"}} = damaged.("empty.exburn", "")
      <<magic::binary-size(8), _version::16, rest::binary>> = good

      assert {:error, %ExBurn.Error{reason: "unsupported format version 2"}} =
               damaged.("v2.exburn", <<magic::binary, 2::16, rest::binary>>)

      assert {:error, %ExBurn.Error{reason: "the file holds parameters, not a model"}} =
               damaged.("params.exburn", Model.serialize_params(model))

      assert {:error, %ExBurn.Error{reason: "cannot read " <> _}} = Model.load(path("missing.exburn"), mlp())

      other = Axon.input("x", shape: {nil, 3}) |> Axon.dense(2, name: "out")

      assert {:error, %ExBurn.Error{reason: "the file's parameters don't match the model's", details: details}} =
               Model.load(path("good.exburn"), other)

      assert details =~ ~s(unknown: ["hidden.bias", "hidden.kernel"])
      wider = Axon.input("x", shape: {nil, 3}) |> Axon.dense(5, name: "hidden") |> Axon.dense(2, name: "out")
      assert {:error, %ExBurn.Error{reason: reason}} = Model.load(path("good.exburn"), wider)
      assert reason =~ ~s(parameter "hidden.bias" has shape {5}, got {4})

      assert_raise ExBurn.Error, ~r/ExBurn.Model.load: checksum mismatch/, fn ->
        Model.load!(path("flip_data.exburn"), mlp())
      end
    end

    test "serialize_params/1 and deserialize_params/1", %{model: model} do
      bin = Model.serialize_params(model)
      assert {:ok, params} = Model.deserialize_params(bin)
      assert bytes(params) == bytes(Model.parameters(model))
      assert bytes(Model.parameters(Model.update_params(model, params))) == bytes(Model.parameters(model))

      assert {:error, %ExBurn.Error{op: "ExBurn.Model.deserialize_params", reason: "the file is truncated"}} =
               Model.deserialize_params(binary_part(bin, 0, byte_size(bin) - 1))

      assert {:error, %ExBurn.Error{reason: "the file holds a model, not parameters"}} =
               Model.save(model, path("m.exburn")) && Model.deserialize_params(File.read!(path("m.exburn")))

      assert {:error, %ExBurn.Error{reason: "expected a binary"}} = Model.deserialize_params(:nope)
    end
  end

  describe "precision" do
    test "quantize(:f16) casts the parameters and computes in f16", %{model: model} do
      half = Model.quantize(model, :f16)
      assert Enum.all?(Model.parameters(half), fn {_, t} -> t.type == {:f, 16} end)
      out = Model.predict(half, x())
      assert out.type == {:f, 32}
      assert close?(out, Model.predict(model, x()), 1.0e-2)
      refute close?(out, Model.predict(model, x()), 0.0)
      assert Model.info(half).precision == {:f, 16}

      :ok = Model.save(half, path("half.exburn"))
      {:ok, loaded} = Model.load(path("half.exburn"), mlp())
      assert loaded.precision == {:f, 16}
      assert bytes(Model.parameters(loaded)) == bytes(Model.parameters(half))

      assert Enum.all?(Model.parameters(Model.quantize(half, :f32)), fn {_, t} -> t.type == {:f, 32} end)

      assert_raise ArgumentError, ~r/ExBurn.Model.quantize: unsupported type :int4/, fn ->
        Model.quantize(model, :int4)
      end
    end

    test "quantize(:bf16) works on every device (computed in f32 where the device has no bf16)", %{model: model} do
      bf = Model.quantize(model, :bf16)
      assert Enum.all?(Model.parameters(bf), fn {_, t} -> t.type == {:bf, 16} end)
      assert close?(Model.predict(bf, x()), Model.predict(model, x()), 5.0e-2)
    end
  end

  describe "freezing" do
    test "freeze/2, unfreeze/2, frozen?/2, frozen_layers/1", %{model: model} do
      frozen = Model.freeze(model, ["out"])
      assert Model.frozen_layers(frozen) == ["out"]
      assert Model.frozen?(frozen, "out")
      refute Model.frozen?(frozen, "hidden")
      assert Axon.ModelState.trainable_parameters(frozen.state) |> Map.keys() == ["hidden"]
      assert Model.info(frozen).trainable_parameters == 16
      assert Model.summary(frozen) =~ ~r/^out .*\| yes$/m

      both = Model.freeze(frozen, &String.starts_with?(&1, "hid"))
      assert Model.frozen_layers(both) == ["hidden", "out"]
      assert Axon.ModelState.trainable_parameters(both.state) == %{}
      assert Model.frozen_layers(Model.unfreeze(both, "out")) == ["hidden"]
      assert Model.frozen_layers(Model.unfreeze(both)) == []
      assert map_size(Axon.ModelState.trainable_parameters(Model.unfreeze(both).state)) == 2

      assert_raise ArgumentError, ~r/ExBurn.Model.freeze: unknown layer\(s\) \["tanh_0"\]/, fn ->
        Model.freeze(model, "tanh_0")
      end
    end
  end

  describe "devices and copies" do
    test "to_device/2 and clone/1", %{model: model} do
      moved = Model.to_device(model, model.device)
      assert bytes(Model.parameters(moved)) == bytes(Model.parameters(model))
      copy = Model.clone(model)
      assert bytes(Model.parameters(copy)) == bytes(Model.parameters(model))
      refute Model.parameters(copy)["out.kernel"].data.ref == Model.parameters(model)["out.kernel"].data.ref
      ExBurn.Tensor.free(Model.parameters(copy)["out.kernel"])
      assert close?(Model.predict(model, x()), axon_reference(model.state.data, x()))

      assert_raise ExBurn.Error, ~r/ExBurn.Model.to_device: the device "cuda:7" is not available/, fn ->
        Model.to_device(model, "cuda:7")
      end
    end
  end

  describe "benchmark/3" do
    test "times predict", %{model: model} do
      result = Model.benchmark(model, x(), iterations: 3, warmup: 1)
      assert %{mode: :predict, iterations: 3, batch_size: 5} = result
      assert result.median_ms > 0 and result.min_ms <= result.median_ms
      assert_in_delta result.samples_per_sec, 5 / (result.median_ms / 1000), 1.0e-6

      assert_raise ArgumentError, ~r/ExBurn.Model.benchmark: unknown :mode :fast/, fn ->
        Model.benchmark(model, x(), mode: :fast)
      end
    end
  end
end
