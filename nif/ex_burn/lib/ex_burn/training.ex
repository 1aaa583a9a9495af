if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training do
    @moduledoc """
    Training loop for ExBurn models, built on `Axon.Loop` and Polaris: mini-batch training
    with exact gradients, the optimizers Adam, SGD with momentum / Nesterov and RMSprop,
    learning-rate schedules (step, exponential, cosine), gradient clipping (by norm and by
    value), weight decay (L2), gradient accumulation, shuffling every epoch, validation,
    accuracy, progress lines with throughput and ETA, and callbacks; `train_step/3` and
    `compute_gradients/3` for custom loops.

        model = ExBurn.Model.compile(axon_model, loss: :cross_entropy, optimizer: :adam)

        opts = [
          epochs: 10,
          batch_size: 32,
          shuffle: true,
          validation_data: val_data,
          lr_schedule: {:cosine, 0.001, 1.0e-5},
          clip_norm: 1.0,
          weight_decay: 1.0e-4,
          accumulate_gradients: 4,
          accuracy: true,
          nesterov: true,
          callbacks: [&ExBurn.Training.LoggingCallback.log/1]
        ]

        trained_model = ExBurn.Training.fit(model, train_data, opts)

    Each training step is one compiled call on the device (`ExBurn.Training.Step`: forward
    pass, exact gradients by `Nx.Defn.value_and_grad/3`, the optimizer update), jitted by
    `Axon.Loop.run/4` with `ExBurn.Defn.Compiler`. `grad_method: :numerical` or
    `:numerical_batch` computes finite-difference gradients instead
    (`ExBurn.Training.Numerical`), on the device, as a check of the exact ones (for custom
    layers); `:exact` is the default.

    ## Options of `fit/3`

      * `:epochs` (10), `:batch_size` (32), `:shuffle` (`true`, every epoch) - for `{x, y}`
        tensors; also `:seed` (of the shuffling; default the model's) and `:drop_last`
        (`false`). Other data (a list or stream of `{x, y}` batches, an
        `ExBurn.Dataset.loader/2`) is used as it is.
      * `:validation_data` - `{x, y}` (batched by `:batch_size`) or batches: evaluated after
        each epoch (`:val_loss`, and `:val_accuracy` with `accuracy: true`).
      * `:callbacks` - functions of the metrics map (`ExBurn.Training.Callbacks`), called
        after each epoch in the order given; also `ExBurn.Training.Callbacks.on/2` handlers.
      * `:verbose` (`true`) - a line per epoch (loss, metrics, learning rate, samples/s, time,
        ETA); `false` prints nothing; an IO device prints there.
      * `:lr_schedule` (`nil`) - `{:step, lr, step_size, gamma}`, `{:exponential, lr, gamma}`,
        `{:cosine, lr, min_lr}`, counted in epochs (`ExBurn.Training.LRSchedule`); its `lr`
        replaces the learning rate. `:warmup` (0) - epochs of linear warm-up.
      * `:clip_norm` (`nil`) - the largest global gradient norm; `:clip_value` (`nil`) - the
        largest absolute gradient element. Both can be used together.
      * `:weight_decay` (`nil`: the model's) - L2: `weight_decay * param` added to each
        gradient before the optimizer.
      * `:accumulate_gradients` (1) - apply the mean gradient every `n` mini-batches.
      * `:accuracy` (`false`) - the classification accuracy of each epoch (`nil` for a loss
        without classes).
      * `:nesterov` (`false`) - Nesterov momentum (SGD, and RMSprop with momentum; no effect
        on Adam).
      * `:grad_method` (`:exact`), `:epsilon` (`1.0e-5`) - see above.
      * `:devices` (`nil`) - a list of devices (`["cuda:0", "cuda:1"]`, `["wgpu", "wgpu:cpu"]`):
        trains data-parallel, see "Several devices" below.
      * `:resume` (`nil`) - a checkpoint of `ExBurn.Training.CheckpointCallback` (a file, or
        its folder: the latest epoch's): the run continues from the epoch after it, with the
        checkpoint's parameters, optimizer state, schedule step, random keys and data order,
        and ends bit for bit where the uninterrupted run ends (give the same data and
        options; `:epochs` is the whole run's). See `ExBurn.Training.Resume`.
      * Beside them: `:metrics` (names of `Axon.Metrics`), `:optimizer` (another optimizer
        than the model's, from its defaults), the optimizer's own options
        (`:learning_rate`, `:momentum`, `:b1`, `:b2`, `:eps`, `:decay`, ...; see
        `ExBurn.Training.Optimizer`), and step-counted schedules (`:schedule`,
        `:warmup_steps`, `ExBurn.Training.Schedule`).

    ## Several devices

    With `devices: [d0, d1, ...]`, `fit/3` trains data-parallel (`ExBurn.Training.Parallel`):
    the model and its optimizer state are copied to every device; each batch is cut into
    equal shards, one per device; each device runs the compiled gradient program on its
    shard; one NIF call (`ExCubecl.all_reduce/2`, `:mean`: NCCL on CUDA where it is
    installed, through the host elsewhere) averages the gradients (and the loss, and the
    layers' float state such as batch-norm statistics) over the devices; and every device
    applies the same optimizer update, so the replicas stay identical. With a mean-reduced
    loss (every built-in loss) a step on `n` devices with shards of `B / n` examples is the
    step on one device with the batch of `B`, up to float rounding.

    Every batch must split into equal shards: a `:batch_size` that `n` divides, and a last
    batch that it divides too (or `drop_last: true`); otherwise `ArgumentError` names
    `fit/3` and the sizes. An unknown device raises `ExBurn.Error`. Gradients are exact
    (`:grad_method` other than `:exact` is refused). The trained model is the first device's
    replica (the model is moved there first); validation and metrics run there, and
    `current_replicas/2` gives every device's replica in a callback.

    The model's frozen layers are not trained. The trained model keeps its optimizer state,
    so a second `fit/3` (or `train_step/3`) with the same optimizer continues it.
    """

    alias ExBurn.Model
    alias ExBurn.Model.Params
    alias ExBurn.Training.{Callbacks, Checks, Evaluate, Fit, Numerical, Step}
    alias Axon.ModelState

    @type callback() :: (map() -> map())
    @type dataset() :: {Nx.Tensor.t(), Nx.Tensor.t()}
    @type lr_schedule() ::
            {:step, float(), pos_integer(), float()}
            | {:exponential, float(), float()}
            | {:cosine, float(), float()}
            | nil
    @type model() :: Model.t()
    @type training_opts() :: [
            epochs: pos_integer(),
            batch_size: pos_integer(),
            shuffle: boolean(),
            validation_data: dataset() | nil,
            callbacks: [callback()],
            verbose: boolean(),
            lr_schedule: lr_schedule(),
            clip_norm: float() | nil,
            clip_value: float() | nil,
            weight_decay: float() | nil,
            accumulate_gradients: pos_integer(),
            accuracy: boolean(),
            nesterov: boolean(),
            warmup: pos_integer(),
            resume: Path.t() | nil
          ]

    ## Fitting

    @doc """
    Trains `model` on `data` (`{inputs, targets}` or batches) and returns the trained
    `ExBurn.Model` struct with updated parameters. Options: see the moduledoc; with
    `devices: [...]` it trains data-parallel over those devices (see "Several devices").
    """
    @spec fit(model(), dataset() | Enumerable.t(), keyword()) :: model()
    def fit(%Model{} = model, data, opts \\ []),
      do: model |> Fit.run(data, opts, "ExBurn.Training.fit") |> elem(0)

    @doc """
    `fit/3` that also gives the history: `{trained_model, history}`, the history a list of
    the epochs' metrics maps without `:model` (`[%{epoch: 1, loss: 0.5, val_loss: 0.4, ...},
    ...]`). With `to: pid`, `pid` also gets `{:training_progress, epoch, loss, val_loss}`
    after each epoch (`val_loss` is `nil` without validation data).
    """
    @spec fit_with_progress(model(), dataset() | Enumerable.t(), keyword()) :: {model(), [map()]}
    def fit_with_progress(%Model{} = model, data, opts \\ []) do
      fun = "ExBurn.Training.fit_with_progress"

      opts =
        case Keyword.pop(opts, :to) do
          {nil, opts} ->
            opts

          {pid, opts} when is_pid(pid) ->
            Keyword.update(opts, :callbacks, [Callbacks.progress(pid)], &(List.wrap(&1) ++ [Callbacks.progress(pid)]))

          {other, _} ->
            raise ArgumentError, "#{fun}: :to must be a pid, got #{inspect(other)}"
        end

      Fit.run(model, data, opts, fun)
    end

    @doc """
    The model as it stands in a running `fit/3` (for `ExBurn.Training.Callbacks.on/2`
    handlers: the loop state and the context they get).
    """
    @spec current_model(%Axon.Loop.State{}, map()) :: model()
    def current_model(state, ctx), do: Fit.current_model(state, ctx)

    @doc """
    The model on each device of a running data-parallel `fit/3` (`devices:`), in the order of
    `:devices` (the first is `current_model/2`'s); a one-element list without `:devices`. For
    `ExBurn.Training.Callbacks.on/2` handlers, as `current_model/2`.
    """
    @spec current_replicas(%Axon.Loop.State{}, map()) :: [model()]
    def current_replicas(state, ctx), do: Fit.current_replicas(state, ctx)

    ## Evaluation

    @doc """
    Evaluates `model` on `data` (`{inputs, targets}` or batches), in inference mode, one
    compiled call per batch: the average loss over the samples; with `track_accuracy` true,
    `{loss, accuracy}`, where accuracy is `nil` for a loss without classes (`:mse`).

    The third argument may also be options: `:accuracy` (as `track_accuracy`),
    `:batch_size` (32), and `:metrics` (a list of `Axon.Metrics` names, e.g. `[:accuracy]`),
    which gives a map `%{loss: ..., accuracy: ...}` instead.
    """
    @spec evaluate(model(), dataset() | Enumerable.t(), boolean() | keyword()) ::
            float() | {float(), float() | nil} | map()
    def evaluate(%Model{} = model, data, track_accuracy \\ false),
      do: Evaluate.evaluate(model, data, track_accuracy)

    ## Single steps

    @doc """
    Performs a single training step on the batch `{x, y}`: forward, backward, optimizer
    update, one compiled call. Returns `{loss, updated_model}`: the batch's loss (a float,
    before the update) and the model with its optimizer state, so the next call continues it.
    Options: those of `fit/3` for the optimizer (`:clip_norm`, `:clip_value`,
    `:weight_decay`, `:nesterov`, `:accumulate_gradients`, `:optimizer`, ...) and
    `:grad_method` / `:epsilon`.
    """
    @spec train_step(model(), dataset(), keyword()) :: {float(), model()}
    def train_step(%Model{} = model, batch, opts \\ []) do
      fun = "ExBurn.Training.train_step"
      {x, y} = Checks.batch!(batch, fun)
      {loop_opts, optimizer_opts} = Checks.split!(opts, fun)

      case Keyword.keys(loop_opts) -- [:optimizer, :grad_method, :epsilon, :lr_schedule] do
        [] -> :ok
        keys -> raise ArgumentError, "#{fun}: #{inspect(keys)} are options of fit/3, not of a single step"
      end

      Checks.require_loss!(model, fun)
      Checks.check_batch!(model, x, y, fun)
      spec = Checks.optimizer_spec(model, loop_opts, optimizer_opts, fun)
      built = Step.build(model, spec, Checks.grad!(loop_opts, fun))
      {state, steps} = Step.initial_state(model, built, {x, y})
      state = Nx.Defn.jit(built.step, Model.jit_opts(model)).({x, y}, state)
      {Nx.to_number(state.loss), Step.model_after(model, built, state, steps + 1)}
    end

    @doc """
    Computes the gradients of the loss on the batch `{x, y}` (train-mode forward pass) with
    respect to each trainable parameter, in one compiled call: a map
    `%{"layer.param" => gradient}` (frozen parameters have no entry).

    Options: `:grad_method` - `:exact` (default: `Nx.Defn.value_and_grad/3`),
    `:numerical` (central finite differences) or `:numerical_batch` (one-sided), the last two
    a check of the first; `:epsilon` - their step (default `1.0e-5`).
    """
    @spec compute_gradients(model(), dataset(), keyword()) :: %{String.t() => Nx.Tensor.t()}
    def compute_gradients(%Model{} = model, batch, opts \\ []) do
      fun = "ExBurn.Training.compute_gradients"
      opts = Model.options!(opts, [:grad_method, :epsilon], fun)
      grad = Checks.grad!(opts, fun)
      {x, y} = Checks.batch!(batch, fun)
      Checks.require_loss!(model, fun)
      Checks.check_batch!(model, x, y, fun)
      loss_fn = ExBurn.Model.Loss.fun(model.loss_fn, model.loss_opts, model.output_activation)
      {_init, forward} = Axon.build(model.model, mode: :train, seed: model.seed)
      loss_at = fn params, {state, x, y} -> loss_fn.(y, forward.(Step.with_params(state, params), x).prediction) end

      grad_fn =
        case grad do
          :exact ->
            fn state, x, y -> Nx.Defn.grad(ModelState.trainable_parameters(state), &loss_at.(&1, {state, x, y})) end

          {method, eps} ->
            precision = Numerical.precision(model.device_spec)

            fn state, x, y ->
              Numerical.gradients(
                ModelState.trainable_parameters(state),
                {state, x, y},
                loss_at,
                method,
                eps,
                precision
              )
            end
        end

      Nx.Defn.jit(grad_fn, Model.jit_opts(model)).(model.state, x, y) |> Params.flatten()
    end

    @doc "Creates a data loader that yields mini-batches from a dataset (`ExBurn.Dataset.loader/2`)."
    @spec data_loader(dataset(), keyword()) :: Enumerable.t()
    def data_loader(data, opts \\ []), do: ExBurn.Dataset.loader(data, opts)

    @doc """
    Profiles a training step on the batch `{x, y}`: `%{forward_ms, backward_ms, optimizer_ms,
    total_ms}` - medians of `:iterations` calls (default 5, after `:warmup`, default 1) of the
    forward pass, of the gradient computation less the forward pass, of the whole step less
    the gradients, and of the whole step - and `first_call_ms` (the first step, compilation
    included) and `samples_per_sec`. Options: those and the options of `train_step/3`.
    """
    @spec profile_step(model(), dataset(), keyword()) :: map()
    def profile_step(%Model{} = model, batch, opts \\ []) do
      fun = "ExBurn.Training.profile_step"
      {iterations, opts} = Keyword.pop(opts, :iterations, 5)
      {warmup, opts} = Keyword.pop(opts, :warmup, 1)
      {x, y} = Checks.batch!(batch, fun)
      sync = fn -> ExCubecl.synchronize(device: model.device_spec) end

      {first_us, {_loss, model}} =
        :timer.tc(fn ->
          result = train_step(model, {x, y}, opts)
          sync.()
          result
        end)

      bench = [runs: iterations, warmup: warmup]
      step = Model.benchmark(model, {x, y}, [mode: :train] ++ bench ++ opts)
      forward = Model.benchmark(model, x, bench)
      grad_opts = Keyword.take(opts, [:grad_method, :epsilon])
      gradients = median_ms(fn -> compute_gradients(model, {x, y}, grad_opts) && sync.() end, warmup, iterations)

      %{
        forward_ms: forward.median_ms,
        backward_ms: max(gradients - forward.median_ms, 0.0),
        optimizer_ms: max(step.median_ms - gradients, 0.0),
        total_ms: step.median_ms,
        first_call_ms: first_us / 1000,
        samples_per_sec: step.samples_per_sec
      }
    end

    defp median_ms(fun, warmup, iterations) do
      for _ <- 1..warmup//1, do: fun.()
      times = for _ <- 1..iterations, do: elem(:timer.tc(fun), 0) / 1000
      times |> Enum.sort() |> Enum.at(div(iterations, 2))
    end

    @doc false
    def batch!(batch, fun), do: Checks.batch!(batch, fun)
  end
end
