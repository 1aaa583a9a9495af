#!/usr/bin/env bash
# Runs on the GPU machine (no Rust toolchain there): the fusion measurements of one session,
# from the bundle .bin/gpu.tar.xz (bench, pipeline and digits in release, the conformance tests
# fusion, fused and matmul in debug, all built here with `--features cuda`; see docs/fusion.md).
# Stages, with the time each took on an H200 (2026-11-27): a device call ends after ten
# minutes, so give each of the long ones a call of its own.
#   bash scripts/fusion_gpu.sh OUT tests     # conformance/tests/{fusion,fused,matmul}.rs on CUDA (8 min)
#   bash scripts/fusion_gpu.sh OUT torch     # PyTorch's rows, eager and torch.compile (1 min)
#   bash scripts/fusion_gpu.sh OUT bench     # the fusion rows: unfused, then both backends fused
#   bash scripts/fusion_gpu.sh OUT bench unfused|fusion  # one of the two (7 and 5 min: most of
#                                            # it burn-cubecl's autotuning and the CPU column)
#   bash scripts/fusion_gpu.sh OUT digits    # the digits job without and with --fusion
#   bash scripts/fusion_gpu.sh OUT pipeline  # training steps eager and replayed, unfused and fused
#   bash scripts/fusion_gpu.sh OUT engine    # the fusion engine's exploration cost, ours and burn-cubecl's
#   bash scripts/fusion_gpu.sh OUT profile   # Nsight Compute on the add and the five-op chain, both backends fused
# OUT gets a log and a table per stage; the bench stage reads OUT/torch.json when present.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: fusion_gpu.sh OUT tests|torch|bench [unfused|fusion]|digits|pipeline|engine|profile"
out="${1:?$usage}"
stage="${2:?$usage}"
mkdir -p "$out" /tmp/ex_cubecl_gpu
[[ -x /tmp/ex_cubecl_gpu/bench ]] || tar -C /tmp/ex_cubecl_gpu -xJf .bin/gpu.tar.xz
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
bin=/tmp/ex_cubecl_gpu
# The rows issue 28 asks for: one add, the five-op chain, softmax, layer norm and GELU written
# as ops, a linear layer with its activation, the MLP step at batch 64 and 1024, the small
# CNN step at batch 64; and a 16-element add + sync, the engine's cost per synced run.
cases="add f32 2^26|tiny add|5 elementwise ops f32 (add|softmax|layer norm|gelu|linear + relu|MLP train step f32 (784-256-128-10, Adam)|CNN train step f32 (28x28, conv 8-16, pool, linear, Adam)"
case "$stage" in
tests)
    for t in fusion_test fused_test matmul_test; do
        "$bin/$t" --test-threads 8 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$out/$t.log" | grep -E "^conformance|test result"
    done
    ;;
torch)
    PYTHONUNBUFFERED=1 python3 benches/torch_rows.py --filter "$cases" --out "$out/torch.json" 2>&1 | tee "$out/torch.log"
    ;;
bench)
    torch=()
    [[ -f $out/torch.json ]] && torch=(--torch "$out/torch.json")
    for mode in ${3:-unfused fusion}; do
        flag=()
        [[ $mode == fusion ]] && flag=(--fusion)
        "$bin/bench" --size full --gpu "$gpu" --date "$(date -u +%Y-%m-%d)" --filter "$cases" \
            --out "$out/bench_$mode.md" ${torch[@]+"${torch[@]}"} ${flag[@]+"${flag[@]}"} 2>&1 | tee "$out/bench_$mode.log"
    done
    ;;
digits)
    for run in 1 2; do
        for flag in "" --fusion; do
            echo "== digits $flag (run $run)"
            "$bin/digits" --device cuda --no-progress $flag 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$out/digits.log" |
                grep -E "final test accuracy|time per epoch|backend"
        done
    done
    ;;
pipeline)
    "$bin/pipeline" 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$out/pipeline.log"
    ;;
engine)
    "$bin/engine" 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$out/engine.log"
    ;;
profile)
    # The kernels' own times and limits, apart from the host work the bench's clock includes;
    # the generated CUDA source of every kernel goes to cubecl.log.
    ncu="$(ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1 || command -v ncu)"
    CUBECL_DEBUG_LOG="$out/cubecl.log" "$ncu" --clock-control none -k 'regex:fused|binary_float_vec|elemwise|kernel_binop' \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section InstructionStats \
        "$bin/bench" --size full --fusion --iters 2 --warmup 1 --filter "add f32 2^26|5 elementwise ops f32 (add" \
        >"$out/ncu.log" 2>&1 || true
    grep -E '^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Executed Instructions  |Issue Slots Busy|Grid Size|Block Size' "$out/ncu.log" | head -150
    ;;
*)
    echo "fusion_gpu.sh: unknown stage $stage (tests, torch, bench, digits, pipeline, engine, profile)" >&2
    exit 2
    ;;
esac
