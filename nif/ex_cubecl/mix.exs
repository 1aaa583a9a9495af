defmodule Mix.Tasks.Compile.ExCubeclNif do
  @moduledoc """
  Builds the NIF crate `ex_cubecl_nif` with cargo and copies the library into `priv/`.

  rustler's Mix package is not needed: the crate is a member of the repository's cargo
  workspace, so it shares the lockfile and the warm target directory
  (`CARGO_TARGET_DIR`, default `~/.cache/ex_cubecl/target`). `EX_CUBECL_PROFILE` picks the
  cargo profile (`debug`, the default outside `:prod`, or `release`); `EX_CUBECL_FEATURES`
  the crate's features, comma-separated, built with `--no-default-features`: `wgpu` (the
  default here: hardware adapters through wgpu besides the CPU device), `vulkan`, `metal`,
  `cuda`, `default` (the crate's own default: CUDA and wgpu), or `none` for a NIF that runs
  on the CPU device alone (lavapipe/llvmpipe, WARP). The README's platform table maps them.

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
    root = Path.expand("../..", __DIR__)
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
        cd: root,
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

  def project do
    [
      app: :ex_cubecl,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      compilers: [:ex_cubecl_nif] ++ Mix.compilers(),
      deps: [],
      test_coverage: [summary: false]
    ]
  end

  def application do
    [extra_applications: [:logger]]
  end
end
