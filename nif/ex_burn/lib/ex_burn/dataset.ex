defmodule ExBurn.Dataset do
  @moduledoc """
  Data preparation for training: train/test splits, batch loaders, per-feature
  standardisation, one-hot labels.

      {train, test} = ExBurn.Dataset.split({x, y}, test: 0.2, seed: 42)
      {train_x, stats} = ExBurn.Dataset.normalize(elem(train, 0))
      test_x = ExBurn.Dataset.normalize_with_stats(elem(test, 0), stats)

      {train_x, elem(train, 1)}
      |> ExBurn.Dataset.loader(batch_size: 32, shuffle: true, seed: 1)
      |> Enum.each(fn {x_batch, y_batch} -> ... end)

  A data set is a pair `{x, y}` of tensors whose first axis runs over the examples (both have
  the same number of examples). Every function works on tensors of any backend and keeps
  them there: on `ExBurn.Backend` the data stays on the device and each batch is gathered
  there (one `Nx.take/3` or `Nx.slice_along_axis/4` per tensor and batch); only the order of
  the examples is computed on the host. Shuffles come from a seed alone (Erlang's `:exsss`
  generator), so the same seed gives the same order on every machine.

  Bad arguments raise `ExBurn.Error`, whose message starts with the function's name and
  gives the shapes involved.
  """

  alias ExBurn.Dataset.Loader

  @type data :: {Nx.Tensor.t(), Nx.Tensor.t()}
  @type stats :: %{mean: Nx.Tensor.t(), std: Nx.Tensor.t(), min: Nx.Tensor.t(), max: Nx.Tensor.t()}

  ## Splitting

  @doc """
  Splits `{x, y}` into `{{x_train, y_train}, {x_test, y_test}}`.

  ## Options

    * `:test` - the fraction of examples in the test set (default `0.2`, or `1 - train`).
    * `:train` - the fraction in the train set (default `1 - test`). With both given, they
      may sum to less than 1: the rest is left out.
    * `:shuffle` - shuffle before splitting (default `true`); without it the first examples
      are the train set.
    * `:seed` - the integer seed of the shuffle (default `0`): the same seed, the same split.

  Counts are rounded to the nearest example; both sets must get at least one.

      iex> x = Nx.iota({10, 2})
      iex> {{x_train, _}, {x_test, _}} = ExBurn.Dataset.split({x, Nx.iota({10})}, test: 0.3)
      iex> {Nx.shape(x_train), Nx.shape(x_test)}
      {{7, 2}, {3, 2}}
  """
  @spec split(data(), keyword()) :: {data(), data()}
  def split(data, opts \\ []) do
    op = "ExBurn.Dataset.split"
    {x, y} = data!(op, data)
    opts = options!(op, opts, train: nil, test: nil, shuffle: true, seed: 0)
    n = examples(x)
    {n_train, n_test} = split_counts!(op, n, opts[:train], opts[:test])
    seed = seed!(op, opts[:seed])
    order = if boolean!(op, :shuffle, opts[:shuffle]), do: permutation(n, seed), else: Enum.to_list(0..(n - 1))
    {train, rest} = Enum.split(order, n_train)
    test = Enum.take(rest, n_test)
    {{gather(x, train), gather(y, train)}, {gather(x, test), gather(y, test)}}
  end

  defp split_counts!(op, n, train, test) do
    train = fraction!(op, :train, train)
    test = fraction!(op, :test, test)

    {train, test} =
      case {train, test} do
        {nil, nil} ->
          {0.8, 0.2}

        {nil, test} ->
          {1 - test, test}

        {train, nil} ->
          {train, 1 - train}

        {train, test} when train + test <= 1.0 + 1.0e-9 ->
          {train, test}

        {train, test} ->
          raise ExBurn.Error.new(op, "the fractions :train (#{train}) and :test (#{test}) sum to more than 1")
      end

    n_train = round(n * train)
    n_test = min(round(n * test), n - n_train)

    if n_train == 0 or n_test == 0 do
      raise ExBurn.Error.new(
              op,
              "a split of #{n} examples into train #{train} / test #{test} leaves #{n_train} train and #{n_test} test examples; both need at least one"
            )
    end

    {n_train, n_test}
  end

  defp fraction!(_op, _key, nil), do: nil
  defp fraction!(_op, _key, f) when is_number(f) and f > 0 and f < 1, do: f

  defp fraction!(op, key, f),
    do: raise(ExBurn.Error.new(op, "#{inspect(key)} must be a fraction strictly between 0 and 1, got #{inspect(f)}"))

  ## Loading

  @doc """
  A loader over `{x, y}`: an `Enumerable` of `{x_batch, y_batch}`, one pass per epoch.

  Each pass yields every example exactly once (the last batch is smaller when the batch size
  doesn't divide the examples, unless `drop_last: true` drops it). `Enum.count/1` gives the
  batches of a pass without gathering any. The loader can be given as is to
  `Axon.Loop.run/4`.

  ## Options

    * `:batch_size` - examples per batch (default `32`).
    * `:shuffle` - a new order on every pass (default `false`: the data's order).
    * `:seed` - the integer seed of the shuffles. Passes of a loader are numbered: pass `k`
      of every loader built with the same seed has the same order, and passes differ from
      each other (the `k`-th order comes from `seed + k`). Default: a random seed.
    * `:drop_last` - drop the last batch when it is smaller than `:batch_size`
      (default `false`).

      iex> loader = ExBurn.Dataset.loader({Nx.iota({5, 2}), Nx.iota({5})}, batch_size: 2)
      iex> Enum.map(loader, fn {_x, y} -> Nx.to_flat_list(y) end)
      [[0, 1], [2, 3], [4]]
  """
  @spec loader(data(), keyword()) :: Enumerable.t()
  def loader(data, opts \\ []) do
    op = "ExBurn.Dataset.loader"
    {x, y} = data!(op, data)
    opts = options!(op, opts, batch_size: 32, shuffle: false, seed: nil, drop_last: false)
    batch_size = opts[:batch_size]

    unless is_integer(batch_size) and batch_size > 0 do
      raise ExBurn.Error.new(
              op,
              ":batch_size must be a positive integer, got #{inspect(batch_size)}",
              "#{examples(x)} examples"
            )
    end

    n = examples(x)
    drop_last = boolean!(op, :drop_last, opts[:drop_last])

    if drop_last and batch_size > n do
      raise ExBurn.Error.new(
              op,
              ":batch_size #{batch_size} with drop_last: true drops every example",
              "#{n} examples, x #{inspect(x.shape)}"
            )
    end

    %Loader{
      x: x,
      y: y,
      size: n,
      batch_size: batch_size,
      shuffle: boolean!(op, :shuffle, opts[:shuffle]),
      seed: if(opts[:seed] == nil, do: :rand.uniform(1_000_000_000_000), else: seed!(op, opts[:seed])),
      drop_last: drop_last,
      passes: :counters.new(1, [:atomics])
    }
  end

  ## Normalisation

  @doc """
  Per-feature statistics of `x` over its first axis (the examples): `%{mean:, std:, min:,
  max:}`, each of `x`'s shape without the first axis. `std` is the population standard
  deviation (divided by the count of examples). `mean` and `std` are floats; `min` and `max`
  keep `x`'s type.

      iex> s = ExBurn.Dataset.stats(Nx.tensor([[1.0, 10.0], [3.0, 10.0]]))
      iex> {Nx.to_flat_list(s.mean), Nx.to_flat_list(s.std), Nx.to_flat_list(s.min), Nx.to_flat_list(s.max)}
      {[2.0, 10.0], [1.0, 0.0], [1.0, 10.0], [3.0, 10.0]}
  """
  @spec stats(Nx.Tensor.t()) :: stats()
  def stats(x) do
    x = examples!("ExBurn.Dataset.stats", x)
    xf = if Nx.Type.float?(x.type), do: x, else: Nx.as_type(x, :f32)

    %{
      mean: Nx.mean(xf, axes: [0]),
      std: Nx.standard_deviation(xf, axes: [0]),
      min: Nx.reduce_min(x, axes: [0]),
      max: Nx.reduce_max(x, axes: [0])
    }
  end

  @doc """
  Standardises every feature of `x` (every position after the first axis) with the
  statistics of `x` itself and gives `{normalized, stats}`; `normalize_with_stats/3` applies
  the same `stats` to other data (a test set, requests to a serving).

  ## Options

    * `:method` - `:standard` (default): `(x - mean) / std`; `:min_max`: `(x - min) / (max -
      min)`, into `[0, 1]`.

  A constant feature (zero `std`, or `max == min`) is divided by 1 instead: it becomes 0.

      iex> {z, _stats} = ExBurn.Dataset.normalize(Nx.tensor([[1.0, 5.0], [3.0, 5.0]]))
      iex> Nx.to_flat_list(z)
      [-1.0, 0.0, 1.0, 0.0]
  """
  @spec normalize(Nx.Tensor.t(), keyword()) :: {Nx.Tensor.t(), stats()}
  def normalize(x, opts \\ []) do
    opts = options!("ExBurn.Dataset.normalize", opts, method: :standard)
    stats = stats(x)
    {do_normalize("ExBurn.Dataset.normalize", x, stats, opts[:method]), stats}
  end

  @doc """
  Standardises `x` with `stats` (of `stats/1` or `normalize/2`). Options as `normalize/2`;
  `stats` needs `:mean` and `:std` for `:standard`, `:min` and `:max` for `:min_max`, each of
  `x`'s shape without the first axis.
  """
  @spec normalize_with_stats(Nx.Tensor.t(), map(), keyword()) :: Nx.Tensor.t()
  def normalize_with_stats(x, stats, opts \\ []) do
    op = "ExBurn.Dataset.normalize_with_stats"
    opts = options!(op, opts, method: :standard)
    do_normalize(op, examples!(op, x), stats, opts[:method])
  end

  defp do_normalize(op, x, stats, method) do
    {shift, scale} =
      case method do
        :standard -> {stat!(op, stats, :mean, x), stat!(op, stats, :std, x)}
        :min_max -> {stat!(op, stats, :min, x), Nx.subtract(stat!(op, stats, :max, x), stat!(op, stats, :min, x))}
        other -> raise ExBurn.Error.new(op, "unknown :method #{inspect(other)}", "methods: :standard, :min_max")
      end

    type = Nx.Type.to_floating(Nx.Type.merge(x.type, Nx.type(shift)))
    scale = Nx.as_type(scale, type)
    scale = Nx.select(Nx.equal(scale, 0), Nx.tensor(1, type: type), scale)
    x |> Nx.as_type(type) |> Nx.subtract(shift) |> Nx.divide(scale)
  end

  defp stat!(op, stats, key, x) do
    feature_shape = Tuple.delete_at(x.shape, 0)

    case stats do
      %{^key => %Nx.Tensor{shape: ^feature_shape} = t} ->
        t

      %{^key => %Nx.Tensor{shape: shape}} ->
        raise ExBurn.Error.new(
                op,
                "stats.#{key} has shape #{inspect(shape)}, not x's feature shape #{inspect(feature_shape)}",
                "x #{inspect(x.shape)}"
              )

      _ ->
        raise ExBurn.Error.new(
                op,
                "stats has no tensor #{inspect(key)}",
                "stats keys: #{inspect(if is_map(stats), do: Map.keys(stats), else: stats)}"
              )
    end
  end

  ## Labels

  @doc """
  One-hot encodes integer `labels` (any shape) into `num_classes` columns: a new last axis,
  1 where the column is the label and 0 elsewhere. Option `:type` (default `:f32`). Labels
  outside `0..num_classes-1` raise (reading the labels' minimum and maximum).

      iex> ExBurn.Dataset.one_hot(Nx.tensor([2, 0]), 3) |> Nx.to_flat_list()
      [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
  """
  @spec one_hot(Nx.Tensor.t(), pos_integer(), keyword()) :: Nx.Tensor.t()
  def one_hot(labels, num_classes, opts \\ []) do
    op = "ExBurn.Dataset.one_hot"
    opts = options!(op, opts, type: :f32)

    unless match?(%Nx.Tensor{}, labels) and Nx.Type.integer?(labels.type) do
      raise ExBurn.Error.new(op, "labels must be a tensor of integers", "got #{describe(labels)}")
    end

    unless is_integer(num_classes) and num_classes > 0 do
      raise ExBurn.Error.new(
              op,
              "num_classes must be a positive integer, got #{inspect(num_classes)}",
              "labels #{inspect(labels.shape)}"
            )
    end

    {lo, hi} = {Nx.to_number(Nx.reduce_min(labels)), Nx.to_number(Nx.reduce_max(labels))}

    if lo < 0 or hi >= num_classes do
      raise ExBurn.Error.new(
              op,
              "labels must lie in 0..#{num_classes - 1}, found #{if lo < 0, do: lo, else: hi}",
              "labels #{Nx.Type.to_string(labels.type)} #{inspect(labels.shape)}, #{num_classes} classes"
            )
    end

    classes = Nx.iota({num_classes}, type: labels.type, backend: backend_of(labels))
    labels |> Nx.new_axis(-1) |> Nx.equal(classes) |> Nx.as_type(opts[:type])
  end

  ## Helpers shared with the loader

  @doc false
  # A seeded permutation of 0..n-1, on the host: sort the indices by uniform keys of the
  # seeded :exsss generator (ties, if any, keep index order).
  def permutation(n, seed) do
    {keys, _} = Enum.map_reduce(1..n//1, :rand.seed_s(:exsss, seed), fn _, s -> :rand.uniform_s(s) end)
    keys |> Enum.with_index() |> Enum.sort() |> Enum.map(&elem(&1, 1))
  end

  @doc false
  # Rows `indices` of `t` (first axis), on t's backend: a slice when they are consecutive.
  def gather(t, [first | _] = indices) do
    count = length(indices)

    if indices == Enum.to_list(first..(first + count - 1)//1),
      do: Nx.slice_along_axis(t, first, count, axis: 0),
      else: Nx.take(t, Nx.tensor(indices, type: :s32, backend: backend_of(t)), axis: 0)
  end

  defp backend_of(%Nx.Tensor{data: %ExBurn.Backend{device: dev}}), do: {ExBurn.Backend, device: dev}
  defp backend_of(%Nx.Tensor{data: %mod{}}), do: mod

  defp data!(op, {%Nx.Tensor{} = x, %Nx.Tensor{} = y}) do
    examples!(op, x, "x")
    examples!(op, y, "y")

    if examples(x) != examples(y) do
      raise ExBurn.Error.new(
              op,
              "x has #{examples(x)} examples but y has #{examples(y)}",
              "x #{inspect(x.shape)}, y #{inspect(y.shape)}"
            )
    end

    {x, y}
  end

  defp data!(op, other),
    do: raise(ExBurn.Error.new(op, "data must be a tuple {x, y} of tensors", "got #{describe(other)}"))

  defp examples!(op, t, name \\ "x")
  defp examples!(_op, %Nx.Tensor{shape: shape} = t, _name) when tuple_size(shape) > 0, do: t

  defp examples!(op, %Nx.Tensor{} = t, name),
    do:
      raise(
        ExBurn.Error.new(op, "#{name} must have an axis of examples (rank 1 or more)", "#{name} #{inspect(t.shape)}")
      )

  defp examples!(op, other, name), do: raise(ExBurn.Error.new(op, "#{name} must be a tensor", "got #{describe(other)}"))

  defp examples(t), do: elem(t.shape, 0)

  defp options!(op, opts, defaults), do: ExBurn.Options.validate!(op, opts, defaults)

  defp boolean!(_op, _key, b) when is_boolean(b), do: b

  defp boolean!(op, key, other),
    do: raise(ExBurn.Error.new(op, "#{inspect(key)} must be a boolean, got #{inspect(other)}"))

  defp seed!(_op, seed) when is_integer(seed), do: seed
  defp seed!(op, other), do: raise(ExBurn.Error.new(op, ":seed must be an integer, got #{inspect(other)}"))

  defp describe(%Nx.Tensor{} = t), do: "a tensor #{Nx.Type.to_string(t.type)} #{inspect(t.shape)}"
  defp describe(other), do: inspect(other, limit: 5)
end
