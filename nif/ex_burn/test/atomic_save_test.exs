defmodule ExBurn.AtomicSaveTest do
  # Saves that survive a crash: ExBurn.AtomicFile (under ExBurn.Model.save/2, hence the
  # checkpoint callback, and the NIF's record writes) replaces a file so that a writer killed
  # at any moment leaves the old complete checkpoint or the new complete one. An OS process
  # (a VM of its own) writes two checkpoints in turn, as fast as it can, and is killed with
  # kill -9 at random moments; after each kill the file must be one of the two, byte for byte,
  # and load.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  alias ExBurn.{AtomicFile, Model}

  doctest ExBurn.AtomicFile

  @kills 12
  @dir Path.join(System.tmp_dir!(), "ex_burn_atomic_save_test_#{System.unique_integer([:positive])}")

  setup_all do
    File.mkdir_p!(@dir)
    on_exit(fn -> File.rm_rf!(@dir) end)
    :ok
  end

  defp path(name), do: Path.join(@dir, name)

  defp temp_files(dir), do: dir |> File.ls!() |> Enum.filter(&String.starts_with?(&1, "."))

  test "write/2 replaces the file, makes its folder, leaves no temporary file; errors name the path" do
    target = path("sub/folder/file.bin")
    assert :ok = AtomicFile.write(target, "one")
    assert :ok = AtomicFile.write(target, ["t", "wo"])
    assert File.read!(target) == "two"
    assert temp_files(Path.dirname(target)) == []

    # A folder that can't be made: the path is in the reason, and nothing was written.
    File.write!(path("plain"), "x")
    assert {:error, reason} = AtomicFile.write(path("plain/inner.bin"), "data")
    assert reason =~ path("plain")

    # Model.save/2's error names the operation and the path.
    model = Axon.input("x", shape: {nil, 2}) |> Axon.dense(1) |> Model.compile(loss: :mse, seed: 0)
    assert {:error, message} = Model.save(model, path("plain/m.exburn"))
    assert message =~ "ExBurn.Model.save"
    assert message =~ "plain/m.exburn"
  end

  # The writer: a VM with ex_cubecl and ex_burn's compiled code, writing `a` and `b` in turn.
  @writer ~S"""
  [a, b, target] = System.argv()
  {a, b} = {File.read!(a), File.read!(b)}
  :ok = ExBurn.AtomicFile.write(target, a)
  IO.puts("ready #{System.pid()}")
  Stream.cycle([b, a]) |> Enum.each(fn bytes -> :ok = ExBurn.AtomicFile.write(target, bytes) end)
  """

  defp start_writer(args) do
    paths = Enum.flat_map([:ex_cubecl, :ex_burn], &["-pa", Path.join(:code.lib_dir(&1), "ebin")])
    elixir = System.find_executable("elixir")
    Port.open({:spawn_executable, elixir}, [:binary, :exit_status, {:line, 1024}, args: paths ++ ["-e", @writer | args]])
  end

  defp await_ready(port) do
    receive do
      {^port, {:data, {:eol, "ready " <> pid}}} -> pid
      {^port, {:data, _other}} -> await_ready(port)
      {^port, {:exit_status, status}} -> flunk("the writer exited with #{status} before writing")
    after
      60_000 -> flunk("the writer did not start within a minute")
    end
  end

  defp await_exit(port) do
    receive do
      {^port, {:exit_status, status}} -> status
      {^port, {:data, _}} -> await_exit(port)
    after
      30_000 -> flunk("the killed writer did not exit")
    end
  end

  test "a writer killed with kill -9 at random moments leaves the old or the new complete checkpoint" do
    # Two checkpoints of a model with about 70k parameters (280 KB files): each write takes
    # long enough (and is flushed to disk) that random kills land inside writes.
    axon = Axon.input("x", shape: {nil, 8}) |> Axon.dense(256, activation: :relu) |> Axon.dense(256) |> Axon.dense(2)
    [a, b] = for seed <- [1, 2], do: Model.compile(axon, loss: :mse, seed: seed)
    :ok = Model.save(a, path("a.exburn"))
    :ok = Model.save(b, path("b.exburn"))
    {bytes_a, bytes_b} = {File.read!(path("a.exburn")), File.read!(path("b.exburn"))}
    assert bytes_a != bytes_b
    dir = path("ckpt")
    File.mkdir_p!(dir)
    target = Path.join(dir, "model.exburn")
    :rand.seed(:exsss, 54)

    results =
      for _kill <- 1..@kills do
        port = start_writer([path("a.exburn"), path("b.exburn"), target])
        pid = await_ready(port)
        Process.sleep(:rand.uniform(250))
        {_, 0} = System.cmd("kill", ["-9", pid])
        assert await_exit(port) != 0

        content = File.read!(target)
        which = cond do
          content == bytes_a -> :a
          content == bytes_b -> :b
          true -> flunk("a torn checkpoint: #{byte_size(content)} bytes, neither of the two (#{byte_size(bytes_a)} bytes)")
        end

        {:ok, loaded} = Model.load(a, target)
        want = if which == :a, do: a, else: b
        for {name, t} <- Model.parameters(want), do: assert(Nx.to_binary(Model.parameters(loaded)[name]) == Nx.to_binary(t))

        # A kill inside a write leaves its temporary file (hidden, never read as the checkpoint).
        left = temp_files(dir)
        Enum.each(left, &File.rm!(Path.join(dir, &1)))
        {which, left != []}
      end

    mid_write = Enum.count(results, &elem(&1, 1))
    IO.puts("atomic saves: #{@kills} kills, #{@kills} checkpoints intact (#{Enum.count(results, &(elem(&1, 0) == :a))} old, " <>
              "#{Enum.count(results, &(elem(&1, 0) == :b))} new), #{mid_write} kills inside a write")
  end
end
