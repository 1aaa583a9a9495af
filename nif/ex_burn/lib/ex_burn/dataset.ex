defmodule ExBurn.Dataset do
  @moduledoc """
  Dataset utilities for ExBurn: common data loading, splitting, and preprocessing helpers
  for machine learning workflows.

      # Split data into train/validation sets
      {train, val} = ExBurn.Dataset.split({x, y}, val_split: 0.2)

      # Create a batched data loader
      loader = ExBurn.Dataset.loader({x, y}, batch_size: 32, shuffle: true)

      # Normalize features
      {normalized, stats} = ExBurn.Dataset.normalize(x, method: :standard)

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

  @type dataset :: {Nx.Tensor.t(), Nx.Tensor.t()}
  @type data :: dataset()
  @type stats :: %{mean: Nx.Tensor.t(), std: Nx.Tensor.t(), min: Nx.Tensor.t(), max: Nx.Tensor.t()}

  ## Splitting

  @doc """
  Splits a dataset into training and validation sets: `{train_data, val_data}`, each
  `{inputs, targets}`.

  ## Options

    * `:val_split` - the fraction of examples for validation (default `0.2`); `:test` is
      the same option under another name.
    * `:train` - the fraction in the train set (default `1 - val_split`). With both given,
      they may sum to less than 1: the rest is left out.
    * `:shuffle` - shuffle before splitting (default `true`); without it the first examples
      are the train set.
    * `:seed` - the integer seed of the shuffle, for reproducibility (default `nil`: a new
      one each call): the same seed, the same split.

      {train, val} = ExBurn.Dataset.split({x, y}, val_split: 0.2, seed: 42)

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
    opts = options!(op, opts, val_split: nil, train: nil, test: nil, shuffle: true, seed: nil)

    if opts[:val_split] && opts[:test],
      do: raise(ExBurn.Error.new(op, ":val_split and :test are the same option; give one"))

    n = examples(x)
    {n_train, n_test} = split_counts!(op, n, opts[:train], opts[:val_split] || opts[:test])
    seed = if opts[:seed] == nil, do: :rand.uniform(1_000_000_000_000), else: seed!(op, opts[:seed])
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
  Creates a batched data loader from a dataset: an `Enumerable` (a stream) of
  `{batch_inputs, batch_targets}`, one pass per epoch.

  Each pass yields every example exactly once (the last batch is smaller when the batch size
  doesn't divide the examples, unless `drop_last: true` drops it). `Enum.count/1` gives the
  batches of a pass without gathering any. The loader can be given as is to
  `Axon.Loop.run/4`.

  ## Options

    * `:batch_size` - examples per batch (default `32`).
    * `:shuffle` - a new order on every pass (default `true`; `false`: the data's order).
    * `:seed` - the integer seed of the shuffles. Passes of a loader are numbered: pass `k`
      of every loader built with the same seed has the same order, and passes differ from
      each other (the `k`-th order comes from `seed + k`). Default: a random seed.
    * `:drop_last` - drop the last batch when it is smaller than `:batch_size`
      (default `false`).

      iex> loader = ExBurn.Dataset.loader({Nx.iota({5, 2}), Nx.iota({5})}, batch_size: 2, shuffle: false)
      iex> Enum.map(loader, fn {_x, y} -> Nx.to_flat_list(y) end)
      [[0, 1], [2, 3], [4]]
  """
  @spec loader(data(), keyword()) :: Enumerable.t()
  def loader(data, opts \\ []) do
    op = "ExBurn.Dataset.loader"
    {x, y} = data!(op, data)
    opts = options!(op, opts, batch_size: 32, shuffle: true, seed: nil, drop_last: false)
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

  ## Statistics and normalisation

  @doc """
  Returns basic statistics about a dataset `{x, y}`: `%{num_samples, input_shape,
  target_shape, input_type, target_type}` (shapes without the axis of samples, types as Nx
  types).

      s = ExBurn.Dataset.stats({x, y})
      IO.puts("Samples: \#{s.num_samples}")

  Given a tensor `x` instead, its per-feature statistics over the first axis: `%{mean:, std:,
  min:, max:}`, each of `x`'s shape without the first axis (`std` the population standard
  deviation; `mean` and `std` floats, `min` and `max` of `x`'s type).

      iex> s = ExBurn.Dataset.stats({Nx.iota({4, 3}), Nx.iota({4})})
      iex> {s.num_samples, s.input_shape, s.target_shape, s.input_type}
      {4, {3}, {}, {:s, 32}}

      iex> s = ExBurn.Dataset.stats(Nx.tensor([[1.0, 10.0], [3.0, 10.0]]))
      iex> {Nx.to_flat_list(s.mean), Nx.to_flat_list(s.std), Nx.to_flat_list(s.min), Nx.to_flat_list(s.max)}
      {[2.0, 10.0], [1.0, 0.0], [1.0, 10.0], [3.0, 10.0]}
  """
  @spec stats(dataset() | Nx.Tensor.t()) :: map()
  def stats({_x, _y} = data) do
    {x, y} = data!("ExBurn.Dataset.stats", data)

    %{
      num_samples: examples(x),
      input_shape: Tuple.delete_at(x.shape, 0),
      target_shape: Tuple.delete_at(y.shape, 0),
      input_type: x.type,
      target_type: y.type
    }
  end

  def stats(x), do: feature_stats("ExBurn.Dataset.stats", examples!("ExBurn.Dataset.stats", x), [0])

  defp feature_stats(op, x, axes) do
    axes = axes!(op, x, axes)
    xf = if Nx.Type.float?(x.type), do: x, else: Nx.as_type(x, :f32)

    %{
      mean: Nx.mean(xf, axes: axes),
      std: Nx.standard_deviation(xf, axes: axes),
      min: Nx.reduce_min(x, axes: axes),
      max: Nx.reduce_max(x, axes: axes)
    }
  end

  defp axes!(op, x, axes) do
    rank = Nx.rank(x)

    if is_list(axes) and axes != [] and Enum.all?(axes, &(is_integer(&1) and &1 >= -rank and &1 < rank)) do
      axes |> Enum.map(&if(&1 < 0, do: &1 + rank, else: &1)) |> Enum.uniq() |> Enum.sort()
    else
      raise ExBurn.Error.new(
              op,
              ":axes must be a non-empty list of axes of x, got #{inspect(axes)}",
              "x #{inspect(x.shape)}"
            )
    end
  end

  @doc """
  Normalizes a tensor and gives `{normalized_tensor, stats}`; `normalize_with_stats/2`
  applies the same `stats` to new data (a test set, requests to a serving).

  ## Options

    * `:method` - `:standard` (z-score, the default): `(x - mean) / std`; `:minmax` (also
      `:min_max`): `(x - min) / (max - min)`, into `[0, 1]`; `:l2`: `x / norm`, the
      Euclidean norm over `:axes`.
    * `:axes` - the axes to compute the statistics over (default `[0]`: per feature, over the
      samples).

  A constant feature (zero `std`, `max == min`, or a zero norm) is divided by 1 instead.

      {train_norm, stats} = ExBurn.Dataset.normalize(train_x, method: :standard)
      test_norm = ExBurn.Dataset.normalize_with_stats(test_x, stats)

      iex> {z, _stats} = ExBurn.Dataset.normalize(Nx.tensor([[1.0, 5.0], [3.0, 5.0]]))
      iex> Nx.to_flat_list(z)
      [-1.0, 0.0, 1.0, 0.0]
  """
  @spec normalize(Nx.Tensor.t(), keyword()) :: {Nx.Tensor.t(), map()}
  def normalize(tensor, opts \\ []) do
    op = "ExBurn.Dataset.normalize"
    opts = options!(op, opts, method: :standard, axes: [0])
    x = examples!(op, tensor)
    method = method!(op, opts[:method])
    axes = axes!(op, x, opts[:axes])

    stats =
      case method do
        :l2 ->
          xf = if Nx.Type.float?(x.type), do: x, else: Nx.as_type(x, :f32)
          %{norm: xf |> Nx.pow(2) |> Nx.sum(axes: axes) |> Nx.sqrt()}

        _ ->
          feature_stats(op, x, axes)
      end
      |> Map.merge(%{method: method, axes: axes})

    {do_normalize(op, x, stats, method), stats}
  end

  @doc """
  Normalizes a tensor using pre-computed statistics (of `normalize/2`, whose `:method` and
  `:axes` they hold; or of `stats/1`, standardised per feature). Useful for applying the
  same normalization to test/validation data. Option `:method` overrides the stats' method.

      {train_norm, stats} = ExBurn.Dataset.normalize(train_x)
      test_norm = ExBurn.Dataset.normalize_with_stats(test_x, stats)
  """
  @spec normalize_with_stats(Nx.Tensor.t(), map(), keyword()) :: Nx.Tensor.t()
  def normalize_with_stats(tensor, stats, opts \\ []) do
    op = "ExBurn.Dataset.normalize_with_stats"
    opts = options!(op, opts, method: nil)
    x = examples!(op, tensor)

    unless is_map(stats),
      do:
        raise(
          ExBurn.Error.new(op, "stats must be the map of normalize/2 or stats/1", "got #{inspect(stats, limit: 5)}")
        )

    method = method!(op, opts[:method] || Map.get(stats, :method, :standard))
    do_normalize(op, x, stats, method)
  end

  defp method!(_op, m) when m in [:standard, :l2], do: m
  defp method!(_op, m) when m in [:minmax, :min_max], do: :minmax

  defp method!(op, other),
    do: raise(ExBurn.Error.new(op, "unknown :method #{inspect(other)}", "methods: :standard, :minmax, :l2"))

  defp do_normalize(op, x, stats, method) do
    axes = Map.get(stats, :axes, [0])

    {shift, scale} =
      case method do
        :standard ->
          {stat!(op, stats, :mean, x, axes), stat!(op, stats, :std, x, axes)}

        :minmax ->
          min = stat!(op, stats, :min, x, axes)
          {min, Nx.subtract(stat!(op, stats, :max, x, axes), min)}

        :l2 ->
          {nil, stat!(op, stats, :norm, x, axes)}
      end

    type = Nx.Type.to_floating(Nx.Type.merge(x.type, Nx.type(scale)))
    scale = Nx.as_type(scale, type)
    scale = Nx.select(Nx.equal(scale, 0), Nx.tensor(1, type: type), scale)
    x = Nx.as_type(x, type)
    x = if shift, do: Nx.subtract(x, shift), else: x
    Nx.divide(x, scale)
  end

  # The statistic `key`, checked against x's shape less `axes`, with those axes put back
  # (of size 1) so that it broadcasts against x.
  defp stat!(op, stats, key, x, axes) do
    reduced =
      x.shape
      |> Tuple.to_list()
      |> Enum.with_index()
      |> Enum.reject(&(elem(&1, 1) in axes))
      |> Enum.map(&elem(&1, 0))
      |> List.to_tuple()

    case stats do
      %{^key => %Nx.Tensor{shape: ^reduced} = t} ->
        Enum.reduce(axes, t, &Nx.new_axis(&2, &1))

      %{^key => %Nx.Tensor{shape: shape}} ->
        raise ExBurn.Error.new(
                op,
                "stats.#{key} has shape #{inspect(shape)}, not x's feature shape #{inspect(reduced)}",
                "x #{inspect(x.shape)}, axes #{inspect(axes)}"
              )

      _ ->
        raise ExBurn.Error.new(
                op,
                "stats has no tensor #{inspect(key)}",
                "stats keys: #{inspect(Map.keys(stats))}"
              )
    end
  end

  ## Labels

  @doc """
  Applies one-hot encoding to integer class labels: a new last axis of `num_classes`, 1.0
  where the column is the label and 0.0 elsewhere. `labels` is a tensor of integer class
  indices (any shape).

  ## Options

    * `:num_classes` - the total number of classes (default: the largest label + 1).
    * `:type` - the type of the result (default `:f32`).

  The number of classes may also be given as the second argument: `one_hot(labels, 10)`.
  Labels outside `0..num_classes-1` raise.

      iex> ExBurn.Dataset.one_hot(Nx.tensor([0, 2, 1]), num_classes: 3) |> Nx.to_list()
      [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]

      iex> ExBurn.Dataset.one_hot(Nx.tensor([2, 0]), 3) |> Nx.to_flat_list()
      [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
  """
  @spec one_hot(Nx.Tensor.t(), keyword() | pos_integer(), keyword()) :: Nx.Tensor.t()
  def one_hot(labels, opts \\ [], more \\ [])

  def one_hot(labels, num_classes, opts) when is_integer(num_classes),
    do: one_hot(labels, Keyword.put(opts, :num_classes, num_classes), [])

  def one_hot(labels, opts, []) when is_list(opts) do
    op = "ExBurn.Dataset.one_hot"
    opts = options!(op, opts, num_classes: nil, type: :f32)

    unless match?(%Nx.Tensor{}, labels) and Nx.Type.integer?(labels.type) do
      raise ExBurn.Error.new(op, "labels must be a tensor of integers", "got #{describe(labels)}")
    end

    {lo, hi} = {Nx.to_number(Nx.reduce_min(labels)), Nx.to_number(Nx.reduce_max(labels))}
    num_classes = opts[:num_classes] || max(hi + 1, 1)

    unless is_integer(num_classes) and num_classes > 0 do
      raise ExBurn.Error.new(
              op,
              "num_classes must be a positive integer, got #{inspect(num_classes)}",
              "labels #{inspect(labels.shape)}"
            )
    end

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

  def one_hot(_labels, other, _more),
    do:
      raise(
        ExBurn.Error.new(
          "ExBurn.Dataset.one_hot",
          "expected options (num_classes: n) or a number of classes, got #{inspect(other, limit: 5)}"
        )
      )

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
