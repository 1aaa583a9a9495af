if Code.ensure_loaded?(Polaris) do
  defmodule ExBurn.Training.Optimizer do
    @moduledoc """
    ExBurn's optimizers as Polaris `{init_fn, update_fn}` pairs, composed from
    `Polaris.Updates` the way `Polaris.Optimizers` composes them, with the training options
    in their places:

        clip_by_global_norm (:clip_norm) -> clip (:clip_value) -> add_decayed_weights (L2 :weight_decay)
          -> the optimizer (trace / scale_by_adam / scale_by_rms ...) -> -learning rate (or -schedule)
          -> gradient accumulation (:accumulate_gradients) -> scale_by_state(1.0)

    The last combinator is a learning-rate multiplier held in the optimizer state (the first
    element of the state tuple, `%{scale: 1.0}`, as `Axon.Loop.reduce_lr_on_plateau/3`
    expects): callbacks that change the learning rate during training (reduce on plateau,
    epoch warm-up) scale it without recompiling the step.

    ## Optimizers and their options

      * `:sgd` - `:learning_rate` (1.0e-3), `:momentum` (0.9, as the documents give it; `nil`
        or `0` for plain SGD), `:nesterov` (false).
      * `:adam` - `:learning_rate` (1.0e-3), `:b1` (0.9), `:b2` (0.999), `:eps` (1.0e-8),
        `:eps_root` (1.0e-15). `:nesterov` is accepted and has no effect (Nesterov momentum
        is SGD's, and RMSprop's with momentum).
      * `:adamw` - as `:adam` (`:eps_root` 0.0), and `:weight_decay` (1.0e-2) is decoupled:
        added to the Adam direction, then scaled by the learning rate (Polaris's `adamw/1`).
      * `:rmsprop` - `:learning_rate` (1.0e-3), `:decay` (0.9), `:eps` (1.0e-8), `:centered`
        (false), `:momentum` (none), `:nesterov` (false), `:initial_scale` (0.0).

    Every optimizer takes `:weight_decay` (default 0.0; for all but `:adamw` it is L2: `wd * param`
    added to the gradient before the optimizer).
    """

    alias Polaris.Updates
    alias ExBurn.Training.{Accumulate, Schedule}

    @defaults %{
      sgd: [learning_rate: 1.0e-3, weight_decay: 0.0, momentum: 0.9, nesterov: false],
      adam: [
        learning_rate: 1.0e-3,
        weight_decay: 0.0,
        b1: 0.9,
        b2: 0.999,
        eps: 1.0e-8,
        eps_root: 1.0e-15,
        nesterov: false
      ],
      adamw: [
        learning_rate: 1.0e-3,
        weight_decay: 1.0e-2,
        b1: 0.9,
        b2: 0.999,
        eps: 1.0e-8,
        eps_root: 0.0,
        nesterov: false
      ],
      rmsprop: [
        learning_rate: 1.0e-3,
        weight_decay: 0.0,
        decay: 0.9,
        eps: 1.0e-8,
        centered: false,
        momentum: nil,
        nesterov: false,
        initial_scale: 0.0
      ]
    }

    @training [schedule: nil, warmup_steps: 0, clip_norm: nil, clip_value: nil, accumulate_gradients: 1]

    @doc "The optimizer names."
    def names, do: Map.keys(@defaults) |> Enum.sort()

    @doc "The training options an optimizer spec holds beside the optimizer's own."
    def training_options, do: Keyword.keys(@training)

    @doc "Every option name of any optimizer, and the training options."
    def option_names,
      do: (Enum.flat_map(@defaults, fn {_, d} -> Keyword.keys(d) end) ++ Keyword.keys(@training)) |> Enum.uniq()

    @doc """
    Checks an optimizer (`name` or `{name, opts}`) and its options `opts` (merged over the
    tuple's) and gives the spec: `%{name: name, opts: full options, training: training options}`.
    Raises `ArgumentError` naming `fun` and the offending value.
    """
    @spec validate!(atom() | {atom(), keyword()}, keyword(), String.t()) :: map()
    def validate!(optimizer, opts, fun)

    def validate!({name, tuple_opts}, opts, fun) when is_list(tuple_opts),
      do: validate!(name, Keyword.merge(tuple_opts, opts), fun)

    def validate!(name, opts, fun) when is_map_key(@defaults, name) do
      defaults = Map.fetch!(@defaults, name)
      allowed = Keyword.keys(defaults) ++ Keyword.keys(@training)

      case Enum.uniq(Keyword.keys(opts)) -- allowed do
        [] ->
          :ok

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown option(s) #{Enum.map_join(unknown, ", ", &inspect/1)} for the #{inspect(name)} optimizer (options: #{Enum.map_join(allowed, ", ", &inspect/1)})"
      end

      {training, own} = Keyword.split(opts, Keyword.keys(@training))
      own = Keyword.merge(defaults, own)
      training = Keyword.merge(@training, training)
      Enum.each(own ++ training, &check!(&1, name, fun))
      %{name: name, opts: own, training: Keyword.update!(training, :schedule, &Schedule.validate!(&1, fun))}
    end

    def validate!(other, _opts, fun),
      do:
        raise(
          ArgumentError,
          "#{fun}: unknown optimizer #{inspect(other)} (optimizers: #{Enum.map_join(names(), ", ", &inspect/1)})"
        )

    defp check!({key, value}, _name, _fun)
         when key in [:b1, :b2, :decay] and is_number(value) and value >= 0 and value < 1,
         do: :ok

    defp check!({key, value}, _name, _fun)
         when key in [:learning_rate, :eps, :eps_root, :weight_decay, :initial_scale] and is_number(value) and
                value >= 0,
         do: :ok

    defp check!({:momentum, value}, _name, _fun) when is_nil(value) or (is_number(value) and value >= 0), do: :ok
    defp check!({key, value}, _name, _fun) when key in [:nesterov, :centered] and is_boolean(value), do: :ok

    defp check!({key, value}, _name, _fun)
         when key in [:clip_norm, :clip_value] and (is_nil(value) or (is_number(value) and value > 0)),
         do: :ok

    defp check!({:warmup_steps, value}, _name, _fun) when is_integer(value) and value >= 0, do: :ok
    defp check!({:accumulate_gradients, value}, _name, _fun) when is_integer(value) and value >= 1, do: :ok
    defp check!({:schedule, _}, _name, _fun), do: :ok

    defp check!({key, value}, name, fun),
      do: raise(ArgumentError, "#{fun}: invalid #{inspect(key)} for the #{inspect(name)} optimizer: #{inspect(value)}")

    @doc "The Polaris `{init_fn, update_fn}` of a spec of `validate!/3`."
    @spec build(map()) :: {function(), function()}
    def build(%{name: name, opts: opts, training: training}) do
      Updates.identity()
      |> maybe(training[:clip_norm], &Updates.clip_by_global_norm(&1, max_norm: training[:clip_norm]))
      |> maybe(training[:clip_value], &Updates.clip(&1, delta: training[:clip_value]))
      |> maybe(name != :adamw and opts[:weight_decay] > 0, &Updates.add_decayed_weights(&1, decay: opts[:weight_decay]))
      |> direction(name, opts)
      |> scale_by_learning_rate(opts[:learning_rate], training)
      |> maybe(
        name == :rmsprop and opts[:momentum],
        &Updates.trace(&1, decay: opts[:momentum], nesterov: opts[:nesterov])
      )
      |> maybe(training[:accumulate_gradients] > 1, &Accumulate.wrap(&1, training[:accumulate_gradients]))
      |> Updates.scale_by_state(1.0)
    end

    defp maybe(combinator, condition, fun), do: if(condition, do: fun.(combinator), else: combinator)

    defp direction(base, :sgd, opts),
      do: maybe(base, opts[:momentum], &Updates.trace(&1, decay: opts[:momentum], nesterov: opts[:nesterov]))

    defp direction(base, :adam, opts), do: Updates.scale_by_adam(base, Keyword.take(opts, [:b1, :b2, :eps, :eps_root]))

    defp direction(base, :adamw, opts),
      do:
        base
        |> Updates.scale_by_adam(Keyword.take(opts, [:b1, :b2, :eps, :eps_root]))
        |> Updates.add_decayed_weights(decay: opts[:weight_decay])

    defp direction(base, :rmsprop, opts) do
      rms_opts = Keyword.take(opts, [:decay, :eps, :initial_scale])
      if opts[:centered], do: Updates.scale_by_stddev(base, rms_opts), else: Updates.scale_by_rms(base, rms_opts)
    end

    defp scale_by_learning_rate(combinator, lr, training) do
      case {training[:schedule], training[:warmup_steps]} do
        {{:constant, _}, 0} -> Updates.scale(combinator, -lr)
        {spec, warmup} -> Updates.scale_by_schedule(combinator, lr |> Schedule.build(spec, warmup) |> negate())
      end
    end

    defp negate(schedule), do: fn count -> Nx.negate(schedule.(count)) end

    @doc "The learning rate of a spec at update `count` (before any multiplier a callback set)."
    @spec learning_rate(map(), non_neg_integer()) :: float()
    def learning_rate(%{opts: opts, training: training}, count) do
      case {training[:schedule], training[:warmup_steps]} do
        {{:constant, _}, 0} ->
          opts[:learning_rate] * 1.0

        {spec, warmup} ->
          Nx.with_default_backend(Nx.BinaryBackend, fn ->
            Schedule.build(opts[:learning_rate], spec, warmup).(Nx.tensor(count)) |> Nx.to_number()
          end)
      end
    end
  end
end
