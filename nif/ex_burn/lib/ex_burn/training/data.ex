if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Data do
    @moduledoc """
    Training data as batches for `Axon.Loop.run/4`: `{x, y}` tensors (or containers of
    tensors sharing their first axis) are moved to the device once and cut into batches of
    `:batch_size` along axis 0, reshuffled on every pass with `:seed` when `:shuffle` is on;
    any other enumerable is taken as batches `{x, y}` as they are (an `ExBurn.Dataset`, a
    stream, a list).

    `strict?` says whether every batch has the same shapes (then `Axon.Loop.run/4` compiles
    the step once, strictly); a last smaller batch, or batches of unknown shapes, compile once
    per shape.

    With `:devices` (a data-parallel `ExBurn.Training.fit/3`), `{x, y}` tensors also get
    `sharded`: the same batches, in the same order, as each device's shard already on its
    device (`ExBurn.Training.Parallel.Shards`).
    """

    alias Nx.Defn.Composite

    defstruct [:batches, :samples, :batch_size, sharded: nil, strict?: true]

    @type t :: %__MODULE__{
            batches: Enumerable.t(),
            sharded: Enumerable.t() | nil,
            samples: non_neg_integer() | nil,
            batch_size: pos_integer() | nil,
            strict?: boolean()
          }

    @doc """
    The batches of `data`. Options: `:batch_size` (default 32), `:shuffle` (default `true`),
    `:seed` (default 0), `:drop_last` (default `false`), for `{x, y}` tensors only, and
    `:passes` (default 0): the passes over the data made before (by the run a resumed run
    continues), so that the shuffled orders continue theirs, and `:devices` (see above).
    Raises `ArgumentError` naming `fun`.
    """
    @spec new(term(), keyword(), {module(), keyword()}, String.t()) :: t()
    def new(data, opts, backend, fun)

    def new({x, y}, opts, backend, fun) when not is_list(x) do
      n = samples!(x, "x", fun)
      m = samples!(y, "y", fun)
      if n != m, do: raise(ArgumentError, "#{fun}: x has #{n} samples but y has #{m}")
      if n == 0, do: raise(ArgumentError, "#{fun}: the data has no samples")
      batch_size = opts[:batch_size] || 32

      unless is_integer(batch_size) and batch_size > 0,
        do: raise(ArgumentError, "#{fun}: :batch_size must be a positive integer, got #{inspect(batch_size)}")

      batch_size = min(batch_size, n)
      drop_last = boolean!(Keyword.get(opts, :drop_last, false), :drop_last, fun)
      shuffle = boolean!(Keyword.get(opts, :shuffle, true), :shuffle, fun)
      seed = opts[:seed] || 0

      unless is_integer(seed) and seed >= 0,
        do: raise(ArgumentError, "#{fun}: :seed must be a non-negative integer, got #{inspect(seed)}")

      count = if drop_last, do: div(n, batch_size), else: div(n + batch_size - 1, batch_size)
      x = Composite.traverse(x, &ExBurn.Model.Params.on_backend(&1, backend))
      y = Composite.traverse(y, &ExBurn.Model.Params.on_backend(&1, backend))
      # Each enumeration is a pass, with an order of its own from the seed and its number.
      passes = :counters.new(1, [])
      :counters.add(passes, 1, opts[:passes] || 0)

      batches =
        Stream.resource(
          fn ->
            :counters.add(passes, 1, 1)
            {order(n, shuffle, seed, :counters.get(passes, 1), backend), 0}
          end,
          fn
            {_order, ^count} = acc ->
              {:halt, acc}

            {order, i} ->
              start = i * batch_size
              len = min(batch_size, n - start)
              {[{take(x, order, start, len), take(y, order, start, len)}], {order, i + 1}}
          end,
          fn _ -> :ok end
        )

      # Both streams count their passes on one counter, so a pass has the same order in either.
      sharded =
        case opts[:devices] do
          [_, _ | _] = devices ->
            order = &permutation(n, shuffle, seed, &1)
            ExBurn.Training.Parallel.Shards.stream({x, y}, n, batch_size, count, order, passes, backend, devices)

          _ ->
            nil
        end

      %__MODULE__{
        batches: batches,
        sharded: sharded,
        samples: if(drop_last, do: count * batch_size, else: n),
        batch_size: batch_size,
        strict?: drop_last or rem(n, batch_size) == 0
      }
    end

    def new(data, opts, _backend, fun) do
      for key <- [:batch_size, :shuffle, :drop_last], Keyword.has_key?(opts, key) do
        raise ArgumentError,
              "#{fun}: #{inspect(key)} applies to {x, y} tensors; the data given is batched already (#{inspect(data, limit: 3)})"
      end

      unless Enumerable.impl_for(data),
        do:
          raise(
            ArgumentError,
            "#{fun}: expected {x, y} tensors or an enumerable of {x, y} batches, got #{inspect(data, limit: 3)}"
          )

      %__MODULE__{batches: data, samples: nil, batch_size: nil, strict?: false}
    end

    defp boolean!(value, _key, _fun) when is_boolean(value), do: value

    defp boolean!(value, key, fun),
      do: raise(ArgumentError, "#{fun}: #{inspect(key)} must be a boolean, got #{inspect(value)}")

    defp samples!(container, what, fun) do
      sizes =
        [container]
        |> Composite.flatten_list()
        |> Enum.map(fn
          %Nx.Tensor{shape: {}} -> raise ArgumentError, "#{fun}: #{what} must have a batch axis, got a scalar"
          %Nx.Tensor{shape: shape} -> elem(shape, 0)
          other -> raise ArgumentError, "#{fun}: #{what} must be tensors, got #{inspect(other, limit: 3)}"
        end)
        |> Enum.uniq()

      case sizes do
        [n] -> n
        [] -> raise ArgumentError, "#{fun}: #{what} holds no tensor"
        many -> raise ArgumentError, "#{fun}: the tensors of #{what} have different first axes: #{inspect(many)}"
      end
    rescue
      e in Protocol.UndefinedError ->
        reraise ArgumentError, "#{fun}: #{what} must be tensors, got #{inspect(e.value, limit: 3)}", __STACKTRACE__
    end

    # The sample order of a pass: nil (in order) or a permutation tensor on the device, from
    # the seed and the pass number.
    defp order(n, shuffle, seed, pass, backend) do
      case permutation(n, shuffle, seed, pass) do
        nil -> nil
        perm -> Nx.tensor(perm, type: :s32, backend: backend)
      end
    end

    # The order of a pass as a list of sample indices, nil when not shuffling.
    defp permutation(_n, false, _seed, _pass), do: nil

    defp permutation(n, true, seed, pass) do
      state = :rand.seed_s(:exsss, {seed, pass, 27})
      {keys, _} = Enum.map_reduce(1..n, state, fn _, st -> :rand.uniform_s(st) end)
      keys |> Enum.with_index() |> Enum.sort() |> Enum.map(&elem(&1, 1))
    end

    defp take(container, nil, start, len),
      do: Composite.traverse(container, &Nx.slice_along_axis(&1, start, len, axis: 0))

    defp take(container, order, start, len) do
      idx = Nx.slice(order, [start], [len])
      Composite.traverse(container, &Nx.take(&1, idx, axis: 0))
    end

    @doc "The first batch of `data`."
    @spec first(t(), String.t()) :: {term(), term()}
    def first(%__MODULE__{batches: batches}, fun) do
      case Enum.take(batches, 1) do
        [{_x, _y} = batch] -> batch
        [other] -> raise ArgumentError, "#{fun}: batches must be {x, y} tuples, got #{inspect(other, limit: 3)}"
        [] -> raise ArgumentError, "#{fun}: the data has no batches"
      end
    end
  end
end
