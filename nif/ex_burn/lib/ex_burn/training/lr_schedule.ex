defmodule ExBurn.Training.LRSchedule do
  @moduledoc """
  The learning-rate schedules of `ExBurn.Training.fit/3`'s `:lr_schedule`, counted in epochs
  (`e` from 0 for the first epoch, `E` the run's epochs):

    * `{:step, lr, step_size, gamma}` - `lr * gamma ** floor(e / step_size)`: multiplied by
      `gamma` every `step_size` epochs.
    * `{:exponential, lr, gamma}` - `lr * gamma ** e`.
    * `{:cosine, lr, min_lr}` - `min_lr + (lr - min_lr) * (1 + cos(pi * e / E)) / 2`: from
      `lr` in the first epoch towards `min_lr` over the run.
    * `nil` - the model's (or the options') learning rate throughout.

  `warmup: n` multiplies epoch `e < n` by `(e + 1) / n`. The learning rate reaches the
  compiled training step as a multiplier in the optimizer state (`ExBurn.Training.Optimizer`),
  a tensor input: changing it recompiles nothing.
  """

  @type t ::
          {:step, number(), pos_integer(), number()}
          | {:exponential, number(), number()}
          | {:cosine, number(), number()}
          | nil

  @doc "Checks a schedule; raises `ArgumentError` naming `fun`."
  @spec validate!(term(), String.t()) :: t()
  def validate!(nil, _fun), do: nil

  def validate!({:step, lr, every, gamma} = s, _fun)
      when is_number(lr) and lr > 0 and is_integer(every) and every > 0 and is_number(gamma) and gamma > 0,
      do: s

  def validate!({:exponential, lr, gamma} = s, _fun) when is_number(lr) and lr > 0 and is_number(gamma) and gamma > 0,
    do: s

  def validate!({:cosine, lr, min} = s, _fun)
      when is_number(lr) and lr > 0 and is_number(min) and min >= 0 and min <= lr,
      do: s

  def validate!(other, fun),
    do:
      raise(
        ArgumentError,
        "#{fun}: invalid :lr_schedule #{inspect(other)} ({:step, lr, step_size, gamma}, {:exponential, lr, gamma}, {:cosine, lr, min_lr} or nil)"
      )

  @doc "The base learning rate of a schedule (`nil` for none)."
  @spec base(t()) :: number() | nil
  def base(nil), do: nil
  def base(schedule), do: elem(schedule, 1)

  @doc "The learning rate of epoch `e` (from 0) of `epochs`, for the schedule, warm-up `warmup` and base `lr`."
  @spec at(t(), non_neg_integer(), pos_integer(), non_neg_integer(), number()) :: float()
  def at(schedule, e, epochs, warmup, lr) do
    rate =
      case schedule do
        nil -> lr
        {:step, lr, every, gamma} -> lr * :math.pow(gamma, div(e, every))
        {:exponential, lr, gamma} -> lr * :math.pow(gamma, e)
        {:cosine, lr, min} -> min + (lr - min) * (1 + :math.cos(:math.pi() * e / epochs)) / 2
      end

    if warmup > 0 and e < warmup, do: rate * (e + 1) / warmup, else: rate * 1.0
  end
end
