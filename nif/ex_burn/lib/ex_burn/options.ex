defmodule ExBurn.Options do
  @moduledoc false
  # Keyword options checked against their defaults, for ExBurn's functions that raise
  # `ExBurn.Error` naming the function on bad options.

  @doc "`opts` merged over `defaults`; raises `ExBurn.Error` naming `op` on a non-keyword or an unknown key."
  @spec validate!(String.t(), term(), keyword()) :: keyword()
  def validate!(op, opts, defaults) do
    unless Keyword.keyword?(opts),
      do: raise(ExBurn.Error.new(op, "options must be a keyword list", "got #{inspect(opts)}"))

    case Keyword.keys(opts) -- Keyword.keys(defaults) do
      [] ->
        Keyword.merge(defaults, opts)

      unknown ->
        raise ExBurn.Error.new(
                op,
                "unknown option(s) #{Enum.map_join(unknown, ", ", &inspect/1)}",
                "options: #{Enum.map_join(Keyword.keys(defaults), ", ", &inspect/1)}"
              )
    end
  end
end
