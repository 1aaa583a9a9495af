if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.LoggingCallback do
    @moduledoc """
    Logs training metrics after each epoch.

        callbacks: [&ExBurn.Training.LoggingCallback.log/1]

    prints `Epoch 3 - loss: 0.1234 - accuracy: 0.9500 - val_loss: 0.2000 - lr: 0.001` (the
    numbers the map holds) and passes the map on.
    """

    @doc "Prints the epoch's metrics on standard output and returns `metrics`."
    @spec log(map()) :: map()
    def log(metrics), do: ExBurn.Training.Callbacks.log(metrics)
  end
end
