#!/usr/bin/env bash
# Builds the pipeline benchmark (eager vs replayed MLP training steps) against CUDA here
# (cubecl loads CUDA and NVRTC at run time, so no CUDA toolkit is needed to build), strips
# it and packs it into .bin/pipeline.tar.xz, a git-ignored folder to carry to a GPU machine.
# There, run:
#   mkdir -p /tmp/p && tar -C /tmp/p -xJf .bin/pipeline.tar.xz
#   export LD_LIBRARY_PATH=$(ls -d /usr/local/cuda-*/lib64 | head -1):$LD_LIBRARY_PATH
#   /tmp/p/pipeline                     # add --iters N, --warmup N, --batches 64,1024
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
cargo build --release --locked -p ex_cubecl_benches --no-default-features --features cuda --bin pipeline
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$CARGO_TARGET_DIR/release/pipeline" "$stage/pipeline"
strip "$stage/pipeline"
mkdir -p .bin
tar -C "$stage" -cJf .bin/pipeline.tar.xz .
ls -la .bin/pipeline.tar.xz
