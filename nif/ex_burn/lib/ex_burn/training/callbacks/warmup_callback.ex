if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.WarmupCallback do
    @moduledoc """
    Learning rate warmup callback: gradually increases the learning rate from `start_lr` to
    `target_lr` over `warmup_epochs` epochs. Helps stabilize early training.

        callbacks: [ExBurn.Training.WarmupCallback.linear(5, 1.0e-5, 0.001)]

    After epoch `e` the next epoch's learning rate is
    `start_lr + (target_lr - start_lr) * e / warmup_epochs` (then `target_lr`). Epoch 1 runs
    before any callback, at the model's learning rate; `fit/3`'s `warmup: n` option warms up
    from epoch 1.
    """

    @doc "The linear warm-up callback."
    @spec linear(pos_integer(), float(), float()) :: (map() -> map())
    def linear(warmup_epochs, start_lr, target_lr),
      do: ExBurn.Training.Callbacks.linear_warmup(warmup_epochs, start_lr, target_lr)
  end
end
