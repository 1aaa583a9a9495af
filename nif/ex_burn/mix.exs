defmodule ExBurn.MixProject do
  use Mix.Project

  @version "0.1.0"
  @source_url "https://github.com/ExCubecl/ExBurn"

  def project do
    [
      app: :ex_burn,
      version: @version,
      elixir: "~> 1.17",
      start_permanent: Mix.env() == :prod,
      deps: deps(),
      elixirc_paths: elixirc_paths(Mix.env()),
      # Nx's suite (test/nx_defn_suite_test.exs) derives Nx.Container for structs of its own.
      consolidate_protocols: Mix.env() != :test,
      description: "An Nx backend on ExCubecl: every Nx function on the GPU (CUDA, Vulkan, Metal)",
      package: package(),
      docs: docs(),
      source_url: @source_url
    ]
  end

  def application, do: [mod: {ExBurn.Application, []}, extra_applications: [:logger]]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp deps, do: [ex_cubecl_dep() | hex_deps(System.get_env("EXBURN_DEPS"))] ++ docs_deps()

  # ExCubecl 0.1 from Hex; in this repository (nif/ex_burn beside nif/ex_cubecl under the cargo
  # workspace) the sibling folder, as a development override.
  defp ex_cubecl_dep do
    if in_repository?(),
      do: {:ex_cubecl, "~> 0.1", path: "../ex_cubecl"},
      else: {:ex_cubecl, "~> 0.1"}
  end

  defp in_repository? do
    Path.basename(Path.dirname(__DIR__)) == "nif" and File.regular?(Path.expand("../../Cargo.toml", __DIR__)) and
      File.regular?(Path.expand("../ex_cubecl/mix.exs", __DIR__))
  end

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

  # ExDoc for `mix docs`: from Hex outside the repository; in it, only where scripts/docs.sh
  # names its offline copy (EX_CUBECL_DOCS_DEPS), so that `mix deps.get` never needs Hex for it.
  defp docs_deps do
    case {System.get_env("EX_CUBECL_DOCS_DEPS"), in_repository?()} do
      {nil, true} ->
        []

      {nil, false} ->
        [{:ex_doc, "~> 0.40", only: :dev, runtime: false}]

      {dir, _} ->
        for name <- ~w(ex_doc earmark_parser makeup makeup_elixir makeup_erlang nimble_parsec)a do
          {name, path: Path.join(dir, Atom.to_string(name)), only: :dev, runtime: false, override: true}
        end
    end
  end

  defp package do
    [
      licenses: ["MIT", "Apache-2.0"],
      links: %{"GitHub" => @source_url},
      # What a build from the tarball needs; the guides go to HexDocs (`mix docs`), not here.
      files: ~w(lib mix.exs README.md .formatter.exs LICENSE-MIT LICENSE-APACHE)
    ]
  end

  # The guides (guides/*.md) as extras, by glob: a new guide needs no change here.
  defp docs do
    [
      main: "readme",
      extras: ["README.md" | Enum.sort(Path.wildcard(Path.expand("guides/*.md", __DIR__)))],
      groups_for_extras: [Guides: ~r"guides/"],
      source_ref: "v#{@version}",
      source_url_pattern: "#{@source_url}/blob/v#{@version}/nif/ex_burn/%{path}#L%{line}"
    ]
  end
end
