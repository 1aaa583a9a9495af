defmodule ExBurn.Error do
  @moduledoc """
  The one exception of ExBurn: `op` names the Nx operation (`"Nx.add"`), `reason` says what
  went wrong, `details` gives the shapes, types and devices involved. The message starts
  with the op. Every failure of an `ExBurn.Backend` callback raises it; none crashes the VM.
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
  def new(op, reason, details \\ ""), do: %__MODULE__{op: to_string(op), reason: to_string(reason), details: to_string(details)}

  @doc false
  def from(op, %{reason: reason, details: details}), do: new(op, reason, details)
  def from(op, %ExCubecl.Error{reason: reason, details: details}), do: new(op, reason, details)
  def from(op, other), do: new(op, inspect(other))
end
