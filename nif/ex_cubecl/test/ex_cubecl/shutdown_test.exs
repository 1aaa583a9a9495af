defmodule ExCubecl.ShutdownTest do
  # ExCubecl.shutdown/0 in a VM of its own (it ends the runtime for good, so not in this
  # one): the command queued before it finishes, a launch after it is an error that says
  # so, so is a command submitted after it, reads still work, and a second call is fine;
  # then the VM exits with status 0 (the at-exit winding down runs after it).
  use ExUnit.Case, async: true

  @script ~S"""
  x = ExCubecl.buffer!([0.0, 1.0, 2.0], [3], :f32)
  {:ok, queued} = ExCubecl.submit([{:exp, [{:input, 0}], []}, {:mul, [{:step, 0, 0}, {:step, 0, 0}], []}], [x])
  :ok = ExCubecl.shutdown()
  {:ok, [y]} = ExCubecl.wait(queued)
  IO.puts("queued: " <> inspect(Enum.map(ExCubecl.to_list!(y), &Float.round(&1, 3))))
  {:error, refused} = ExCubecl.run_kernel(:exp, [x])
  IO.puts("refused: " <> Exception.message(refused))
  {:ok, late} = ExCubecl.submit([{:exp, [{:input, 0}], []}], [x])
  {:error, late} = ExCubecl.wait(late)
  IO.puts("late: " <> Exception.message(late))
  IO.puts("read: " <> inspect(ExCubecl.to_list!(x)))
  IO.puts("again: " <> inspect(ExCubecl.shutdown()))
  """

  test "shutdown/0 finishes queued work, then refuses launches and commands; the VM exits cleanly" do
    ebin = Path.join(:code.lib_dir(:ex_cubecl), "ebin")
    {out, status} = System.cmd(System.find_executable("elixir"), ["-pa", ebin, "-e", @script], stderr_to_stdout: true)
    assert status == 0, out
    # exp(x)^2 = exp(2x)
    assert out =~ "queued: [1.0, 7.389, 54.598]"
    assert out =~ ~r/refused: exp: .*the runtime was shut down/
    assert out =~ ~r/late: .*submitted after the runtime was shut down/
    assert out =~ "read: [0.0, 1.0, 2.0]"
    assert out =~ "again: :ok"
  end
end
