defmodule ExBurn.AsyncTest do
  # ExBurn.async/3 and await/2: compiled calls on the device's command queue.
  use ExUnit.Case, async: false
  import Nx.Defn

  defn affine(x, w), do: Nx.dot(x, w) |> Nx.add(1)
  defn loop(x), do: while({x, i = 0}, i < 4, do: {x * 2, i + 1}) |> elem(0)

  defn hook_and_call(x) do
    y = x |> Nx.add(1) |> hook(:hooked)
    Nx.runtime_call(Nx.tensor(0.0), y, [], &__MODULE__.times_ten/2)
  end

  def times_ten(t, _opts), do: Nx.multiply(t, 10)

  test "a call runs on the queue and its result comes as a message" do
    x = Nx.iota({4, 3}, type: :f32)
    w = Nx.iota({3, 2}, type: :f32)
    ref = ExBurn.async(&affine/2, [x, w])
    assert is_reference(ref)
    assert_receive {ExBurn, ^ref, {:ok, got}}, 60_000
    assert Nx.to_flat_list(got) == Nx.to_flat_list(Nx.add(Nx.dot(x, w), 1))
  end

  test "calls queued one after the other all complete, in any order of awaiting" do
    refs = for k <- 1..6, do: {k, ExBurn.async(&loop/1, [Nx.tensor([k * 1.0])])}

    for {k, ref} <- Enum.reverse(refs) do
      assert {:ok, t} = ExBurn.await(ref, 60_000)
      assert Nx.to_flat_list(t) == [k * 16.0]
    end
  end

  test "the queue runs them: one program_submit per call, no program_run" do
    fun = fn x -> Nx.multiply(x, 3) end
    {:ok, _} = ExBurn.await(ExBurn.async(fun, [Nx.tensor([1.0])]), 60_000)
    :erlang.trace_pattern({ExCubecl.Native, :_, :_}, true, [:call_count])

    try do
      {:ok, t} = ExBurn.await(ExBurn.async(fun, [Nx.tensor([2.0])]), 60_000)
      assert Nx.to_flat_list(t) == [6.0]
      assert {:call_count, 1} = :erlang.trace_info({ExCubecl.Native, :program_submit, 2}, :call_count)
      assert {:call_count, 0} = :erlang.trace_info({ExCubecl.Native, :program_run, 2}, :call_count)
    after
      :erlang.trace_pattern({ExCubecl.Native, :_, :_}, false, [:call_count])
    end
  end

  test "a failed call gives an error and affects no other call" do
    # a result larger than any device buffer
    bad = ExBurn.async(fn x -> Nx.broadcast(x, {1_000_000, 1_000_000}) end, [Nx.tensor([1.0])])
    good = ExBurn.async(&loop/1, [Nx.tensor([1.0])])
    assert {:error, %ExBurn.Error{}} = ExBurn.await(bad, 60_000)
    assert {:ok, t} = ExBurn.await(good, 60_000)
    assert Nx.to_flat_list(t) == [16.0]
  end

  test "await gives :timeout where the call is not done" do
    assert ExBurn.await(make_ref(), 10) == {:error, :timeout}
  end

  test "hooks and runtime calls work in async calls" do
    pid = self()
    ref = ExBurn.async(&hook_and_call/1, [Nx.tensor(1.0)], hooks: %{hooked: &send(pid, {:hooked, Nx.to_number(&1)})})
    assert {:ok, t} = ExBurn.await(ref, 60_000)
    assert Nx.to_number(t) == 20.0
    assert_received {:hooked, 2.0}
  end
end
