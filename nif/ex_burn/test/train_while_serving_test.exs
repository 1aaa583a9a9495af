defmodule ExBurn.TrainWhileServingTest do
  # Training and serving together on one device (issue 54): a model is fine-tuned with fit/3
  # while its previous version serves 16 concurrent callers from a supervised ExBurn.Serving.
  # Both proceed (the callers are answered all through the training, the training ends within
  # its deadline: no deadlock), every answer matches the served version run on
  # Nx.BinaryBackend, and the fine-tuned model is bit for bit the one the same fit/3 gives with
  # nothing else on the device. The new version then serves, checked the same way.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  alias ExBurn.{Model, Serving, Training}

  @callers 16
  @deadline 60_000

  defp rand(shape, seed) do
    {values, _} = Enum.map_reduce(1..Nx.size(shape), :rand.seed_s(:exsss, seed), fn _, s -> :rand.uniform_s(s) end)
    values |> Enum.map(&(2 * &1 - 1)) |> Nx.tensor(type: :f32) |> Nx.reshape(shape)
  end

  defp data do
    x = rand({64, 4}, 1)
    class = x |> Nx.sum(axes: [1]) |> Nx.greater(0)
    {x, Nx.stack([Nx.subtract(1, class), class], axis: 1) |> Nx.as_type(:f32)}
  end

  defp on_binary(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  # The model's predictions on Nx.BinaryBackend (the reference of a served version).
  defp reference(%Model{model: axon, state: state}, x) do
    state = Nx.backend_copy(state, Nx.BinaryBackend)
    Nx.with_default_backend(Nx.BinaryBackend, fn -> Axon.predict(axon, state, on_binary(x)) end)
  end

  defp snapshot(model), do: Map.new(Model.parameters(model), fn {name, t} -> {name, Nx.to_binary(t)} end)

  # A caller: requests from `pool` until `stop` is set; returns the timestamps (ms) of its right
  # answers and its wrong ones (with what came back).
  defp caller(name, pool, want, stop, id) do
    Stream.iterate(id, &(&1 + 1))
    |> Enum.reduce_while({[], []}, fn n, {ok, wrong} ->
      if :atomics.get(stop, 1) == 1 do
        {:halt, {ok, wrong}}
      else
        i = rem(n, length(pool))
        got = Serving.run(name, Enum.at(pool, i)) |> on_binary()

        if Nx.all_close(got, Enum.at(want, i), atol: 1.0e-5) |> Nx.to_number() == 1,
          do: {:cont, {[System.monotonic_time(:millisecond) | ok], wrong}},
          else: {:cont, {ok, [{i, Nx.to_list(got), Nx.to_list(Enum.at(want, i)), n - id} | wrong]}}
      end
    end)
  end

  defp serve(model, name, pool) do
    want = Enum.map(pool, &reference(model, &1))
    stop = :atomics.new(1, [])
    tasks = for id <- 1..@callers, do: Task.async(fn -> caller(name, pool, want, stop, id * 7) end)
    {stop, tasks}
  end

  defp finish({stop, tasks}) do
    :atomics.put(stop, 1, 1)
    results = Task.await_many(tasks, @deadline)
    {Enum.flat_map(results, &elem(&1, 0)), Enum.flat_map(results, &elem(&1, 1))}
  end

  test "a model fine-tuned while its previous version serves #{@callers} callers: both proceed, both right" do
    v1 =
      Axon.input("x", shape: {nil, 4})
      |> Axon.dense(16, activation: :relu)
      |> Axon.dense(2)
      |> Axon.softmax()
      |> Model.compile(loss: :cross_entropy, optimizer: :adam, learning_rate: 0.02, seed: 9)

    opts = [epochs: 2, batch_size: 8, shuffle: true, verbose: false]
    # The fine-tuning alone, as the reference of the one run beside the serving.
    alone = Training.fit(v1, data(), opts)

    pool = for i <- 1..12, do: rand({1 + rem(i, 3), 4}, 100 + i)

    start_supervised!(Serving.supervise(v1, name: __MODULE__.V1, batch_size: 8, batch_timeout: 5, padding: true),
      id: :v1
    )

    # Warm: the first batches compile.
    for x <- pool, do: Serving.run(__MODULE__.V1, x)
    serving = serve(v1, __MODULE__.V1, pool)

    t0 = System.monotonic_time(:millisecond)
    training = Task.async(fn -> Training.fit(v1, data(), opts) end)

    v2 =
      case Task.yield(training, @deadline) || Task.shutdown(training) do
        {:ok, model} -> model
        other -> flunk("the fine-tuning didn't end within #{@deadline} ms beside the serving: #{inspect(other)}")
      end

    t1 = System.monotonic_time(:millisecond)
    {answered, wrong} = finish(serving)
    during = Enum.count(answered, &(&1 >= t0 and &1 <= t1))

    assert wrong == [],
           "#{length(wrong)} wrong answers (of #{length(answered)} right) from the serving during the training: #{inspect(Enum.take(wrong, 4))}"

    assert during >= @callers, "only #{during} requests answered during the #{t1 - t0} ms of training"
    assert snapshot(v2) == snapshot(alone), "the fine-tuning beside the serving differs from the one alone"
    assert snapshot(v2) != snapshot(v1)

    # The fine-tuned version serves, beside the previous one, each right.
    start_supervised!(Serving.supervise(v2, name: __MODULE__.V2, batch_size: 8, batch_timeout: 5, padding: true),
      id: :v2
    )

    both = [serve(v2, __MODULE__.V2, pool), serve(v1, __MODULE__.V1, pool)]
    Process.sleep(300)
    [{answered2, wrong2}, {answered1, wrong1}] = Enum.map(both, &finish/1)

    assert wrong1 == [],
           "v1: #{length(wrong1)} wrong answers (of #{length(answered1)} right): #{inspect(Enum.take(wrong1, 4))}"

    assert wrong2 == [],
           "v2: #{length(wrong2)} wrong answers (of #{length(answered2)} right): #{inspect(Enum.take(wrong2, 4))}"

    assert answered1 != [] and answered2 != []

    IO.puts(
      "train while serving: #{length(answered)} requests from #{@callers} callers, #{during} of them during " <>
        "the #{t1 - t0} ms fine-tuning (2 epochs, 16 steps), all right; the fine-tuned model equals the one " <>
        "trained alone; then v1 and v2 served together (#{length(answered1)} + #{length(answered2)} right answers)"
    )
  end
end
