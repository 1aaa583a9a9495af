if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Callback do
    @moduledoc """
    A low-level callback of `ExBurn.Training.fit/3`: an `Axon.Loop` event handler (`event`, one
    of Axon's events or a list of them) whose `handler` receives the `Axon.Loop.State` and the
    run's context and returns `{status, state}` (`:continue`, `:halt_epoch`, `:halt_loop`).
    `ExBurn.Training.Callbacks.on/2` builds them. The documented callbacks are plain functions
    over the metrics map (`ExBurn.Training.Callbacks`).
    """
    defstruct [:name, :event, :handler]

    @type t :: %__MODULE__{
            name: atom(),
            event: atom() | [atom()],
            handler: (%Axon.Loop.State{}, map() -> {atom(), %Axon.Loop.State{}})
          }
  end

  defmodule ExBurn.Training.Callbacks do
    @moduledoc """
    The callbacks of `ExBurn.Training.fit/3`. A callback is a function that receives the
    metrics map after each epoch and returns it, possibly modified:

        %{
          epoch: 5,                # from 1
          loss: 0.0234,            # the epoch's mean training loss
          val_loss: 0.0312,        # with validation_data
          accuracy: 0.98,          # with accuracy: true (nil for a loss without classes)
          val_accuracy: 0.95,      # with validation_data and accuracy: true
          learning_rate: 0.001,    # the learning rate of the epoch
          model: %ExBurn.Model{}   # the model as it stands
        }

    `fit/3` calls the callbacks in the order given, each with the map the one before it
    returned. A map with `stop_training: true` ends training after this epoch; a different
    `:learning_rate` becomes the learning rate of the epochs that follow (relative to what
    the schedule gives). Metrics of `metrics: [...]` appear as their names (and `val_` names).

    The functions here build such callbacks (the documented modules
    `ExBurn.Training.LoggingCallback`, `EarlyStoppingCallback`, `CheckpointCallback`,
    `HistoryCallback`, `ReduceLROnPlateauCallback` and `WarmupCallback` are their
    documented forms); `on/2` attaches a function to an `Axon.Loop` event instead.

    A callback that watches a value across epochs keeps its state in the calling process
    (the one that runs `fit/3`), and starts afresh when it sees epoch 1 again.

    A monitored value (`:monitor`) is a key of the metrics map; the default is `:val_loss`
    when the map has one, else `:loss`. Improvement is by more than `:min_delta`, downwards
    (`mode: :min`, the default) or upwards (`:max`).
    """

    alias ExBurn.Training.Callback

    @type t :: (map() -> map())

    ## Logging

    @doc """
    Prints a line per epoch: `Epoch 2 - loss: 0.1234 - accuracy: 0.9500 - val_loss: 0.2000 -
    lr: 0.001`. Option: `:device` (an IO device, default `:stdio`).
    """
    @spec logging(keyword()) :: t()
    def logging(opts \\ []) do
      opts = check!(opts, [device: :stdio], "logging")
      fn metrics -> log(metrics, opts[:device]) end
    end

    @doc "Prints the metrics line of `metrics` on `device` and returns `metrics`."
    @spec log(map(), IO.device()) :: map()
    def log(metrics, device \\ :stdio) when is_map(metrics) do
      IO.puts(device, Enum.join(["Epoch #{Map.get(metrics, :epoch, "?")}" | metric_fields(metrics)], " - "))
      metrics
    end

    @doc false
    # The line fit/3 prints with verbose: true: the metrics, the learning rate, the speed and
    # the time left.
    def line(entry, epochs, time_ms, samples_per_sec) do
      eta = (epochs - entry.epoch) * time_ms / 1000
      speed = if is_number(samples_per_sec), do: ["#{round(samples_per_sec)} samples/s"], else: []

      Enum.join(
        ["Epoch #{entry.epoch}/#{epochs}"] ++
          metric_fields(entry) ++ speed ++ [seconds(time_ms / 1000), "ETA #{seconds(eta)}"],
        " - "
      )
    end

    defp metric_fields(metrics) do
      values =
        metrics
        |> Map.drop([:epoch, :model, :learning_rate, :stop_training])
        |> Enum.filter(fn {_k, v} -> is_number(v) end)
        |> Enum.sort_by(fn {k, _} -> {String.starts_with?(to_string(k), "val_"), k != :loss, k != :val_loss, k} end)
        |> Enum.map(fn {k, v} -> "#{k}: #{format(v)}" end)

      lr = if is_number(metrics[:learning_rate]), do: ["lr: #{format(metrics[:learning_rate])}"], else: []
      values ++ lr
    end

    defp format(v) when is_float(v) and (abs(v) >= 1.0e-3 or v == 0.0), do: :erlang.float_to_binary(v, decimals: 4)
    defp format(v) when is_float(v), do: :io_lib.format(~c"~.3e", [v]) |> to_string()
    defp format(v), do: inspect(v)

    defp seconds(s), do: "#{:erlang.float_to_binary(s * 1.0, decimals: 2)}s"

    ## Early stopping and learning rate on plateau

    @doc """
    Stops training (`stop_training: true`) when the monitored value hasn't improved by more
    than `:min_delta` (default `1.0e-4`) for `:patience` epochs (default 5). Options:
    `:monitor`, `:patience`, `:min_delta`, `:mode`.
    """
    @spec early_stopping(keyword()) :: t()
    def early_stopping(opts \\ []) do
      opts = check!(opts, [monitor: nil, patience: 5, min_delta: 1.0e-4, mode: :min], "early_stopping")
      key = {__MODULE__, :early_stopping, make_ref()}

      fn metrics ->
        stale = watch(metrics, key, opts, "early_stopping")
        if stale >= opts[:patience], do: Map.put(metrics, :stop_training, true), else: metrics
      end
    end

    @doc """
    Multiplies the learning rate by `:factor` (default 0.5) when the monitored value hasn't
    improved by more than `:min_delta` (default `1.0e-4`) for `:patience` epochs (default 5),
    never below `:min_lr` (default `1.0e-6`); then waits `:patience` epochs again. Options:
    `:monitor`, `:factor`, `:patience`, `:min_delta`, `:min_lr`, `:mode`.
    """
    @spec reduce_lr_on_plateau(keyword()) :: t()
    def reduce_lr_on_plateau(opts \\ []) do
      defaults = [monitor: nil, factor: 0.5, patience: 5, min_delta: 1.0e-4, min_lr: 1.0e-6, mode: :min]
      opts = check!(opts, defaults, "reduce_lr_on_plateau")
      key = {__MODULE__, :reduce_lr, make_ref()}
      patience = opts[:patience]

      fn metrics ->
        stale = watch(metrics, key, opts, "reduce_lr_on_plateau")

        case metrics do
          %{learning_rate: lr} when is_number(lr) and stale >= patience ->
            Process.put(key, %{Process.get(key) | stale: 0})
            Map.put(metrics, :learning_rate, max(lr * opts[:factor], opts[:min_lr]))

          _ ->
            metrics
        end
      end
    end

    # Tracks the monitored value under `key` in the process: the epochs without improvement.
    defp watch(metrics, key, opts, name) do
      monitor = monitor!(metrics, opts[:monitor], name)
      value = Map.fetch!(metrics, monitor)
      epoch = Map.get(metrics, :epoch, 0)

      %{best: best, stale: stale} =
        case Process.get(key) do
          %{epoch: last} = st when is_integer(epoch) and epoch > last -> st
          _ -> %{best: nil, stale: 0, epoch: 0}
        end

      improved? =
        best == nil or
          case opts[:mode] do
            :min -> value < best - opts[:min_delta]
            :max -> value > best + opts[:min_delta]
          end

      meta =
        if improved?, do: %{best: value, stale: 0, epoch: epoch}, else: %{best: best, stale: stale + 1, epoch: epoch}

      Process.put(key, meta)
      meta.stale
    end

    defp monitor!(metrics, nil, _name), do: if(is_number(metrics[:val_loss]), do: :val_loss, else: :loss)

    defp monitor!(metrics, monitor, name) do
      monitor = if is_binary(monitor), do: String.to_atom(monitor), else: monitor

      if is_number(metrics[monitor]),
        do: monitor,
        else:
          raise(
            ArgumentError,
            "ExBurn.Training.Callbacks.#{name}: cannot monitor #{inspect(monitor)}; the metrics hold #{inspect(metrics |> Map.keys() |> Enum.sort())}"
          )
    end

    ## Checkpoints

    @doc """
    Saves a checkpoint of the model every `:every` epochs (default 1): a model file
    (`ExBurn.Model.load/2` reads it) that also holds the training state, so that
    `ExBurn.Training.fit(model, data, resume: path)` continues the run exactly
    (`ExBurn.Training.Resume`). Written atomically. `:path` (required) is a folder (files
    `epoch_<n>.exburn` in it) or a file name where `{epoch}` is replaced by the epoch number.
    Raises `ExBurn.Error` when the file cannot be written.
    """
    @spec checkpoint(keyword()) :: t()
    def checkpoint(opts) do
      opts = check!(opts, [path: nil, every: 1], "checkpoint")

      unless is_binary(opts[:path]),
        do:
          raise(
            ArgumentError,
            "ExBurn.Training.Callbacks.checkpoint: :path must be a string, got #{inspect(opts[:path])}"
          )

      fn metrics ->
        epoch = Map.fetch!(metrics, :epoch)

        if rem(epoch, opts[:every]) == 0 do
          path =
            if String.contains?(opts[:path], "{epoch}"),
              do: String.replace(opts[:path], "{epoch}", to_string(epoch)),
              else: Path.join(opts[:path], "epoch_#{epoch}.exburn")

          case metrics do
            %{model: %ExBurn.Model{}} ->
              case ExBurn.Training.Resume.save_checkpoint(metrics, path) do
                :ok -> metrics
                {:error, reason} -> raise ExBurn.Error.new("ExBurn.Training.Callbacks.checkpoint", reason)
              end

            _ ->
              raise ArgumentError,
                    "ExBurn.Training.Callbacks.checkpoint: the metrics map has no :model (a callback before it dropped it)"
          end
        else
          metrics
        end
      end
    end

    ## Learning rate warm-up

    @doc """
    A linear warm-up of the learning rate from `start_lr` to `target_lr` over
    `warmup_epochs` epochs: after epoch `e` (from 1) the learning rate of the next epoch is
    `start_lr + (target_lr - start_lr) * e / warmup_epochs`, and `target_lr` from epoch
    `warmup_epochs + 1` on. A callback runs after an epoch, so epoch 1 trains at the model's
    learning rate: compile with `learning_rate: start_lr` to start the warm-up there (or give
    `warmup: n` to `fit/3`, which warms up from epoch 1 on).
    """
    @spec linear_warmup(pos_integer(), number(), number()) :: t()
    def linear_warmup(warmup_epochs, start_lr, target_lr)
        when is_integer(warmup_epochs) and warmup_epochs > 0 and is_number(start_lr) and start_lr >= 0 and
               is_number(target_lr) and target_lr > 0 do
      fn metrics ->
        epoch = Map.fetch!(metrics, :epoch)
        lr = start_lr + (target_lr - start_lr) * min(epoch / warmup_epochs, 1.0)
        Map.put(metrics, :learning_rate, lr * 1.0)
      end
    end

    def linear_warmup(warmup_epochs, start_lr, target_lr),
      do:
        raise(
          ArgumentError,
          "ExBurn.Training.WarmupCallback.linear: expected a positive number of epochs and learning rates start >= 0, target > 0, got #{inspect({warmup_epochs, start_lr, target_lr})}"
        )

    ## History and progress

    @doc """
    Records every epoch's metrics map (without `:model`) in an `Agent` linked to the caller;
    `history(pid)` reads them in epoch order. `new/0` of `ExBurn.Training.HistoryCallback`
    also remembers the agent in the calling process, for its `get_history/0`.
    """
    @spec history(pid()) :: t()
    def history(pid) when is_pid(pid) do
      fn metrics ->
        entry = Map.delete(metrics, :model)
        Agent.update(pid, &[entry | &1])
        metrics
      end
    end

    @doc "Sends `{:training_progress, epoch, loss, val_loss}` to `pid` after each epoch (`val_loss` is `nil` without validation data)."
    @spec progress(pid()) :: t()
    def progress(pid \\ self()) when is_pid(pid) do
      fn metrics ->
        send(pid, {:training_progress, metrics[:epoch], metrics[:loss], metrics[:val_loss]})
        metrics
      end
    end

    ## Axon events

    @doc """
    A callback of your own on an `Axon.Loop` event (`:started`, `:epoch_started`,
    `:iteration_started`, `:iteration_completed`, `:epoch_completed`, `:epoch_halted`, or a
    list): `fun` takes the `Axon.Loop.State` (and, with arity 2, the run's context, whose
    `ExBurn.Training.current_model/2` gives the model) and returns a status (`:continue`,
    `:halt_epoch`, `:halt_loop`) or `{status, state}`. On `:epoch_completed` these run after
    the metrics-map callbacks; `epoch/1` gives the epoch's metrics.
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

      %Callback{
        name: :custom,
        event: event,
        handler: fn state, ctx ->
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
        end
      }
    end

    def on(_event, fun),
      do:
        raise(
          ArgumentError,
          "ExBurn.Training.Callbacks.on: expected a function of 1 or 2 arguments, got #{inspect(fun)}"
        )

    @doc "The metrics of the epoch that just completed, without `:model` (in `:epoch_completed` handlers of `on/2`)."
    @spec epoch(%Axon.Loop.State{}) :: map()
    def epoch(state), do: state.handler_metadata.exburn.epoch

    @doc false
    # The callbacks of fit's :callbacks, split: {functions over the metrics map, Axon handlers}.
    def split!(callbacks, fun) do
      callbacks
      |> List.wrap()
      |> Enum.reduce({[], []}, fn
        f, {fs, hs} when is_function(f, 1) ->
          {[f | fs], hs}

        %Callback{} = c, {fs, hs} ->
          {fs, [c | hs]}

        {event, f}, {fs, hs} when is_function(f) ->
          {fs, [on(event, f) | hs]}

        other, _ ->
          raise ArgumentError,
                "#{fun}: invalid callback #{inspect(other, limit: 5)} (a function of the metrics map, or ExBurn.Training.Callbacks.on/2)"
      end)
      |> then(fn {fs, hs} -> {Enum.reverse(fs), Enum.reverse(hs)} end)
    end

    @doc false
    # Runs the metrics-map callbacks in order; each must return a map.
    def run(callbacks, metrics, fun) do
      Enum.reduce(callbacks, metrics, fn callback, acc ->
        case callback.(acc) do
          %{} = map when not is_struct(map) ->
            map

          other ->
            raise ArgumentError,
                  "#{fun}: a callback must return the metrics map, got #{inspect(other, limit: 5)} from #{inspect(callback)}"
        end
      end)
    end

    @doc false
    # The Axon handlers of on/2, attached to `loop` in order.
    def attach(loop, handlers, ctx) do
      Enum.reduce(handlers, loop, fn %Callback{event: event, handler: handler}, loop ->
        Axon.Loop.handle_event(loop, event, &handler.(&1, ctx))
      end)
    end

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
  end
end
