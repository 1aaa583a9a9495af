defmodule ExBurn.PeerServing do
  @moduledoc false
  # The two sides of serving_distributed_test.exs, run on `:peer` nodes (a module on the
  # code path, since the test's own module exists on the test node only): a serving of a
  # small dense model started on one node, and a call from another.

  @doc "The model: an Axon dense layer 3 -> 2 and its parameters (host tensors)."
  def model do
    kernel = Nx.tensor([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], backend: Nx.BinaryBackend)
    bias = Nx.tensor([0.1, -0.2], backend: Nx.BinaryBackend)
    axon = Axon.input("x", shape: {nil, 3}) |> Axon.dense(2, name: "d")
    {axon, Axon.ModelState.new(%{"d" => %{"kernel" => kernel, "bias" => bias}})}
  end

  @doc """
  Starts ExBurn and the serving `name` of `model/0` on this node, under a supervisor owned by
  a process of its own (so that it outlives the caller); `{:ok, device}` once it is running.
  """
  def start(name) do
    {:ok, _} = Application.ensure_all_started(:ex_burn)
    caller = self()

    spawn(fn ->
      children = [ExBurn.Serving.supervise(model(), name: name, batch_size: 4, batch_timeout: 5)]
      {:ok, _sup} = Supervisor.start_link(children, strategy: :one_for_one)
      send(caller, {:started, name})
      Process.sleep(:infinity)
    end)

    receive do
      {:started, ^name} -> {:ok, ExBurn.default_device_spec()}
    after
      60_000 -> {:error, :timeout}
    end
  end

  @doc """
  From a node without the serving: waits (at most `wait_ms`) until the serving `name` of a
  connected node shows in `Nx.Serving`'s process group, then runs `input` on it, through
  `ExBurn.Serving.run/2` and through `Nx.Serving.batched_run/2`: `{ours, nx's, serving node}`.
  """
  def call(name, input, wait_ms) do
    {:ok, _} = Application.ensure_all_started(:nx)

    case wait_for_member(name, System.monotonic_time(:millisecond) + wait_ms) do
      {:ok, pid} ->
        {ExBurn.Serving.run({:distributed, name}, input), Nx.Serving.batched_run({:distributed, name}, input),
         node(pid)}

      :timeout ->
        {:error, "no serving #{inspect(name)} in :pg after #{wait_ms} ms (nodes: #{inspect(Node.list())})"}
    end
  end

  defp wait_for_member(name, deadline) do
    case :pg.get_members(Nx.Serving.PG, name) do
      [pid | _] ->
        {:ok, pid}

      [] ->
        if System.monotonic_time(:millisecond) > deadline do
          :timeout
        else
          Process.sleep(50)
          wait_for_member(name, deadline)
        end
    end
  end
end
