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
      description: "An Nx backend on ExCubecl: every Nx function on the GPU (CUDA, Vulkan, Metal)"
    ]
  end

  def application, do: [extra_applications: [:logger]]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp deps, do: [{:ex_cubecl, path: "../ex_cubecl"} | nx_deps()]

  # With Hex, Nx comes from Hex. Without it, EXBURN_DEPS names a folder holding checkouts of
  # nx (its `nx/` folder), complex and telemetry (as Axon's AXON_NX_PATH does for Nx).
  defp nx_deps do
    case System.get_env("EXBURN_DEPS") do
      nil ->
        [{:nx, "~> 0.13"}]

      dir ->
        for name <- [:nx, :complex, :telemetry], do: {name, path: Path.join(dir, to_string(name)), override: true}
    end
  end
end
