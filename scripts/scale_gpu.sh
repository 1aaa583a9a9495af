#!/usr/bin/env bash
# Runs on the GPU machine (no Rust toolchain there; CUDA driver, NVRTC, NCCL or PyTorch's
# NCCL wheel, python3 with torch): unpacks .bin/scale.tar.xz (scripts/scale_cuda.sh), then
#   1. finds NCCL: cudarc opens `libnccl.so`; where only `libnccl.so.2` exists (NCCL's runtime
#      package, or PyTorch's pip wheel `nvidia/nccl/lib/libnccl.so.2`) it links
#      libnccl.so to it in a folder of its own put first on LD_LIBRARY_PATH; where none is
#      found, SCALE.md says so (our all-reduces then run host-staged),
#   2. the two-process NCCL check: scripts/launch_distributed.sh --nproc 2 -- process_group,
#   3. our scale binary on 1, 2 (and 4 where present) GPUs: all-reduce bus bandwidth
#      1 MiB-1 GiB, weak scaling of the MLP 784-4096-4096-10 (f32/TF32, batch 1024 per GPU)
#      and of ResNet-50 (bf16, batch 128 per GPU), the gradients all-reduced after the
#      backward pass (`--grad-sync overlap`: during it, in 25 MiB buckets as DDP, which over
#      NCCL hung in some first steps and needs EX_CUBECL_ALLOW_NCCL_OVERLAP=1), each
#      part its own process and time limit; the parts share a kernel cache (cubecl's PTX
#      cache, $EX_CUBECL_KERNEL_CACHE or /tmp/ex_cubecl_kernel_cache), so only the first
#      device compiles ResNet-50's kernels and the others load them,
#   4. benches/torch_ddp.py, the same in PyTorch (NCCL all_reduce, DDP, autocast bf16),
# and writes three files to OUT_DIR: SCALE.md (ours beside PyTorch, with ratios), logs.txt
# (every step's output, and each stage's wall time) and raw.tar.gz (the JSON figures, tables,
# logs and `nvidia-smi topo -m`). About 5 minutes on 2 GPUs, at most 9 (the stages' time
# limits: 40 + 50 + 60 + 220 + 150 s). NCCL_NVLS_ENABLE=0 throughout (no NVLink multicast).
#   bash scripts/scale_gpu.sh OUT_DIR [--resnet-batch N] [--devices 1,2] [--grad-sync overlap|after]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scale_gpu.sh OUT_DIR [--resnet-batch N] [--devices 1,2,4]}"
shift
resnet_batch=128 counts="" grad_sync=after
while [ $# -gt 0 ]; do
    case "$1" in
        --resnet-batch) resnet_batch="$2"; shift 2 ;;
        --devices) counts="$2"; shift 2 ;;
        --grad-sync) grad_sync="$2"; shift 2 ;;
        *) echo "scale_gpu: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
final="$(cd "$out" && pwd)"
out="$(mktemp -d /tmp/ex_cubecl_scale_run.XXXXXX)"
bin=/tmp/ex_cubecl_scale
rm -rf "$bin" && mkdir -p "$bin"
tar -C "$bin" -xJf .bin/scale.tar.xz || { echo "scale_gpu: no .bin/scale.tar.xz (run scripts/scale_cuda.sh on the build machine)" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}"
notes=()
note() { notes+=(--note "$1"); echo "scale_gpu: $1" >&2; }
# Each stage's wall time, on stderr and in logs.txt.
stages=()
stage_start() { stage_t0=$SECONDS; echo "scale_gpu: $1 ..." >&2; }
stage_end() { stages+=("$1: $((SECONDS - stage_t0)) s"); echo "scale_gpu: $1 took $((SECONDS - stage_t0)) s" >&2; }
kernel_cache="${EX_CUBECL_KERNEL_CACHE:-/tmp/ex_cubecl_kernel_cache}"
mkdir -p "$kernel_cache"
# The driver's cache of PTX compiled for the GPU, shared by the devices: room for ResNet-50's kernels.
export CUDA_CACHE_MAXSIZE="${CUDA_CACHE_MAXSIZE:-4294967296}"

# 1. NCCL, as cudarc loads it (libnccl.so).
source scripts/nccl_env.sh
note "$EX_CUBECL_NCCL_FOUND"
gpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if [ -z "$counts" ]; then
    counts=1
    [ "$gpus" -ge 2 ] && counts="1,2"
    [ "$gpus" -ge 4 ] && counts="1,2,4"
fi
note "$gpus x $gpu, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1); $(date -u +%Y-%m-%dT%H:%MZ); commit $(cat "$bin/COMMIT" 2>/dev/null || echo '?'); NCCL_NVLS_ENABLE=0"
nvidia-smi topo -m > "$out/topology.txt" 2>&1 || true

# 2. The two-process NCCL check.
stage_start "two-process NCCL check"
if [ "$gpus" -ge 2 ]; then
    timeout 40 scripts/launch_distributed.sh --nproc 2 -- "$bin/process_group" > "$out/process_group.log" 2>&1
    status=$?
    if [ $status -eq 0 ]; then
        note "two-process NCCL check (launch_distributed.sh --nproc 2 -- process_group): passed; $(grep -h 'bus bandwidth' "$out/process_group.log" | head -2 | sed 's/process_group: //' | tr '\n' ' ')"
    else
        note "two-process NCCL check: FAILED (exit $status$([ $status -eq 124 ] && echo ', timed out after 40 s')); see process_group.log: $(tail -2 "$out/process_group.log" | tr '\n' ' ')"
    fi
else
    note "two-process NCCL check: not run (one GPU)"
fi
stage_end "two-process NCCL check"

# 3. Ours, one process per part, each with its own limit (a hang costs only its part).
run_part() {
    local part="$1" limit="$2"
    shift 2
    stage_start "ours, $part"
    timeout "$limit" "$bin/scale" --devices "$counts" --only "$part" --out "$out/ours_$part.json" \
        --kernel-cache "$kernel_cache" "$@" > "$out/ours_$part.md" 2> "$out/ours_$part.log"
    local status=$?
    if [ $status -ne 0 ]; then
        note "ours, $part: exit $status$([ $status -eq 124 ] && echo ", timed out after $limit s"); the table has what it measured before; see ours_$part.log: $(grep -v '^scale: .*: .* ms' "$out/ours_$part.log" | tail -3 | tr '\n' ' ')"
    fi
    stage_end "ours, $part"
}
run_part allreduce 50
run_part mlp 60 --grad-sync "$grad_sync"
run_part resnet 220 --grad-sync "$grad_sync" --resnet-batch "$resnet_batch"
[ "$grad_sync" = overlap ] && note "ours: gradients all-reduced during the backward pass (--grad-sync overlap)"

# 4. PyTorch, the same on the same GPUs.
torch_json=()
if python3 -c "import torch" 2>/dev/null; then
    stage_start "PyTorch"
    timeout 150 python3 benches/torch_ddp.py --devices "$counts" --resnet-batch "$resnet_batch" --out "$out/torch.json" \
        > /dev/null 2> "$out/torch.log"
    status=$?
    [ $status -ne 0 ] && note "PyTorch: torch_ddp.py exit $status$([ $status -eq 124 ] && echo ', timed out after 150 s'); see torch.log: $(tail -2 "$out/torch.log" | tr '\n' ' ')"
    stage_end "PyTorch"
    torch_json=(--torch "$out/torch.json")
else
    note "PyTorch: no torch in python3; no PyTorch column"
fi
[ "$resnet_batch" != 128 ] && note "ResNet-50 at batch $resnet_batch per GPU (not 128)"

note "stage times: $(IFS=';'; echo "${stages[*]}" | sed 's/;/; /g')"
python3 benches/scale_report.py --ours "$out"/ours_allreduce.json "$out"/ours_mlp.json "$out"/ours_resnet.json \
    ${torch_json[@]+"${torch_json[@]}"} "${notes[@]}" > "$final/SCALE.md"
for f in process_group.log ours_allreduce.md ours_allreduce.log ours_mlp.md ours_mlp.log ours_resnet.md ours_resnet.log torch.log; do
    [ -f "$out/$f" ] && { echo "==== $f"; cat "$out/$f"; }
done > "$final/logs.txt"
printf 'scale_gpu stage times: %s\n' "${stages[@]}" >> "$final/logs.txt"
tar -C "$out" -czf "$final/raw.tar.gz" .
cat "$final/SCALE.md"
