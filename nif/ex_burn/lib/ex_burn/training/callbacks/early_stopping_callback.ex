if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.EarlyStoppingCallback do
    @moduledoc """
    Stops training when validation loss stops improving.

        callbacks: [ExBurn.Training.EarlyStoppingCallback.wait(5, 1.0e-4)]

    Watches `:val_loss` (`:loss` when there is no validation data): after `patience` epochs
    without an improvement of more than `min_delta`, it returns the map with
    `stop_training: true` and `ExBurn.Training.fit/3` stops.
    """

    @doc "The callback: stop after `patience` epochs without an improvement of more than `min_delta`."
    @spec wait(pos_integer(), float()) :: (map() -> map())
    def wait(patience, min_delta \\ 0.0001),
      do: ExBurn.Training.Callbacks.early_stopping(patience: patience, min_delta: min_delta)
  end
end
