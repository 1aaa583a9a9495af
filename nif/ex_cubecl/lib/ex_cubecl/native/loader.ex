defmodule ExCubecl.Native.Loader do
  @moduledoc false
  # How `ExCubecl.Native` gets its library, decided by mix.exs (`:ex_cubecl_nif` in the project
  # config, read at compile time):
  #
  #   - `:source` (this repository; EX_CUBECL_BUILD=true; EX_CUBECL_NIF): Mix.Tasks.Compile.ExCubeclNif
  #     put `priv/libex_cubecl_nif.so` there, and `load_nif/0` loads it;
  #   - `:precompiled` (the Hex package's default): rustler_precompiled downloads the library
  #     for this machine's target, NIF version and variant from the release of this version,
  #     checks it against `checksum-Elixir.ExCubecl.Native.exs`, and loads it.
  #
  # A macro, so that the source build never expands `use RustlerPrecompiled` (the package is
  # not a dependency there).

  @version Mix.Project.config()[:version]

  # The precompiled libraries: scripts/release_nif.sh builds x86_64 Linux here, the release
  # workflow (.github/workflows/release.yml) the others.
  @targets ~w(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu aarch64-apple-darwin x86_64-pc-windows-msvc)
  @nif_versions ["2.16", "2.17"]

  defmacro __using__(_opts) do
    case Mix.Project.config()[:ex_cubecl_nif] do
      :precompiled -> precompiled()
      _ -> source()
    end
  end

  defp source do
    quote do
      @on_load :load_nif

      @doc false
      def load_nif do
        path = :filename.join(:code.priv_dir(:ex_cubecl), ~c"libex_cubecl_nif")
        :erlang.load_nif(path, 0)
      end
    end
  end

  defp precompiled do
    quote do
      use RustlerPrecompiled,
        otp_app: :ex_cubecl,
        crate: "ex_cubecl_nif",
        version: unquote(@version),
        base_url: unquote(__MODULE__).base_url(),
        targets: unquote(@targets),
        nif_versions: unquote(@nif_versions),
        # With CUDA (cubecl loads libcuda at run time) beside wgpu; picked by
        # EX_CUBECL_FEATURES naming cuda, the variable that picks the runtimes of a source build.
        variants: %{"x86_64-unknown-linux-gnu" => [cuda: &unquote(__MODULE__).cuda?/0]}
    end
  end

  @doc false
  # The release of this version; EX_CUBECL_PRECOMPILED_URL points elsewhere (a mirror, or the
  # install test's loopback server).
  def base_url do
    System.get_env("EX_CUBECL_PRECOMPILED_URL") ||
      "https://github.com/ExCubecl/ExBurn/releases/download/v#{@version}"
  end

  @doc false
  def cuda? do
    "cuda" in String.split(System.get_env("EX_CUBECL_FEATURES", ""), [",", " "], trim: true)
  end
end
