#!/usr/bin/env bash
# Runs on the GPU machine (no Rust toolchain there): unpacks the binary that
# scripts/bench_cuda.sh packed into .bin/bench.tar.xz, runs every benchmark case at full size
# on ExCubecl, burn-cubecl and burn-ndarray, and writes the report (device, date, commit, the
# table with floors from the device's datasheet peaks) to OUT_DIR/RESULTS.md. Extra arguments
# go to the binary (e.g. --filter matmul). Copy the file to benches/RESULTS.md and commit it.
#   bash scripts/bench_gpu.sh OUT_DIR [bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bench_gpu.sh OUT_DIR [bench args...]}"
shift
mkdir -p "$out" /tmp/ex_cubecl_bench
tar -C /tmp/ex_cubecl_bench -xJf .bin/bench.tar.xz
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
/tmp/ex_cubecl_bench/bench --size full --gpu "$gpu" --date "$(date -u +%Y-%m-%d)" \
    --out "$out/RESULTS.md" "$@"
