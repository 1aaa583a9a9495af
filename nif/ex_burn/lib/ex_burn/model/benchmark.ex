if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Benchmark do
    @moduledoc false
    # ExBurn.Model.benchmark/3: predict or a training step timed call by call, each ended by a
    # device sync, after warm-up calls.

    alias ExBurn.Model
    alias ExBurn.Model.Spec

    def run(%Model{} = model, input, opts) do
      fun = "ExBurn.Model.benchmark"
      {mode, opts} = Keyword.pop(opts, :mode, :predict)
      {iterations, opts} = Keyword.pop(opts, :iterations, 10)
      {warmup, opts} = Keyword.pop(opts, :warmup, 2)

      unless is_integer(iterations) and iterations > 0 and is_integer(warmup) and warmup >= 0,
        do:
          raise(
            ArgumentError,
            "#{fun}: :iterations must be a positive integer and :warmup a non-negative one, got #{inspect(iterations)} and #{inspect(warmup)}"
          )

      {step, batch} =
        case mode do
          :predict ->
            Model.options!(opts, [], fun)
            batch = Spec.check_input!(model.input, input, fun)
            {fn m -> Model.run_predict(m, input) && m end, batch}

          :train ->
            {x, _y} = ExBurn.Training.batch!(input, fun)

            {fn m -> m |> ExBurn.Training.train_step(input, opts) |> elem(0) end,
             Spec.check_input!(model.input, x, fun)}

          other ->
            raise ArgumentError, "#{fun}: unknown :mode #{inspect(other)} (modes: :predict, :train)"
        end

      times = time(step, model, warmup, iterations)
      median = times |> Enum.sort() |> Enum.at(div(iterations, 2))

      %{
        mode: mode,
        iterations: iterations,
        batch_size: batch,
        median_ms: median,
        min_ms: Enum.min(times),
        mean_ms: Enum.sum(times) / iterations,
        samples_per_sec: if(median > 0, do: batch / (median / 1000), else: :infinity)
      }
    end

    defp time(step, model, warmup, iterations) do
      sync = fn -> ExCubecl.synchronize(device: model.device) end

      model =
        Enum.reduce(1..warmup//1, model, fn _, m ->
          m = step.(m)
          sync.()
          m
        end)

      {times, _} =
        Enum.map_reduce(1..iterations, model, fn _, m ->
          {us, m} =
            :timer.tc(fn ->
              m = step.(m)
              sync.()
              m
            end)

          {us / 1000, m}
        end)

      times
    end
  end
end
