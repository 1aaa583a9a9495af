defmodule ExBurn.Doctests do
  @moduledoc false
  # `doctest/2` with an except-list of single doctests ("Nx.atan2/2 (330)": ExUnit's names)
  # rather than whole functions, so that one failing example of a function doesn't hide
  # the others. Built on the same ExUnit.DocTest functions as `doctest/2` (Elixir 1.17+).

  defmacro doctest_except(module, except) do
    quote bind_quoted: [module: module, except: except, env_line: __CALLER__.line, env_file: __CALLER__.file] do
      file = ExUnit.DocTest.__file__(module)
      except = MapSet.new(except)

      for {name, test, tags} <- ExUnit.DocTest.__doctests__(module, []), not MapSet.member?(except, name) do
        @file file
        doc = ExUnit.Case.register_test(__MODULE__, env_file, env_line, :doctest, name, tags)
        def unquote(doc)(_), do: unquote(test)
      end
    end
  end
end
