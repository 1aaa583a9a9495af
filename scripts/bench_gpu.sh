#!/usr/bin/env bash
# Runs on the GPU machine (no Rust toolchain there): unpacks the binary that
# scripts/bench_cuda.sh packed into .bin/bench.tar.xz, runs every benchmark case at full size
# on ExCubecl, burn-cubecl and burn-ndarray, and writes the report (device, date, commit, the
# table with floors from the device's datasheet peaks) to OUT_DIR/RESULTS.md. Where Python
# has torch, benches/torch_rows.py first times the same cases in PyTorch on the same device
# (OUT_DIR/torch.json) and the table gets a PyTorch column. Extra arguments go to the binary
# (e.g. --iters 50); a --filter among them goes to torch_rows.py too. Copy the file to
# benches/RESULTS.md and commit it.
#   bash scripts/bench_gpu.sh OUT_DIR [--filter TEXT] [bench args...]
# Every case in one call can take more than 10 minutes; to keep each call under a 10-minute
# limit, run the groups one by one, each into its own OUT_DIR (a filter may list
# `|`-separated alternatives), and merge the tables:
#   --filter matmul
#   --filter conv
#   --filter attention
#   --filter train
#   --filter "add|elementwise|sum|softmax|gather|scatter|cat|max_pool"    (the rest)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bench_gpu.sh OUT_DIR [--filter TEXT] [bench args...]}"
shift
mkdir -p "$out" /tmp/ex_cubecl_bench
tar -C /tmp/ex_cubecl_bench -xJf .bin/bench.tar.xz
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# PyTorch's times first, for the cases the binary will run (the same --filter).
filter=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    if [[ ${args[i]} == --filter ]]; then filter=(--filter "${args[i + 1]:-}"); fi
done
torch=()
rm -f "$out/torch.json"
if python3 -c "import torch" 2>/dev/null; then
    # A failure keeps the rows written so far; the benchmark runs either way.
    python3 benches/torch_rows.py --out "$out/torch.json" ${filter[@]+"${filter[@]}"} ||
        echo "bench_gpu: torch_rows.py failed; the PyTorch column has the rows it wrote" >&2
    if [[ -f $out/torch.json ]]; then torch=(--torch "$out/torch.json"); fi
else
    echo "bench_gpu: no torch in python3; the table has no PyTorch column" >&2
fi

/tmp/ex_cubecl_bench/bench --size full --gpu "$gpu" --date "$(date -u +%Y-%m-%d)" \
    --out "$out/RESULTS.md" ${torch[@]+"${torch[@]}"} "$@"
