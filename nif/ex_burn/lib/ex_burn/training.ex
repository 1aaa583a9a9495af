if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training do
    @moduledoc """
    Training an `ExBurn.Model`, built on `Axon.Loop` and Polaris.

        {model, history} =
          ExBurn.Training.fit(model, {x, y},
            epochs: 10,
            batch_size: 32,
            validation_data: {x_val, y_val},
            metrics: [:accuracy],
            optimizer: {:sgd, momentum: 0.9, nesterov: true},
            learning_rate: 0.05,
            schedule: {:cosine, decay_steps: 300},
            warmup_steps: 20,
            clip_norm: 1.0,
            callbacks: [ExBurn.Training.Callbacks.early_stopping(patience: 3)]
          )

    `fit/3` runs an `Axon.Loop` whose step is `Axon.Loop.train_step/4` (see
    `ExBurn.Training.Step`): forward pass, exact gradients by `Nx.Defn.value_and_grad/3`,
    the optimizer update and the parameter update, jitted by `Axon.Loop.run/4` with
    `ExBurn.Defn.Compiler`, so each training step is one compiled call on the device. The
    loop's metrics (Axon's running averages) and its events drive the epoch summary, the
    validation pass and the callbacks (`ExBurn.Training.Callbacks`).

    ## Options of `fit/3`

      * `:epochs` (1), `:batch_size` (32), `:shuffle` (`true`, reshuffled every epoch),
        `:seed` (of the shuffling; default the model's), `:drop_last` (`false`) - for
        `{x, y}` tensors. Other data (a list or stream of `{x, y}` batches, an
        `ExBurn.Dataset`) is used as it is.
      * `:validation_data` - `{x, y}` (batched by `:batch_size`) or batches: evaluated after
        each epoch (`:val_loss`, `:val_<metric>` in the history).
      * `:metrics` - a list of `Axon.Metrics` names, e.g. `[:accuracy]`.
      * `:callbacks` - `ExBurn.Training.Callbacks` or `{event, fun}`, attached in order.
      * `:log` - `true` (the default) prints a line per epoch, `false` nothing, or an IO device.
      * The optimizer: `:optimizer` (`:sgd`, `:adam`, `:adamw`, `:rmsprop` or `{name, opts}`;
        default the model's, with its options), the optimizer's own options
        (`:learning_rate`, `:momentum`, `:nesterov`, `:b1`, `:b2`, `:eps`, `:decay`,
        `:centered`, `:weight_decay`, ...), `:schedule` (`ExBurn.Training.Schedule`),
        `:warmup_steps`, `:clip_norm` (global norm), `:clip_value`,
        `:accumulate_gradients` (apply the mean gradient every `n` steps). See
        `ExBurn.Training.Optimizer`. Naming another optimizer than the model's starts from
        that optimizer's defaults.

    The model's frozen layers (`ExBurn.Model.freeze/2`) are not trained. The trained model
    keeps its optimizer state, so a second `fit/3` (or `train_step/3`) with the same
    optimizer continues it (Adam's moments, the schedule's step count).
    """

    alias ExBurn.Model
    alias ExBurn.Model.{Params, Spec}
    alias ExBurn.Training.{Callbacks, Data, History, Optimizer, Step}
    alias Axon.ModelState

    @fit_opts [
      :epochs,
      :batch_size,
      :shuffle,
      :seed,
      :drop_last,
      :validation_data,
      :metrics,
      :callbacks,
      :log,
      :optimizer
    ]

    ## Fitting

    @doc """
    Trains `model` on `data` (`{x, y}` tensors or batches) and gives `{trained_model, history}`
    (`ExBurn.Training.History`). Options: see the moduledoc.
    """
    @spec fit(Model.t(), term(), keyword()) :: {Model.t(), History.t()}
    def fit(%Model{} = model, data, opts \\ []), do: run_fit(model, data, opts, "ExBurn.Training.fit")

    @doc """
    `fit/3` that also reports its progress: after every epoch the process `:to` (default the
    caller) gets `{:training_progress, epoch, loss, val_loss}` (`val_loss` is `nil` without
    validation data), and the progress line is printed (unless `log: false`). Gives
    `{trained_model, history}`.
    """
    @spec fit_with_progress(Model.t(), term(), keyword()) :: {Model.t(), History.t()}
    def fit_with_progress(%Model{} = model, data, opts \\ []) do
      {to, opts} = Keyword.pop(opts, :to, self())

      unless is_pid(to),
        do: raise(ArgumentError, "ExBurn.Training.fit_with_progress: :to must be a pid, got #{inspect(to)}")

      opts = Keyword.update(opts, :callbacks, [Callbacks.progress(to)], &(&1 ++ [Callbacks.progress(to)]))
      run_fit(model, data, opts, "ExBurn.Training.fit_with_progress")
    end

    defp run_fit(model, data, opts, fun) do
      {fit_opts, optimizer_opts} = split!(opts, fun)
      require_loss!(model, fun)
      epochs = positive!(Keyword.get(fit_opts, :epochs, 1), :epochs, fun)
      spec = optimizer_spec(model, fit_opts[:optimizer], optimizer_opts, fun)
      backend = Model.backend(model)

      train =
        Data.new(
          data,
          Keyword.take(fit_opts, [:batch_size, :shuffle, :drop_last]) ++ [seed: fit_opts[:seed] || model.seed],
          backend,
          fun
        )

      validation = validation(fit_opts[:validation_data], train, backend, fun)
      metrics = metrics!(Keyword.get(fit_opts, :metrics, []), model, fun)
      {x, y} = first = Data.first(train, fun)
      check_batch!(model, x, y, fun)

      if validation do
        {vx, vy} = Data.first(validation, fun)
        check_batch!(model, vx, vy, fun)
      end

      built = Step.build(model, spec)
      {state, steps} = Step.initial_state(model, built, first)
      monitors = [:loss | Enum.map(metrics, &elem(&1, 0))]
      monitors = if validation, do: monitors ++ Enum.map(monitors, &:"val_#{&1}"), else: monitors

      ctx = %{
        model: model,
        built: built,
        epochs: epochs,
        steps: steps,
        validation: validation,
        eval: eval_fn(model, metrics),
        fun: fun,
        monitors: monitors
      }

      callbacks = log_callbacks(Keyword.get(fit_opts, :log, true), fun) ++ List.wrap(fit_opts[:callbacks])
      run_opts = [epochs: epochs, strict?: train.strict?] ++ Model.jit_opts(model)
      final = built |> loop(metrics, callbacks, ctx) |> Axon.Loop.run(train.batches, state, run_opts)
      {Step.model_after(model, built, final.step_state, steps(final, ctx)), history(final)}
    end

    # The Axon loop: the train step as given (its state starts as built by Step), the loss and
    # the metrics as Axon's running averages, the samples counted, the epoch summarized, then
    # the callbacks in order.
    defp loop(built, metrics, callbacks, ctx) do
      Axon.Loop.loop(built.step, fn _batch, state -> state end, & &1)
      |> Axon.Loop.metric(built.loss_fn, "exburn_loss")
      |> add_metrics(metrics)
      |> Axon.Loop.handle_event(:epoch_started, &{:continue, put_in(&1.handler_metadata[:exburn_samples], 0)})
      |> Axon.Loop.handle_event(:iteration_completed, &{:continue, count_samples(&1)})
      |> Axon.Loop.handle_event(:epoch_completed, &summarize(&1, ctx, metrics))
      |> Callbacks.attach(callbacks, ctx)
    end

    defp log_callbacks(false, _fun), do: []
    defp log_callbacks(true, _fun), do: [Callbacks.logging()]
    defp log_callbacks(device, _fun) when is_atom(device) or is_pid(device), do: [Callbacks.logging(device: device)]

    defp log_callbacks(other, fun),
      do: raise(ArgumentError, "#{fun}: :log must be a boolean or an IO device, got #{inspect(other)}")

    defp add_metrics(loop, metrics),
      do: Enum.reduce(metrics, loop, fn {name, metric}, loop -> Axon.Loop.metric(loop, metric, "exburn_#{name}") end)

    defp count_samples(state) do
      n = [state.step_state.y_true] |> Nx.Defn.Composite.flatten_list() |> hd() |> Nx.axis_size(0)
      update_in(state.handler_metadata[:exburn_samples], &((&1 || 0) + n))
    end

    defp steps(state, ctx), do: ctx.steps + (get_in(state.event_counts, [:iteration_completed, :total]) || 0)

    # The epoch's history entry: the loop's metrics, the validation pass, the learning rate,
    # the time; kept in the loop state's handler metadata for the callbacks after it.
    defp summarize(state, ctx, metrics) do
      train = Map.new(state.metrics, fn {"exburn_" <> name, v} -> {String.to_existing_atom(name), Nx.to_number(v)} end)

      val =
        if ctx.validation,
          do:
            ctx.model
            |> with_state(state)
            |> eval_batches(ctx.validation, ctx.eval, metrics)
            |> Map.new(fn {k, v} -> {:"val_#{k}", v} end),
          else: %{}

      samples = state.handler_metadata[:exburn_samples] || 0
      time_ms = Map.get(state.times, state.epoch, 0) / 1000
      multiplier = state.step_state.optimizer_state |> Step.multiplier() |> Nx.to_number()
      updates = div(steps(state, ctx), ctx.built.spec.training[:accumulate_gradients])
      lr = Optimizer.learning_rate(ctx.built.spec, updates) * multiplier

      entry =
        %{
          epoch: state.epoch + 1,
          learning_rate: lr,
          samples: samples,
          time_ms: time_ms,
          samples_per_sec: if(time_ms > 0, do: samples / (time_ms / 1000))
        }
        |> Map.merge(train)
        |> Map.merge(val)

      meta = Map.get(state.handler_metadata, :exburn, %{history: []})
      meta = %{meta | history: [entry | meta.history]} |> Map.put(:epoch, entry)
      {:continue, put_in(state.handler_metadata[:exburn], meta)}
    end

    defp history(state) do
      meta = Map.get(state.handler_metadata, :exburn, %{history: []})
      status = meta[:stopped] || state.status
      %History{epochs: Enum.reverse(meta.history), status: status}
    end

    defp with_state(model, state), do: %{model | state: state.step_state.model_state}

    @doc """
    The model as it stands in a running `fit/3` (for callbacks: the loop state and the
    context they get).
    """
    @spec current_model(Axon.Loop.State.t(), map()) :: Model.t()
    def current_model(state, ctx), do: Step.model_after(ctx.model, ctx.built, state.step_state, steps(state, ctx))

    defp validation(nil, _train, _backend, _fun), do: nil

    defp validation(data, train, backend, fun),
      do: Data.new(data, tensor_opts(data, batch_size: train.batch_size || 32, shuffle: false), backend, fun)

    # Batching options for {x, y} tensors; batched data takes none.
    defp tensor_opts({_x, _y}, opts), do: opts
    defp tensor_opts(_batches, _opts), do: []

    ## Evaluation

    @doc """
    The loss and metrics of `model` on `data` (`{x, y}` tensors or batches), in inference
    mode: `%{loss: float, accuracy: float, ...}`, means over the samples. Options:
    `:batch_size` (32), `:metrics` (`[]`). One compiled call per batch.
    """
    @spec evaluate(Model.t(), term(), keyword()) :: %{atom() => float()}
    def evaluate(%Model{} = model, data, opts \\ []) do
      fun = "ExBurn.Training.evaluate"
      opts = Model.options!(opts, [:batch_size, :metrics], fun)
      require_loss!(model, fun)
      metrics = metrics!(Keyword.get(opts, :metrics, []), model, fun)

      batching =
        if opts[:batch_size],
          do: [batch_size: opts[:batch_size], shuffle: false],
          else: tensor_opts(data, batch_size: 32, shuffle: false)

      data = Data.new(data, batching, Model.backend(model), fun)
      {x, y} = Data.first(data, fun)
      check_batch!(model, x, y, fun)
      eval_batches(model, data, eval_fn(model, metrics), metrics)
    end

    # The loss and metrics of a batch, one compiled function: `(state, x, y) -> %{name => mean}`.
    defp eval_fn(model, metrics) do
      loss_fn = Spec.loss_fn(model.loss, model.loss_opts)
      predict = model.predict_fn
      metric_fns = Map.new(metrics)

      fn state, x, y ->
        pred = predict.(state, x)

        Map.new(metric_fns, fn {name, f} -> {Atom.to_string(name), f.(y, pred)} end)
        |> Map.put("loss", loss_fn.(y, pred))
      end
    end

    defp eval_batches(model, data, eval, metrics) do
      jitted = Nx.Defn.jit(eval, Model.jit_opts(model))
      names = [:loss | Enum.map(metrics, &elem(&1, 0))]

      {sums, n} =
        Enum.reduce(data.batches, {Map.new(names, &{&1, 0.0}), 0}, fn {x, y}, {sums, n} ->
          size = [y] |> Nx.Defn.Composite.flatten_list() |> hd() |> Nx.axis_size(0)
          values = jitted.(model.state, x, y)
          {Map.new(sums, fn {k, s} -> {k, s + Nx.to_number(values[Atom.to_string(k)]) * size} end), n + size}
        end)

      Map.new(sums, fn {k, s} -> {k, s / max(n, 1)} end)
    end

    ## Single steps

    @doc """
    One training step on the batch `{x, y}`: one compiled call (forward, gradients,
    optimizer update). Gives `{model, loss}`: the updated model (with its optimizer state, so
    the next call continues it) and the batch's loss before the update. Options: the
    optimizer options of `fit/3`.
    """
    @spec train_step(Model.t(), {Nx.Tensor.t(), Nx.Tensor.t()}, keyword()) :: {Model.t(), Nx.Tensor.t()}
    def train_step(%Model{} = model, batch, opts \\ []) do
      fun = "ExBurn.Training.train_step"
      {x, y} = batch!(batch, fun)
      {built, {state, steps}} = prepare_step(model, {x, y}, opts, fun)
      state = Nx.Defn.jit(built.step, Model.jit_opts(model)).({x, y}, state)
      {Step.model_after(model, built, state, steps + 1), state.loss}
    end

    defp prepare_step(model, {x, y}, opts, fun) do
      {fit_opts, optimizer_opts} = split!(opts, fun)

      case Keyword.keys(fit_opts) -- [:optimizer] do
        [] -> :ok
        keys -> raise ArgumentError, "#{fun}: #{inspect(keys)} are options of fit/3, not of a single step"
      end

      require_loss!(model, fun)
      check_batch!(model, x, y, fun)
      built = Step.build(model, optimizer_spec(model, fit_opts[:optimizer], optimizer_opts, fun))
      {built, Step.initial_state(model, built, {x, y})}
    end

    @doc """
    The loss of the batch `{x, y}` and its exact gradient with respect to each trainable
    parameter (`Nx.Defn.value_and_grad/2`, train-mode forward pass), in one compiled call:
    `{loss, %{"layer.param" => gradient}}`. Frozen parameters have no entry.
    """
    @spec compute_gradients(Model.t(), {Nx.Tensor.t(), Nx.Tensor.t()}, keyword()) ::
            {Nx.Tensor.t(), %{String.t() => Nx.Tensor.t()}}
    def compute_gradients(%Model{} = model, batch, opts \\ []) do
      fun = "ExBurn.Training.compute_gradients"
      Model.options!(opts, [], fun)
      {x, y} = batch!(batch, fun)
      require_loss!(model, fun)
      check_batch!(model, x, y, fun)
      loss_fn = Spec.loss_fn(model.loss, model.loss_opts)
      {_init, forward} = Axon.build(model.model, mode: :train, seed: model.seed)

      grad_fn = fn state, x, y ->
        Nx.Defn.value_and_grad(ModelState.trainable_parameters(state), fn params ->
          loss_fn.(y, forward.(ModelState.update(state, params), x).prediction)
        end)
      end

      {loss, grads} = Nx.Defn.jit(grad_fn, Model.jit_opts(model)).(model.state, x, y)
      {loss, Params.flatten(grads)}
    end

    @doc """
    Times the parts of a training step on `{x, y}`: `%{first_call_ms, step_ms, forward_ms,
    gradients_ms, update_ms, samples_per_sec}` - the first step (compilation included), then
    medians of `:iterations` calls (default 5, after `:warmup`, default 1) of a whole step,
    the forward pass, the forward and backward pass, and their difference (the optimizer and
    parameter update). Options: those and the optimizer options of `fit/3`.
    """
    @spec profile_step(Model.t(), {Nx.Tensor.t(), Nx.Tensor.t()}, keyword()) :: map()
    def profile_step(%Model{} = model, batch, opts \\ []) do
      fun = "ExBurn.Training.profile_step"
      {iterations, opts} = Keyword.pop(opts, :iterations, 5)
      {warmup, opts} = Keyword.pop(opts, :warmup, 1)
      {x, y} = batch!(batch, fun)
      sync = fn -> ExCubecl.synchronize(device: model.device) end

      {first_us, {model, _loss}} =
        :timer.tc(fn ->
          result = train_step(model, {x, y}, opts)
          sync.()
          result
        end)

      bench = [iterations: iterations, warmup: warmup]
      step = Model.benchmark(model, {x, y}, [mode: :train] ++ bench ++ opts)
      forward = Model.benchmark(model, x, bench)

      gradients =
        median_ms(
          fn ->
            compute_gradients(model, {x, y})
            sync.()
          end,
          warmup,
          iterations
        )

      %{
        first_call_ms: first_us / 1000,
        step_ms: step.median_ms,
        forward_ms: forward.median_ms,
        gradients_ms: gradients,
        update_ms: max(step.median_ms - gradients, 0.0),
        samples_per_sec: step.samples_per_sec
      }
    end

    defp median_ms(fun, warmup, iterations) do
      for _ <- 1..warmup//1, do: fun.()
      times = for _ <- 1..iterations, do: elem(:timer.tc(fun), 0) / 1000
      times |> Enum.sort() |> Enum.at(div(iterations, 2))
    end

    ## Checks

    @doc false
    # `batch` as {x, y}, or ArgumentError naming `fun`.
    def batch!({_x, _y} = batch, _fun), do: batch
    def batch!(other, fun), do: raise(ArgumentError, "#{fun}: expected a batch {x, y}, got #{inspect(other, limit: 3)}")

    defp split!(opts, fun) do
      unless Keyword.keyword?(opts),
        do: raise(ArgumentError, "#{fun}: options must be a keyword list, got #{inspect(opts, limit: 5)}")

      {fit_opts, optimizer_opts} = Keyword.split(opts, @fit_opts)

      case Keyword.keys(optimizer_opts) -- Optimizer.option_names() do
        [] ->
          {fit_opts, optimizer_opts}

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown option(s) #{Enum.map_join(unknown, ", ", &inspect/1)} (options: #{Enum.map_join(@fit_opts ++ Optimizer.option_names(), ", ", &inspect/1)})"
      end
    end

    defp require_loss!(%Model{loss: nil}, fun),
      do: raise(ArgumentError, "#{fun}: the model has no loss; compile it with ExBurn.Model.compile(axon, loss: ...)")

    defp require_loss!(_model, _fun), do: :ok

    defp positive!(n, _key, _fun) when is_integer(n) and n > 0, do: n

    defp positive!(n, key, fun),
      do: raise(ArgumentError, "#{fun}: #{inspect(key)} must be a positive integer, got #{inspect(n)}")

    # The optimizer spec: the model's, with `overrides`; another optimizer from its defaults.
    defp optimizer_spec(model, nil, overrides, fun),
      do: Optimizer.validate!({model.optimizer, model.optimizer_opts}, overrides, fun)

    defp optimizer_spec(model, {name, opts}, overrides, fun) when name == model.optimizer and is_list(opts),
      do: Optimizer.validate!({name, Keyword.merge(model.optimizer_opts, opts)}, overrides, fun)

    defp optimizer_spec(model, name, overrides, fun) when name == model.optimizer,
      do: optimizer_spec(model, nil, overrides, fun)

    defp optimizer_spec(_model, optimizer, overrides, fun), do: Optimizer.validate!(optimizer, overrides, fun)

    defp metrics!(metrics, model, fun) when is_list(metrics) do
      Enum.map(metrics, fn
        :accuracy ->
          opts = Spec.accuracy_opts(model.loss, model.loss_opts)
          {:accuracy, fn y_true, y_pred -> Axon.Metrics.accuracy(y_true, y_pred, opts) end}

        name when is_atom(name) ->
          if function_exported?(Axon.Metrics, name, 2),
            do: {name, fn y_true, y_pred -> apply(Axon.Metrics, name, [y_true, y_pred]) end},
            else:
              raise(
                ArgumentError,
                "#{fun}: unknown metric #{inspect(name)} (:accuracy, or a function of Axon.Metrics of (y_true, y_pred))"
              )

        other ->
          raise ArgumentError,
                "#{fun}: unknown metric #{inspect(other)} (:accuracy, or a function of Axon.Metrics of (y_true, y_pred))"
      end)
    end

    defp metrics!(other, _model, fun),
      do: raise(ArgumentError, "#{fun}: :metrics must be a list, got #{inspect(other)}")

    # The batch against the model: the input's shapes, and targets that fit the output.
    defp check_batch!(model, x, y, fun) do
      n = Spec.check_input!(model.input, x, fun)

      case {y, model.output} do
        {%Nx.Tensor{shape: shape}, %Nx.Tensor{shape: out}} ->
          want = put_elem(out, 0, n)

          ok? =
            cond do
              elem(shape, 0) != n or tuple_size(shape) == 0 -> false
              is_function(model.loss) -> true
              model.loss_opts[:sparse] -> shape in [{n}, {n, 1}]
              true -> shape == want
            end

          unless ok?,
            do:
              raise(
                ArgumentError,
                "#{fun}: targets of shape #{inspect(shape)} don't fit the model's output #{Spec.shape_string(out)} for a batch of #{n}"
              )

        {%Nx.Tensor{}, _} ->
          :ok

        {other, _} ->
          unless is_map(other) or is_tuple(other),
            do: raise(ArgumentError, "#{fun}: targets must be tensors, got #{inspect(other, limit: 3)}")
      end
    end
  end
end
