# Nx's and Nx.LinAlg's doctests on the device that scripts/elixir_gpu.sh runs on (a GPU),
# with the test modules and except-lists that the README's test command runs on lavapipe:
#   bash scripts/elixir_cuda.sh                                          # here
#   bash scripts/elixir_gpu.sh nif/ex_burn/test/gpu/doctests.exs         # on the GPU machine
# Prints each module's count of doctests run and ExUnit's failures; exits 1 on a failure.
# With --excepted it runs only the excepted doctests instead and prints each one's outcome:
# an excepted doctest that passes on the device is a stale entry there.
here = Path.dirname(__ENV__.file)
Nx.global_default_backend(ExBurn.Backend)
ExUnit.start(autorun: false)
Enum.each(["../support/doctests.ex", "../doctest_test.exs", "../linalg_doctest_test.exs"], &Code.require_file(&1, here))

if "--excepted" in System.argv() do
  for {module, tests} <- [{Nx, ExBurn.DoctestTest}, {Nx.LinAlg, ExBurn.LinAlgDoctestTest}] do
    except = MapSet.new(tests.except())

    for {name, test, _tags} <- ExUnit.DocTest.__doctests__(module, []), MapSet.member?(except, name) do
      outcome =
        try do
          Code.eval_quoted(quote(do: (import ExUnit.Assertions; require ExUnit.DocTest; unquote(test))))
          "passes (stale entry)"
        rescue
          e -> "fails: " <> (e |> Exception.message() |> String.split("\n") |> Enum.take(3) |> Enum.join(" "))
        end

      IO.puts("#{name}: #{outcome}")
    end
  end
else
  %{failures: failures} = ExUnit.run()
  System.halt(if failures == 0, do: 0, else: 1)
end
