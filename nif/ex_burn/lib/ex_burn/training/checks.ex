if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Checks do
    @moduledoc false
    # The argument checks of ExBurn.Training: options split into the loop's and the
    # optimizer's, the optimizer spec, metrics, gradient methods, and batches against the
    # model. Each raises ArgumentError naming the function.

    alias ExBurn.Model
    alias ExBurn.Model.{Loss, Spec}
    alias ExBurn.Training.{LRSchedule, Numerical, Optimizer}

    # The options of the loop (the rest are the optimizer's, ExBurn.Training.Optimizer).
    @loop_opts [
      :epochs,
      :batch_size,
      :shuffle,
      :seed,
      :drop_last,
      :validation_data,
      :metrics,
      :callbacks,
      :verbose,
      :optimizer,
      :lr_schedule,
      :accuracy,
      :warmup,
      :grad_method,
      :epsilon,
      :devices,
      :resume
    ]

    def loop_opts, do: @loop_opts

    # {loop options, optimizer options}; nil values of documented options (weight_decay: nil,
    # clip_norm: nil ...) mean "the default" and are dropped.
    def split!(opts, fun) do
      unless Keyword.keyword?(opts),
        do: raise(ArgumentError, "#{fun}: options must be a keyword list, got #{inspect(opts, limit: 5)}")

      {loop, optimizer} = Keyword.split(opts, @loop_opts)
      optimizer = Enum.reject(optimizer, fn {_k, v} -> is_nil(v) end)

      case Keyword.keys(optimizer) -- Optimizer.option_names() do
        [] ->
          {loop, optimizer}

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown option(s) #{Enum.map_join(Enum.uniq(unknown), ", ", &inspect/1)} (options: #{Enum.map_join(@loop_opts ++ Optimizer.option_names(), ", ", &inspect/1)})"
      end
    end

    def batch!({_x, _y} = batch, _fun), do: batch
    def batch!(other, fun), do: raise(ArgumentError, "#{fun}: expected a batch {x, y}, got #{inspect(other, limit: 3)}")

    def require_loss!(%Model{loss_fn: nil}, fun),
      do: raise(ArgumentError, "#{fun}: the model has no loss; compile it with ExBurn.Model.compile(axon, loss: ...)")

    def require_loss!(_model, _fun), do: :ok

    def positive!(n, _key, _fun) when is_integer(n) and n > 0, do: n

    def positive!(n, key, fun),
      do: raise(ArgumentError, "#{fun}: #{inspect(key)} must be a positive integer, got #{inspect(n)}")

    def non_negative!(n, _key, _fun) when is_integer(n) and n >= 0, do: n

    def non_negative!(n, key, fun),
      do: raise(ArgumentError, "#{fun}: #{inspect(key)} must be a non-negative integer, got #{inspect(n)}")

    def boolean!(b, _key, _fun) when is_boolean(b), do: b
    def boolean!(b, key, fun), do: raise(ArgumentError, "#{fun}: #{inspect(key)} must be a boolean, got #{inspect(b)}")

    # The optimizer spec: the model's, with `overrides`; another optimizer from its defaults.
    # An :lr_schedule sets the base learning rate.
    def optimizer_spec(model, loop_opts, overrides, fun) do
      schedule = LRSchedule.validate!(loop_opts[:lr_schedule], fun)
      overrides = if lr = LRSchedule.base(schedule), do: Keyword.put(overrides, :learning_rate, lr), else: overrides

      case loop_opts[:optimizer] do
        nil ->
          Optimizer.validate!({model.optimizer, model.optimizer_opts}, overrides, fun)

        {name, opts} when name == model.optimizer and is_list(opts) ->
          Optimizer.validate!({name, Keyword.merge(model.optimizer_opts, opts)}, overrides, fun)

        name when name == model.optimizer ->
          Optimizer.validate!({model.optimizer, model.optimizer_opts}, overrides, fun)

        optimizer ->
          Optimizer.validate!(optimizer, overrides, fun)
      end
    end

    # :exact, or {method, epsilon} for ExBurn.Training.Numerical.
    def grad!(opts, fun) do
      case Keyword.get(opts, :grad_method, :exact) do
        :exact ->
          if Keyword.has_key?(opts, :epsilon),
            do: raise(ArgumentError, "#{fun}: :epsilon applies to grad_method: :numerical or :numerical_batch")

          :exact

        method ->
          unless method in Numerical.methods(),
            do:
              raise(
                ArgumentError,
                "#{fun}: unknown :grad_method #{inspect(method)} (:exact, :numerical, :numerical_batch)"
              )

          case Keyword.get(opts, :epsilon, 1.0e-5) do
            eps when is_number(eps) and eps > 0 -> {method, eps}
            eps -> raise ArgumentError, "#{fun}: :epsilon must be a positive number, got #{inspect(eps)}"
          end
      end
    end

    # [{name, fun(y_true, y_pred)}]: `accuracy: true` adds the loss's accuracy (or nil: a
    # loss without classes), `metrics:` names Axon.Metrics.
    def metrics!(model, loop_opts, fun) do
      accuracy? = boolean!(Keyword.get(loop_opts, :accuracy, false), :accuracy, fun)
      names = Keyword.get(loop_opts, :metrics, [])

      unless is_list(names), do: raise(ArgumentError, "#{fun}: :metrics must be a list, got #{inspect(names)}")
      names = if accuracy?, do: Enum.uniq([:accuracy | names]), else: names

      Enum.map(names, fn
        :accuracy ->
          {:accuracy, Loss.accuracy(model.loss_fn, model.loss_opts, model.output_activation)}

        name when is_atom(name) ->
          if function_exported?(Axon.Metrics, name, 2),
            do: {name, fn y_true, y_pred -> apply(Axon.Metrics, name, [y_true, y_pred]) end},
            else: raise(ArgumentError, "#{fun}: unknown metric #{inspect(name)} #{metric_help()}")

        other ->
          raise ArgumentError, "#{fun}: unknown metric #{inspect(other)} #{metric_help()}"
      end)
    end

    defp metric_help, do: "(:accuracy, or a function of Axon.Metrics of (y_true, y_pred))"

    # The batch against the model: the input's shapes, and targets that fit the output.
    def check_batch!(model, x, y, fun) do
      n = Spec.check_input!(model.input, x, fun)

      case {y, model.output} do
        {%Nx.Tensor{shape: shape}, %Nx.Tensor{shape: out}} ->
          want = put_elem(out, 0, n)

          result =
            if tuple_size(shape) == 0 or elem(shape, 0) != n,
              do: {:error, "#{n} targets"},
              else: Loss.check_targets(model.loss_fn, shape, want)

          with {:error, what} <- result do
            raise ArgumentError,
                  "#{fun}: targets of shape #{inspect(shape)} don't fit the model's output #{Spec.shape_string(out)} for a batch of #{n} (#{inspect(model.loss_fn)} takes #{what})"
          end

        {%Nx.Tensor{}, _} ->
          :ok

        {other, _} ->
          unless is_map(other) or is_tuple(other),
            do: raise(ArgumentError, "#{fun}: targets must be tensors, got #{inspect(other, limit: 3)}")
      end
    end
  end
end
