#!/usr/bin/env bash
# Builds, here, what scripts/fusion_gpu.sh runs on the GPU machine (which has CUDA's driver and
# NVRTC but no Rust): bench, pipeline, engine and digits in release, and the conformance tests fusion, fused and
# matmul in debug, all with `--features cuda`, stripped and packed into .bin/gpu.tar.xz (git-ignored;
# pass `.bin` in the device tool's carry). A CUDA target folder of its own, so that the
# wgpu builds of the test command don't rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CUDA_TARGET_DIR:-$HOME/.cache/ex_cubecl/target-cuda}"
EX_CUBECL_COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!benches/RESULTS.md' || echo +dirty)"
export EX_CUBECL_COMMIT
cargo build --release --locked -p ex_cubecl_benches --no-default-features --features cuda --bin bench --bin pipeline --bin engine
cargo build --release --locked -p ex_cubecl_examples --no-default-features --features cuda --bin digits
tests="$(cargo test --no-run --locked -p ex_cubecl_conformance --no-default-features --features cuda \
    --test fusion --test fused --test matmul --message-format=json | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$CARGO_TARGET_DIR"/release/{bench,pipeline,engine,digits} "$stage/"
for t in $tests; do
    name="$(basename "$t")"
    cp "$t" "$stage/${name%%-*}_test"
done
strip "$stage"/*
mkdir -p .bin
tar -C "$stage" -cJf .bin/gpu.tar.xz .
ls -la .bin/gpu.tar.xz
