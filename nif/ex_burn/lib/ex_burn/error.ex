defmodule ExBurn.Error do
  @moduledoc """
  The one exception of ExBurn. Fields:

    * `:op` - the operation that failed: an atom (`:add`, `:matmul`, `:conv`) where the caller
      names it so, or the function's name as a string (`"Nx.add"`,
      `"ExBurn.Serving.run"`), which is how ExBurn's own errors name it.
    * `:reason` - a human-readable message.
    * `:details` - optional context (shapes, types, devices): a map, a string, or `nil`.

  The message starts with the op. Every failure of an `ExBurn.Backend` callback raises it;
  none crashes the VM.

      raise ExBurn.Error, op: :matmul, reason: "shape mismatch",
        details: %{lhs: [3, 4], rhs: [5, 6]}
  """
  defexception [:op, :reason, :details]

  @type t :: %__MODULE__{
          __exception__: true,
          op: atom() | String.t(),
          reason: String.t(),
          details: map() | String.t() | nil
        }

  @impl true
  def message(%__MODULE__{} = e), do: format_error(e)

  @doc """
  Formats an error for logging or display: the operation, the reason, and any details.

      iex> ExBurn.Error.format_error(%ExBurn.Error{op: :matmul, reason: "shape mismatch", details: %{lhs: [3, 4]}})
      "matmul: shape mismatch (%{lhs: [3, 4]})"
  """
  @spec format_error(t()) :: String.t()
  def format_error(%__MODULE__{op: op, reason: reason, details: details}) do
    head = "#{op_name(op)}: #{reason_text(reason)}"

    case details do
      d when d in [nil, "", %{}] -> head
      d when is_binary(d) -> "#{head} (#{d})"
      d -> "#{head} (#{inspect(d)})"
    end
  end

  @doc """
  Converts the error to a string suitable for logging (as `format_error/1`).

      iex> ExBurn.Error.to_string(ExBurn.Error.new(op: :add, reason: "bad input"))
      "add: bad input"
  """
  @spec to_string(t()) :: String.t()
  def to_string(%__MODULE__{} = e), do: format_error(e)

  @doc """
  Wraps an error tuple in an `ExBurn.Error` (options: `:op`, `:details`). A reason that is
  not a string (an `ExCubecl.Error`, an exception, a term) becomes its message.

      iex> ExBurn.Error.from_tuple({:error, "something failed"}, op: :forward)
      %ExBurn.Error{op: :forward, reason: "something failed", details: nil}
  """
  @spec from_tuple({:error, term()}, keyword()) :: t()
  def from_tuple({:error, reason}, opts \\ []) when is_list(opts) do
    %__MODULE__{op: Keyword.get(opts, :op, :unknown), reason: reason_text(reason), details: Keyword.get(opts, :details)}
  end

  @doc """
  Creates an error struct without raising (options: `:op`, `:reason`, `:details`), to return
  errors in pipelines.

      iex> ExBurn.Error.new(op: :add, reason: "bad input")
      %ExBurn.Error{op: :add, reason: "bad input", details: nil}
  """
  @spec new(keyword()) :: t()
  def new(opts) when is_list(opts) do
    %__MODULE__{op: Keyword.get(opts, :op, :unknown), reason: reason_text(Keyword.get(opts, :reason, "")), details: Keyword.get(opts, :details)}
  end

  @doc false
  # ExBurn's own errors: op (the function's name), reason and details as strings.
  def new(op, reason, details \\ ""), do: %__MODULE__{op: Kernel.to_string(op), reason: Kernel.to_string(reason), details: Kernel.to_string(details)}

  @doc false
  def from(op, %{reason: reason, details: details}), do: new(op, reason, details)
  def from(op, %ExCubecl.Error{reason: reason, details: details}), do: new(op, reason, details)
  def from(op, other), do: new(op, inspect(other))

  defp op_name(op) when is_atom(op) and op != nil, do: Atom.to_string(op)
  defp op_name(op), do: Kernel.to_string(op)

  defp reason_text(reason) when is_binary(reason), do: reason
  defp reason_text(%{__exception__: true} = e), do: Exception.message(e)
  defp reason_text(%{reason: reason}) when is_binary(reason), do: reason
  defp reason_text(reason) when is_atom(reason), do: Atom.to_string(reason)
  defp reason_text(reason), do: inspect(reason)
end

defimpl String.Chars, for: ExBurn.Error do
  def to_string(e), do: ExBurn.Error.format_error(e)
end
