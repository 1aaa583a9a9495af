if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Parallel.Shards do
    @moduledoc false
    # The batches of `{x, y}` tensors for a data-parallel fit, each as its devices' shards
    # (ExBurn.Training.Data's `sharded`). At the start of a pass, each device's rows of the
    # whole pass (shard k of every batch, in the pass's order) are gathered on the data's
    # device by one take per tensor and moved to the device by one copy per tensor (device to
    # device on CUDA with NCCL, through the host elsewhere), so that a step moves nothing
    # between devices: each device's shard is a slice of its part. Batch i is
    # `{:shards, y, parts, start, rows}`: `y` the whole batch's targets on the data's device
    # (the loop's `y_true`), `parts` one `{x_k, y_k}` per device, each device's shard the rows
    # `[start, start + rows)` of its part. The batches, and each batch's cut into shards, are
    # the ones that ExBurn.Training.Parallel makes of Data's `batches`.

    alias Nx.Defn.Composite

    @doc false
    # `order` gives a pass's sample order (a list of indices, or nil: in order) from the pass
    # number, which `passes` counts.
    def stream({x, y}, n, batch_size, count, order, passes, backend, devices) do
      shard = div(batch_size, length(devices))

      Stream.resource(
        fn ->
          :counters.add(passes, 1, 1)
          {place(x, y, n, batch_size, count, order.(:counters.get(passes, 1)), backend, devices), 0}
        end,
        fn
          {_placed, ^count} = acc ->
            {:halt, acc}

          {{targets, parts} = placed, i} ->
            start = i * batch_size
            len = min(batch_size, n - start)
            y_batch = Composite.traverse(targets, &Nx.slice_along_axis(&1, start, len, axis: 0))
            {[{:shards, y_batch, parts, i * shard, div(len, length(devices))}], {placed, i + 1}}
        end,
        fn _ -> :ok end
      )
    end

    # The pass's targets in its order on the data's device, and each device's part.
    defp place(x, y, n, batch_size, count, perm, {_, opts} = backend, devices) do
      at = if perm, do: List.to_tuple(perm)
      ndev = length(devices)

      parts =
        for {dev, k} <- Enum.with_index(devices) do
          rows =
            for i <- 0..(count - 1)//1,
                start = i * batch_size,
                s = div(min(batch_size, n - start), ndev),
                j <- (start + k * s)..(start + (k + 1) * s - 1)//1,
                do: if(at, do: elem(at, j), else: j)

          idx = Nx.tensor(rows, type: :s32, backend: backend)
          move = &(&1 |> Nx.take(idx, axis: 0) |> to(dev, opts[:device]))
          {Composite.traverse(x, move), Composite.traverse(y, move)}
        end

      targets =
        if perm,
          do: Composite.traverse(y, &Nx.take(&1, Nx.tensor(perm, type: :s32, backend: backend), axis: 0)),
          else: y

      {targets, parts}
    end

    defp to(t, dev, dev), do: t
    defp to(t, dev, _data_dev), do: Nx.backend_transfer(t, {ExBurn.Backend, device: dev})
  end
end
