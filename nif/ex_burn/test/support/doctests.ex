defmodule ExBurn.Doctests do
  @moduledoc false
  # `doctest/2` with an except-list of single doctests ("Nx.atan2/2 (330)": ExUnit's names)
  # rather than whole functions, so that one failing example of a function doesn't hide
  # the others. Built on the same ExUnit.DocTest functions as `doctest/2` (Elixir 1.17+).
  # Also a test that every excepted name is one of the module's doctests (a renamed or
  # renumbered doctest must not hide behind a stale entry), which prints how many run.

  defmacro doctest_except(module, except) do
    quote bind_quoted: [module: module, except: except, env_line: __CALLER__.line, env_file: __CALLER__.file] do
      file = ExUnit.DocTest.__file__(module)
      doctests = ExUnit.DocTest.__doctests__(module, [])
      except = MapSet.new(except)

      for {name, test, tags} <- doctests, not MapSet.member?(except, name) do
        @file file
        doc = ExUnit.Case.register_test(__MODULE__, env_file, env_line, :doctest, name, tags)
        def unquote(doc)(_), do: unquote(test)
      end

      @doctest_names Enum.map(doctests, &elem(&1, 0))
      @doctest_except MapSet.to_list(except)

      test "the except-list of #{inspect(module)}'s doctests names real doctests" do
        assert @doctest_except -- @doctest_names == []
        total = length(@doctest_names)
        run = total - length(@doctest_except)
        IO.puts("\n#{inspect(unquote(module))} doctests: #{run} of #{total} run on #{ExBurn.default_device_spec()}, #{total - run} excepted by cause")
      end
    end
  end
end
