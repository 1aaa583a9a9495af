if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.HistoryCallback do
    @moduledoc """
    Records all training metrics into a history list. Useful for plotting training curves or
    post-hoc analysis.

        callbacks: [ExBurn.Training.HistoryCallback.new()]

    Access the history after training:

        history = ExBurn.Training.HistoryCallback.get_history()

    Each `new/0` starts an `Agent` linked to the calling process, holding the metrics maps
    (without `:model`); `get_history/0` reads the one the calling process made last,
    `get_history/1` any by its pid (`pid/1` of the callback gives it).
    """

    @key {__MODULE__, :last}

    @doc "A new history callback (and its agent, the calling process's latest)."
    @spec new() :: (map() -> map())
    def new do
      {:ok, pid} = Agent.start_link(fn -> [] end)
      Process.put(@key, pid)
      ExBurn.Training.Callbacks.history(pid)
    end

    @doc "The history of the last callback `new/0` made in this process: the metrics maps, in epoch order."
    @spec get_history() :: [map()]
    def get_history do
      case Process.get(@key) do
        nil ->
          raise ArgumentError, "ExBurn.Training.HistoryCallback.get_history: this process made no HistoryCallback.new()"

        pid ->
          get_history(pid)
      end
    end

    @doc "The history held by the agent `pid`."
    @spec get_history(pid()) :: [map()]
    def get_history(pid) when is_pid(pid), do: pid |> Agent.get(& &1) |> Enum.reverse()

    @doc "The agent of the last callback `new/0` made in this process."
    @spec pid() :: pid() | nil
    def pid, do: Process.get(@key)
  end
end
