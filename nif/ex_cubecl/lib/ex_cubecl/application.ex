defmodule ExCubecl.Application do
  @moduledoc false
  # Starts the owner of ExCubecl's registry table (`ExCubecl.Registry`), and winds the runtime
  # down (ExCubecl.shutdown/0) before the VM calls `exit`: at the end of a script, `mix run` or
  # `mix test` (System.at_exit/1 callbacks, which Elixir's command line runs before it halts)
  # and when the application stops (System.stop/1, a release's stop). The NIF's own `atexit`
  # handler, reached by every `exit`, comes after LLVM's lazily registered destructors and so
  # can't be the only guard: no kernel may be compiling then.
  use Application

  @impl true
  def start(_type, _args) do
    System.at_exit(fn _status -> wind_down() end)
    Supervisor.start_link([ExCubecl.Registry], strategy: :one_for_one, name: ExCubecl.Supervisor)
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

defmodule ExCubecl.Registry do
  @moduledoc false
  # A public ETS table, owned by this process, for what ExCubecl's documented forms keep
  # between calls: the commands added to a pipeline with `ExCubecl.pipeline_add/5` (key
  # `{:pipeline, ref}`, until `pipeline_free/1`) and the outcomes of commands run by
  # `ExCubecl.submit/1` and `pipeline_run/1` (key `{:command, id}`, until `wait/1` takes them).
  use GenServer

  @table :ex_cubecl_registry

  # Ids of these commands start above any id of the NIF's command queues (which count from 1).
  @id_base Bitwise.bsl(1, 52)

  def start_link(_), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @impl true
  def init([]) do
    :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
    {:ok, nil}
  end

  def put(key, value), do: :ets.insert(@table, {key, value})

  # (where the application isn't started, as in a bare `elixir -pa ...` script, the table is
  # absent and holds nothing: the NIF's own commands are then all there is)
  def delete(key), do: present?() and :ets.delete(@table, key)

  def get(key) do
    case present?() and :ets.lookup(@table, key) do
      [{^key, value}] -> value
      _ -> nil
    end
  end

  def take(key) do
    case present?() and :ets.take(@table, key) do
      [{^key, value}] -> value
      _ -> nil
    end
  end

  defp present?, do: :ets.whereis(@table) != :undefined

  @doc "A new command id (never one of the NIF's queues)."
  def next_id, do: @id_base + System.unique_integer([:positive, :monotonic])
end
