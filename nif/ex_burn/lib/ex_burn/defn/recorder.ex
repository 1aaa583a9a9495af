defmodule ExBurn.Defn.Recorder do
  @moduledoc false
  # The one place where ExBurn.Backend's callbacks reach the NIF's op table. Normally it runs
  # the entry. While ExBurn.Defn.Lower lowers a graph, it calls the backend's callbacks on
  # placeholder tensors (whose refs are program slots) inside `record/1`, and the entry each
  # callback would run is recorded instead, with its inputs and options: a jitted graph runs
  # the very entries, with the very options, that eager calls run.

  @key {__MODULE__, :calls}

  @doc false
  # Runs entry `name` on `refs`, or records it where a recording is active: the results are
  # then `{:pending, call, k}` refs for the recorder's caller to resolve.
  def run_kernel(name, refs, opts, dev, count) do
    case Process.get(@key) do
      nil ->
        ExCubecl.Native.run_kernel(name, refs, opts, dev)

      calls ->
        j = length(calls)
        Process.put(@key, [{name, refs, opts} | calls])
        {:ok, for(k <- 0..(count - 1)//1, do: {{:pending, j, k}, nil, nil})}
    end
  end

  @doc false
  # Whether a recording is active (the callbacks then see placeholders, no data).
  def recording?, do: Process.get(@key) != nil

  @doc false
  # Runs `fun` with recording on: `{:ok, result, calls}`, or `{:default, calls}` where `fun`
  # called `default/1` (a block the backend leaves to its default implementation).
  def record(fun) do
    previous = Process.put(@key, [])

    try do
      result = fun.()
      {:ok, result, Enum.reverse(Process.get(@key))}
    catch
      :throw, {__MODULE__, :default} -> {:default, Enum.reverse(Process.get(@key))}
    after
      if previous, do: Process.put(@key, previous), else: Process.delete(@key)
    end
  end

  @doc false
  # The `fun` given to ExBurn.Backend.block/4 while lowering (it is called with the block's
  # struct and arguments): a block that is not native lowers its default implementation,
  # already traced in the graph, instead.
  def default_fun(arity), do: Function.capture(__MODULE__, :default, arity)

  for arity <- 1..16 do
    @doc false
    def default(unquote_splicing(for i <- 1..arity, do: Macro.var(:"_arg#{i}", __MODULE__))), do: throw({__MODULE__, :default})
  end
end
