#!/usr/bin/env bash
# Runs on the GPU machine (no Rust toolchain there) what issue 29's tensor-core work measures,
# from the bundle .bin/speed.tar.xz that scripts/speed_cuda.sh builds here. A device call ends
# after ten minutes: give each long stage a call of its own.
#   bash scripts/speed_gpu.sh OUT tests [FILTER]   # the tensor-core kernels' conformance tests on CUDA
#   bash scripts/speed_gpu.sh OUT torch FILTER     # PyTorch's rows whose names contain one of FILTER's |-separated texts
#   bash scripts/speed_gpu.sh OUT bench FILTER [ARGS]  # our rows (burn-cubecl's beside them) with
#                                                  # PyTorch's; ARGS go to the bench (--tune, --iters N)
#   bash scripts/speed_gpu.sh OUT profile FILTER KERNELS [ARGS]  # Nsight Compute on the rows, kernels
#                                                  # by regex; ARGS go to the bench (--tune for tiling rows)
#   bash scripts/speed_gpu.sh OUT launch           # launch_cost: µs and heap allocations per launch, waits
#   bash scripts/speed_gpu.sh OUT sass FILTER [ARGS]  # the tensor-core kernels of the rows (ours only with
#                                                  # --tune's tiling rows) compiled by nvcc: registers, PTX
#                                                  # counts, the main loop's SASS per K step (scripts/sass_loop.py)
# OUT gets a log and a table per stage; bench reads OUT/torch.json when present.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: speed_gpu.sh OUT tests [FILTER] | torch FILTER | bench FILTER [ARGS] | profile FILTER KERNELS [ARGS] | launch | sass FILTER [ARGS]"
out="${1:?$usage}"
stage="${2:?$usage}"
filter="${3:-}"
mkdir -p "$out" /tmp/ex_cubecl_speed
[[ -x /tmp/ex_cubecl_speed/bench ]] || tar -C /tmp/ex_cubecl_speed -xJf .bin/speed.tar.xz
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
bin=/tmp/ex_cubecl_speed
case "$stage" in
tests)
    for t in "$bin"/*_test; do
        "$t" --test-threads 8 $filter 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$out/$(basename "$t").log" |
            grep -E "^conformance|test result|FAILED|panicked" | head -40
    done
    ;;
torch)
    PYTHONUNBUFFERED=1 python3 benches/torch_rows.py --filter "${filter:?$usage}" --out "$out/torch.json" 2>&1 | tee "$out/torch.log"
    ;;
bench)
    torch=()
    [[ -f $out/torch.json ]] && torch=(--torch "$out/torch.json")
    "$bin/bench" --size full --gpu "$gpu" --date "$(date -u +%Y-%m-%d)" --filter "${filter:?$usage}" \
        --out "$out/bench.md" ${torch[@]+"${torch[@]}"} ${4:-} 2>&1 | tee "$out/bench.log"
    ;;
profile)
    ncu="$(ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1 || command -v ncu)"
    CUBECL_DEBUG_LOG="$out/cubecl.log" "$ncu" --clock-control none -k "regex:${4:?$usage}" \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section InstructionStats \
        --section WarpStateStats "$bin/bench" --size full --iters 2 --warmup 1 --filter "${filter:?$usage}" ${5:-} \
        >"$out/ncu.log" 2>&1 || true
    grep -E '^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Executed Instructions  |Issue Slots Busy|Grid Size|Block Size|Stall|Dynamic Shared' "$out/ncu.log" | head -150
    ;;
launch)
    "$bin/launch_cost" 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$out/launch_cost.md"
    ;;
sass)
    rm -f "$out/kernels.log"
    CUBECL_DEBUG_LOG="$out/kernels.log" "$bin/bench" --size full --iters 3 --warmup 1 --filter "${filter:?$usage}" ${4:-} \
        >"$out/sass_bench.log" 2>&1
    python3 scripts/sass_loop.py "$out/kernels.log" "$out/sass" | tee "$out/sass.txt"
    ;;
*)
    echo "speed_gpu.sh: unknown stage $stage" >&2
    exit 2
    ;;
esac
