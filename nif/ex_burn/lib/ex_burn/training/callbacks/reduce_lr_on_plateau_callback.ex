if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.ReduceLROnPlateauCallback do
    @moduledoc """
    Reduces learning rate when validation loss stops improving.

    Monitors validation loss (training loss without validation data) and multiplies the
    learning rate by `factor` after `patience` epochs without improvement, never below
    `min_lr`.

        callbacks: [
          ExBurn.Training.ReduceLROnPlateauCallback.new(patience: 5, factor: 0.5, min_lr: 1.0e-6)
        ]
    """

    @doc """
    The callback. Options: `:patience` (5), `:factor` (0.5), `:min_lr` (1.0e-6),
    `:min_delta` (1.0e-4), `:monitor` (`:val_loss`, else `:loss`), `:mode` (`:min`).
    """
    @spec new(keyword()) :: (map() -> map())
    def new(opts \\ []), do: ExBurn.Training.Callbacks.reduce_lr_on_plateau(opts)
  end
end
