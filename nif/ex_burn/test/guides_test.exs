defmodule ExBurn.GuidesTest.Blocks do
  @moduledoc false
  # The ```elixir blocks of a Markdown guide, each with the line its code starts on.

  @spec extract(String.t()) :: [{pos_integer(), String.t()}]
  def extract(markdown) do
    {blocks, open} =
      markdown
      |> String.split("\n")
      |> Enum.with_index(1)
      |> Enum.reduce({[], nil}, fn
        {"```elixir" <> rest, n}, {blocks, nil} when rest in ["", " "] -> {blocks, {n + 1, []}}
        {"```" <> _, _n}, {blocks, {start, lines}} -> {[{start, Enum.join(Enum.reverse(lines), "\n")} | blocks], nil}
        {line, _n}, {blocks, {start, lines}} -> {blocks, {start, [line | lines]}}
        {_line, _n}, acc -> acc
      end)

    if open, do: raise(ArgumentError, "an ```elixir block opened on line #{elem(open, 0) - 1} is never closed")
    Enum.reverse(blocks)
  end

  # Runs the blocks in order in one binding, as doctests do: a block may use what an earlier
  # block of the same guide bound. A failure names the guide's file and the line.
  @spec run(String.t(), [{pos_integer(), String.t()}]) :: keyword()
  def run(file, blocks) do
    Enum.reduce(blocks, [], fn {line, code}, binding ->
      {_value, binding} = Code.eval_string(code, binding, file: file, line: line)
      binding
    end)
  end
end

defmodule ExBurn.GuidesTest do
  # Every ```elixir block of guides/*.md runs here, each guide's blocks in order in one
  # binding (a block may use what earlier blocks of its guide defined), so the guides cannot
  # rot: a block that raises, or whose `=` match of a documented result fails, fails its
  # guide's test with the guide's file and line. Blocks fenced otherwise (```bash, plain
  # ```) are not run.
  use ExUnit.Case, async: false

  alias ExBurn.GuidesTest.Blocks

  @dir Path.expand("../guides", __DIR__)
  # The guides the seed's README lists, by the names it gives them, and the media guide.
  @guides ~w(01_getting_started.md 02_training.md 03_mobile_deployment.md 04_architecture.md 05_training_optimization.md 06_images.md)


  setup do
    # Guides set Nx.Defn's global options (the process's backend goes with the test process).
    previous = Nx.Defn.global_default_options([])
    Nx.Defn.global_default_options(previous)
    on_exit(fn -> Nx.Defn.global_default_options(previous) end)
  end

  test "the guides are the seed's five and the media guide, each with code to run" do
    assert @dir |> File.ls!() |> Enum.filter(&String.ends_with?(&1, ".md")) |> Enum.sort() == @guides

    for guide <- @guides do
      assert length(Blocks.extract(File.read!(Path.join(@dir, guide)))) >= 3, "#{guide} has fewer than 3 elixir blocks"
    end
  end

  test "blocks are extracted with their lines, and a failing block names its line" do
    markdown = "# T\n\n```elixir\na = 1\n```\n\ntext\n\n```bash\nexit 1\n```\n\n```elixir\n2 = a + 1\n3 = a\n```\n"
    assert [{4, "a = 1"}, {14, "2 = a + 1\n3 = a"}] = blocks = Blocks.extract(markdown)
    {error, stacktrace} =
      try do
        Blocks.run("t.md", blocks)
      rescue
        e -> {e, __STACKTRACE__}
      end

    assert %MatchError{} = error
    assert Enum.any?(stacktrace, fn {_, _, _, at} -> at[:file] == ~c"t.md" and at[:line] == 15 end)
    assert_raise ArgumentError, ~r/never closed/, fn -> Blocks.extract("```elixir\n1\n") end
  end

  for guide <- @guides do
    @tag timeout: 1_200_000
    test "guides/#{guide} runs as written" do
      path = Path.join(@dir, unquote(guide))
      Blocks.run(path, Blocks.extract(File.read!(path)))
    end
  end
end
