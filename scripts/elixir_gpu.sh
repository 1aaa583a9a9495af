#!/usr/bin/env bash
# Runs an Elixir script with ExBurn on a GPU machine (no Rust, Erlang or Elixir there), from
# the bundle that scripts/elixir_cuda.sh packed into .bin/elixir.tar.xz:
#   bash scripts/elixir_gpu.sh nif/ex_burn/bench/train_step.exs [script args...]
# The script runs with ex_burn's applications started and the CUDA device as the default.
set -euo pipefail
cd "$(dirname "$0")/.."
script="${1:?usage: elixir_gpu.sh SCRIPT [args...]}"
shift
root=/tmp/exb
if [ ! -d "$root" ]; then
    tar -C /tmp -xJf .bin/elixir.tar.xz
fi
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="$root/so${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$root/erlang/bin:$root/elixir/bin:$PATH"
# NCCL for all-reduces across the GPUs (ExCubecl.all_reduce/2, fit(devices:)).
source scripts/nccl_env.sh
echo "elixir_gpu: $EX_CUBECL_NCCL_FOUND" >&2
export NCCL_NVLS_ENABLE=0
export ELIXIR_ERL_OPTIONS="${ELIXIR_ERL_OPTIONS:-+fnu}"
export EX_CUBECL_DEVICE="${EX_CUBECL_DEVICE:-cuda:0}"
# Starts ex_burn's applications, then runs the script with its own arguments.
cat >"$root/boot.exs" <<'EOF'
{:ok, _} = Application.ensure_all_started(:ex_burn)
[script | args] = System.argv()
System.argv(args)
Code.require_file(script)
EOF
# EXB_UNCONSOLIDATED=1 leaves the consolidated protocols out (to measure what they save).
consolidated=("-pa" "$root/consolidated")
if [ -n "${EXB_UNCONSOLIDATED:-}" ]; then consolidated=(); fi
exec elixir -pa "$root/apps/*/ebin" "${consolidated[@]}" "$root/boot.exs" "$script" "$@"
