if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Fit do
    @moduledoc false
    # ExBurn.Training.fit/3 and fit_with_progress/3: an Axon.Loop whose step is the model's
    # (ExBurn.Training.Step, one compiled call), whose :epoch_started handler sets the epoch's
    # learning rate (the multiplier in the optimizer state), and whose :epoch_completed
    # handler builds the metrics map (running averages of the loss and metrics, the validation
    # pass), prints the progress line, runs the callbacks over the map in order, keeps the
    # history, and stops the loop on stop_training: true. With resume: path, the run starts
    # from the checkpoint's state (ExBurn.Training.Resume) at the epoch after it.

    alias ExBurn.Model
    alias ExBurn.Training.{Callbacks, Checks, Data, Evaluate, LRSchedule, Optimizer, Parallel, Resume, Step}

    # {trained model, history (a list of metrics maps without :model)}.
    def run(%Model{} = model, data, opts, fun) do
      {loop_opts, optimizer_opts} = Checks.split!(opts, fun)
      Checks.require_loss!(model, fun)
      epochs = Checks.positive!(Keyword.get(loop_opts, :epochs, 10), :epochs, fun)
      warmup = Checks.non_negative!(Keyword.get(loop_opts, :warmup, 0), :warmup, fun)
      spec = Checks.optimizer_spec(model, loop_opts, optimizer_opts, fun)
      grad = Checks.grad!(loop_opts, fun)
      {functions, handlers} = Callbacks.split!(Keyword.get(loop_opts, :callbacks, []), fun)
      verbose = verbose!(Keyword.get(loop_opts, :verbose, true), fun)
      devices = Parallel.devices!(loop_opts[:devices], fun)

      if devices && grad != :exact,
        do:
          raise(
            ArgumentError,
            "#{fun}: :devices trains with exact gradients; grad_method: #{inspect(elem(grad, 0))} is not supported with it"
          )

      # Data-parallel: the model (the first replica) lives on the first device.
      model = if devices, do: Model.to_device(model, hd(devices)), else: model

      if devices && loop_opts[:resume],
        do: raise(ArgumentError, "#{fun}: resume: continues a run on one device; it can't be combined with :devices")

      {model, resumed} = Resume.restore(model, loop_opts[:resume], fun)
      done = if resumed, do: resumed.epoch, else: 0

      if done > epochs,
        do: raise(ArgumentError, "#{fun}: the checkpoint to resume from is of epoch #{done}, past epochs: #{epochs}")

      backend = Model.backend(model)

      train =
        Data.new(
          data,
          Keyword.take(loop_opts, [:batch_size, :shuffle, :drop_last]) ++
            [seed: loop_opts[:seed] || model.seed, passes: done, devices: devices],
          backend,
          fun
        )

      validation = validation(loop_opts[:validation_data], train, backend, fun)
      metrics = Checks.metrics!(model, loop_opts, fun)
      {x, y} = first = Data.first(train, fun)
      Checks.check_batch!(model, x, y, fun)
      if devices, do: check_split!(train, x, length(devices), fun)

      if validation do
        {vx, vy} = Data.first(validation, fun)
        Checks.check_batch!(model, vx, vy, fun)
      end

      {built, {state, steps}} =
        if devices do
          # The shards' predictions go to the first device only for metrics that read them.
          gather = Enum.any?(metrics, fn {_name, metric} -> metric != nil end)
          built = Parallel.build(model, spec, devices, fun, gather: gather)
          {built, Parallel.initial_state(model, built, first)}
        else
          built = Step.build(model, spec, grad)
          if resumed, do: same_run!(model, built, loop_opts[:resume], fun)
          {built, Step.initial_state(model, built, first)}
        end

      ctx = %{
        model: model,
        built: built,
        epochs: epochs,
        steps: steps,
        validation: validation,
        eval: Evaluate.eval_fn(model, metrics),
        metrics: metrics,
        fun: fun,
        devices: devices,
        verbose: verbose,
        callbacks: functions,
        lr: %{
          schedule: LRSchedule.validate!(loop_opts[:lr_schedule], fun),
          warmup: warmup,
          base: spec.opts[:learning_rate]
        }
      }

      # A data-parallel step calls its compiled programs itself (ExBurn.Training.Parallel).
      run_opts =
        if devices,
          do: [epochs: epochs, jit_compile?: false],
          else: [epochs: epochs - done, strict?: train.strict?] ++ Model.jit_opts(model)

      final =
        try do
          built
          |> loop(metrics, handlers, ctx)
          |> from_checkpoint(resumed, state)
          |> Axon.Loop.run(train.sharded || train.batches, state, run_opts)
        after
          if devices, do: Parallel.forget()
        end

      meta = Map.get(final.handler_metadata, :exburn, %{history: []})
      {Step.model_after(model, built, final.step_state, steps(final, ctx)), Enum.reverse(meta.history)}
    end

    # A resumed run: the loop state of the checkpoint's epoch (the epochs done, the step
    # state with its running loss, the history and the callbacks' learning-rate factor).
    defp from_checkpoint(loop, nil, _state), do: loop

    defp from_checkpoint(loop, resumed, state) do
      state = if resumed.step, do: Map.merge(state, resumed.step), else: state
      meta = %{history: Enum.reverse(resumed.history), factor: resumed.factor}
      meta = if resumed.history == [], do: meta, else: Map.put(meta, :epoch, List.last(resumed.history))

      Axon.Loop.from_state(loop, %Axon.Loop.State{
        step_state: state,
        epoch: resumed.epoch,
        handler_metadata: %{exburn: meta}
      })
    end

    # The optimizer state of a checkpoint serves only the run that wrote it: the same
    # optimizer, options and trainable parameters.
    defp same_run!(%Model{optimizer_state: %{key: key}}, %{key: key}, _path, _fun), do: :ok

    defp same_run!(%Model{optimizer_state: %{key: {spec, params}}}, %{key: {want_spec, want_params}}, path, fun) do
      what =
        if spec != want_spec,
          do: "the optimizer #{inspect(spec)}, this run #{inspect(want_spec)}",
          else: "trainable parameters #{inspect(params -- want_params)}, this run #{inspect(want_params -- params)}"

      raise ArgumentError, "#{fun}: the checkpoint #{path} is of another run: it has #{what}"
    end

    defp verbose!(v, _fun) when is_boolean(v), do: v
    defp verbose!(device, _fun) when is_pid(device) or (is_atom(device) and not is_nil(device)), do: device

    defp verbose!(other, fun),
      do: raise(ArgumentError, "#{fun}: :verbose must be a boolean or an IO device, got #{inspect(other)}")

    # Each batch of a data-parallel fit must split into equal shards: the batches of {x, y}
    # tensors are known here, others are checked as they come (and the first one here).
    defp check_split!(train, x, count, fun) do
      if train.batch_size do
        Parallel.check_split!(train.batch_size, count, "a batch (:batch_size)", fun)
        last = rem(train.samples, train.batch_size)
        if last != 0, do: Parallel.check_split!(last, count, "the last batch", fun)
      end

      rows = [x] |> Nx.Defn.Composite.flatten_list() |> hd() |> Nx.axis_size(0)
      Parallel.check_split!(rows, count, "a batch", fun)
    end

    defp validation(nil, _train, _backend, _fun), do: nil

    defp validation({_x, _y} = data, train, backend, fun),
      do: Data.new(data, [batch_size: train.batch_size || 32, shuffle: false], backend, fun)

    defp validation(batches, _train, backend, fun), do: Data.new(batches, [], backend, fun)

    # The Axon loop: the train step as given (its state starts as built by Step), the loss and
    # the metrics as Axon's running averages, the samples counted, the epoch's learning rate
    # set, the epoch summarized and the callbacks run, then the Axon handlers of on/2.
    defp loop(built, metrics, handlers, ctx) do
      Axon.Loop.loop(built.step, fn _batch, state -> state end, & &1)
      |> add_loss(built.loss_fn, ctx)
      |> add_metrics(metrics, ctx)
      |> Axon.Loop.handle_event(:epoch_started, &epoch_started(&1, ctx))
      |> Axon.Loop.handle_event(:iteration_completed, &{:continue, count_samples(&1)})
      |> Axon.Loop.handle_event(:epoch_completed, &epoch_completed(&1, ctx))
      |> Callbacks.attach(handlers, ctx)
    end

    defp add_metrics(loop, metrics, ctx) do
      Enum.reduce(metrics, loop, fn
        {_name, nil}, loop -> loop
        {name, metric}, loop -> add_metric(loop, metric, "exburn_#{name}", ctx)
      end)
    end

    # The loss of each batch, averaged over the epoch. A data-parallel step has it already:
    # the mean of its shards' losses (`batch_loss`, on the first device), which is the batch's
    # for a mean-reduced loss.
    defp add_loss(loop, loss_fn, %{devices: nil} = ctx), do: add_metric(loop, loss_fn, "exburn_loss", ctx)

    defp add_loss(loop, _loss_fn, %{devices: [dev | _]}),
      do: Axon.Loop.metric(loop, & &1, "exburn_loss", average(dev), &[&1.batch_loss])

    # Outside Axon's jit (a data-parallel step), the metric and its running average are
    # compiled calls on the first device.
    defp add_metric(loop, metric, name, %{devices: nil}), do: Axon.Loop.metric(loop, metric, name)

    defp add_metric(loop, metric, name, %{devices: [dev | _]}),
      do: Axon.Loop.metric(loop, Nx.Defn.jit(metric, compiler: ExBurn.Defn.Compiler, device: dev), name, average(dev))

    # Axon's running average; the iteration number goes with the call from the host (made
    # on the default device, it would be read back from there first).
    defp average(dev) do
      average = fn avg, obs, i -> avg |> Nx.multiply(i) |> Nx.add(obs) |> Nx.divide(Nx.add(i, 1)) end
      jitted = Nx.Defn.jit(average, compiler: ExBurn.Defn.Compiler, device: dev)
      fn avg, obs, i -> jitted.(avg, obs, Nx.tensor(i, backend: Nx.BinaryBackend)) end
    end

    defp count_samples(state) do
      n = [state.step_state.y_true] |> Nx.Defn.Composite.flatten_list() |> hd() |> Nx.axis_size(0)
      update_in(state.handler_metadata[:exburn_samples], &((&1 || 0) + n))
    end

    defp steps(state, ctx), do: ctx.steps + (get_in(state.event_counts, [:iteration_completed, :total]) || 0)

    defp meta(state), do: Map.get(state.handler_metadata, :exburn, %{history: [], factor: 1.0})

    # The epoch's learning rate: the schedule's (with warm-up), times the factor the callbacks
    # set, as the multiplier of the optimizer's learning rate.
    defp epoch_started(state, ctx) do
      %{schedule: schedule, warmup: warmup, base: base} = ctx.lr
      factor = meta(state).factor
      lr = LRSchedule.at(schedule, state.epoch, ctx.epochs, warmup, base) * factor
      multiplier = if base > 0, do: lr / base, else: 1.0
      state = put_in(state.handler_metadata[:exburn_samples], 0)
      {:continue, update_in(state.step_state, &Parallel.put_multiplier(&1, multiplier))}
    end

    defp epoch_completed(state, ctx) do
      train =
        Map.new(state.metrics, fn {"exburn_" <> name, v} -> {String.to_existing_atom(name), Nx.to_number(v)} end)

      train = Enum.reduce(ctx.metrics, train, fn {name, _}, acc -> Map.put_new(acc, name, nil) end)

      val =
        if ctx.validation,
          do:
            %{ctx.model | state: state.step_state.model_state}
            |> Evaluate.batches(ctx.validation, ctx.eval, ctx.metrics)
            |> Map.new(fn {k, v} -> {:"val_#{k}", v} end),
          else: %{}

      multiplier = state.step_state.optimizer_state |> Step.multiplier() |> Nx.to_number()
      updates = div(steps(state, ctx), ctx.built.spec.training[:accumulate_gradients])
      lr = Optimizer.learning_rate(ctx.built.spec, updates) * multiplier

      entry = %{epoch: state.epoch + 1, learning_rate: lr} |> Map.merge(train) |> Map.merge(val)
      log(entry, state, ctx)

      history = [entry | meta(state).history]

      # The model as it stands, with the run's state for a checkpoint (ExBurn.Training.Resume).
      run = %{
        epoch: entry.epoch,
        lr: lr,
        factor: meta(state).factor,
        history: Enum.reverse(history),
        step: Map.take(state.step_state, [:i, :loss])
      }

      metrics = Map.put(entry, :model, Resume.put_run(current_model(state, ctx), run))
      returned = Callbacks.run(ctx.callbacks, metrics, ctx.fun)
      factor = Resume.next_factor(meta(state).factor, lr, returned)
      meta = %{meta(state) | history: history} |> Map.merge(%{epoch: entry, factor: factor})
      state = put_in(state.handler_metadata[:exburn], meta)
      if returned[:stop_training] == true, do: {:halt_loop, state}, else: {:continue, state}
    end

    defp log(_entry, _state, %{verbose: false}), do: :ok

    defp log(entry, state, ctx) do
      device = if ctx.verbose == true, do: :stdio, else: ctx.verbose
      samples = state.handler_metadata[:exburn_samples] || 0
      time_ms = Map.get(state.times, state.epoch, 0) / 1000
      speed = if time_ms > 0, do: samples / (time_ms / 1000)
      IO.puts(device, Callbacks.line(entry, ctx.epochs, time_ms, speed))
    end

    @doc false
    def current_model(state, ctx), do: Step.model_after(ctx.model, ctx.built, state.step_state, steps(state, ctx))

    @doc false
    def current_replicas(state, ctx), do: Parallel.replicas(ctx.model, ctx.built, state.step_state, steps(state, ctx))
  end
end
