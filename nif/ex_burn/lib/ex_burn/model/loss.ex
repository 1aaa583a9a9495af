if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Loss do
    @moduledoc """
    The losses of `ExBurn.Model.compile/2` and their accuracy, as functions of
    `(y_true, y_pred)` that trace into a compiled call.

      * `:cross_entropy` - categorical cross-entropy. What the model outputs is read from its
        Axon graph: a model whose output layer is `softmax` gives probabilities (the loss takes
        `log(clip(p, 1e-7, 1))`), one ending in `log_softmax` gives log-probabilities, any
        other (the documents' `Axon.dense(10)`) gives logits, and the loss takes their
        log-softmax (`x - logsumexp(x)`, stable for any magnitude). Targets are one-hot
        (the output's shape) or integer class indices (the output's shape without its last
        axis, or with a last axis of 1).
      * `:binary_cross_entropy` - from probabilities when the output layer is `sigmoid`
        (clipped to `[1e-7, 1 - 1e-7]`), else from logits
        (`max(x, 0) - x y + log(1 + exp(-|x|))`). Targets 0.0 / 1.0 of the output's shape
        (or without its last axis of 1).
      * `:mse` - the mean of the squared differences.

    Each is the mean over the batch. `loss_opts: [from_logits: boolean]` overrides what the
    graph says; `sparse:` is accepted for compatibility and ignored (index targets are
    recognised by their shape). A function `(y_true, y_pred) -> scalar` is a loss too.
    """

    @losses [:cross_entropy, :mse, :binary_cross_entropy]
    @eps 1.0e-7

    @doc "The loss names."
    def names, do: @losses

    @doc """
    Checks a loss and its options; raises `ArgumentError` naming `fun`. Gives `{loss, opts}`.
    """
    @spec validate!(term(), keyword(), String.t()) :: {atom() | function(), keyword()}
    def validate!(loss, opts, fun) when loss in @losses do
      allowed = if loss == :mse, do: [], else: [:from_logits, :sparse]

      case Enum.uniq(Keyword.keys(opts)) -- allowed do
        [] ->
          :ok

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown loss option(s) #{inspect(unknown)} for #{inspect(loss)} (options: #{inspect(allowed)})"
      end

      for {key, value} <- opts,
          not is_boolean(value),
          do: raise(ArgumentError, "#{fun}: loss option #{inspect(key)} must be a boolean, got #{inspect(value)}")

      {loss, opts}
    end

    def validate!(loss, [], _fun) when is_function(loss, 2), do: {loss, []}

    def validate!(loss, _opts, fun),
      do:
        raise(
          ArgumentError,
          "#{fun}: unknown loss #{inspect(loss)} (losses: #{Enum.map_join(@losses, ", ", &inspect/1)}, or a function of (y_true, y_pred))"
        )

    @doc """
    What the output layer of an Axon graph gives: `:softmax`, `:log_softmax`, `:sigmoid`
    (the op of its output node), or `nil` (anything else: logits or values).
    """
    @spec output_activation(Axon.t()) :: :softmax | :log_softmax | :sigmoid | nil
    def output_activation(%Axon{output: id, nodes: nodes}) do
      case nodes do
        %{^id => %Axon.Node{op_name: op}} when op in [:softmax, :log_softmax, :sigmoid] -> op
        _ -> nil
      end
    end

    @doc """
    The loss function `(y_true, y_pred) -> mean loss` of `loss` with `opts`, for a model whose
    output layer is `activation` (`output_activation/1`).
    """
    @spec fun(atom() | function(), keyword(), atom() | nil) :: (Nx.Tensor.t(), Nx.Tensor.t() -> Nx.Tensor.t())
    def fun(loss, _opts, _activation) when is_function(loss, 2), do: loss

    def fun(:mse, _opts, _activation), do: &mse/2

    def fun(:cross_entropy, opts, activation) do
      source = source(opts, activation, :softmax)
      &cross_entropy(&1, &2, source)
    end

    def fun(:binary_cross_entropy, opts, activation) do
      source = source(opts, activation, :sigmoid)
      &binary_cross_entropy(&1, &2, source)
    end

    # What y_pred holds: :logits, :probabilities or :log_probabilities.
    defp source(opts, activation, probabilities) do
      case {opts[:from_logits], activation} do
        {true, _} -> :logits
        {false, :log_softmax} when probabilities == :softmax -> :log_probabilities
        {false, _} -> :probabilities
        {nil, ^probabilities} -> :probabilities
        {nil, :log_softmax} when probabilities == :softmax -> :log_probabilities
        {nil, _} -> :logits
      end
    end

    @doc "Mean squared error; targets of the output's shape (or without its last axis of 1)."
    def mse(y_true, y_pred) do
      y_true = like(y_true, y_pred, "mse")
      y_pred |> Nx.subtract(y_true) |> Nx.pow(2) |> Nx.mean()
    end

    @doc """
    Categorical cross-entropy of `y_pred` (`:logits`, `:probabilities` or
    `:log_probabilities`) against one-hot or index targets.
    """
    def cross_entropy(y_true, y_pred, source) do
      log_p =
        case source do
          :logits -> Nx.subtract(y_pred, Nx.logsumexp(y_pred, axes: [-1], keep_axes: true))
          :probabilities -> y_pred |> Nx.clip(@eps, 1.0) |> Nx.log()
          :log_probabilities -> y_pred
        end

      targets = class_targets(y_true, y_pred, "cross_entropy")
      targets |> Nx.multiply(log_p) |> Nx.sum(axes: [-1]) |> Nx.negate() |> Nx.mean()
    end

    @doc "Binary cross-entropy of `y_pred` (`:logits` or `:probabilities`) against 0/1 targets."
    def binary_cross_entropy(y_true, y_pred, source) do
      y = like(y_true, y_pred, "binary_cross_entropy")

      case source do
        :probabilities ->
          p = Nx.clip(y_pred, @eps, 1 - @eps)
          one = Nx.tensor(1, type: Nx.type(p))

          Nx.add(Nx.multiply(y, Nx.log(p)), Nx.multiply(Nx.subtract(one, y), Nx.log(Nx.subtract(one, p))))
          |> Nx.negate()
          |> Nx.mean()

        _logits ->
          x = y_pred

          Nx.max(x, 0)
          |> Nx.subtract(Nx.multiply(x, y))
          |> Nx.add(Nx.log1p(Nx.exp(Nx.negate(Nx.abs(x)))))
          |> Nx.mean()
      end
    end

    @doc """
    The accuracy function `(y_true, y_pred) -> fraction correct` that goes with a loss, or `nil`
    where there is none (`:mse`, a function): the arg-max class for `:cross_entropy`, the
    decision at 0.5 (probabilities) or 0 (logits) for `:binary_cross_entropy`.
    """
    @spec accuracy(atom() | function(), keyword(), atom() | nil) ::
            (Nx.Tensor.t(), Nx.Tensor.t() -> Nx.Tensor.t()) | nil
    def accuracy(:cross_entropy, _opts, _activation) do
      fn y_true, y_pred ->
        predicted = Nx.argmax(y_pred, axis: -1)

        wanted =
          if index_targets?(y_true, y_pred),
            do: index_shape(y_true, y_pred),
            else: Nx.argmax(y_true, axis: -1)

        predicted |> Nx.equal(Nx.as_type(wanted, Nx.type(predicted))) |> Nx.as_type(:f32) |> Nx.mean()
      end
    end

    def accuracy(:binary_cross_entropy, opts, activation) do
      threshold = if source(opts, activation, :sigmoid) == :probabilities, do: 0.5, else: 0.0

      fn y_true, y_pred ->
        y = like(y_true, y_pred, "binary_cross_entropy")
        Nx.greater(y_pred, threshold) |> Nx.equal(Nx.greater(y, 0.5)) |> Nx.as_type(:f32) |> Nx.mean()
      end
    end

    def accuracy(_loss, _opts, _activation), do: nil

    @doc """
    Whether `y_true` fits a model output of shape `out` (with the batch axis) for `loss`:
    `:ok` or `{:error, what is wrong}`.
    """
    @spec check_targets(atom() | function(), tuple(), tuple()) :: :ok | {:error, String.t()}
    def check_targets(loss, _y, _out) when is_function(loss), do: :ok

    def check_targets(:cross_entropy, y, out) do
      if y == out or index_shape?(y, out),
        do: :ok,
        else: {:error, "one-hot targets of the output's shape or integer class indices"}
    end

    def check_targets(_loss, y, out) do
      if y == out or
           (tuple_size(out) >= 1 and y == Tuple.delete_at(out, tuple_size(out) - 1) and
              elem(out, tuple_size(out) - 1) == 1),
         do: :ok,
         else: {:error, "targets of the output's shape"}
    end

    # y_true as float targets over the classes of y_pred (one-hot from indices).
    defp class_targets(y_true, y_pred, what) do
      cond do
        index_targets?(y_true, y_pred) ->
          idx = index_shape(y_true, y_pred)
          classes = Nx.iota(Nx.shape(y_pred), axis: -1, type: Nx.type(idx))
          idx |> Nx.new_axis(-1) |> Nx.equal(classes) |> Nx.as_type(Nx.type(y_pred))

        Nx.shape(y_true) == Nx.shape(y_pred) ->
          Nx.as_type(y_true, Nx.type(y_pred))

        true ->
          raise ArgumentError,
                "#{what}: targets of shape #{inspect(Nx.shape(y_true))} fit neither the output #{inspect(Nx.shape(y_pred))} (one-hot) nor its class indices"
      end
    end

    defp index_targets?(y_true, y_pred),
      do: Nx.shape(y_true) != Nx.shape(y_pred) and index_shape?(Nx.shape(y_true), Nx.shape(y_pred))

    # Class indices: the output's shape without its last axis, or with a last axis of 1.
    defp index_shape?(y, out) do
      rank = tuple_size(out)

      rank >= 1 and
        (y == Tuple.delete_at(out, rank - 1) or (tuple_size(y) == rank and y == put_elem(out, rank - 1, 1)))
    end

    defp index_shape(y_true, y_pred) do
      if Nx.rank(y_true) == Nx.rank(y_pred), do: Nx.squeeze(y_true, axes: [-1]), else: y_true
    end

    # y_true in the shape and type of y_pred.
    defp like(y_true, y_pred, what) do
      cond do
        Nx.shape(y_true) == Nx.shape(y_pred) ->
          Nx.as_type(y_true, Nx.type(y_pred))

        Nx.size(y_true) == Nx.size(y_pred) and Nx.rank(y_true) + 1 == Nx.rank(y_pred) ->
          y_true |> Nx.reshape(Nx.shape(y_pred)) |> Nx.as_type(Nx.type(y_pred))

        true ->
          raise ArgumentError,
                "#{what}: targets of shape #{inspect(Nx.shape(y_true))} don't fit the output #{inspect(Nx.shape(y_pred))}"
      end
    end
  end
end
