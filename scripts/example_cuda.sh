#!/usr/bin/env bash
# Builds the digits example here with the `cuda` and `peer` features (without wgpu, which
# halves the release build of the example; cubecl loads CUDA and NVRTC at run time, so no
# CUDA toolkit is needed to build), strips it and packs it into .bin/digits.tar.xz, a
# git-ignored folder to carry to a GPU machine. There, run:
#   mkdir -p /tmp/d && tar -C /tmp/d -xJf .bin/digits.tar.xz
#   export LD_LIBRARY_PATH=$(ls -d /usr/local/cuda-*/lib64 | head -1):$LD_LIBRARY_PATH
#   /tmp/d/digits --device cuda --no-progress                          # ExCubecl
#   /tmp/d/digits --device cuda --no-progress --backend burn-cubecl    # burn-cubecl, same code
# Each run prints the time per epoch (median of epochs 2..N) of each model.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
cargo build --release --locked -p ex_cubecl_examples --no-default-features --features cuda,peer --bin digits
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$CARGO_TARGET_DIR/release/digits" "$stage/digits"
strip "$stage/digits"
mkdir -p .bin
tar -C "$stage" -cJf .bin/digits.tar.xz .
ls -la .bin/digits.tar.xz
