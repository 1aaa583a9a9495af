defmodule ExCubecl.Application do
  @moduledoc false
  # Winds the runtime down (ExCubecl.shutdown/0) before the VM calls `exit`: at the end of a
  # script, `mix run` or `mix test` (System.at_exit/1 callbacks, which Elixir's command line
  # runs before it halts) and when the application stops (System.stop/1, a release's stop).
  # The NIF's own `atexit` handler, reached by every `exit`, comes after LLVM's lazily
  # registered destructors and so can't be the only guard: no kernel may be compiling then.
  use Application

  @impl true
  def start(_type, _args) do
    System.at_exit(fn _status -> wind_down() end)
    Supervisor.start_link([], strategy: :one_for_one, name: ExCubecl.Supervisor)
  end

  @impl true
  def prep_stop(state) do
    wind_down()
    state
  end

  defp wind_down do
    ExCubecl.shutdown()
  rescue
    # No NIF (a build without it): nothing ran, nothing to wind down.
    _ -> :ok
  end
end
