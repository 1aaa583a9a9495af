if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Evaluate do
    @moduledoc false
    # ExBurn.Training.evaluate/3 and the validation pass of fit/3: the loss and metrics of a
    # model on batches, in inference mode, one compiled call per batch, as means over the
    # samples.

    alias ExBurn.Model
    alias ExBurn.Model.Loss
    alias ExBurn.Training.{Checks, Data}

    def evaluate(model, data, track_accuracy) when is_boolean(track_accuracy) do
      %{loss: loss} = values = run(model, data, [accuracy: track_accuracy], "ExBurn.Training.evaluate")
      if track_accuracy, do: {loss, values[:accuracy]}, else: loss
    end

    def evaluate(model, data, opts) when is_list(opts) do
      fun = "ExBurn.Training.evaluate"
      opts = Model.options!(opts, [:batch_size, :metrics, :accuracy], fun)
      values = run(model, data, opts, fun)

      cond do
        Keyword.has_key?(opts, :metrics) -> values
        opts[:accuracy] -> {values.loss, values[:accuracy]}
        true -> values.loss
      end
    end

    def evaluate(_model, _data, other),
      do:
        raise(
          ArgumentError,
          "ExBurn.Training.evaluate: the third argument is track_accuracy (a boolean) or options, got #{inspect(other)}"
        )

    defp run(model, data, opts, fun) do
      Checks.require_loss!(model, fun)
      metrics = Checks.metrics!(model, Keyword.take(opts, [:metrics, :accuracy]), fun)

      batching =
        case {data, opts[:batch_size]} do
          {{_x, _y}, nil} -> [batch_size: 32, shuffle: false]
          {_, nil} -> []
          {_, n} -> [batch_size: n, shuffle: false]
        end

      data = Data.new(data, batching, Model.backend(model), fun)
      {x, y} = Data.first(data, fun)
      Checks.check_batch!(model, x, y, fun)
      batches(model, data, eval_fn(model, metrics), metrics)
    end

    @doc false
    # The loss and metrics of a batch, one compiled function: `(state, x, y) -> %{name => mean}`
    # (a metric without a function, accuracy of a loss without classes, is left out).
    def eval_fn(model, metrics) do
      loss_fn = Loss.fun(model.loss_fn, model.loss_opts, model.output_activation)
      predict = model.predict_fn
      metric_fns = for {name, f} <- metrics, f != nil, into: %{}, do: {name, f}

      fn state, x, y ->
        pred = predict.(state, x)

        Map.new(metric_fns, fn {name, f} -> {Atom.to_string(name), f.(y, pred)} end)
        |> Map.put("loss", loss_fn.(y, pred))
      end
    end

    @doc false
    # %{loss: mean, metric: mean | nil} over the batches of `data`.
    def batches(model, data, eval, metrics) do
      jitted = Nx.Defn.jit(eval, Model.jit_opts(model))
      computed = [:loss | for({name, f} <- metrics, f != nil, do: name)]

      {sums, n} =
        Enum.reduce(data.batches, {Map.new(computed, &{&1, 0.0}), 0}, fn {x, y}, {sums, n} ->
          size = [y] |> Nx.Defn.Composite.flatten_list() |> hd() |> Nx.axis_size(0)
          values = jitted.(model.state, x, y)
          {Map.new(sums, fn {k, s} -> {k, s + Nx.to_number(values[Atom.to_string(k)]) * size} end), n + size}
        end)

      means = Map.new(sums, fn {k, s} -> {k, s / max(n, 1)} end)
      Enum.reduce(metrics, means, fn {name, _f}, acc -> Map.put_new(acc, name, nil) end)
    end
  end
end
