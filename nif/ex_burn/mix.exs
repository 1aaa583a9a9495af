defmodule ExBurn.MixProject do
  use Mix.Project

  def project do
    [
      app: :ex_burn,
      version: "0.1.0",
      elixir: "~> 1.17",
      start_permanent: Mix.env() == :prod,
      deps: deps(),
      elixirc_paths: elixirc_paths(Mix.env()),
      # Nx's suite (test/nx_defn_suite_test.exs) derives Nx.Container for structs of its own.
      consolidate_protocols: Mix.env() != :test,
      description: "An Nx backend on ExCubecl: every Nx function on the GPU (CUDA, Vulkan, Metal)"
    ]
  end

  def application, do: [mod: {ExBurn.Application, []}, extra_applications: [:logger]]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp deps, do: [{:ex_cubecl, path: "../ex_cubecl"} | hex_deps(System.get_env("EXBURN_DEPS"))]

  # With Hex, these come from Hex. Axon and Polaris are optional: the backend and the compiler
  # need Nx alone; ExBurn's models and training build on them.
  defp hex_deps(nil) do
    [{:nx, "~> 0.13"}, {:axon, "~> 0.8", optional: true}, {:polaris, "~> 0.1", optional: true}]
  end

  # Without Hex, EXBURN_DEPS names a folder holding checkouts of nx (its `nx/` folder),
  # complex, telemetry, axon and polaris side by side (as Axon's AXON_NX_PATH does for Nx);
  # scripts/setup_nx.sh unpacks them from the offline sources. Nx's own dependencies are
  # overridden too: Nx 0.13.1 asks complex ~> 0.7, which was never tagged in its source.
  defp hex_deps(dir) do
    path = fn name -> [path: Path.join(dir, name), override: true] end

    [
      {:nx, path.("nx")},
      {:complex, path.("complex")},
      {:telemetry, path.("telemetry")},
      {:axon, path.("axon") ++ [optional: true]},
      {:polaris, path.("polaris") ++ [optional: true]}
    ]
  end
end
