defmodule Mix.Tasks.Compile.ExCubeclNif do
  @moduledoc """
  Builds the NIF crate `ex_cubecl_nif` with cargo and copies the library into `priv/`: the
  source build, which this repository always uses and a user asks for with
  `EX_CUBECL_BUILD=true` (otherwise `ExCubecl.Native` loads a precompiled library through
  `rustler_precompiled`, and this compiler is not in the project's list).

  rustler's Mix package is not needed. In the repository the crate is a member of the cargo
  workspace, so it shares the lockfile and the warm target directory (`CARGO_TARGET_DIR`,
  default `~/.cache/ex_cubecl/target`); in the Hex package it builds on its own, with the
  `ex_cubecl` crate from crates.io. `EX_CUBECL_PROFILE` picks the cargo profile (`debug`, the
  default outside `:prod`, or `release`); `EX_CUBECL_FEATURES` the crate's features,
  comma-separated, built with `--no-default-features`: `wgpu` (the default here: hardware
  adapters through wgpu besides the CPU device), `vulkan`, `metal`, `cuda`, `default` (the
  crate's own default: CUDA and wgpu), or `none` for a NIF that runs on the CPU device alone
  (lavapipe/llvmpipe, WARP). The README's platform table maps them.

  `EX_CUBECL_NIF` names a library built before (e.g. on a machine without Rust, or to share one
  build between checkouts): it is copied into `priv/` as it is, and cargo does not run.
  """
  use Mix.Task.Compiler

  @crate "ex_cubecl_nif"

  @impl true
  def run(_args) do
    case System.get_env("EX_CUBECL_NIF") do
      nil -> build()
      "" -> build()
      prebuilt -> install(Path.expand(prebuilt))
    end
  end

  defp build do
    # In the repository, cargo finds the workspace above the crate; in the Hex package the
    # crate is a project of its own.
    crate_dir = Path.expand("native/#{@crate}", __DIR__)
    target = System.get_env("CARGO_TARGET_DIR") || Path.expand("~/.cache/ex_cubecl/target")
    profile = System.get_env("EX_CUBECL_PROFILE") || if(Mix.env() == :prod, do: "release", else: "debug")
    features = System.get_env("EX_CUBECL_FEATURES") || "wgpu"

    cargo = System.find_executable("cargo")

    if cargo == nil do
      Mix.raise("ex_cubecl: cargo is required to build the NIF (install Rust with rustup)")
    end

    features = if features in ["", "none"], do: [], else: ["--features", features]

    args =
      ["build", "-p", @crate, "--no-default-features"] ++
        features ++ if(profile == "release", do: ["--release"], else: [])

    Mix.shell().info("ex_cubecl: cargo #{Enum.join(args, " ")}")

    {_, status} =
      System.cmd(cargo, args,
        cd: crate_dir,
        env: [{"CARGO_TARGET_DIR", target}],
        into: IO.stream(:stdio, :line),
        stderr_to_stdout: true
      )

    if status != 0 do
      Mix.raise("ex_cubecl: building the NIF failed (cargo exited with #{status}); see the output above")
    end

    ext = if match?({:unix, :darwin}, :os.type()), do: "dylib", else: "so"
    install(Path.join([target, profile, "lib#{@crate}.#{ext}"]))
  end

  defp install(built) do
    priv = Path.join(Mix.Project.app_path(), "priv")
    File.mkdir_p!(priv)
    dest = Path.join(priv, "lib#{@crate}.so")

    if stale?(built, dest) do
      # A fresh file, never an overwrite: a loaded library must not change under the VM.
      File.rm(dest)
      File.cp!(built, dest)
      {:ok, []}
    else
      {:noop, []}
    end
  end

  defp stale?(built, dest) do
    case {File.stat(built), File.stat(dest)} do
      {{:ok, b}, {:ok, d}} -> b.mtime > d.mtime or b.size != d.size
      {{:ok, _}, _} -> true
      {{:error, reason}, _} -> Mix.raise("ex_cubecl: no NIF library at #{built} (#{reason})")
    end
  end
end

defmodule ExCubecl.MixProject do
  use Mix.Project

  @version "0.1.0"
  @source_url "https://github.com/ExCubecl/ExBurn"

  def project do
    [
      app: :ex_cubecl,
      version: @version,
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      compilers: if(source_build?(), do: [:ex_cubecl_nif], else: []) ++ Mix.compilers(),
      # Read by ExCubecl.Native.Loader at compile time: how ExCubecl.Native gets its library.
      ex_cubecl_nif: if(source_build?(), do: :source, else: :precompiled),
      deps: deps(),
      test_coverage: [summary: false],
      description:
        "Buffers, kernels, pipelines and async commands on the GPU (CUDA, Vulkan, Metal) " <>
          "from Elixir: the Elixir side of ExCubecl, a Burn backend on hand-written CubeCL kernels",
      package: package(),
      docs: docs(),
      source_url: @source_url
    ]
  end

  def application do
    [extra_applications: [:logger], mod: {ExCubecl.Application, []}]
  end

  # Where the library comes from. In this repository (nif/ex_cubecl beside the cargo workspace)
  # it is always built from source, as before: no Hex dependency, so Debian's Elixir and cargo
  # alone build and test the package. In the Hex package it is downloaded precompiled
  # (rustler_precompiled, checked against checksum-Elixir.ExCubecl.Native.exs) unless
  # EX_CUBECL_BUILD=true (rustler_precompiled's convention, as is
  # RUSTLER_PRECOMPILED_FORCE_BUILD_ALL) or EX_CUBECL_NIF names a library built before.
  # After changing these, `mix deps.compile ex_cubecl --force`.
  defp source_build? do
    cond do
      System.get_env("EX_CUBECL_BUILD") in ~w(1 true) -> true
      System.get_env("RUSTLER_PRECOMPILED_FORCE_BUILD_ALL") in ~w(1 true) -> true
      System.get_env("EX_CUBECL_NIF") not in [nil, ""] -> true
      System.get_env("EX_CUBECL_BUILD") in ~w(0 false) -> false
      true -> in_repository?()
    end
  end

  defp in_repository?,
    do: File.regular?(Path.expand("../../Cargo.toml", __DIR__)) and Path.basename(Path.dirname(__DIR__)) == "nif"

  # The repository's source build needs no Hex package; a user of the Hex package gets
  # rustler_precompiled (and castore through it) even when building from source.
  defp deps do
    nif = if in_repository?() and source_build?(), do: [], else: [{:rustler_precompiled, "~> 0.8"}]
    nif ++ docs_deps()
  end

  # ExDoc for `mix docs`: from Hex outside the repository; in it, only where
  # scripts/docs.sh names its offline copy (EX_CUBECL_DOCS_DEPS), so that `mix deps.get` in the
  # repository never needs Hex for it.
  defp docs_deps do
    case {System.get_env("EX_CUBECL_DOCS_DEPS"), in_repository?()} do
      {nil, true} -> []
      {nil, false} -> [{:ex_doc, "~> 0.40", only: :dev, runtime: false}]
      {dir, _} -> offline_docs_deps(dir)
    end
  end

  # ExDoc and its dependencies as path dependencies, from a folder holding their source trees
  # side by side (scripts/setup_packaging.sh unpacks them from the offline folder).
  defp offline_docs_deps(dir) do
    for name <- ~w(ex_doc earmark_parser makeup makeup_elixir makeup_erlang nimble_parsec)a do
      {name, path: Path.join(dir, Atom.to_string(name)), only: :dev, runtime: false, override: true}
    end
  end

  defp package do
    [
      licenses: ["MIT", "Apache-2.0"],
      links: %{"GitHub" => @source_url},
      # What a build from the tarball needs: the Elixir sources, the checksums of the
      # precompiled libraries, and the two crates of the source build (their own manifests,
      # no workspace); scripts/package_hex.sh adds the workspace's Cargo.lock beside the NIF
      # crate's manifest.
      files: ~w(lib mix.exs README.md .formatter.exs LICENSE-MIT LICENSE-APACHE checksum-Elixir.ExCubecl.Native.exs
                native/ex_cubecl_nif/Cargo.toml native/ex_cubecl_nif/Cargo.lock native/ex_cubecl_nif/src
                native/ex_cubecl_record/Cargo.toml native/ex_cubecl_record/README.md native/ex_cubecl_record/src)
    ]
  end

  defp docs do
    [
      main: "readme",
      extras: ["README.md"],
      source_ref: "v#{@version}",
      source_url_pattern: "#{@source_url}/blob/v#{@version}/nif/ex_cubecl/%{path}#L%{line}"
    ]
  end
end
