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
      assert device == model.device_spec
      assert model.device in [:gpu, :cpu]
      assert model.compiled and model.weight_decay == 0.0

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

      assert_raise ExBurn.Error, ~r/ExBurn.Model.compile: unknown device :tpu.*:gpu, :cpu/, fn ->
        Model.compile(mlp(), device: :tpu)
      end
    end
  end

  describe "inference" do
    test "forward/2 and predict/3 give {:ok, Axon's outputs}, in batches too", %{model: model} do
      want = axon_reference(model.state.data, x())
      assert {:ok, out} = Model.forward(model, x())
      assert close?(out, want)
      assert {:ok, out} = Model.predict(model, x())
      assert close?(out, want)
      {:ok, batched} = Model.predict(model, x(), batch_size: 2)
      assert batched.shape == {5, 2}
      assert close?(batched, want)
    end

    test "a second predict with the same shapes replays the cached program", %{model: model} do
      Model.predict(model, x())
      size = ExBurn.Defn.Compiler.cache_size()
      Model.predict(model, Nx.add(x(), 1))
      assert ExBurn.Defn.Compiler.cache_size() == size
    end

    test "wrong inputs give {:error, message} naming the function", %{model: model} do
      assert {:error, message} = Model.predict(model, Nx.iota({5, 4}, type: :f32))
      assert message =~ ~r/^ExBurn.Model.predict: input of shape \{5, 4\} doesn't match the model's input \{nil, 3\}/

      assert {:error, "ExBurn.Model.forward: input of shape {3} doesn't match" <> _} =
               Model.forward(model, Nx.iota({3}, type: :f32))

      assert {:error, "ExBurn.Model.forward: expected a tensor of shape {nil, 3}, got [1, 2, 3]"} =
               Model.forward(model, [1, 2, 3])

      assert {:error, "ExBurn.Model.predict: :batch_size must be a positive integer, got 0"} =
               Model.predict(model, x(), batch_size: 0)

      assert_raise ArgumentError, ~r/ExBurn.Model.predict: unknown option\(s\) :mode/, fn ->
        Model.predict(model, x(), mode: :train)
      end
    end
  end

  describe "inspection" do
    test "summary/1 is a box of the layers in order with types, output shapes and parameter counts", %{model: model} do
      summary = Model.summary(model)
      lines = String.split(summary, "\n", trim: true)
      assert hd(lines) =~ ~r/^╔═+╗$/u
      assert Enum.at(lines, 1) =~ ~r/^║\s+ExBurn Model Summary\s+║$/u
      assert Enum.at(lines, 3) =~ ~r/^║  Layer\s+Type\s+Output Shape\s+Params\s+║$/u

      assert Enum.find_index(lines, &(&1 =~ ~r/^║  hidden\s+Dense\s+\[nil, 4\]\s+16\s+║$/u)) <
               Enum.find_index(lines, &(&1 =~ ~r/^║  out\s+Dense\s+\[nil, 2\]\s+10\s+║$/u))

      assert summary =~ ~r/║  tanh_0\s+Tanh\s+\[nil, 4\]\s+0\s+║/u
      refute summary =~ ~r/Input/
      assert summary =~ ~r/║  Total params:     26\s+║/u
      assert summary =~ ~r/║  Trainable params: 26\s+║/u
      assert List.last(lines) =~ ~r/^╚═+╝$/u
      assert lines |> Enum.map(&String.length/1) |> Enum.uniq() |> length() == 1
    end

    test "info/1", %{model: model} do
      info = Model.info(model)

      assert %{total_params: 26, trainable_params: 26, frozen_params: 0, memory_bytes: 104, layers: ["hidden", "out"]} =
               info

      assert %{layer_count: 4, device: device} = info
      assert device == model.device

      assert %{
               input_shape: {nil, 3},
               output_shape: {nil, 2},
               loss_fn: :cross_entropy,
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

      assert %{total_params: 48, layer_state: 18, trainable_params: 48, memory_bytes: 264} = Model.info(model)

      assert model |> Model.parameters() |> Map.keys() |> Enum.sort() ==
               ~w(bn.beta bn.gamma bn.mean bn.var d.bias d.kernel drop.key)

      assert Model.summary(model) =~ ~r/║  bn\s+BatchNorm\s+\[nil, 8\]\s+16\s+║/u
      assert Model.summary(model) =~ ~r/║  drop\s+Dropout\s+\[nil, 8\]\s+0\s+║/u
      assert {:ok, %Nx.Tensor{shape: {5, 8}}} = Model.predict(model, x())
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
    test "save/2 then load(model, path) is bit-exact, with the model's settings", %{model: model} do
      model = Model.freeze(model, ["hidden"])
      assert :ok = Model.save(model, path("model.exburn"))

      assert {:ok, loaded} = Model.load(mlp(), path("model.exburn"))
      assert bytes(Model.parameters(loaded)) == bytes(Model.parameters(model))

      assert {loaded.loss_fn, loaded.optimizer, loaded.optimizer_opts, loaded.frozen_layers, loaded.seed} ==
               {model.loss_fn, model.optimizer, model.optimizer_opts, MapSet.new(["hidden"]), 7}

      {{:ok, a}, {:ok, b}} = {Model.predict(loaded, x()), Model.predict(model, x())}
      assert close?(a, b, 0.0)

      fresh = Model.compile(mlp(), loss: :mse, seed: 99)
      assert {:ok, into} = Model.load(fresh, path("model.exburn"))
      assert bytes(Model.parameters(into)) == bytes(Model.parameters(model))
      assert into.loss_fn == :mse
    end

    test "a damaged, truncated, foreign or mismatched file is an error, never a model", %{model: model} do
      :ok = Model.save(model, path("good.exburn"))
      good = File.read!(path("good.exburn"))
      size = byte_size(good)

      damaged = fn name, bin -> File.write!(path(name), bin) && Model.load(mlp(), path(name)) end

      flip = fn bin, at ->
        <<pre::binary-size(at), b, rest::binary>> = bin
        <<pre::binary, Bitwise.bxor(b, 0xFF), rest::binary>>
      end

      assert {:error, "ExBurn.Model.load: checksum mismatch: the file is corrupted" <> _} =
               damaged.("flip_data.exburn", flip.(good, size - 3))

      assert {:error, "ExBurn.Model.load: checksum mismatch" <> _} = damaged.("flip_index.exburn", flip.(good, 40))

      assert {:error, "ExBurn.Model.load: the file is truncated" <> _} =
               damaged.("cut.exburn", binary_part(good, 0, size - 10))

      assert {:error, "ExBurn.Model.load: the file is truncated" <> _} =
               damaged.("cut_header.exburn", binary_part(good, 0, 12))

      assert {:error, "ExBurn.Model.load: the file has 1 bytes after its payload"} =
               damaged.("long.exburn", good <> "!")

      assert {:error, "ExBurn.Model.load: not an ExBurn model file" <> _} =
               damaged.("foreign.exburn", "PK\x03\x04 not a model at all")

      assert {:error, "ExBurn.Model.load: not an ExBurn model file" <> _} = damaged.("empty.exburn", "")
      <<magic::binary-size(8), _version::16, rest::binary>> = good

      assert {:error, "ExBurn.Model.load: unsupported format version 2" <> _} =
               damaged.("v2.exburn", <<magic::binary, 2::16, rest::binary>>)

      assert {:error, "ExBurn.Model.load: the file holds parameters, not a model"} =
               damaged.("params.exburn", Model.serialize_params(model))

      assert {:error, "ExBurn.Model.load: cannot read " <> _} = Model.load(mlp(), path("missing.exburn"))

      other = Axon.input("x", shape: {nil, 3}) |> Axon.dense(2, name: "out")

      assert {:error, "ExBurn.Model.load: the file's parameters don't match the model's" <> details} =
               Model.load(other, path("good.exburn"))

      assert details =~ ~s(unknown: ["hidden.bias", "hidden.kernel"])
      wider = Axon.input("x", shape: {nil, 3}) |> Axon.dense(5, name: "hidden") |> Axon.dense(2, name: "out")
      assert {:error, reason} = Model.load(wider, path("good.exburn"))
      assert reason =~ ~s(parameter "hidden.bias" has shape {5}, got {4})
    end

    test "serialize_params/1 and deserialize_params/1", %{model: model} do
      bin = Model.serialize_params(model)
      assert {:ok, params} = Model.deserialize_params(bin)
      assert bytes(params) == bytes(Model.parameters(model))
      assert bytes(Model.parameters(Model.update_params(model, params))) == bytes(Model.parameters(model))

      assert {:error, "ExBurn.Model.deserialize_params: the file is truncated" <> _} =
               Model.deserialize_params(binary_part(bin, 0, byte_size(bin) - 1))

      assert {:error, "ExBurn.Model.deserialize_params: the file holds a model, not parameters"} =
               Model.save(model, path("m.exburn")) && Model.deserialize_params(File.read!(path("m.exburn")))

      assert {:error, "ExBurn.Model.deserialize_params: expected a binary" <> _} = Model.deserialize_params(:nope)
    end
  end

  describe "precision" do
    test "quantize(:f16) casts the parameters and computes in f16", %{model: model} do
      half = Model.quantize(model, :f16)
      assert Enum.all?(Model.parameters(half), fn {_, t} -> t.type == {:f, 16} end)
      {:ok, out} = Model.predict(half, x())
      {:ok, full} = Model.predict(model, x())
      assert out.type == {:f, 32}
      assert close?(out, full, 1.0e-2)
      refute close?(out, full, 0.0)
      assert Model.info(half).precision == {:f, 16}

      :ok = Model.save(half, path("half.exburn"))
      {:ok, loaded} = Model.load(mlp(), path("half.exburn"))
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
      {{:ok, a}, {:ok, b}} = {Model.predict(bf, x()), Model.predict(model, x())}
      assert close?(a, b, 5.0e-2)
    end
  end

  describe "freezing" do
    test "freeze/2, unfreeze/2, frozen?/2, frozen_layers/1", %{model: model} do
      frozen = Model.freeze(model, ["out"])
      assert Model.frozen_layers(frozen) == MapSet.new(["out"])
      assert Model.frozen?(frozen, "out") and Model.frozen?(frozen, :out)
      refute Model.frozen?(frozen, "hidden")
      assert Axon.ModelState.trainable_parameters(frozen.state) |> Map.keys() == ["hidden"]
      assert Model.info(frozen).trainable_params == 16
      assert Model.summary(frozen) =~ ~r/║  out \(frozen\)\s+Dense/u

      both = Model.freeze(frozen, &String.starts_with?(&1, "hid"))
      assert Model.frozen_layers(both) == MapSet.new(["hidden", "out"])
      assert Axon.ModelState.trainable_parameters(both.state) == %{}
      assert Model.frozen_layers(Model.unfreeze(both, [:out])) == MapSet.new(["hidden"])
      assert Model.frozen_layers(Model.unfreeze(both, :all)) == MapSet.new()
      assert map_size(Axon.ModelState.trainable_parameters(Model.unfreeze(both, :all).state)) == 2

      assert_raise ArgumentError, ~r/ExBurn.Model.freeze: unknown layer\(s\) \["tanh_0"\]/, fn ->
        Model.freeze(model, "tanh_0")
      end
    end
  end

  describe "devices and copies" do
    test "to_device/2 and clone/1", %{model: model} do
      assert Model.to_device(model, model.device) == model
      moved = Model.to_device(model, :cpu)
      assert moved.device == :cpu
      assert bytes(Model.parameters(moved)) == bytes(Model.parameters(model))
      assert Model.to_device(moved, :cpu) == moved
      copy = Model.clone(model)
      assert bytes(Model.parameters(copy)) == bytes(Model.parameters(model))
      refute Model.parameters(copy)["out.kernel"].data.ref == Model.parameters(model)["out.kernel"].data.ref
      ExBurn.Tensor.free(Model.parameters(copy)["out.kernel"])
      {:ok, out} = Model.predict(model, x())
      assert close?(out, axon_reference(model.state.data, x()))

      assert_raise ExBurn.Error, ~r/ExBurn.Model.to_device: the device "cuda:7" is not available/, fn ->
        Model.to_device(model, "cuda:7")
      end
    end
  end

  describe "benchmark/3" do
    test "times the forward pass: avg, min, max, median, std", %{model: model} do
      result = Model.benchmark(model, x(), runs: 3, warmup: 1)
      assert %{mode: :predict, runs: 3, batch_size: 5} = result
      assert result.median_ms > 0 and result.min_ms <= result.median_ms and result.median_ms <= result.max_ms
      assert result.min_ms <= result.avg_ms and result.avg_ms <= result.max_ms and result.std_ms >= 0
      assert_in_delta result.samples_per_sec, 5 / (result.median_ms / 1000), 1.0e-6

      assert_raise ArgumentError, ~r/ExBurn.Model.benchmark: unknown :mode :fast/, fn ->
        Model.benchmark(model, x(), mode: :fast)
      end
    end
  end

  # The documents' classifier: Axon.dense(10) at the end, logits out.
  defp logits_model(opts \\ []) do
    Axon.input("input", shape: {nil, 4})
    |> Axon.dense(10, name: "output")
    |> Model.compile(Keyword.merge([loss: :cross_entropy, seed: 3], opts))
  end

  # -mean(sum(one_hot * log_softmax(logits))) in Elixir floats.
  defp reference_ce(logits, classes) do
    rows = Nx.to_list(binary(logits))

    rows
    |> Enum.zip(classes)
    |> Enum.map(fn {row, c} ->
      m = Enum.max(row)
      lse = m + :math.log(Enum.sum(Enum.map(row, &:math.exp(&1 - m))))
      lse - Enum.at(row, c)
    end)
    |> Enum.sum()
    |> Kernel./(length(rows))
  end

  describe "losses" do
    test ":cross_entropy is finite on large logits and matches log-softmax; one-hot or index targets" do
      model = logits_model()

      logits =
        Nx.tensor([
          [80.0, -40.0, 3.0, 0.0, 1.0, 2.0, 0.5, -1.0, 60.0, 0.0],
          [-90.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        ])

      classes = [8, 3]
      want = reference_ce(logits, classes)

      {:ok, from_index} = Model.compute_loss(model, logits, Nx.tensor(classes))

      {:ok, from_one_hot} =
        Model.compute_loss(model, logits, ExBurn.Dataset.one_hot(Nx.tensor(classes), num_classes: 10))

      {:ok, from_column} = Model.compute_loss(model, logits, Nx.tensor([[8], [3]]))

      for got <- [from_index, from_one_hot, from_column] do
        assert Nx.shape(got) == {}
        assert_in_delta Nx.to_number(got), want, 1.0e-3
      end

      # about 20 for the first row (60 against 80), about 0 for the second
      assert want > 9.9 and want < 10.1

      # the model's own outputs and training stay finite
      x = Nx.tensor([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, 0.0]])
      {:ok, out} = Model.forward(model, Nx.multiply(x, 100))
      {:ok, loss} = Model.compute_loss(model, out, Nx.tensor([1, 2]))
      assert is_float(Nx.to_number(loss))
      trained = ExBurn.Training.fit(model, {x, Nx.tensor([1, 2])}, epochs: 3, batch_size: 2, verbose: false)
      assert is_float(ExBurn.Training.evaluate(trained, {x, Nx.tensor([1, 2])}))
    end

    test ":cross_entropy takes probabilities when the graph ends in softmax", %{model: model} do
      assert model.output_activation == :softmax
      probs = Nx.tensor([[0.9, 0.1], [0.25, 0.75]])
      {:ok, loss} = Model.compute_loss(model, probs, Nx.tensor([0, 1]))
      assert_in_delta Nx.to_number(loss), -(:math.log(0.9) + :math.log(0.75)) / 2, 1.0e-6
      # a zero probability is clipped, not -inf
      {:ok, loss} = Model.compute_loss(model, Nx.tensor([[1.0, 0.0]]), Nx.tensor([1]))
      assert_in_delta Nx.to_number(loss), -:math.log(1.0e-7), 1.0e-2
    end

    test ":binary_cross_entropy from sigmoid probabilities or logits; :mse; weight decay adds L2" do
      bce = fn activation ->
        layer = Axon.input("x", shape: {nil, 2}) |> Axon.dense(1, name: "o")
        layer = if activation, do: Axon.sigmoid(layer), else: layer
        Model.compile(layer, loss: :binary_cross_entropy, seed: 1)
      end

      p = Nx.tensor([[0.8], [0.3]])
      y = Nx.tensor([[1.0], [0.0]])
      want = -(:math.log(0.8) + :math.log(0.7)) / 2
      {:ok, got} = Model.compute_loss(bce.(true), p, y)
      assert_in_delta Nx.to_number(got), want, 1.0e-6
      logits = Nx.log(Nx.divide(p, Nx.subtract(1, p)))
      {:ok, got} = Model.compute_loss(bce.(false), logits, Nx.tensor([1.0, 0.0]))
      assert_in_delta Nx.to_number(got), want, 1.0e-5

      mse = Axon.input("x", shape: {nil, 2}) |> Axon.dense(1, name: "o") |> Model.compile(loss: :mse, seed: 1)
      {:ok, got} = Model.compute_loss(mse, Nx.tensor([[1.0], [3.0]]), Nx.tensor([[0.0], [1.0]]))
      assert_in_delta Nx.to_number(got), 2.5, 1.0e-6

      decayed =
        Axon.input("x", shape: {nil, 2})
        |> Axon.dense(1, name: "o")
        |> Model.compile(loss: :mse, seed: 1, weight_decay: 0.5)

      l2 =
        decayed
        |> Model.parameters()
        |> Map.values()
        |> Enum.map(&(&1 |> Nx.pow(2) |> Nx.sum() |> Nx.to_number()))
        |> Enum.sum()

      {:ok, got} = Model.compute_loss(decayed, Nx.tensor([[1.0], [3.0]]), Nx.tensor([[0.0], [1.0]]))
      assert_in_delta Nx.to_number(got), 2.5 + 0.25 * l2, 1.0e-5

      assert {:error, "ExBurn.Model.compute_loss: " <> _} =
               Model.compute_loss(mse, Nx.tensor([[1.0], [3.0]]), Nx.tensor([1.0, 2.0, 3.0]))
    end
  end

  describe "the documented accessors" do
    test "loss_function/1, optimizer/1, weight_decay/1, parameters/1, forward_pattern/1, new/1" do
      model = Model.compile(mlp(), optimizer: :sgd, weight_decay: 1.0e-4, seed: 1)
      assert Model.loss_function(model) == :cross_entropy
      assert Model.optimizer(model) == :sgd
      assert Model.weight_decay(model) == 1.0e-4
      assert model.optimizer_opts[:momentum] == 0.9 and model.optimizer_opts[:learning_rate] == 0.001
      assert map_size(Model.parameters(model)) == 4
      assert Model.forward_pattern(model) == %{output_shape: {nil, 2}, output_type: :f32}
      assert %Model{loss_fn: :mse, compiled: true} = Model.new(loss_fn: :mse)

      rms = Model.compile(mlp(), optimizer: :rmsprop, seed: 1)

      assert Keyword.take(rms.optimizer_opts, [:decay, :eps, :learning_rate]) == [
               learning_rate: 0.001,
               decay: 0.9,
               eps: 1.0e-8
             ]

      assert Model.fit(model, {x(), Nx.tensor([0, 1, 1, 0, 1])}, epochs: 1, batch_size: 5, verbose: false).optimizer_state.updates ==
               1
    end

    test "export/3 and import_params/3: Erlang terms and JSON round trips", %{model: model} do
      for {format, file} <- [{:elixir_terms, "model.etf"}, {:json, "model.json"}] do
        assert :ok = Model.export(model, path(file), format: format)
        fresh = Model.compile(mlp(), seed: 1234)
        refute bytes(Model.parameters(fresh)) == bytes(Model.parameters(model))
        assert {:ok, imported} = Model.import_params(fresh, path(file))
        assert bytes(Model.parameters(imported)) == bytes(Model.parameters(model)), "#{format}"
      end

      assert File.read!(path("model.json")) =~ ~s("format":"ex_burn/params")
      assert <<131, _::binary>> = File.read!(path("model.etf"))
      # a save/2 file imports too
      :ok = Model.save(model, path("saved.exburn"))
      assert {:ok, imported} = Model.import_params(Model.compile(mlp(), seed: 5), path("saved.exburn"))
      assert bytes(Model.parameters(imported)) == bytes(Model.parameters(model))

      File.write!(
        path("bad.json"),
        ~s({"format": "ex_burn/params", "params": {"out.bias": {"type": "f32", "shape": [3], "data": [1, 2, 3]}}})
      )

      assert {:error, "ExBurn.Model.import_params: parameter \"out.bias\" has shape {2}, got {3}"} =
               Model.import_params(model, path("bad.json"))

      assert {:error, "ExBurn.Model.import_params: cannot read" <> _} = Model.import_params(model, path("none.etf"))

      assert_raise ArgumentError, ~r/ExBurn.Model.export: unknown :format :xml/, fn ->
        Model.export(model, path("m.xml"), format: :xml)
      end
    end

    test "device: :cpu is the CPU device; :gpu the best hardware device, or an error naming what is missing" do
      cpu = Model.compile(mlp(), device: :cpu, seed: 1)
      assert cpu.device == :cpu
      assert Enum.any?(ExCubecl.devices(), &(&1.device == cpu.device_spec and &1.kind == :cpu))
      {:ok, _} = Model.forward(cpu, x())

      if Enum.any?(ExCubecl.devices(), &(&1.kind == :gpu)) do
        assert %Model{device: :gpu} = Model.compile(mlp(), device: :gpu, seed: 1)
      else
        assert_raise ExBurn.Error,
                     ~r/ExBurn.Model.compile: device: :gpu, but there is no GPU here.*use device: :cpu/,
                     fn ->
                       Model.compile(mlp(), device: :gpu)
                     end

        assert_raise ExBurn.Error, ~r/ExBurn.Model.to_device: device: :gpu, but there is no GPU/, fn ->
          Model.to_device(cpu, :gpu)
        end
      end
    end
  end
end
