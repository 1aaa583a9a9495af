defmodule ExBurn.ServingDistributedTest do
  # ExBurn.Serving across BEAM nodes: two `:peer` nodes on loopback started by the test (the
  # test's node itself stays undistributed: it drives them over their standard input and
  # output), a serving on one, a call `{:distributed, name}` from the other through
  # Nx.Serving's `:pg` group; the results come back as host tensors. The peers get this
  # node's code paths and environment (EX_CUBECL_NIF names the NIF), and stop at the end.
  use ExUnit.Case, async: false

  @moduletag timeout: 180_000
  @boot_ms 60_000
  @call_ms 60_000

  # A peer named `prefix_<n>@127.0.0.1`, distribution on the loopback interface only.
  defp start_peer!(prefix, cookie) do
    name = :"#{prefix}_#{System.unique_integer([:positive])}"

    opts = %{
      name: name,
      host: ~c"127.0.0.1",
      longnames: true,
      connection: :standard_io,
      wait_boot: @boot_ms,
      env: [{~c"ERL_EPMD_ADDRESS", ~c"127.0.0.1"}],
      args: [~c"-setcookie", Atom.to_charlist(cookie), ~c"-kernel", ~c"inet_dist_use_interface", ~c"{127,0,0,1}"]
    }

    # Only a node that doesn't start (no epmd, no distribution on loopback) skips the test.
    case start(opts) do
      {:ok, peer, node} ->
        on_exit(fn -> :peer.stop(peer) end)
        true = :peer.call(peer, :code, :set_path, [:code.get_path()], @boot_ms)
        {peer, node}

      {:error, reason} ->
        throw({:no_peer, "a :peer node with distribution on 127.0.0.1 did not start: #{inspect(reason)}"})
    end
  end

  defp start(opts) do
    :peer.start(opts)
  catch
    :exit, reason -> {:error, reason}
  end

  setup do
    cookie = :"exburn_#{System.unique_integer([:positive])}"

    try do
      {:ok, serving_node: start_peer!("exburn_serving", cookie), caller_node: start_peer!("exburn_caller", cookie)}
    catch
      {:no_peer, why} -> {:skip, why}
    end
  end

  test "a serving on one node answers a {:distributed, name} call from another with host tensors", ctx do
    {serving_peer, serving_node} = ctx.serving_node
    {caller_peer, caller_node} = ctx.caller_node
    name = :"exburn_distributed_#{System.unique_integer([:positive])}"

    assert {:ok, device} = :peer.call(serving_peer, ExBurn.PeerServing, :start, [name], @boot_ms)
    assert is_binary(device)
    assert :peer.call(caller_peer, Node, :connect, [serving_node], @call_ms)
    assert serving_node in :peer.call(caller_peer, Node, :list, [], @call_ms)

    x = Nx.tensor([[1.0, 2.0, 3.0], [-0.5, 0.25, 4.0]], backend: Nx.BinaryBackend)
    {ours, nx, ran_on} = :peer.call(caller_peer, ExBurn.PeerServing, :call, [name, x, 10_000], @call_ms)

    assert ran_on == serving_node and ran_on != caller_node
    {_axon, state} = ExBurn.PeerServing.model()
    %{"d" => %{"kernel" => kernel, "bias" => bias}} = state.data
    reference = x |> Nx.dot(kernel) |> Nx.add(bias)

    for result <- [ours, nx] do
      assert %Nx.Tensor{data: %Nx.BinaryBackend{}, shape: {2, 2}} = result
      assert Nx.to_number(Nx.all_close(result, reference, atol: 1.0e-5)) == 1
    end
  end
end
