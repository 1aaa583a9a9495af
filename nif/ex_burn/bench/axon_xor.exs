# Axon's own integration test "bce with simple xor model" (axon 0.8.1,
# test/axon/integration_test.exs) run on ExBurn: a generator that draws every batch with
# Nx.Random.uniform outside any jit, 20 epochs of 100 steps, then the evaluation. Issue 56's
# figure: the test's run time, with the compiler set as the default (as the seed's Quick Start
# and Axon's own test helper do), and, with --eager, with the generator on Nx.Defn.Evaluator.
#
#     cd nif/ex_burn
#     MIX_ENV=test mix run bench/axon_xor.exs [--eager] [--epochs N]
{opts, _, _} = OptionParser.parse(System.argv(), strict: [eager: :boolean, epochs: :integer])
Nx.global_default_backend(ExBurn.Backend)
unless opts[:eager], do: Nx.Defn.global_default_options(compiler: ExBurn.Defn.Compiler)

x1_input = Axon.input("x1", shape: {nil, 1})
x2_input = Axon.input("x2", shape: {nil, 1})

model =
  x1_input
  |> Axon.concatenate(x2_input)
  |> Axon.dense(8, activation: :tanh)
  |> Axon.dense(1, activation: :sigmoid)

batch_size = 32

data =
  Stream.unfold(Nx.Random.key(42), fn key ->
    {x1, key} = Nx.Random.uniform(key, 0, 1, shape: {batch_size, 1})
    {x2, key} = Nx.Random.uniform(key, 0, 1, shape: {batch_size, 1})
    {x1, x2} = {Nx.round(x1), Nx.round(x2)}
    y = Nx.logical_xor(x1, x2)
    {{%{"x1" => x1, "x2" => x2}, y}, key}
  end)

{micros, accuracy} =
  :timer.tc(fn ->
    ExUnit.CaptureIO.capture_io(fn ->
      model_state =
        model
        |> Axon.Loop.trainer(:binary_cross_entropy, :sgd)
        |> Axon.Loop.run(data, Axon.ModelState.empty(), iterations: 100, epochs: opts[:epochs] || 20, compiler: ExBurn.Defn.Compiler)

      results =
        model
        |> Axon.Loop.evaluator()
        |> Axon.Loop.metric(:accuracy)
        |> Axon.Loop.run(data, model_state, iterations: 100, compiler: ExBurn.Defn.Compiler)

      send(self(), {:accuracy, get_in(results, [0, "accuracy"]) |> Nx.to_number()})
    end)

    receive do
      {:accuracy, a} -> a
    end
  end)

IO.puts("Axon's xor integration test on ExBurn (#{if opts[:eager], do: "generator on the Evaluator", else: "compiler as default"}): #{Float.round(micros / 1.0e6, 1)} s, accuracy #{Float.round(accuracy, 3)} (the test asks >= 0.9)")
