defmodule ExBurn.NxSuite do
  @moduledoc false
  # Loads test files of Nx's own suite (from the Nx sources that the test set-up unpacks) so
  # that they run here, with ExBurn.Backend as the default backend and ExBurn.Defn.Compiler as
  # the default compiler. Changes to their source, made on its syntax tree, adapt them:
  #
  #   * each test module gets a setup that makes ExBurn.Defn.Compiler its processes' default
  #     compiler, before the module's own setups (the rest of ExBurn's suite keeps
  #     Nx.Defn.Evaluator, which Nx's own defn-based functions then use eagerly);
  #   * `a == b` and `a != b` (outside guards and defn bodies, where they are Nx's own
  #     operators) compare both sides copied to Nx.BinaryBackend:
  #     Nx's suite compares BinaryBackend tensors with `==`, which for them compares type,
  #     shape, names and bytes; device tensors are refs, never `==`. With both sides copied
  #     the comparison is the one Nx's suite makes.
  #   * module names given in `renames` are replaced (`Nx.Defn.Evaluator` by
  #     `ExBurn.Defn.Compiler` where a file asks for the Evaluator by name).
  #
  # Tests of the except-list (`%{file => %{"test <describe> <name>" => cause}}`) get the tag
  # `nx_except: cause`, which test_helper.exs excludes; excepted doctests are left out with
  # ExBurn.Doctests.doctest_except/2. Each file's count of tests run prints as it loads.

  @doc false
  # The folder of Nx's test sources, or nil where the Nx dependency has none (Hex packages
  # ship lib/ only).
  def tests_dir do
    dir = Path.join(Mix.Project.deps_paths()[:nx] || "", "test")
    if File.dir?(Path.join(dir, "support")), do: dir
  end

  @doc false
  # Requires Nx's test support files, then compiles each of `files` (relative to the tests
  # folder) adapted as above.
  def load!(dir, files, renames, except \\ %{}) do
    for file <- ["support/helpers.ex", "support/container.ex", "support/backends.ex" | files] do
      # Compiled under its path in Nx's tree, from where Nx runs it (some tests match it in
      # error messages).
      path = Path.join("test", file)
      names = Map.get(except, file, %{})
      ast = Path.join(dir, file) |> File.read!() |> Code.string_to_quoted!(file: path, columns: true)
      modules = ast |> adapt(renames) |> except(names, nil) |> Code.compile_quoted(path)

      unless String.starts_with?(file, "support/") do
        tests =
          for {mod, _} <- modules, function_exported?(mod, :__ex_unit__, 0), test <- mod.__ex_unit__().tests,
              not String.starts_with?(to_string(test.name), "test the except-list"),
              do: test

        excepted = Enum.count(tests, &Map.has_key?(&1.tags, :nx_except)) + Enum.count(Map.keys(names), &String.starts_with?(&1, "doctest "))
        total = length(tests) + Enum.count(Map.keys(names), &String.starts_with?(&1, "doctest "))
        IO.puts("Nx's #{path}: #{total - excepted} of #{total} tests run, #{excepted} excepted by cause")
      end
    end
  end

  # Tags the excepted tests of `names`, tracking the describe block they are in (names may be
  # interpolated, as in tests made in a `for`: the tag is computed where the test is defined);
  # rewrites `doctest Mod` to leave the excepted doctests out.
  defp except({:describe, meta, [name, [do: body]]}, names, nil),
    do: {:describe, meta, [name, [do: except(body, names, name)]]}

  defp except({:test, _meta, [name | _]} = node, names, describe) when map_size(names) > 0 do
    full = quote(do: Enum.join(Enum.reject(["test", unquote(describe), unquote(name)], &is_nil/1), " "))
    {:__block__, [], [quote(do: @tag(ExBurn.NxSuite.except_tags(unquote(Macro.escape(names)), unquote(full)))), node]}
  end

  defp except({:doctest, meta, [mod]} = node, names, _describe) do
    doctests = for {"doctest " <> doctest, _cause} <- names, do: doctest

    if doctests == [] do
      node
    else
      call = {{:., meta, [{:__aliases__, meta, [:ExBurn, :Doctests]}, :doctest_except]}, meta, [mod, doctests]}
      {:__block__, [], [quote(do: require(ExBurn.Doctests)), call]}
    end
  end

  defp except({form, meta, args}, names, describe) when is_list(args), do: {except(form, names, describe), meta, Enum.map(args, &except(&1, names, describe))}
  defp except({left, right}, names, describe), do: {except(left, names, describe), except(right, names, describe)}
  defp except(list, names, describe) when is_list(list), do: Enum.map(list, &except(&1, names, describe))
  defp except(other, _names, _describe), do: other

  @doc false
  # The tags of test `name`: `[nx_except: cause]` where the except-list has it.
  def except_tags(names, name) do
    case names do
      %{^name => cause} -> [nx_except: cause]
      %{} -> []
    end
  end

  @keep [:when, :defn, :defnp]

  defp adapt(ast, renames) do
    renames = Map.new(renames, fn {from, to} -> {Module.split(from) |> Enum.map(&String.to_atom/1), Module.split(to) |> Enum.map(&String.to_atom/1)} end)

    # The accumulator counts the guards and defn bodies around a node (where `==` stays).
    pre = fn
      {kind, _, _} = node, guards when kind in @keep ->
        {node, guards + 1}

      {op, meta, [left, right]}, 0 when op in [:==, :!=] ->
        {{op, meta, [on_binary(left), on_binary(right)]}, 0}

      {:use, meta, [{:__aliases__, _, [:ExUnit, :Case]} | _] = args}, guards ->
        # (the traversal goes on into the block, where the marked `use` is left as it is)
        if meta[:ex_burn_setup],
          do: {{:use, meta, args}, guards},
          else: {{:__block__, [], [{:use, [ex_burn_setup: true] ++ meta, args}, quote(do: setup(do: ExBurn.NxSuite.compile_with_exburn()))]}, guards}

      {:__aliases__, meta, parts} = node, guards ->
        case renames do
          %{^parts => to} -> {{:__aliases__, meta, to}, guards}
          _ -> {node, guards}
        end

      node, guards ->
        {node, guards}
    end

    post = fn
      {kind, _, _} = node, guards when kind in @keep -> {node, guards - 1}
      node, guards -> {node, guards}
    end

    ast |> Macro.traverse(0, pre, post) |> elem(0)
  end

  defp on_binary(ast), do: quote(do: ExBurn.NxSuite.binary(unquote(ast)))

  @doc false
  def compile_with_exburn do
    Nx.Defn.default_options(compiler: ExBurn.Defn.Compiler)
    :ok
  end

  @doc false
  # `term` with every tensor in it (in tuples, lists, maps, containers) copied to
  # Nx.BinaryBackend.
  def binary(%Nx.Tensor{data: %backend{}} = t) when backend in [Nx.BinaryBackend, Nx.Defn.Expr, Nx.TemplateBackend], do: t
  def binary(%Nx.Tensor{} = t), do: Nx.backend_copy(t, Nx.BinaryBackend)
  def binary(list) when is_list(list), do: Enum.map(list, &binary/1)
  def binary(n) when is_number(n) or is_atom(n) or is_binary(n), do: n
  def binary(%Complex{} = c), do: c

  def binary(term) do
    if Nx.Container.impl_for(term),
      do: term |> Nx.Container.traverse(nil, &{binary(&1), &2}) |> elem(0),
      else: term
  end
end
