defmodule ExCubecl.Error do
  @moduledoc """
  The one exception of ExCubecl: `op` names the operation, `reason` says what went wrong,
  `details` gives the shapes, dtypes or values involved. The message starts with the op.
  """
  defexception [:op, :reason, :details]

  @type t :: %__MODULE__{op: String.t(), reason: String.t(), details: String.t()}

  @impl true
  def message(%__MODULE__{op: op, reason: reason, details: details}) do
    case details do
      d when d in [nil, ""] -> "#{op}: #{reason}"
      d -> "#{op}: #{reason} (#{d})"
    end
  end

  @doc false
  def from(%{op: op, reason: reason, details: details}),
    do: %__MODULE__{op: to_string(op), reason: to_string(reason), details: to_string(details)}

  @doc false
  def new(op, reason, details \\ ""),
    do: %__MODULE__{op: to_string(op), reason: reason, details: details}
end
