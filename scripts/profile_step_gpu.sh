#!/usr/bin/env bash
# On a GPU machine: where one training step's GPU time goes. Runs the scale binary
# (.bin/scale.tar.xz of scripts/scale_cuda.sh) on one device for WARMUP + STEPS steps under
# Nsight Compute (only each kernel's duration; `--clock-control none`, as the library's
# METHOD.md asks), then groups the kernels by name with benches/kernel_times.py into
# OUT_DIR/kernels.md (per step: launches, ms, share). Kernel compilation happens before the
# first kernel runs, so it is not in the times; ncu serialises the launches, so the sum is
# the kernels' time without overlap, not the step's wall time.
#   bash scripts/profile_step_gpu.sh OUT_DIR [scale args...]   (default: ResNet-50 bf16, batch 64)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: profile_step_gpu.sh OUT_DIR [scale args...]}"
shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--only resnet --resnet-batch 64 --resnet-dtype bf16)
mkdir -p "$out"
bin=/tmp/ex_cubecl_profile
rm -rf "$bin"; mkdir -p "$bin"; tar -C "$bin" -xJf .bin/scale.tar.xz
cuda="$(ls -d /usr/local/cuda* 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda:+$cuda/lib64:}${LD_LIBRARY_PATH:-}"
ncu="$(command -v ncu || ls "$cuda"/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
warmup=1 steps=1
"$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$out/ncu.csv" \
    "$bin/scale" --devices 1 --warmup "$warmup" --steps "$steps" --out "$out/scale.json" "${args[@]}" \
    > "$out/scale.md" 2> "$out/scale.log"
python3 benches/kernel_times.py "$out/ncu.csv" --steps $((warmup + steps)) > "$out/kernels.md"
head -45 "$out/kernels.md"
