if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.CheckpointCallback do
    @moduledoc """
    Saves model checkpoints at specified intervals.

        callbacks: [ExBurn.Training.CheckpointCallback.every(5, "/checkpoints")]

    Every `interval` epochs the map's `:model` is saved, atomically, as `epoch_<n>.exburn` in
    `dir` (created as needed): a model file (`ExBurn.Model.load/2` reads it back) that also
    holds the optimizer state and the run's progress, so that
    `ExBurn.Training.fit(model, data, resume: dir)` continues the run from its latest
    checkpoint exactly (`ExBurn.Training.Resume`).
    """

    @doc "The callback: save the model every `interval` epochs into `dir`."
    @spec every(pos_integer(), Path.t()) :: (map() -> map())
    def every(interval, dir), do: ExBurn.Training.Callbacks.checkpoint(path: dir, every: interval)
  end
end
