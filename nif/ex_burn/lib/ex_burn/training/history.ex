defmodule ExBurn.Training.History do
  @moduledoc """
  What `ExBurn.Training.fit/3` gives back beside the model: one map per epoch that ran, in
  order, and how the run ended.

  Each epoch: `:epoch` (from 1), `:loss` (the mean of the epoch's batch losses, each taken
  before its update), one key per metric (`:accuracy`, ...), with validation data
  `:val_loss` and `:val_<metric>` (after the epoch), `:learning_rate` (for the next update,
  multiplier included), `:samples`, `:time_ms`, `:samples_per_sec`.

  `status`: `:completed`, `:early_stopped` (an early-stopping callback halted it), or
  `:halted` (another callback did).
  """

  defstruct epochs: [], status: :completed

  @type t :: %__MODULE__{epochs: [map()], status: :completed | :early_stopped | :halted}

  @doc "The values of `key` over the epochs: `values(history, :loss) #=> [0.69, 0.41, ...]`."
  @spec values(t(), atom()) :: [term()]
  def values(%__MODULE__{epochs: epochs}, key), do: Enum.map(epochs, &Map.get(&1, key))

  @doc "The last epoch's map, or `nil` when none ran."
  @spec last(t()) :: map() | nil
  def last(%__MODULE__{epochs: epochs}), do: List.last(epochs)
end
