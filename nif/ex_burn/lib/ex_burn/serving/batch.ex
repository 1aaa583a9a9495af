defmodule ExBurn.Serving.Batch do
  @moduledoc false
  # A batch of `ExBurn.Serving`'s requests, built in the process of the partition that runs
  # it, on that partition's device. Each request is `{inputs, rows}` (the rows' numbers, on
  # the host). Of each input leaf, the requests' parts on the host (any backend but
  # `ExBurn.Backend`) are joined on the host and go to the device in one upload (inside the
  # program's own call); parts already on the partition's device are used as they are; parts
  # on another device are copied device to device. The rows' numbers stay on the host: the
  # callers read them without touching a device.
  #
  # Nx.Batch (0.13) keeps its entries newest first, each as `{funs, size}` with one function
  # per leaf of its template (the last leaf first): what its own `Nx.LazyContainer` reads.

  alias Nx.Defn.Composite

  @doc false
  # `{inputs, rows}`: the inputs for `dev` (host tensors to upload with the program's call,
  # or tensors on `dev`) and the rows' numbers on the host, each with `pad` zero rows after
  # the batch's own.
  def build(%Nx.Batch{stack: [_ | _] = stack, template: {inputs, _rows}}, pad, dev) do
    parts =
      stack
      |> Enum.reverse()
      |> Enum.map(fn {funs, _size} -> funs |> Enum.reverse() |> Enum.map(& &1.()) end)
      |> Enum.zip_with(& &1)

    {input_parts, [row_parts]} = Enum.split(parts, length(Composite.flatten_list([inputs])))
    {built, []} = Composite.traverse(inputs, Enum.map(input_parts, &leaf(&1, pad, dev)), fn _t, [t | ts] -> {t, ts} end)
    {built, row_parts |> Enum.map(&host/1) |> host_join(pad)}
  end

  # One input leaf: the requests' parts in order, then `pad` zero rows.
  defp leaf(parts, pad, dev) do
    if Enum.all?(parts, &(not device?(&1))) do
      host_join(parts, pad)
    else
      parts
      |> Enum.map(&on(&1, dev))
      |> Enum.chunk_by(&device?/1)
      |> Enum.map(fn [first | _] = run -> if device?(first), do: run, else: [upload(host_join(run, 0), dev)] end)
      |> Enum.concat()
      |> then(&(&1 ++ zeros(hd(&1), pad, dev)))
      |> join()
    end
  end

  defp device?(%Nx.Tensor{data: %ExBurn.Backend{}}), do: true
  defp device?(%Nx.Tensor{}), do: false

  # A part on `dev` or on the host: one on another device is copied to `dev`.
  defp on(%Nx.Tensor{data: %ExBurn.Backend{device: dev}} = t, dev), do: t
  defp on(%Nx.Tensor{data: %ExBurn.Backend{}} = t, dev), do: Nx.backend_copy(t, {ExBurn.Backend, device: dev})
  defp on(t, _dev), do: t

  defp host(%Nx.Tensor{data: %Nx.BinaryBackend{}} = t), do: t
  defp host(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

  # Host parts (of any backend but ExBurn's) as one Nx.BinaryBackend tensor, their binaries
  # joined, with `pad` zero rows after them.
  defp host_join([%Nx.Tensor{data: %Nx.BinaryBackend{}} = t], 0), do: t

  defp host_join([%Nx.Tensor{shape: shape, type: {_, bits} = type} | _] = parts, pad) do
    rows = Enum.reduce(parts, pad, &(elem(&1.shape, 0) + &2))
    row = shape |> Tuple.delete_at(0) |> Tuple.product()

    parts
    |> Enum.map(&Nx.to_binary/1)
    |> Kernel.++([<<0::size(pad * row * bits)>>])
    |> :erlang.list_to_bitstring()
    |> Nx.from_binary(type, backend: Nx.BinaryBackend)
    |> Nx.reshape(put_elem(shape, 0, rows))
  end

  defp upload(t, dev), do: Nx.backend_transfer(t, {ExBurn.Backend, device: dev})

  defp zeros(_like, 0, _dev), do: []

  defp zeros(%Nx.Tensor{shape: shape, type: type}, pad, dev),
    do: [Nx.broadcast(Nx.tensor(0, type: type, backend: {ExBurn.Backend, device: dev}), put_elem(shape, 0, pad))]

  # Device parts on one device: one concatenation there.
  defp join([t]), do: t
  defp join(parts), do: Nx.concatenate(parts, axis: 0)
end
