defmodule ExBurn.ExamplesTest do
  # The seed README's two example scripts, run as it says (`mix run examples/...`) in a VM of
  # their own, with few epochs. Each script checks its own result and exits non-zero when it
  # didn't learn: linear_regression.exs unless it finds the line within 0.1, mnist_simple.exs
  # under 90% test accuracy on the digits (the Rust job's split, exported by its `digits`
  # binary, which `cargo test` built into $CARGO_TARGET_DIR).
  use ExUnit.Case, async: false

  @root Path.expand("..", __DIR__)


  @examples [
    {"linear_regression.exs", ~w(--epochs 20), ~r/learned: y = \S+ x \+ \S+/},
    {"mnist_simple.exs", ~w(--epochs 4), ~r/test accuracy \d+\.\d+%/}
  ]

  for {script, args, expected} <- @examples do
    @tag timeout: 900_000
    test "examples/#{script} runs as documented" do
      {out, status} =
        System.cmd("mix", ["run", Path.join("examples", unquote(script)) | unquote(args)],
          cd: @root,
          env: [{"MIX_ENV", "test"}],
          stderr_to_stdout: true
        )

      assert status == 0, "mix run examples/#{unquote(script)} exited with #{status}:\n#{out}"
      assert out =~ unquote(Macro.escape(expected)), out
    end
  end
end
