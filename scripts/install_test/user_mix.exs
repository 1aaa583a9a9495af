# The install test's user project: ex_burn and ex_cubecl unpacked from their Hex tarballs into
# vendor/, and their Hex dependencies from the offline folder, all as path dependencies (where
# a user's Mix would fetch them from Hex). Nothing here builds Rust.
defmodule InstallTest.MixProject do
  use Mix.Project

  def project do
    [
      app: :install_test,
      version: "0.1.0",
      elixir: "~> 1.17",
      deps: deps(),
      # castore's source tree (not its Hex package) has a Mix task that needs public_key's
      # headers, which Mix prunes from the code path of a dependency compiled in :prod.
      prune_code_paths: false
    ]
  end

  def application, do: [extra_applications: [:logger]]

  defp deps do
    offline = fn var, name -> {name, path: Path.join(System.fetch_env!(var), Atom.to_string(name)), override: true} end

    [
      {:ex_burn, path: "vendor/ex_burn"},
      {:ex_cubecl, path: "vendor/ex_cubecl", override: true},
      offline.("EXBURN_DEPS_DIR", :nx),
      offline.("EXBURN_DEPS_DIR", :complex),
      offline.("EXBURN_DEPS_DIR", :telemetry),
      offline.("EXBURN_DEPS_DIR", :axon),
      offline.("EXBURN_DEPS_DIR", :polaris),
      offline.("EX_CUBECL_PKG_DEPS", :rustler_precompiled),
      offline.("EX_CUBECL_PKG_DEPS", :castore)
    ]
  end
end
