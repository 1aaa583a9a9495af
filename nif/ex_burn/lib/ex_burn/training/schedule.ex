if Code.ensure_loaded?(Polaris) do
  defmodule ExBurn.Training.Schedule do
    @moduledoc """
    Learning-rate schedules: a function of the update count (a tensor, 0 for the first
    update) giving the learning rate, built on `Polaris.Schedules`.

      * `:constant` - `lr`.
      * `{:step, step_size: k, gamma: g}` - `lr * g ** floor(t / k)` (Polaris's
        `exponential_decay/2` with `staircase: true`). Defaults: `k = 10`, `g = 0.1`.
      * `{:exponential, decay_rate: r, transition_steps: k}` - `lr * r ** (t / k)`
        (`exponential_decay/2`). Defaults: `r = 0.95`, `k = 10`.
      * `{:cosine, decay_steps: k, alpha: a}` - `lr * ((1 - a) * (1 + cos(pi * min(t, k) / k)) / 2 + a)`
        (`cosine_decay/2`). Defaults: `k = 10`, `a = 0.0`.

    `warmup_steps: n` composes a linear warm-up in front of any of them: `lr(0) * (t + 1) / n`
    for the first `n` updates, then the schedule from its own step 0 (`schedule(t - n)`).
    Polaris has no warm-up of its own (its `linear_decay/2` ignores its initial value), so
    the composition is here.
    """

    alias Polaris.Schedules

    @kinds [:constant, :step, :exponential, :cosine]
    @kind_opts %{
      constant: [],
      step: [:step_size, :gamma],
      exponential: [:decay_rate, :transition_steps],
      cosine: [:decay_steps, :alpha]
    }

    @doc "The schedule kinds."
    def kinds, do: @kinds

    @doc """
    Checks a schedule spec (`nil`, a kind, or `{kind, opts}`) and gives it as `{kind, opts}`;
    raises `ArgumentError` naming `fun` otherwise.
    """
    @spec validate!(term(), String.t()) :: {atom(), keyword()}
    def validate!(nil, _fun), do: {:constant, []}
    def validate!(kind, fun) when kind in @kinds, do: validate!({kind, []}, fun)

    def validate!({kind, opts}, fun) when kind in @kinds and is_list(opts) do
      allowed = Map.fetch!(@kind_opts, kind)

      case Enum.uniq(Keyword.keys(opts)) -- allowed do
        [] ->
          :ok

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown option(s) #{inspect(unknown)} for the #{inspect(kind)} schedule (options: #{inspect(allowed)})"
      end

      for {key, value} <- opts,
          not (is_number(value) and value > 0) and not (key == :alpha and is_number(value) and value >= 0) do
        raise ArgumentError,
              "#{fun}: the #{inspect(kind)} schedule's #{inspect(key)} must be a positive number, got #{inspect(value)}"
      end

      {kind, opts}
    end

    def validate!(other, fun),
      do:
        raise(
          ArgumentError,
          "#{fun}: unknown schedule #{inspect(other)} (schedules: #{Enum.map_join(@kinds, ", ", &inspect/1)}, or {kind, opts})"
        )

    @doc "The schedule function of `lr` (a number) for a validated spec, with `warmup` steps (0: none)."
    @spec build(number(), {atom(), keyword()}, non_neg_integer()) :: (Nx.Tensor.t() -> Nx.Tensor.t())
    def build(lr, {kind, opts}, warmup) do
      schedule = schedule(kind, lr, opts)
      if warmup > 0, do: warmup(schedule, warmup), else: schedule
    end

    defp schedule(:constant, lr, _opts), do: Schedules.constant(lr)

    defp schedule(:step, lr, opts),
      do:
        Schedules.exponential_decay(lr,
          decay_rate: opts[:gamma] || 0.1,
          transition_steps: opts[:step_size] || 10,
          staircase: true
        )

    defp schedule(:exponential, lr, opts),
      do:
        Schedules.exponential_decay(lr,
          decay_rate: opts[:decay_rate] || 0.95,
          transition_steps: opts[:transition_steps] || 10
        )

    defp schedule(:cosine, lr, opts),
      do: Schedules.cosine_decay(lr, decay_steps: opts[:decay_steps] || 10, alpha: opts[:alpha] || 0.0)

    # Linear warm-up over `n` updates, then the schedule from its step 0.
    defp warmup(schedule, n) do
      fn count ->
        warm = Nx.multiply(schedule.(Nx.tensor(0)), Nx.divide(Nx.add(count, 1), n))
        Nx.select(Nx.less(count, n), warm, schedule.(Nx.max(Nx.subtract(count, n), 0)))
      end
    end
  end
end
