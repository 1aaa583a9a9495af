defmodule ExBurn.DatasetTest do
  # ExBurn.Dataset on ExBurn.Backend tensors: split sizes and seeded determinism, loaders
  # that cover every example once per pass, statistics and normalisation against sums
  # computed by hand in Elixir, one-hot labels, and the errors.
  use ExUnit.Case, async: true

  alias ExBurn.Dataset

  doctest ExBurn.Dataset

  # 20 examples of 3 features; row i is [i, 10 * i, 7] and its label is i, so every batch
  # says which examples it holds and whether x and y stayed paired.
  defp data(n \\ 20) do
    x = Nx.tensor(for(i <- 0..(n - 1), do: [i * 1.0, i * 10.0, 7.0]))
    {x, Nx.iota({n}, type: :s32)}
  end

  defp labels(y), do: Nx.to_flat_list(y)

  defp assert_paired({x, y}) do
    assert x.data.__struct__ == ExBurn.Backend and y.data.__struct__ == ExBurn.Backend
    assert Enum.map(Nx.to_list(x), &trunc(hd(&1))) == labels(y)
  end

  describe "split/2" do
    test "sizes follow the fractions, and the sets partition the examples" do
      {train, test} = Dataset.split(data(), test: 0.25)
      assert {Nx.shape(elem(train, 0)), Nx.shape(elem(test, 0))} == {{15, 3}, {5, 3}}
      assert_paired(train)
      assert_paired(test)
      assert Enum.sort(labels(elem(train, 1)) ++ labels(elem(test, 1))) == Enum.to_list(0..19)

      {train, test} = Dataset.split(data(), train: 0.5, test: 0.3)
      assert {Nx.axis_size(elem(train, 1), 0), Nx.axis_size(elem(test, 1), 0)} == {10, 6}
      assert MapSet.disjoint?(MapSet.new(labels(elem(train, 1))), MapSet.new(labels(elem(test, 1))))
    end

    test "the same seed gives the same split; another seed another; shuffle: false keeps the order" do
      run = fn opts -> data() |> Dataset.split(opts) |> then(fn {{_, a}, {_, b}} -> {labels(a), labels(b)} end) end
      assert run.(seed: 7) == run.(seed: 7)
      assert run.(seed: 7) != run.(seed: 8)
      assert elem(run.(seed: 7), 0) != Enum.to_list(0..15)
      assert run.(shuffle: false) == {Enum.to_list(0..15), Enum.to_list(16..19)}
    end

    test "errors name the function and the shapes" do
      {x, _} = data()

      assert_raise ExBurn.Error, ~r/ExBurn.Dataset.split: x has 20 examples but y has 19.*\{20, 3\}.*\{19\}/, fn ->
        Dataset.split({x, Nx.iota({19})})
      end

      assert_raise ExBurn.Error, ~r/split: :test must be a fraction strictly between 0 and 1, got 1.5/, fn ->
        Dataset.split(data(), test: 1.5)
      end

      assert_raise ExBurn.Error, ~r/split: :train must be a fraction.*got 0/, fn -> Dataset.split(data(), train: 0) end
      assert_raise ExBurn.Error, ~r/sum to more than 1/, fn -> Dataset.split(data(), train: 0.7, test: 0.5) end
      assert_raise ExBurn.Error, ~r/leaves 2 train and 0 test/, fn -> Dataset.split(data(2), test: 0.1) end
      assert_raise ExBurn.Error, ~r/data must be a tuple \{x, y\}/, fn -> Dataset.split(x) end
      assert_raise ExBurn.Error, ~r/unknown option\(s\) :tset/, fn -> Dataset.split(data(), tset: 0.2) end
    end
  end

  describe "loader/2" do
    test "batches in order, the last one smaller" do
      loader = Dataset.loader(data(), batch_size: 6, shuffle: false)
      batches = Enum.to_list(loader)
      assert Enum.count(loader) == 4

      assert Enum.map(batches, fn {x, y} -> {Nx.shape(x), Nx.shape(y)} end) == [
               {{6, 3}, {6}},
               {{6, 3}, {6}},
               {{6, 3}, {6}},
               {{2, 3}, {2}}
             ]

      Enum.each(batches, &assert_paired/1)
      assert Enum.flat_map(batches, &labels(elem(&1, 1))) == Enum.to_list(0..19)
    end

    test "shuffled passes cover every example exactly once, in a new order each pass" do
      loader = Dataset.loader(data(), batch_size: 8, shuffle: true, seed: 3)
      passes = for _ <- 1..3, do: Enum.map(loader, fn batch -> assert_paired(batch) && labels(elem(batch, 1)) end)

      for pass <- passes do
        assert Enum.map(pass, &length/1) == [8, 8, 4]
        assert Enum.sort(List.flatten(pass)) == Enum.to_list(0..19)
      end

      orders = Enum.map(passes, &List.flatten/1)
      assert length(Enum.uniq([Enum.to_list(0..19) | orders])) == 4
    end

    test "the same seed gives the same sequence of passes; another seed another" do
      passes = fn seed ->
        loader = Dataset.loader(data(), batch_size: 5, shuffle: true, seed: seed)
        for _ <- 1..2, do: Enum.flat_map(loader, &labels(elem(&1, 1)))
      end

      assert passes.(11) == passes.(11)
      assert passes.(11) != passes.(12)
      # Pass k of seed s is pass 0 of seed s + k.
      assert Enum.at(passes.(11), 1) == hd(passes.(12))
    end

    test "drop_last drops the short batch" do
      loader = Dataset.loader(data(), batch_size: 6, shuffle: true, seed: 1, drop_last: true)
      batches = Enum.to_list(loader)
      assert Enum.count(loader) == 3
      assert Enum.map(batches, &Nx.axis_size(elem(&1, 0), 0)) == [6, 6, 6]
      seen = Enum.flat_map(batches, &labels(elem(&1, 1)))
      assert length(Enum.uniq(seen)) == 18
      # A batch size that divides the examples drops nothing.
      assert Enum.count(Dataset.loader(data(), batch_size: 5, drop_last: true)) == 4
    end

    test "errors: batch size, lengths, options" do
      assert_raise ExBurn.Error, ~r/ExBurn.Dataset.loader: :batch_size must be a positive integer, got 0/, fn ->
        Dataset.loader(data(), batch_size: 0)
      end

      assert_raise ExBurn.Error, ~r/loader: :batch_size must be a positive integer, got 2.5/, fn ->
        Dataset.loader(data(), batch_size: 2.5)
      end

      assert_raise ExBurn.Error, ~r/loader: :batch_size 30 with drop_last: true drops every example/, fn ->
        Dataset.loader(data(), batch_size: 30, drop_last: true)
      end

      assert_raise ExBurn.Error, ~r/loader: x has 20 examples but y has 4/, fn ->
        Dataset.loader({elem(data(), 0), Nx.iota({4})})
      end

      assert_raise ExBurn.Error, ~r/loader: y must have an axis of examples.*y \{\}/, fn ->
        Dataset.loader({elem(data(), 0), Nx.tensor(1)})
      end

      assert_raise ExBurn.Error, ~r/loader: :seed must be an integer/, fn -> Dataset.loader(data(), seed: "x") end
    end
  end

  describe "stats, normalize, normalize_with_stats" do
    @rows [[1.0, -2.0, 5.0], [4.0, 0.5, 5.0], [-3.0, 8.0, 5.0], [2.0, 1.5, 5.0]]

    # Column statistics computed in Elixir.
    defp by_hand(rows) do
      cols = Enum.zip_with(rows, & &1)
      n = length(rows)
      mean = Enum.map(cols, &(Enum.sum(&1) / n))
      std = Enum.zip_with(cols, mean, fn c, m -> :math.sqrt(Enum.sum(Enum.map(c, &((&1 - m) ** 2))) / n) end)
      %{mean: mean, std: std, min: Enum.map(cols, &Enum.min/1), max: Enum.map(cols, &Enum.max/1)}
    end

    defp close(got, want), do: Enum.zip_with(Nx.to_flat_list(got), List.flatten(want), &assert_in_delta(&1, &2, 1.0e-5))

    test "stats/1 against hand computation" do
      stats = Dataset.stats(Nx.tensor(@rows))
      want = by_hand(@rows)
      for key <- [:mean, :std, :min, :max], do: close(stats[key], want[key])
      assert Nx.shape(stats.mean) == {3}
      assert stats.mean.data.__struct__ == ExBurn.Backend

      ints = Dataset.stats(Nx.tensor([[1, 2], [3, 6]]))
      assert {ints.mean.type, ints.min.type} == {{:f, 32}, {:s, 32}}
      close(ints.std, [1.0, 2.0])
    end

    test "normalize/2 standardises each feature; a constant feature becomes 0" do
      {z, stats} = Dataset.normalize(Nx.tensor(@rows))
      %{mean: mean, std: std} = by_hand(@rows)

      want =
        for row <- @rows, do: Enum.zip_with([row, mean, std], fn [v, m, s] -> if s == 0, do: 0.0, else: (v - m) / s end)

      close(z, want)
      close(Nx.mean(z, axes: [0]), [0.0, 0.0, 0.0])
      close(Nx.standard_deviation(z, axes: [0]), [1.0, 1.0, 0.0])
      close(stats.mean, mean)
    end

    test "min_max into [0, 1], and the training stats applied to other data" do
      {z, stats} = Dataset.normalize(Nx.tensor(@rows), method: :min_max)
      close(Nx.reduce_min(z, axes: [0]), [0.0, 0.0, 0.0])
      close(Nx.reduce_max(z, axes: [0]), [1.0, 1.0, 0.0])

      other = Nx.tensor([[5.0, 0.0, 6.0]])
      close(Dataset.normalize_with_stats(other, stats, method: :min_max), [[8.0 / 7.0, 0.2, 1.0]])
      %{mean: [m0, m1, _], std: [s0, s1, _]} = by_hand(@rows)

      close(Dataset.normalize_with_stats(other, Dataset.stats(Nx.tensor(@rows))), [
        [(5.0 - m0) / s0, (0.0 - m1) / s1, 1.0]
      ])
    end

    test "errors: feature shapes, missing stats, rank 0, unknown method" do
      stats = Dataset.stats(Nx.tensor(@rows))

      assert_raise ExBurn.Error,
                   ~r/normalize_with_stats: stats.mean has shape \{3\}, not x's feature shape \{2\}.*x \{4, 2\}/,
                   fn ->
                     Dataset.normalize_with_stats(Nx.iota({4, 2}), stats)
                   end

      assert_raise ExBurn.Error, ~r/stats has no tensor :min/, fn ->
        Dataset.normalize_with_stats(Nx.tensor(@rows), Map.delete(stats, :min), method: :min_max)
      end

      assert_raise ExBurn.Error, ~r/ExBurn.Dataset.stats: x must have an axis of examples/, fn ->
        Dataset.stats(Nx.tensor(1.0))
      end

      assert_raise ExBurn.Error, ~r/normalize: unknown :method :zscore/, fn ->
        Dataset.normalize(Nx.tensor(@rows), method: :zscore)
      end
    end
  end

  describe "one_hot/2" do
    test "rows of the identity, any shape of labels" do
      got = Dataset.one_hot(Nx.tensor([1, 0, 3, 1]), 4)
      assert {got.type, got.shape} == {{:f, 32}, {4, 4}}
      assert Nx.to_list(got) == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
      assert got.data.__struct__ == ExBurn.Backend
      assert Nx.to_list(Dataset.one_hot(Nx.tensor([[2], [0]], type: :u8), 3, type: :s32)) == [[[0, 0, 1]], [[1, 0, 0]]]
    end

    test "errors: labels out of range, float labels, classes" do
      assert_raise ExBurn.Error, ~r/one_hot: labels must lie in 0..2, found 3/, fn ->
        Dataset.one_hot(Nx.tensor([0, 3]), 3)
      end

      assert_raise ExBurn.Error, ~r/one_hot: labels must lie in 0..2, found -1/, fn ->
        Dataset.one_hot(Nx.tensor([0, -1]), 3)
      end

      assert_raise ExBurn.Error, ~r/one_hot: labels must be a tensor of integers.*f32/, fn ->
        Dataset.one_hot(Nx.tensor([0.0]), 3)
      end

      assert_raise ExBurn.Error, ~r/one_hot: num_classes must be a positive integer, got 0/, fn ->
        Dataset.one_hot(Nx.tensor([0]), 0)
      end
    end
  end

  describe "the documented examples" do
    test "split/2 with val_split, loader/2 (shuffled by default), normalize/2, stats/1, one_hot/2" do
      {x, y} = data()

      # Split data into train/validation sets
      {train, val} = ExBurn.Dataset.split({x, y}, val_split: 0.2)

      assert {{%Nx.Tensor{shape: {16, 3}}, %Nx.Tensor{shape: {16}}},
              {%Nx.Tensor{shape: {4, 3}}, %Nx.Tensor{shape: {4}}}} = {train, val}

      {{_, a}, _} = Dataset.split({x, y}, val_split: 0.2, seed: 42)
      {{_, b}, _} = Dataset.split({x, y}, val_split: 0.2, seed: 42)
      assert labels(a) == labels(b)

      # Create a batched data loader
      loader = ExBurn.Dataset.loader({x, y}, batch_size: 32, shuffle: true)
      assert [{%Nx.Tensor{shape: {20, 3}}, %Nx.Tensor{shape: {20}}}] = Enum.to_list(loader)
      shuffled = Dataset.loader({x, y}, batch_size: 20, seed: 5) |> Enum.to_list() |> hd() |> elem(1) |> labels()
      assert Enum.sort(shuffled) == Enum.to_list(0..19) and shuffled != Enum.to_list(0..19)

      me = self()

      ExBurn.Dataset.loader({x, y}, batch_size: 64)
      |> Enum.each(fn {batch_x, batch_y} ->
        # process batch
        send(me, {:batch, Nx.shape(batch_x), Nx.shape(batch_y)})
      end)

      assert_received {:batch, {20, 3}, {20}}

      # Normalize features
      {normalized, stats} = ExBurn.Dataset.normalize(x, method: :standard)
      assert Nx.shape(normalized) == {20, 3}
      assert %{mean: _, std: _, method: :standard} = stats
      {train_x, test_x} = {Nx.slice_along_axis(x, 0, 15), Nx.slice_along_axis(x, 15, 5)}
      {train_norm, stats} = ExBurn.Dataset.normalize(train_x, method: :standard)
      test_norm = ExBurn.Dataset.normalize_with_stats(test_x, stats)
      assert Nx.shape(train_norm) == {15, 3} and Nx.shape(test_norm) == {5, 3}
      {train_norm, stats} = ExBurn.Dataset.normalize(train_x)
      test_norm = ExBurn.Dataset.normalize_with_stats(test_x, stats)

      close(Nx.slice_along_axis(test_norm, 0, 1), [
        [(15 - 7) / :math.sqrt(18.666666), (150 - 70) / :math.sqrt(1866.6666), 0.0]
      ])

      assert Nx.shape(train_norm) == {15, 3}

      one_hot = ExBurn.Dataset.one_hot(Nx.tensor([0, 2, 1]), num_classes: 3)
      assert Nx.to_list(one_hot) == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]

      s = ExBurn.Dataset.stats({x, y})
      assert %{num_samples: 20, input_shape: {3}, target_shape: {}, input_type: {:f, 32}, target_type: {:s, 32}} = s
      assert ExUnit.CaptureIO.capture_io(fn -> IO.puts("Samples: #{s.num_samples}") end) == "Samples: 20\n"
    end

    test "normalize/2 methods :minmax and :l2, and :axes" do
      rows = Nx.tensor([[3.0, 0.0], [4.0, 2.0]])
      {mm, stats} = Dataset.normalize(rows, method: :minmax)
      close(mm, [[0.0, 0.0], [1.0, 1.0]])
      close(Dataset.normalize_with_stats(Nx.tensor([[3.5, 4.0]]), stats), [[0.5, 2.0]])
      {l2, stats} = Dataset.normalize(rows, method: :l2)
      close(l2, [[0.6, 0.0], [0.8, 1.0]])
      close(Dataset.normalize_with_stats(Nx.tensor([[10.0, 4.0]]), stats), [[2.0, 2.0]])
      # per sample: statistics over axis 1
      {per_row, _} = Dataset.normalize(rows, method: :l2, axes: [1])
      close(per_row, [[1.0, 0.0], [0.8944272, 0.4472136]])
      {z, stats} = Dataset.normalize(rows, axes: [1])
      close(z, [[1.0, -1.0], [1.0, -1.0]])
      assert Nx.shape(stats.mean) == {2}

      assert_raise ExBurn.Error, ~r/normalize: :axes must be a non-empty list of axes of x, got \[2\]/, fn ->
        Dataset.normalize(rows, axes: [2])
      end

      assert_raise ExBurn.Error, ~r/split: :val_split and :test are the same option/, fn ->
        Dataset.split(data(), val_split: 0.2, test: 0.2)
      end
    end
  end
end
