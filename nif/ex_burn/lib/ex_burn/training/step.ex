if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Step do
    @moduledoc """
    The training step of a model: `Axon.Loop.train_step/4` over the model's train-mode
    forward pass, its loss, and the optimizer of `ExBurn.Training.Optimizer`. The step is
    Axon's: the gradients of the trainable parameters by `Nx.Defn.value_and_grad/3`, the
    optimizer's update, `Polaris.Updates.apply_updates/3`, the model state updated with
    `Axon.ModelState.update/3` (frozen parameters are not trainable, so they get no gradient
    and no update). Jitted with `ExBurn.Defn.Compiler`, it is one compiled call.

    The step state is Axon's (`%{i, y_true, y_pred, loss, model_state, optimizer_state,
    loss_scale_state}`), built here from the model without running Axon's init (which would
    compile a forward pass more): the optimizer state comes from the model when its `key`
    (the optimizer spec, the trainable parameters and their types) matches, else from the
    optimizer's init.
    """

    alias Axon.ModelState
    alias Nx.Defn.Composite
    alias ExBurn.Model
    alias ExBurn.Model.{Loss, Params}
    alias ExBurn.Training.{Numerical, Optimizer}

    @last {__MODULE__, :last}

    @doc """
    The step of `model` with the optimizer spec `spec`: `%{step, optimizer, loss_fn, spec, key}`.
    `grad` is `:exact` (Axon's step, `Nx.Defn.value_and_grad/3`) or `{method, epsilon}` with a
    method of `ExBurn.Training.Numerical` (the same step with finite-difference gradients).

    A process that builds the step of the same model again (`ExBurn.Training.train_step/3`
    call after call) gets the step it built last, the very same function, so that
    `ExBurn.Defn.Compiler` runs its program without looking it up and Axon builds nothing.
    """
    @spec build(Model.t(), map()) :: map()
    def build(%Model{} = model, spec, grad \\ :exact) do
      same =
        {model.loss_fn, model.loss_opts, model.output_activation, model.seed, model.device_spec, grad, spec,
         key(model, spec)}

      case Process.get(@last) do
        {axon, ^same, built} ->
          if :erts_debug.same(axon, model.model), do: built, else: remember(model, spec, grad, same)

        _ ->
          remember(model, spec, grad, same)
      end
    end

    defp remember(model, spec, grad, same) do
      built = new(model, spec, grad)
      Process.put(@last, {model.model, same, built})
      built
    end

    defp new(model, spec, grad) do
      loss_fn = Loss.fun(model.loss_fn, model.loss_opts, model.output_activation)
      {_init, forward} = Axon.build(model.model, mode: :train, seed: model.seed)
      optimizer = Optimizer.build(spec)

      step =
        case grad do
          :exact ->
            {_init, step} = Axon.Loop.train_step({fn _input, state -> state end, forward}, loss_fn, optimizer)
            step

          {method, epsilon} ->
            numerical_step(forward, loss_fn, optimizer, method, epsilon, Numerical.precision(model.device_spec))
        end

      %{step: step, optimizer: optimizer, loss_fn: loss_fn, spec: spec, key: key(model, spec)}
    end

    # Axon.Loop.train_step/4's step (same state, same running loss) with the gradients of
    # ExBurn.Training.Numerical in place of value_and_grad.
    defp numerical_step(forward, loss_fn, {_init, update_fn}, method, epsilon, precision) do
      fn {inp, tar}, %{i: i, model_state: model_state, optimizer_state: optimizer_state, loss: loss} = state ->
        trainable = ModelState.trainable_parameters(model_state)
        %{prediction: preds, state: updated_state} = forward.(model_state, inp)
        batch_loss = loss_fn.(tar, preds)

        loss_at = fn params, {ms, x, y} -> loss_fn.(y, forward.(with_params(ms, params), x).prediction) end
        gradients = Numerical.gradients(trainable, {model_state, inp, tar}, loss_at, method, epsilon, precision)
        {updates, new_optimizer_state} = update_fn.(gradients, optimizer_state, trainable)
        updated = Polaris.Updates.apply_updates(trainable, updates)

        %{
          state
          | i: Nx.add(i, 1),
            y_true: tar,
            y_pred: preds,
            loss: loss |> Nx.multiply(i) |> Nx.add(batch_loss) |> Nx.divide(Nx.add(i, 1)),
            model_state: ModelState.update(model_state, updated, updated_state),
            optimizer_state: new_optimizer_state
        }
      end
    end

    @doc "`model_state` with the tensors of `params` (a nested map of some of its parameters) in place."
    @spec with_params(%ModelState{}, map()) :: %ModelState{}
    def with_params(%ModelState{data: data} = model_state, params), do: %{model_state | data: merge(data, params)}

    defp merge(data, params) do
      Map.new(data, fn {k, v} ->
        case params do
          %{^k => %Nx.Tensor{} = t} -> {k, t}
          %{^k => %{} = inner} when is_map(v) and not is_struct(v) -> {k, merge(v, inner)}
          _ -> {k, v}
        end
      end)
    end

    @doc "What an optimizer state belongs to: the spec, and the trainable parameters' names, shapes and types."
    @spec key(Model.t(), map()) :: term()
    def key(%Model{state: state}, spec) do
      trainable =
        state
        |> ModelState.trainable_parameters()
        |> Params.flatten()
        |> Enum.map(fn {k, t} -> {k, t.shape, t.type} end)
        |> Enum.sort()

      {spec, trainable}
    end

    @doc """
    The step state for a first batch `{x, y}`: the model's state, the optimizer state (the
    model's, when its key matches, else a new one), zeros for `y_true` / `y_pred` of the
    batch's shapes. Gives `{state, updates}`: `updates` counts the optimizer updates the
    state has seen.
    """
    @spec initial_state(Model.t(), map(), {term(), term()}) :: {map(), non_neg_integer()}
    def initial_state(%Model{} = model, built, {x, y}) do
      {optimizer_state, updates} =
        case model.optimizer_state do
          %{key: key, state: st, updates: n} when key == built.key -> {st, n}
          _ -> {new_optimizer_state(model, built), 0}
        end

      backend = Model.backend(model)
      batch = [x] |> Composite.flatten_list() |> hd() |> Nx.axis_size(0)

      state = %{
        i: Nx.tensor(0, type: :s32, backend: backend),
        y_true: Composite.traverse(y, &zeros(&1.shape, &1.type, backend)),
        y_pred: Composite.traverse(model.output, &zeros(put_elem(&1.shape, 0, batch), &1.type, backend)),
        loss: Nx.tensor(0.0, type: :f32, backend: backend),
        model_state: model.state,
        optimizer_state: optimizer_state,
        loss_scale_state: %{}
      }

      {state, updates}
    end

    defp zeros(shape, type, backend), do: Nx.broadcast(Nx.tensor(0, type: type, backend: backend), shape)

    defp new_optimizer_state(model, %{optimizer: {init, _update}}) do
      Nx.Defn.jit(init, Model.jit_opts(model)).(ModelState.trainable_parameters(model.state))
    end

    @doc "The model after a run whose last step state is `state`, keeping its optimizer state."
    @spec model_after(Model.t(), map(), map(), non_neg_integer()) :: Model.t()
    def model_after(%Model{} = model, built, state, updates) do
      %{
        model
        | state: state.model_state,
          optimizer_state: %{key: built.key, state: state.optimizer_state, updates: updates}
      }
    end

    @doc "The learning-rate multiplier in an optimizer state (`Polaris.Updates.scale_by_state/2`, outermost)."
    @spec multiplier(tuple()) :: Nx.Tensor.t()
    def multiplier(optimizer_state), do: elem(optimizer_state, 0).scale

    @doc "`optimizer_state` with its learning-rate multiplier set to `value`."
    @spec put_multiplier(tuple(), number()) :: tuple()
    def put_multiplier(optimizer_state, value) when is_number(value) do
      %{scale: old} = elem(optimizer_state, 0)
      put_elem(optimizer_state, 0, %{scale: Nx.tensor(value, type: Nx.type(old), backend: backend_of(old))})
    end

    defp backend_of(%Nx.Tensor{data: %ExBurn.Backend{device: dev}}), do: {ExBurn.Backend, device: dev}
    defp backend_of(_), do: Nx.BinaryBackend
  end
end
