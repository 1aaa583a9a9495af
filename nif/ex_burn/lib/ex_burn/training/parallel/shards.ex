if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Parallel.Shards do
    @moduledoc false
    # The batches of `{x, y}` tensors for a data-parallel fit, each as its devices' shards
    # (ExBurn.Training.Data's `sharded`). In a pass, at its first step, each device's rows of
    # the whole pass (shard k of every batch, in the pass's order) are gathered on the data's
    # device by one take per tensor and moved to the device by one copy per tensor (device to
    # device on CUDA with NCCL, through the host elsewhere), so that a step moves nothing
    # between devices: each device's shard is a slice of its part. Batch i is
    # `{:shards, y, pass, start, rows}`: `y` the whole batch's targets on the data's device
    # (the loop's `y_true`), `pass` what `parts/1` takes to give one `{x_k, y_k}` per device,
    # each device's shard the rows `[start, start + rows)` of its part. The batches, and each
    # batch's cut into shards, are the ones that ExBurn.Training.Parallel makes of Data's
    # `batches`.
    #
    # The parts are made by the first step that asks for them, and kept by the process that
    # enumerates the batches (the loop's, which runs the steps) until the pass ends: a pass
    # that gives a batch without a step (Axon.Loop.run/4 takes one as a sample) makes none.

    alias Nx.Defn.Composite

    @doc false
    # `order` gives a pass's sample order (a list of indices, or nil: in order) from the pass
    # number, which `passes` counts.
    def stream({x, y}, n, batch_size, count, order, passes, backend, devices) do
      shard = div(batch_size, length(devices))

      Stream.resource(
        fn ->
          :counters.add(passes, 1, 1)
          perm = order.(:counters.get(passes, 1))
          targets = if perm, do: Composite.traverse(y, &Nx.take(&1, index(perm, backend), axis: 0)), else: y
          pass = {make_ref(), fn -> place(x, y, n, batch_size, count, perm, backend, devices) end}
          {targets, pass, 0}
        end,
        fn
          {_targets, _pass, ^count} = acc ->
            {:halt, acc}

          {targets, pass, i} ->
            start = i * batch_size
            len = min(batch_size, n - start)
            y_batch = Composite.traverse(targets, &Nx.slice_along_axis(&1, start, len, axis: 0))
            {[{:shards, y_batch, pass, i * shard, div(len, length(devices))}], {targets, pass, i + 1}}
        end,
        fn {_targets, {key, _place}, _i} -> release(key) end
      )
    end

    @doc false
    # The devices' parts of a pass: `[{x_k, y_k}]`.
    def parts({key, place}) do
      case Process.get({__MODULE__, key}) do
        nil -> tap(place.(), &Process.put({__MODULE__, key}, &1))
        parts -> parts
      end
    end

    # The pass's parts, if made, forgotten, and their device memory given back (a step's shard
    # is a view that keeps its own hold on the memory).
    defp release(key) do
      case Process.delete({__MODULE__, key}) do
        nil -> :ok
        parts -> for {xs, ys} <- parts, t <- Composite.flatten_list([xs, ys]), do: Nx.backend_deallocate(t)
      end
    end

    defp index(rows, backend), do: Nx.tensor(rows, type: :s32, backend: backend)

    # Each device's part of a pass: its rows of every batch, in order, on it. The rows
    # gathered for another device are given back once copied: the runtime makes the data's
    # device wait for the send (`to_device` in docs/distributed.md).
    defp place(x, y, n, batch_size, count, perm, {_, opts} = backend, devices) do
      at = if perm, do: List.to_tuple(perm)
      ndev = length(devices)

      for {dev, k} <- Enum.with_index(devices) do
        rows =
          for i <- 0..(count - 1)//1,
              start = i * batch_size,
              s = div(min(batch_size, n - start), ndev),
              j <- (start + k * s)..(start + (k + 1) * s - 1)//1,
              do: if(at, do: elem(at, j), else: j)

        idx = index(rows, backend)
        move = &(&1 |> Nx.take(idx, axis: 0) |> to(dev, opts[:device]))
        {Composite.traverse(x, move), Composite.traverse(y, move)}
      end
    end

    defp to(t, dev, dev), do: t
    defp to(t, dev, _data_dev), do: Nx.backend_transfer(t, {ExBurn.Backend, device: dev})
  end
end
