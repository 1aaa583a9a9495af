if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Callback do
    @moduledoc """
    A callback of `ExBurn.Training.fit/3`: an `Axon.Loop` event handler (`event`, one of
    Axon's events or a list of them) whose `handler` receives the `Axon.Loop.State` and the
    run's context and returns `{status, state}` (`:continue`, `:halt_epoch`, `:halt_loop`).
    `ExBurn.Training.Callbacks` builds them.
    """
    defstruct [:name, :event, :handler]

    @type t :: %__MODULE__{
            name: atom(),
            event: atom() | [atom()],
            handler: (Axon.Loop.State.t(), map() -> {atom(), Axon.Loop.State.t()})
          }
  end

  defmodule ExBurn.Training.Callbacks do
    @moduledoc """
    The callbacks of `ExBurn.Training.fit/3`, given in its `:callbacks` list and attached to
    the `Axon.Loop` in that order (after the loop's own epoch summary, so each sees the
    finished epoch's numbers; with `log: true` the logging callback comes first):

        callbacks: [
          Callbacks.early_stopping(monitor: :val_loss, patience: 3, min_delta: 1.0e-3),
          Callbacks.checkpoint(path: "ckpt/epoch_{epoch}.exburn", every: 5),
          Callbacks.reduce_lr_on_plateau(factor: 0.5, patience: 2),
          Callbacks.warmup(epochs: 3),
          Callbacks.progress(self()),
          Callbacks.on(:iteration_completed, fn state -> ... ; :continue end)
        ]

    A monitored value (`:monitor`) is a key of the epoch's history entry
    (`ExBurn.Training.History`): `:loss`, `:val_loss`, `:accuracy`, `:val_accuracy`, ...
    The default is `:val_loss` when there is validation data, else `:loss`. Improvement is
    by more than `:min_delta`, downwards (`mode: :min`, the default) or upwards (`:max`).

    The learning-rate callbacks change the multiplier in the optimizer state
    (`ExBurn.Training.Optimizer`), a tensor input of the compiled step: nothing recompiles.
    """

    alias ExBurn.Training.{Callback, Step}

    @doc """
    A progress line per epoch: `Epoch 2/10 - loss: 0.1234 - accuracy: 0.9500 - val_loss: ... -
    lr: 0.001 - 3200 samples/s - 0.52s - ETA 4.2s`. Option: `:device` (an IO device, default
    `:stdio`).
    """
    @spec logging(keyword()) :: Callback.t()
    def logging(opts \\ []) do
      opts = check!(opts, [device: :stdio], "logging")

      callback(:logging, :epoch_completed, fn state, ctx ->
        IO.puts(opts[:device], line(epoch(state), ctx.epochs))
        {:continue, state}
      end)
    end

    @doc false
    def line(entry, epochs) do
      metrics =
        entry
        |> Map.drop([:epoch, :time_ms, :samples, :samples_per_sec, :learning_rate])
        |> Enum.sort_by(fn {k, _} -> {String.starts_with?(to_string(k), "val_"), k != :loss, k != :val_loss, k} end)
        |> Enum.map(fn {k, v} -> "#{k}: #{format(v)}" end)

      eta = (epochs - entry.epoch) * entry.time_ms / 1000
      speed = if is_number(entry.samples_per_sec), do: ["#{round(entry.samples_per_sec)} samples/s"], else: []

      Enum.join(
        ["Epoch #{entry.epoch}/#{epochs}"] ++
          metrics ++
          ["lr: #{format(entry.learning_rate)}"] ++ speed ++ ["#{seconds(entry.time_ms / 1000)}", "ETA #{seconds(eta)}"],
        " - "
      )
    end

    defp format(v) when is_float(v) and (abs(v) >= 1.0e-3 or v == 0.0), do: :erlang.float_to_binary(v, decimals: 4)
    defp format(v) when is_float(v), do: :io_lib.format(~c"~.3e", [v]) |> to_string()
    defp format(v), do: inspect(v)

    defp seconds(s), do: "#{:erlang.float_to_binary(s * 1.0, decimals: 2)}s"

    @doc """
    Stops training when the monitored value hasn't improved by more than `:min_delta` for
    `:patience` epochs (default 3): the run ends with status `:early_stopped`. Options:
    `:monitor`, `:patience`, `:min_delta` (default 0.0), `:mode`.
    """
    @spec early_stopping(keyword()) :: Callback.t()
    def early_stopping(opts \\ []) do
      opts = check!(opts, [monitor: nil, patience: 3, min_delta: 0.0, mode: :min], "early_stopping")
      key = {:early_stopping, make_ref()}

      callback(:early_stopping, :epoch_completed, fn state, ctx ->
        {stale, state} = watch(state, key, opts, ctx)

        if stale >= opts[:patience],
          do: {:halt_loop, put_meta(state, :stopped, :early_stopped)},
          else: {:continue, state}
      end)
    end

    @doc """
    Multiplies the learning rate by `:factor` (default 0.1) when the monitored value hasn't
    improved by more than `:min_delta` for `:patience` epochs (default 3), never below
    `:min_lr` (default 0.0); then waits `:patience` epochs again. Options: `:monitor`,
    `:factor`, `:patience`, `:min_delta`, `:min_lr`, `:mode`.
    """
    @spec reduce_lr_on_plateau(keyword()) :: Callback.t()
    def reduce_lr_on_plateau(opts \\ []) do
      opts =
        check!(
          opts,
          [monitor: nil, factor: 0.1, patience: 3, min_delta: 0.0, min_lr: 0.0, mode: :min],
          "reduce_lr_on_plateau"
        )

      key = {:reduce_lr, make_ref()}

      callback(:reduce_lr_on_plateau, :epoch_completed, fn state, ctx ->
        {stale, state} = watch(state, key, opts, ctx)

        if stale >= opts[:patience] do
          %{learning_rate: lr} = epoch(state)
          multiplier = state.step_state.optimizer_state |> Step.multiplier() |> Nx.to_number()
          new_lr = max(lr * opts[:factor], opts[:min_lr])
          multiplier = if lr > 0, do: multiplier * new_lr / lr, else: multiplier
          state = update_in(state.step_state.optimizer_state, &Step.put_multiplier(&1, multiplier))
          {:continue, put_in(state.handler_metadata[key], %{meta(state, key) | stale: 0})}
        else
          {:continue, state}
        end
      end)
    end

    # Tracks the monitored value under `key`: {epochs without improvement, state}.
    defp watch(state, key, opts, ctx) do
      monitor = monitor!(opts[:monitor], ctx)
      value = Map.fetch!(epoch(state), monitor)
      %{best: best, stale: stale} = meta(state, key)

      improved? =
        best == nil or
          case opts[:mode] do
            :min -> value < best - opts[:min_delta]
            :max -> value > best + opts[:min_delta]
          end

      meta = if improved?, do: %{best: value, stale: 0}, else: %{best: best, stale: stale + 1}
      {meta.stale, put_in(state.handler_metadata[key], meta)}
    end

    defp meta(state, key), do: Map.get(state.handler_metadata, key, %{best: nil, stale: 0})

    defp monitor!(nil, ctx), do: if(ctx.validation, do: :val_loss, else: :loss)

    defp monitor!(monitor, ctx) do
      monitor = if is_binary(monitor), do: String.to_atom(monitor), else: monitor

      if monitor in ctx.monitors,
        do: monitor,
        else:
          raise(
            ArgumentError,
            "#{ctx.fun}: cannot monitor #{inspect(monitor)}; the epochs record #{inspect(ctx.monitors)}"
          )
    end

    @doc """
    Saves the model (`ExBurn.Model.save/2`) every `:every` epochs (default 1) and after the
    last. `:path` (required) is a file name where `{epoch}` is replaced by the epoch number,
    or a folder (files `epoch_<n>.exburn` in it).
    """
    @spec checkpoint(keyword()) :: Callback.t()
    def checkpoint(opts) do
      opts = check!(opts, [path: nil, every: 1], "checkpoint")

      unless is_binary(opts[:path]),
        do:
          raise(
            ArgumentError,
            "ExBurn.Training.Callbacks.checkpoint: :path must be a string, got #{inspect(opts[:path])}"
          )

      callback(:checkpoint, :epoch_completed, fn state, ctx ->
        epoch = state.epoch + 1

        if rem(epoch, opts[:every]) == 0 or epoch == ctx.epochs do
          path =
            if String.contains?(opts[:path], "{epoch}"),
              do: String.replace(opts[:path], "{epoch}", to_string(epoch)),
              else: Path.join(opts[:path], "epoch_#{epoch}.exburn")

          case ExBurn.Model.save(ExBurn.Training.current_model(state, ctx), path) do
            :ok -> {:continue, state}
            {:error, e} -> raise e
          end
        else
          {:continue, state}
        end
      end)
    end

    @doc """
    A linear learning-rate warm-up over the first `:epochs` epochs: epoch `e` (from 1) trains
    at `e / epochs` of the learning rate, and the full rate from epoch `epochs + 1` on. (For
    a warm-up over steps, give `warmup_steps:` to `fit/3`: it is part of the schedule.)
    """
    @spec warmup(keyword()) :: Callback.t()
    def warmup(opts) do
      opts = check!(opts, [epochs: nil], "warmup")

      unless is_integer(opts[:epochs]) and opts[:epochs] > 0,
        do:
          raise(
            ArgumentError,
            "ExBurn.Training.Callbacks.warmup: :epochs must be a positive integer, got #{inspect(opts[:epochs])}"
          )

      n = opts[:epochs]

      callback(:warmup, :epoch_started, fn state, _ctx ->
        if state.epoch <= n,
          do:
            {:continue,
             update_in(state.step_state.optimizer_state, &Step.put_multiplier(&1, min(state.epoch + 1, n) / n))},
          else: {:continue, state}
      end)
    end

    @doc "Sends `{:training_progress, epoch, loss, val_loss}` to `pid` after each epoch (`val_loss` is `nil` without validation data)."
    @spec progress(pid()) :: Callback.t()
    def progress(pid \\ self()) when is_pid(pid) do
      callback(:progress, :epoch_completed, fn state, _ctx ->
        entry = epoch(state)
        send(pid, {:training_progress, entry.epoch, entry.loss, entry[:val_loss]})
        {:continue, state}
      end)
    end

    @doc """
    A callback of your own on an `Axon.Loop` event (`:started`, `:epoch_started`,
    `:iteration_started`, `:iteration_completed`, `:epoch_completed`, `:epoch_halted`, or a
    list): `fun` takes the `Axon.Loop.State` (and, with arity 2, the run's context, whose
    `ExBurn.Training.current_model/2` gives the model) and returns a status (`:continue`,
    `:halt_epoch`, `:halt_loop`) or `{status, state}`. The epoch's history entry is
    `ExBurn.Training.Callbacks.epoch(state)` in `:epoch_completed`.
    """
    @spec on(atom() | [atom()], function()) :: Callback.t()
    def on(event, fun) when is_function(fun, 1) or is_function(fun, 2) do
      events = List.wrap(event)
      allowed = [:started, :epoch_started, :iteration_started, :iteration_completed, :epoch_completed, :epoch_halted]

      case events -- allowed do
        [] ->
          :ok

        bad ->
          raise ArgumentError,
                "ExBurn.Training.Callbacks.on: unknown event(s) #{inspect(bad)} (events: #{inspect(allowed)})"
      end

      callback(:custom, event, fn state, ctx ->
        result = if is_function(fun, 1), do: fun.(state), else: fun.(state, ctx)

        case result do
          status when status in [:continue, :halt_epoch, :halt_loop] ->
            {status, state}

          {status, %Axon.Loop.State{}} = result when status in [:continue, :halt_epoch, :halt_loop] ->
            result

          other ->
            raise ArgumentError,
                  "ExBurn.Training.Callbacks.on: the callback must return :continue, :halt_epoch, :halt_loop or {status, state}, got #{inspect(other, limit: 5)}"
        end
      end)
    end

    def on(_event, fun),
      do:
        raise(
          ArgumentError,
          "ExBurn.Training.Callbacks.on: expected a function of 1 or 2 arguments, got #{inspect(fun)}"
        )

    @doc "The history entry of the epoch that just completed (in `:epoch_completed` handlers)."
    @spec epoch(Axon.Loop.State.t()) :: map()
    def epoch(state), do: state.handler_metadata.exburn.epoch

    defp put_meta(state, key, value), do: update_in(state.handler_metadata.exburn, &Map.put(&1, key, value))

    defp callback(name, event, handler), do: %Callback{name: name, event: event, handler: handler}

    defp check!(opts, defaults, name) do
      fun = "ExBurn.Training.Callbacks.#{name}"

      unless Keyword.keyword?(opts),
        do: raise(ArgumentError, "#{fun}: options must be a keyword list, got #{inspect(opts, limit: 5)}")

      case Enum.uniq(Keyword.keys(opts)) -- Keyword.keys(defaults) do
        [] ->
          :ok

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown option(s) #{inspect(unknown)} (options: #{inspect(Keyword.keys(defaults))})"
      end

      opts = Keyword.merge(defaults, opts)

      for {key, value} <- opts do
        valid? =
          case key do
            k when k in [:patience, :every] -> is_integer(value) and value > 0
            k when k in [:min_delta, :min_lr] -> is_number(value) and value >= 0
            :factor -> is_number(value) and value > 0 and value < 1
            :mode -> value in [:min, :max]
            :monitor -> is_nil(value) or is_atom(value) or is_binary(value)
            _ -> true
          end

        unless valid?, do: raise(ArgumentError, "#{fun}: invalid #{inspect(key)}: #{inspect(value)}")
      end

      opts
    end

    @doc false
    # `callbacks` (Callback structs, or {event, fun}) as handlers of `loop`, in order.
    def attach(loop, callbacks, ctx) do
      Enum.reduce(callbacks, loop, fn
        %Callback{event: event, handler: handler}, loop ->
          Axon.Loop.handle_event(loop, event, &handler.(&1, ctx))

        {event, fun}, loop when is_function(fun) ->
          attach(loop, [on(event, fun)], ctx)

        other, _loop ->
          raise ArgumentError,
                "#{ctx.fun}: invalid callback #{inspect(other, limit: 5)} (a callback of ExBurn.Training.Callbacks, or {event, fun})"
      end)
    end
  end
end
