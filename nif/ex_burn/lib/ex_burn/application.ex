defmodule ExBurn.Application do
  @moduledoc """
  Application callback for ExBurn: starts its supervision tree (`ExBurn.Supervisor`, holding
  the compiled-program cache of `ExBurn.Defn.Compiler`). The Rust NIF library loads with
  `ExCubecl.Native` (its `@on_load`), in the `:ex_cubecl` application that ExBurn depends on,
  before this starts; `ExBurn.nif_loaded?/0` says whether it did.
  """
  use Application

  @impl true
  def start(_type, _args) do
    Supervisor.start_link([ExBurn.Defn.Cache], strategy: :one_for_one, name: ExBurn.Supervisor)
  end
end
