defmodule ExBurn.ServingTest do
  # ExBurn.Serving: results against the model run directly on Nx.BinaryBackend (the
  # Evaluator), inline and through a started serving with 32 concurrent callers, the batches
  # that serving forms, and the errors.
  use ExUnit.Case, async: false

  alias ExBurn.Serving

  doctest ExBurn.Serving

  # A function model: rows of x to {row sums of x * x + 1, x * 3}.
  defp fun_model(x), do: {Nx.add(Nx.sum(Nx.multiply(x, x), axes: [1]), 1), Nx.multiply(x, 3)}

  defp on_binary(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  # The reference: the model on BinaryBackend copies of everything.
  defp reference(fun, x), do: Nx.with_default_backend(Nx.BinaryBackend, fn -> fun.(on_binary(x)) end)

  defp assert_close(got, want) when is_tuple(got),
    do: Enum.zip_with(Tuple.to_list(got), Tuple.to_list(want), &assert_close/2)

  defp assert_close(got, want) do
    assert got.data.__struct__ == ExBurn.Backend
    assert {got.shape, got.type} == {want.shape, want.type}

    assert Nx.all_close(on_binary(got), want, atol: 1.0e-5) |> Nx.to_number() == 1,
           "got #{inspect(got)}, want #{inspect(want)}"
  end

  # Uniform values in [-1, 1) from a seed, drawn on the host (Nx.Random runs eagerly op by
  # op: slow on lavapipe).
  defp rand(shape, seed) do
    {values, _} = Enum.map_reduce(1..Nx.size(shape), :rand.seed_s(:exsss, seed), fn _, s -> :rand.uniform_s(s) end)
    values |> Enum.map(&(2 * &1 - 1)) |> Nx.tensor(type: :f32) |> Nx.reshape(shape)
  end

  # A small Axon classifier of 3 features and its parameters (on ExBurn.Backend).
  defp axon_model do
    model =
      Axon.input("features", shape: {nil, 3}) |> Axon.dense(5, activation: :tanh) |> Axon.dense(2) |> Axon.softmax()

    {init_fn, _predict} = Axon.build(model)
    {model, init_fn.(Nx.broadcast(0.0, {1, 3}), Axon.ModelState.empty())}
  end

  defp axon_reference({model, state}, x) do
    state = Nx.backend_copy(state, Nx.BinaryBackend)
    Nx.with_default_backend(Nx.BinaryBackend, fn -> Axon.predict(model, state, on_binary(x)) end)
  end

  describe "inline" do
    test "a function model: batches smaller than, equal to and larger than batch_size" do
      serving = Serving.build(&fun_model/1, batch_size: 4)
      assert %Nx.Serving{} = serving

      for {n, seed} <- [{3, 1}, {4, 2}, {10, 3}] do
        x = rand({n, 2}, seed)
        assert_close(Serving.run(serving, x), reference(&fun_model/1, x))
      end
    end

    test "a list of examples gives a list of results; inputs from BinaryBackend and of integer type" do
      serving = Serving.build(&fun_model/1, batch_size: 4, shape: {2})
      examples = [Nx.tensor([1.0, 2.0]), Nx.tensor([-1.0, 0.5], backend: Nx.BinaryBackend), Nx.tensor([3, 4])]
      results = Serving.run(serving, examples)
      assert length(results) == 3

      for {{sum, triple}, example} <- Enum.zip(results, examples) do
        {want_sum, want_triple} = reference(&fun_model/1, Nx.new_axis(Nx.as_type(example, :f32), 0))
        assert_close({sum, triple}, {Nx.squeeze(want_sum), Nx.squeeze(want_triple, axes: [0])})
      end
    end

    test "an Axon model, as {model, state} and as an %ExBurn.Model{}" do
      {model, state} = model_state = axon_model()
      x = rand({6, 3}, 4)
      want = axon_reference(model_state, x)
      assert_close(Serving.run(Serving.build(model_state, batch_size: 4), x), want)
      # ExBurn.Model's fields, without depending on the module.
      struct = %{__struct__: ExBurn.Model, model: model, state: state}
      assert_close(Serving.run(Serving.build(struct, batch_size: 8), x), want)
    end

    test "an Nx.Batch runs as it is" do
      serving = Serving.build(&fun_model/1, batch_size: 4)
      x = rand({2, 2}, 5)
      assert_close(Serving.run(serving, Nx.Batch.concatenate([x])), reference(&fun_model/1, x))
    end
  end

  describe "started" do
    def handle_event(_event, _measurements, %{module: ExBurn.Serving.Server, metadata: metadata}, pid),
      do: send(pid, {:executed, metadata.size})

    def handle_event(_event, _measurements, _metadata, _pid), do: :ok

    setup do
      id = "serving-test-#{System.unique_integer()}"
      :telemetry.attach(id, [:nx, :serving, :execute, :stop], &__MODULE__.handle_event/4, self())
      on_exit(fn -> :telemetry.detach(id) end)
    end

    defp executed(acc \\ []) do
      receive do
        {:executed, size} -> executed([size | acc])
      after
        0 -> Enum.reverse(acc)
      end
    end

    test "32 concurrent callers each get their own result, in batches of at most batch_size" do
      model_state = axon_model()
      start_supervised!(
        Serving.supervise(model_state, name: ExBurn.ServingTest.Axon, batch_size: 8, batch_timeout: 50, padding: true, partitions: 1)
      )
      inputs = for i <- 1..32, do: rand({1, 3}, 100 + i)

      results =
        inputs
        |> Task.async_stream(&Serving.run(ExBurn.ServingTest.Axon, &1),
          max_concurrency: 32,
          ordered: true,
          timeout: 30_000
        )
        |> Enum.map(fn {:ok, result} -> result end)

      want = axon_reference(model_state, Nx.concatenate(inputs))
      for {got, i} <- Enum.with_index(results), do: assert_close(got, Nx.slice_along_axis(want, i, 1))

      sizes = executed()
      assert Enum.sum(sizes) == 32
      assert Enum.all?(sizes, &(&1 <= 8))
      assert length(sizes) < 32, "no batching: #{inspect(sizes)}"
    end

    test "callers with batches of several examples, and an input larger than batch_size" do
      start_supervised!(
        Serving.supervise(&fun_model/1, name: ExBurn.ServingTest.Fun, shape: {2}, batch_size: 4, batch_timeout: 20, partitions: 1)
      )

      inputs = for n <- [1, 2, 3, 9], do: rand({n, 2}, n)

      inputs
      |> Task.async_stream(&{&1, Serving.run(ExBurn.ServingTest.Fun, &1)}, max_concurrency: 4, timeout: 30_000)
      |> Enum.each(fn {:ok, {x, got}} -> assert_close(got, reference(&fun_model/1, x)) end)

      assert Enum.sum(executed()) == 15
      assert [{a, _}, {b, _}] = Serving.run(ExBurn.ServingTest.Fun, [Nx.tensor([1.0, 1.0]), Nx.tensor([2.0, 0.0])])
      assert {Nx.to_number(a), Nx.to_number(b)} == {3.0, 5.0}
    end

    test "under a given supervisor, from a built serving; a bad input fails in its caller alone" do
      {:ok, sup} = Supervisor.start_link([], strategy: :one_for_one)
      serving = Serving.build(&fun_model/1, shape: {2}, batch_size: 4, partitions: 1)
      assert {:ok, pid} = Serving.supervise(serving, name: ExBurn.ServingTest.Sup, supervisor: sup, batch_timeout: 5)
      assert is_pid(pid)

      assert_raise ExBurn.Error,
                   ~r/ExBurn.Serving.run: the batch has shape \{1, 3\}; the serving's examples have shape \{2\}/,
                   fn ->
                     Serving.run(ExBurn.ServingTest.Sup, Nx.tensor([[1.0, 2.0, 3.0]]))
                   end

      x = Nx.tensor([[1.0, 2.0]])
      assert_close(Serving.run(ExBurn.ServingTest.Sup, x), reference(&fun_model/1, x))
      assert Process.alive?(pid)
      Supervisor.stop(sup)
    end
  end

  describe "the documented struct, options and examples" do
    test "new/2's defaults and status/1, with_batch_size/2, with_timeout/2" do
      serving = Serving.new(&fun_model/1)
      assert %Serving{model: model, batch_size: 32, batch_timeout: 50, padding: false} = serving
      assert is_function(model, 1)
      assert Serving.status(serving) == %{batch_size: 32, batch_timeout: 50, partitions: System.schedulers_online(), padding: false}
      changed = serving |> Serving.with_batch_size(4) |> Serving.with_timeout(7)
      assert Serving.status(changed) == %{batch_size: 4, batch_timeout: 7, partitions: System.schedulers_online(), padding: false}
      assert Serving.status(Serving.new(&fun_model/1, partitions: true)).partitions == 1
      assert Serving.status(Serving.build(changed)) == Serving.status(changed)
      assert_raise ExBurn.Error, ~r/with_batch_size: :batch_size must be a positive integer, got 0/, fn -> Serving.with_batch_size(serving, 0) end
      assert_raise ExBurn.Error, ~r/with_timeout: :batch_timeout must be a non-negative integer/, fn -> Serving.with_timeout(serving, :soon) end
      assert_raise ExBurn.Error, ~r/new: :partitions must be a positive integer or true, got 0/, fn -> Serving.new(&fun_model/1, partitions: 0) end
      assert_raise ExBurn.Error, ~r/new: :padding must be true or false, got :yes/, fn -> Serving.new(&fun_model/1, padding: :yes) end
      assert_raise ExBurn.Error, ~r/new: the model must be/, fn -> Serving.new(:model) end
      assert_raise ExBurn.Error, ~r/supervise: :partitions is an option of build\/2/, fn -> Serving.supervise(Serving.build(changed), name: X, partitions: 2) end
    end

    test "004's Usage: new/2 with partitions, run inline (run/2, and Nx.Serving.run on its build/2)" do
      {model, state} = model_state = axon_model()
      # an %ExBurn.Model{}'s fields, as a compiled model carries them
      model = %{__struct__: ExBurn.Model, model: model, state: state}
      input_tensor = rand({5, 3}, 9)

      serving =
        ExBurn.Serving.new(model,
          batch_size: 32,
          batch_timeout: 50,
          partitions: System.schedulers_online()
        )

      want = axon_reference(model_state, input_tensor)
      assert_close(ExBurn.Serving.run(serving, input_tensor), want)
      assert_close(Nx.Serving.run(ExBurn.Serving.build(serving), input_tensor), want)
    end

    test "004's build/2 example and 003's calls: build, run, a child of a supervisor, supervise under a DynamicSupervisor" do
      trained_model = axon_model()
      input = rand({2, 3}, 11)
      want = axon_reference(trained_model, input)

      serving = ExBurn.Serving.build(trained_model, batch_size: 16, batch_timeout: 100)
      output = Nx.Serving.run(serving, input)
      assert_close(output, want)
      assert_close(ExBurn.Serving.run(serving, input), want)

      children = [
        {Nx.Serving, serving: ExBurn.Serving.build(trained_model, batch_size: 32, partitions: 1), name: :my_model_serving}
      ]

      {:ok, sup} = Supervisor.start_link(children, strategy: :one_for_one)
      assert_close(Nx.Serving.batched_run(:my_model_serving, input), want)
      assert_close(ExBurn.Serving.run(:my_model_serving, input), want)
      Supervisor.stop(sup)

      {:ok, dyn} = DynamicSupervisor.start_link(strategy: :one_for_one, name: ExBurn.ServingTest.Dynamic)
      {:ok, _pid} = ExBurn.Serving.supervise(trained_model, name: :my_model_serving, supervisor: ExBurn.ServingTest.Dynamic, partitions: 1)
      assert_close(ExBurn.Serving.run(:my_model_serving, input), want)
      DynamicSupervisor.stop(dyn)
    end

    test "padding: true pads every batch to batch_size; padding: false runs each at its size" do
      # The model adds the number of rows of the batch it is given.
      rows = fn x -> Nx.add(x, Nx.axis_size(x, 0)) end
      x = Nx.tensor([[0.0], [0.0], [0.0]])

      padded = Serving.build(rows, batch_size: 4, padding: true)
      assert Nx.to_flat_list(Serving.run(padded, x)) == [4.0, 4.0, 4.0]
      unpadded = Serving.build(rows, batch_size: 4, padding: false)
      assert Nx.to_flat_list(Serving.run(unpadded, x)) == [3.0, 3.0, 3.0]
      # Larger than batch_size: split into 4 + 1.
      assert Nx.to_flat_list(Serving.run(padded, Nx.broadcast(0.0, {5, 1}))) == [4.0, 4.0, 4.0, 4.0, 4.0]
      assert Nx.to_flat_list(Serving.run(unpadded, Nx.broadcast(0.0, {5, 1}))) == [4.0, 4.0, 4.0, 4.0, 1.0]
    end

    def partition_event(_event, _measurements, %{module: ExBurn.Serving.Server, metadata: metadata}, pid),
      do: send(pid, {:partition, metadata.partition, metadata.device})

    def partition_event(_event, _measurements, _metadata, _pid), do: :ok

    test "partitions: 2 starts two partitions on the device, both running batches" do
      id = "serving-partitions-#{System.unique_integer()}"
      me = self()

      :telemetry.attach(id, [:nx, :serving, :execute, :stop], &__MODULE__.partition_event/4, me)

      try do
        start_supervised!(
          Serving.supervise(&fun_model/1, name: ExBurn.ServingTest.Parts, shape: {2}, batch_size: 2, batch_timeout: 1, partitions: 2, padding: true)
        )

        inputs = for i <- 1..6, do: rand({2, 2}, 200 + i)

        for x <- inputs do
          assert_close(Serving.run(ExBurn.ServingTest.Parts, x), reference(&fun_model/1, x))
        end

        seen =
          for _ <- 1..6 do
            assert_receive {:partition, p, dev}, 5_000
            {p, dev}
          end

        assert seen |> Enum.map(&elem(&1, 0)) |> Enum.uniq() |> Enum.sort() == [0, 1]
        assert seen |> Enum.map(&elem(&1, 1)) |> Enum.uniq() == [ExBurn.default_device_spec()]
      after
        :telemetry.detach(id)
      end
    end
  end

  describe "errors" do
    test "bad inputs name ExBurn.Serving.run and the shapes" do
      serving = Serving.build(axon_model(), batch_size: 2)

      assert_raise ExBurn.Error,
                   ~r/run: the batch has shape \{2, 4\}; the serving's examples have shape \{3\}.*a batch is \{n, 3\}/,
                   fn -> Serving.run(serving, Nx.iota({2, 4}, type: :f32)) end

      assert_raise ExBurn.Error, ~r/run: example 1 has shape \{2\}; the serving's examples have shape \{3\}/, fn ->
        Serving.run(serving, [Nx.iota({3}), Nx.iota({2})])
      end

      assert_raise ExBurn.Error, ~r/run: a tensor input is a batch and needs a first axis of examples.*f32 \{\}/, fn ->
        Serving.run(serving, Nx.tensor(1.0))
      end

      assert_raise ExBurn.Error, ~r/run: the input must be a batch tensor/, fn ->
        Serving.run(serving, %{"features" => 1})
      end

      assert_raise ExBurn.Error, ~r/run: a list input holds example tensors; element 0/, fn ->
        Serving.run(serving, [1.0])
      end

      assert_raise ExBurn.Error, ~r/run: expected a serving.*"name"/, fn -> Serving.run("name", Nx.iota({1, 3})) end
    end

    test "a model whose outputs lose the batch axis" do
      serving = Serving.build(&Nx.sum/1, batch_size: 2)

      assert_raise ExBurn.Error, ~r/outputs must keep the batch axis first: a batch of 2 gave \{\}/, fn ->
        Serving.run(serving, Nx.iota({2, 3}, type: :f32))
      end
    end

    test "bad models and options" do
      assert_raise ExBurn.Error, ~r/ExBurn.Serving.build: the model must be \{axon_model, model_state\}/, fn ->
        Serving.build(:model)
      end

      assert_raise ExBurn.Error, ~r/build: :batch_size must be a positive integer, got 0/, fn ->
        Serving.build(&fun_model/1, batch_size: 0)
      end

      assert_raise ExBurn.Error, ~r/build: :batch_timeout must be a non-negative integer/, fn ->
        Serving.build(&fun_model/1, batch_timeout: -1)
      end

      assert_raise ExBurn.Error, ~r/build: :shape must be a tuple of positive integers.*\{0, 2\}/, fn ->
        Serving.build(&fun_model/1, shape: {0, 2})
      end

      assert_raise ExBurn.Error, ~r/build: :type :f32 needs the example's :shape/, fn ->
        Serving.build(&fun_model/1, type: :f32)
      end

      assert_raise ExBurn.Error, ~r/build: unknown option\(s\) :batchsize/, fn ->
        Serving.build(&fun_model/1, batchsize: 2)
      end

      two_inputs = Axon.add(Axon.input("a", shape: {nil, 2}), Axon.input("b", shape: {nil, 2}))

      assert_raise ExBurn.Error, ~r/build: the serving runs models of one input; this model has 2/, fn ->
        Serving.build({two_inputs, Axon.ModelState.empty()})
      end
    end

    test "supervise needs a name and a known example shape; batch sizes must agree" do
      assert_raise ExBurn.Error, ~r/supervise: :name must be an atom/, fn ->
        Serving.supervise(&fun_model/1, shape: {2})
      end

      assert_raise ExBurn.Error, ~r/supervise: a started serving needs the example's shape/, fn ->
        Serving.supervise(&fun_model/1, name: X)
      end

      serving = Serving.build(&fun_model/1, shape: {2}, batch_size: 4)

      assert_raise ExBurn.Error, ~r/supervise: :batch_size 8 differs from the serving's 4/, fn ->
        Serving.supervise(serving, name: X, batch_size: 8)
      end

      assert_raise ExBurn.Error, ~r/supervise: :shape is an option of build\/2/, fn ->
        Serving.supervise(serving, name: X, shape: {3})
      end

      assert %{id: X, start: {Nx.Serving, :start_link, _}} = Serving.supervise(serving, name: X, batch_size: 4)
    end
  end
end
