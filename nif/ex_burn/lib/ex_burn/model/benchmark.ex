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
      {runs, opts} = Keyword.pop(opts, :runs, 10)
      {warmup, opts} = Keyword.pop(opts, :warmup, 3)

      unless is_integer(runs) and runs > 0 and is_integer(warmup) and warmup >= 0,
        do:
          raise(
            ArgumentError,
            "#{fun}: :runs must be a positive integer and :warmup a non-negative one, got #{inspect(runs)} and #{inspect(warmup)}"
          )

      {step, batch} =
        case mode do
          :predict ->
            Model.options!(opts, [], fun)
            batch = Spec.check_input!(model.input, input, fun)
            {fn m -> Model.run_predict(m, input) && m end, batch}

          :train ->
            {x, _y} = ExBurn.Training.batch!(input, fun)

            {fn m -> m |> ExBurn.Training.train_step(input, opts) |> elem(1) end,
             Spec.check_input!(model.input, x, fun)}

          other ->
            raise ArgumentError, "#{fun}: unknown :mode #{inspect(other)} (modes: :predict, :train)"
        end

      times = time(step, model, warmup, runs)
      sorted = Enum.sort(times)
      avg = Enum.sum(times) / runs

      median =
        if rem(runs, 2) == 1,
          do: Enum.at(sorted, div(runs, 2)),
          else: (Enum.at(sorted, div(runs, 2) - 1) + Enum.at(sorted, div(runs, 2))) / 2

      %{
        avg_ms: avg,
        min_ms: hd(sorted),
        max_ms: List.last(sorted),
        median_ms: median,
        std_ms: :math.sqrt(Enum.sum(Enum.map(times, &((&1 - avg) ** 2))) / runs),
        runs: runs,
        mode: mode,
        batch_size: batch,
        samples_per_sec: if(median > 0, do: batch / (median / 1000), else: :infinity)
      }
    end

    defp time(step, model, warmup, runs) do
      sync = fn -> ExCubecl.synchronize(device: model.device_spec) end

      model =
        Enum.reduce(1..warmup//1, model, fn _, m ->
          m = step.(m)
          sync.()
          m
        end)

      {times, _} =
        Enum.map_reduce(1..runs, model, fn _, m ->
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
