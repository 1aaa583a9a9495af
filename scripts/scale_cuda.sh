#!/usr/bin/env bash
# Builds the scaling binaries against CUDA here (features cuda + distributed, without wgpu;
# cubecl loads CUDA, NVRTC and NCCL at run time, so none of them is needed to build), strips
# them and packs them into .bin/scale.tar.xz, a git-ignored folder to carry to a GPU machine
# with the benches/ Python scripts. There, `bash scripts/scale_gpu.sh OUT_DIR` runs them and
# writes OUT_DIR/SCALE.md.
#   scale          all-reduce bus bandwidth and weak scaling on 1..N GPUs of one process
#   process_group  the NCCL check across processes (scripts/launch_distributed.sh)
# CARGO_TARGET_DIR defaults to the project's cache, as in bench_cuda.sh. EX_CUBECL_SYMBOLS=1
# keeps the symbols (for gdb's stacks in scripts/scale_hang.sh; 18 MB instead of 4 packed).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
cargo build --release --locked -p ex_cubecl_examples --no-default-features --features cuda,distributed \
    --bin scale --bin process_group
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for bin in scale process_group; do
    cp "$CARGO_TARGET_DIR/release/$bin" "$stage/$bin"
    [ -n "${EX_CUBECL_SYMBOLS:-}" ] || strip "$stage/$bin"
done
git rev-parse --short HEAD > "$stage/COMMIT"
mkdir -p .bin
tar -C "$stage" -cJf .bin/scale.tar.xz .
ls -la .bin/scale.tar.xz
