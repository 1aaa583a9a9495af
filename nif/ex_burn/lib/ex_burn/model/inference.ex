if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Inference do
    @moduledoc false
    # ExBurn.Model.forward/2, predict/3, forward_pattern/1, compute_loss/3: the inference
    # function of the graph jitted with ExBurn.Defn.Compiler on the model's device (compiled
    # once per input shape and cached by the compiler), and the loss of a prediction.

    alias Nx.Defn.Composite
    alias ExBurn.Model
    alias ExBurn.Model.{Loss, Params, Spec}

    def forward(model, input) do
      fun = "ExBurn.Model.forward"

      result(fun, fn ->
        Spec.check_input!(model.input, input, fun)
        run(model, input)
      end)
    end

    def predict(model, input, opts) do
      fun = "ExBurn.Model.predict"
      opts = Model.options!(opts, [:batch_size], fun)

      result(fun, fn ->
        size = Spec.check_input!(model.input, input, fun)

        case opts[:batch_size] do
          nil ->
            run(model, input)

          n when is_integer(n) and n > 0 ->
            0..(size - 1)//n
            |> Enum.map(fn start -> run(model, slice(input, start, min(n, size - start))) end)
            |> concatenate()

          other ->
            raise ArgumentError, "#{fun}: :batch_size must be a positive integer, got #{inspect(other)}"
        end
      end)
    end

    # {:ok, value} of `body`, or {:error, message}: a bad input or a device failure.
    defp result(fun, body) do
      {:ok, body.()}
    rescue
      e in [ArgumentError, ExBurn.Error, ExCubecl.Error] -> {:error, prefixed(fun, Exception.message(e))}
    end

    defp prefixed(fun, message), do: if(String.starts_with?(message, fun), do: message, else: "#{fun}: #{message}")

    def run(model, input), do: Nx.Defn.jit(model.predict_fn, Model.jit_opts(model)).(model.state, input)

    defp slice(%Nx.Tensor{} = t, start, len), do: Nx.slice_along_axis(t, start, len, axis: 0)
    defp slice(%{} = inputs, start, len), do: Map.new(inputs, fn {k, v} -> {k, slice(v, start, len)} end)

    defp concatenate([single]), do: single
    defp concatenate([%Nx.Tensor{} | _] = outs), do: Nx.concatenate(outs)

    defp concatenate([tuple | _] = outs) when is_tuple(tuple),
      do: outs |> Enum.map(&Tuple.to_list/1) |> Enum.zip_with(&concatenate/1) |> List.to_tuple()

    defp concatenate([%{} = map | _] = outs),
      do: Map.new(map, fn {k, _} -> {k, concatenate(Enum.map(outs, & &1[k]))} end)

    def pattern(%Model{output: output}) do
      case output do
        %Nx.Tensor{shape: shape, type: type} ->
          %{output_shape: put_elem(shape, 0, nil), output_type: type_atom(type)}

        _container ->
          [first | _] = Composite.flatten_list([output])
          %{output_shape: nil, output_type: type_atom(first.type)}
      end
    end

    defp type_atom({kind, bits}), do: String.to_atom("#{kind}#{bits}")

    def compute_loss(%Model{} = model, pred, target) do
      fun = "ExBurn.Model.compute_loss"

      result(fun, fn ->
        unless match?(%Nx.Tensor{}, pred) and match?(%Nx.Tensor{}, target),
          do: raise(ArgumentError, "predictions and targets must be tensors")

        loss_fn = Loss.fun(model.loss_fn, model.loss_opts, model.output_activation)
        wd = model.weight_decay

        l2_fn = fn params ->
          params
          |> Params.flatten()
          |> Map.values()
          |> Enum.filter(&Nx.Type.float?(Nx.type(&1)))
          |> Enum.reduce(Nx.tensor(0.0), fn p, acc -> Nx.add(acc, Nx.sum(Nx.pow(p, 2))) end)
          |> Nx.multiply(wd / 2)
        end

        backend = Model.backend(model)
        [pred, target] = Enum.map([pred, target], &Params.on_backend(&1, backend))

        jitted =
          if wd > 0,
            do: fn state, y_pred, y_true ->
              Nx.add(loss_fn.(y_true, y_pred), l2_fn.(Axon.ModelState.trainable_parameters(state)))
            end,
            else: fn _state, y_pred, y_true -> loss_fn.(y_true, y_pred) end

        Nx.Defn.jit(jitted, Model.jit_opts(model)).(model.state, pred, target)
      end)
    end
  end
end
