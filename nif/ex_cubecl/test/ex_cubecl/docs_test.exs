defmodule ExCubecl.DocsTest do
  # Every public module and function of the package has documentation (a @moduledoc and a
  # @doc, or `false` where it is internal), and every module whose docs hold `iex>` examples
  # is doctested somewhere in the suite, so that HexDocs cannot gain an undocumented function
  # or an example that no longer runs. The same check runs in nif/ex_burn.
  use ExUnit.Case, async: true

  @app :ex_cubecl

  defp modules do
    {:ok, modules} = :application.get_key(@app, :modules)
    Enum.sort(modules)
  end

  defp docs(module) do
    assert {:docs_v1, _, _, _, moduledoc, _, entries} = Code.fetch_docs(module), "#{inspect(module)} has no docs chunk"
    {moduledoc, entries}
  end

  test "every public module and function has a @doc" do
    missing =
      for module <- modules(), {moduledoc, entries} = docs(module), moduledoc != :hidden, reduce: [] do
        acc ->
          acc = if moduledoc == :none, do: ["#{inspect(module)} (no @moduledoc)" | acc], else: acc

          for {{kind, name, arity}, _, _, :none, _} <- entries, kind in [:function, :macro], reduce: acc do
            acc -> ["#{inspect(module)}.#{name}/#{arity}" | acc]
          end
      end

    assert missing == [], "undocumented (give each a @doc, or @doc false if internal):\n" <> Enum.join(Enum.reverse(missing), "\n")
  end

  test "every module with iex> examples is doctested" do
    tested =
      Path.wildcard(Path.join(__DIR__, "../**/*.exs"))
      |> Enum.flat_map(&Regex.scan(~r/^\s*doctest\s+([A-Z][\w.]*)/m, File.read!(&1), capture: :all_but_first))
      |> MapSet.new(fn [name] -> name end)

    with_examples =
      for module <- modules(), {moduledoc, entries} = docs(module), moduledoc != :hidden,
          texts = [moduledoc | Enum.map(entries, &elem(&1, 3))],
          Enum.any?(texts, &match?(%{"en" => text} when is_binary(text), &1) and &1["en"] =~ ~r/^\s*iex>/m),
          do: inspect(module)

    assert Enum.reject(with_examples, &MapSet.member?(tested, &1)) == []
  end
end
