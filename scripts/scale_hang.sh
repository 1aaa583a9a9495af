#!/usr/bin/env bash
# Runs on a machine with 2+ GPUs: where a data-parallel step of the scale binary
# (.bin/scale.tar.xz of scripts/scale_cuda.sh, best built with EX_CUBECL_SYMBOLS=1) stops.
# Starts `scale --devices 2 --only mlp` with the given arguments (e.g. `--grad-sync overlap`
# with EX_CUBECL_ALLOW_NCCL_OVERLAP=1, or `--only resnet`; the later of two options wins)
# and NCCL_DEBUG=INFO; if it is still running after WAIT seconds, records each thread's
# kernel wait channel and every thread's stack (gdb, or cuda-gdb where gdb is missing: the GPU
# machines have only cuda-gdb, which attaches to a running program as root), then kills it. Everything goes into one file, OUT_DIR/hang.tar.gz, written
# before the end (a device call brings back few files, and none past its time limit).
#   bash scripts/scale_hang.sh OUT_DIR [WAIT] [scale args...]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scale_hang.sh OUT_DIR [WAIT] [scale args...]}"
wait_s="${2:-30}"
shift 2 2>/dev/null || shift $#
mkdir -p "$out"
work="$(mktemp -d /tmp/ex_cubecl_hang.XXXXXX)"
bin=/tmp/ex_cubecl_scale_hang
rm -rf "$bin" && mkdir -p "$bin" && tar -C "$bin" -xJf .bin/scale.tar.xz
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO
cuda_lib="$(ls -d /usr/local/cuda*/lib64 2>/dev/null | head -1 || true)"
export LD_LIBRARY_PATH="${cuda_lib:+$cuda_lib:}${LD_LIBRARY_PATH:-}"
source scripts/nccl_env.sh
pack() { tar -C "$work" -czf "$out/hang.tar.gz" .; }
"$bin/scale" --devices 2 --only mlp --warmup 1 --steps 2 "$@" > "$work/scale.md" 2> "$work/scale.log" &
pid=$!
for _ in $(seq "$wait_s"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
if kill -0 "$pid" 2>/dev/null; then
    echo "scale_hang: still running after $wait_s s" | tee "$work/verdict.txt"
    for t in /proc/"$pid"/task/*; do
        echo "$(basename "$t") $(cat "$t/comm") wchan=$(cat "$t/wchan" 2>/dev/null)"
    done > "$work/wchan.txt"
    pack
    debugger="$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1 || true)"
    if [ -n "$debugger" ]; then
        timeout 90 "$debugger" -p "$pid" -batch -ex "set pagination off" -ex "thread apply all bt 30" > "$work/gdb.txt" 2>&1
    else
        echo "neither gdb nor cuda-gdb on this machine" > "$work/gdb.txt"
    fi
    kill -9 "$pid"
else
    wait "$pid"
    echo "scale_hang: ended by itself, exit $?" | tee "$work/verdict.txt"
fi
pack
cat "$work/verdict.txt"; tail -5 "$work/scale.log"
