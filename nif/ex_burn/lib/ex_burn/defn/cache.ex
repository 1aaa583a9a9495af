defmodule ExBurn.Defn.Cache do
  @moduledoc false
  # The compiler's programs by key (the function, its input templates, the device). Reads go
  # straight to a public ETS table; inserts go through this process, which owns the table and
  # keeps it bounded: beyond `:defn_cache_size` programs (application env of :ex_burn,
  # default 64) the oldest is dropped (and freed once no caller holds it). The generation
  # counts the drops, so that a caller that remembers a program can tell it still stands.
  use GenServer

  @table __MODULE__
  @default_size 64
  @generation {__MODULE__, :generation}

  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc false
  # The program cached under `key`, or `fun.()` cached.
  def fetch(key, fun) do
    case :ets.lookup(@table, key) do
      [{^key, value}] ->
        value

      [] ->
        value = fun.()
        GenServer.call(__MODULE__, {:put, key, value})
        value
    end
  end

  @doc false
  def clear, do: GenServer.call(__MODULE__, :clear)

  @doc false
  def size, do: :ets.info(@table, :size)

  @doc false
  # A number that changes whenever a program leaves the cache.
  def generation, do: :atomics.get(:persistent_term.get(@generation), 1)

  @impl true
  def init([]) do
    :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
    unless :persistent_term.get(@generation, nil), do: :persistent_term.put(@generation, :atomics.new(1, []))
    {:ok, :queue.new()}
  end

  @impl true
  def handle_call({:put, key, value}, _from, order) do
    order = if :ets.insert_new(@table, {key, value}), do: :queue.in(key, order), else: order
    {:reply, :ok, evict(order, Application.get_env(:ex_burn, :defn_cache_size, @default_size))}
  end

  def handle_call(:clear, _from, _order) do
    dropped()
    :ets.delete_all_objects(@table)
    {:reply, :ok, :queue.new()}
  end

  defp dropped, do: :atomics.add(:persistent_term.get(@generation), 1, 1)

  defp evict(order, max) do
    if :queue.len(order) > max do
      {{:value, key}, order} = :queue.out(order)
      dropped()
      :ets.delete(@table, key)
      evict(order, max)
    else
      order
    end
  end
end
