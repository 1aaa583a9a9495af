defmodule ExBurn.Serving.Server do
  @moduledoc """
  The `Nx.Serving` callbacks of `ExBurn.Serving`: one compiled model function per partition
  (`init/3`), on the partition's device with the parameters placed there at
  `ExBurn.Serving.build/2`, and each batch dispatched to its partition's function
  (`handle_batch/3`), padded to the batch size when the serving pads. The metadata of a
  batch (`Nx.Serving`'s telemetry) names its partition and device.

  Build servings with `ExBurn.Serving.build/2`; this module is the `Nx.Serving` module they
  name.
  """
  @behaviour Nx.Serving

  alias Nx.Defn.Composite

  @impl true
  def init(_inline_or_process, arg, partitions) do
    # A started serving's partitions each name a device (the compiler's
    # __partitions_options__/1); an inline run gets the serving's list: its first device.
    devices =
      for defn_options <- partitions do
        case defn_options[:device] do
          [first | _] -> first
          device -> device
        end
      end

    funs =
      for {defn_options, dev} <- Enum.zip(partitions, devices) do
        defn_options = defn_options |> Keyword.delete(:batch_keys) |> Keyword.put(:device, dev)
        batch_fun(%{arg | params: arg.params && Map.fetch!(arg.params, dev)}, defn_options)
      end

    {:ok, Map.merge(arg, %{funs: List.to_tuple(funs), devices: List.to_tuple(devices)})}
  end

  # A function of the batch's inputs. Padded batches all have :batch_size rows: with the
  # example known, the model is compiled here for that shape (a serving process compiles when
  # it starts). Otherwise the model is jitted, compiled on the first batch of each size (and
  # cached by ExBurn.Defn.Compiler).
  defp batch_fun(%{fun: fun, params: params, example: example, batch_size: size, padding: padding}, defn_options) do
    args = if params, do: [params], else: []

    compiled =
      case {example, padding} do
        {%Nx.Tensor{shape: shape, type: type}, true} ->
          batch = Nx.template(Tuple.insert_at(shape, 0, size), type)
          Nx.Defn.compile(fun, Enum.map(args, &Nx.to_template/1) ++ [batch], defn_options)

        _ ->
          Nx.Defn.jit(fun, defn_options)
      end

    fn inputs -> apply(compiled, args ++ [inputs]) end
  end

  # A batch is the requests' `{inputs, rows}` (`ExBurn.Serving`'s client side numbers each
  # request's rows on the host). The partition's task builds the inputs on its device
  # (`ExBurn.Serving.Batch`: the host parts in one upload) and runs its function on them; the
  # rows' numbers stay on the host and go back beside the outputs.
  @impl true
  def handle_batch(%Nx.Batch{size: size, pad: pad} = batch, partition, state) do
    pad = if state.padding, do: max(state.batch_size - size, 0), else: pad
    fun = elem(state.funs, partition)
    dev = elem(state.devices, partition)

    {:execute,
     fn ->
       {inputs, rows} = ExBurn.Serving.Batch.build(batch, pad, dev)
       metadata = %{size: size, device: dev, partition: partition}
       {{check_output!(fun.(inputs), size + pad), rows}, metadata}
     end, state}
  end

  defp check_output!(output, rows) do
    Composite.traverse(output, fn
      %Nx.Tensor{shape: shape} = t when tuple_size(shape) > 0 and elem(shape, 0) == rows ->
        t

      t ->
        raise ExBurn.Error.new(
                "ExBurn.Serving",
                "the model's outputs must keep the batch axis first: a batch of #{rows} gave #{inspect(Nx.shape(t))}",
                "output #{inspect(output)}"
              )
    end)
  end
end
