defmodule ExBurn.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    Supervisor.start_link([ExBurn.Defn.Cache], strategy: :one_for_one, name: ExBurn.Supervisor)
  end
end
