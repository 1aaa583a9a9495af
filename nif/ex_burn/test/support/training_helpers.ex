defmodule ExBurn.TrainingHelpers do
  @moduledoc false
  # What the training tests (training_steps_test.exs, training_fit_test.exs,
  # training_callbacks_test.exs, training_errors_test.exs) share: a linear model with the
  # mean squared error and its steps computed by hand on Nx.BinaryBackend (the gradient
  # x^T (2 (x w + b - y) / n), each optimizer, clipping and weight decay as the formulas
  # say), and a small classifier on two separable clusters.
  import ExUnit.Assertions

  alias ExBurn.Model
  alias ExBurn.Training

  ## The linear model and its hand-computed steps

  def w0, do: Nx.tensor([[0.5], [-0.3]], backend: Nx.BinaryBackend)
  def b0, do: Nx.tensor([0.1], backend: Nx.BinaryBackend)

  def batches do
    [
      {Nx.tensor([[1.0, 2.0], [-1.0, 0.5], [0.5, -1.5], [2.0, 1.0]]), Nx.tensor([[1.0], [-0.5], [2.0], [0.0]])},
      {Nx.tensor([[0.0, 1.0], [1.5, -0.5], [-2.0, 1.0], [1.0, 1.0]]), Nx.tensor([[0.5], [1.0], [-1.0], [3.0]])}
    ]
  end

  def linear(optimizer, opts \\ []) do
    Axon.input("x", shape: {nil, 2})
    |> Axon.dense(1, name: "lin")
    |> Model.compile(Keyword.merge([loss: :mse, optimizer: optimizer, seed: 0], opts))
    |> Model.update_params(%{"lin.kernel" => w0(), "lin.bias" => b0()})
  end

  def bin(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  # d(mean((x w + b - y)^2)) / d{w, b}, by hand.
  def hand_grad(%{"lin.kernel" => w, "lin.bias" => b}, x, y) do
    {x, y} = {bin(x), bin(y)}
    d = x |> Nx.dot(w) |> Nx.add(b) |> Nx.subtract(y) |> Nx.multiply(2 / Nx.size(y))
    %{"lin.kernel" => Nx.dot(Nx.transpose(x), d), "lin.bias" => Nx.sum(d, axes: [0])}
  end

  def hand_loss(%{"lin.kernel" => w, "lin.bias" => b}, x, y),
    do: bin(x) |> Nx.dot(w) |> Nx.add(b) |> Nx.subtract(bin(y)) |> Nx.pow(2) |> Nx.mean()

  def zip(a, b, fun), do: Map.new(a, fn {k, v} -> {k, fun.(v, Map.fetch!(b, k))} end)
  def each(a, fun), do: Map.new(a, fn {k, v} -> {k, fun.(v)} end)

  # The optimizer's direction (before the learning rate) for gradient g at step t (from 1).
  defp direction({:sgd, o}, g, _p, s, _t) do
    # SGD's documented default momentum is 0.9; momentum: nil is plain SGD.
    case Keyword.get(o, :momentum, 0.9) do
      nil ->
        {g, s}

      m ->
        trace = zip(g, s[:trace] || each(g, &Nx.multiply(&1, 0)), fn g, tr -> Nx.add(Nx.multiply(tr, m), g) end)
        u = if o[:nesterov], do: zip(g, trace, fn g, tr -> Nx.add(Nx.multiply(tr, m), g) end), else: trace
        {u, %{trace: trace}}
    end
  end

  defp direction({kind, o}, g, p, s, t) when kind in [:adam, :adamw] do
    {b1, b2, eps, eps_root} =
      {o[:b1] || 0.9, o[:b2] || 0.999, o[:eps] || 1.0e-8, o[:eps_root] || if(kind == :adam, do: 1.0e-15, else: 0.0)}

    zero = each(g, &Nx.multiply(&1, 0))
    mu = zip(g, s[:mu] || zero, fn g, m -> Nx.add(Nx.multiply(1 - b1, g), Nx.multiply(b1, m)) end)
    nu = zip(g, s[:nu] || zero, fn g, v -> Nx.add(Nx.multiply(1 - b2, Nx.pow(g, 2)), Nx.multiply(b2, v)) end)

    u =
      zip(mu, nu, fn m, v ->
        Nx.divide(
          Nx.divide(m, 1 - :math.pow(b1, t)),
          Nx.add(Nx.sqrt(Nx.add(Nx.divide(v, 1 - :math.pow(b2, t)), eps_root)), eps)
        )
      end)

    u = if kind == :adamw, do: zip(u, p, fn u, p -> Nx.add(u, Nx.multiply(o[:weight_decay] || 1.0e-2, p)) end), else: u
    {u, %{mu: mu, nu: nu}}
  end

  defp direction({:rmsprop, o}, g, _p, s, _t) do
    d = o[:decay] || 0.9

    nu =
      zip(g, s[:nu] || each(g, &Nx.multiply(&1, 0)), fn g, v ->
        Nx.add(Nx.multiply(1 - d, Nx.pow(g, 2)), Nx.multiply(d, v))
      end)

    {zip(g, nu, fn g, v -> Nx.multiply(Nx.rsqrt(Nx.add(v, o[:eps] || 1.0e-8)), g) end), %{nu: nu}}
  end

  # Parameters after the hand-computed steps on `batches`, learning rate `lr.(t)`.
  def reference(optimizer, batches, lr, opts \\ []) do
    p0 = %{"lin.kernel" => w0(), "lin.bias" => b0()}

    batches
    |> Enum.with_index(1)
    |> Enum.reduce({p0, %{}}, fn {{x, y}, t}, {p, s} ->
      g = hand_grad(p, x, y)
      g = if c = opts[:clip_value], do: each(g, &Nx.clip(&1, -c, c)), else: g
      g = if c = opts[:clip_norm], do: clip_norm(g, c), else: g
      g = if wd = opts[:l2], do: zip(g, p, fn g, p -> Nx.add(g, Nx.multiply(wd, p)) end), else: g
      {u, s} = direction(optimizer, g, p, s, t)
      {zip(p, u, fn p, u -> Nx.subtract(p, Nx.multiply(lr.(t), u)) end), s}
    end)
    |> elem(0)
  end

  defp clip_norm(g, c) do
    norm = g |> Map.values() |> Enum.map(&(&1 |> Nx.pow(2) |> Nx.sum() |> Nx.to_number())) |> Enum.sum() |> :math.sqrt()
    if norm < c, do: g, else: each(g, &Nx.multiply(&1, c / norm))
  end

  def steps(model, batches, opts \\ []),
    do: Enum.reduce(batches, model, fn b, m -> m |> Training.train_step(b, opts) |> elem(1) end)

  def assert_params(model, want, atol \\ 1.0e-6) do
    got = Model.parameters(model)

    for {name, w} <- want do
      assert Nx.all_close(bin(got[name]), w, atol: atol, rtol: 1.0e-5) |> Nx.to_number() == 1,
             "#{name}: got #{inspect(bin(got[name]))}, want #{inspect(w)}"
    end
  end

  def bytes(model), do: model |> Model.parameters() |> Map.new(fn {k, t} -> {k, Nx.to_binary(t)} end)

  ## A classifier on two clusters

  # Two separable clusters: class 1 around (1, 1), class 0 around (-1, -1).
  def blobs(n) do
    x =
      for i <- 0..(n - 1),
          do: [
            if(rem(i, 2) == 0, do: 1, else: -1) + 0.3 * :math.sin(i),
            if(rem(i, 2) == 0, do: 1, else: -1) + 0.3 * :math.cos(3 * i)
          ]

    y = for i <- 0..(n - 1), do: [if(rem(i, 2) == 0, do: 1.0, else: 0.0)]
    {Nx.tensor(x), Nx.tensor(y)}
  end

  def classifier(opts \\ []) do
    Axon.input("x", shape: {nil, 2})
    |> Axon.dense(1, activation: :sigmoid, name: "out")
    |> Model.compile(Keyword.merge([loss: :binary_cross_entropy, optimizer: :adam, learning_rate: 0.1, seed: 3], opts))
  end

  ## Assertions

  def assert_lrs(got, want) do
    assert length(got) == length(want)
    Enum.zip_with(got, want, &assert_in_delta(&1, &2, 1.0e-9))
  end
end
