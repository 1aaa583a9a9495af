#!/usr/bin/env bash
# Builds, here, what scripts/speed_gpu.sh runs on the GPU machine (CUDA's driver and NVRTC, no
# Rust): the bench and launch_cost in release and the conformance tests of the tensor-core and
# memory-bound kernels (module_pool_attention, matmul, module, layout, reduce) in debug, all with `--features cuda`, stripped and
# packed into .bin/speed.tar.xz (git-ignored; pass `.bin` in the device tool's carry). The
# CUDA target folder is fusion_cuda.sh's, so that the two share their build.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CUDA_TARGET_DIR:-$HOME/.cache/ex_cubecl/target-cuda}"
EX_CUBECL_COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!benches/RESULTS.md' || echo +dirty)"
export EX_CUBECL_COMMIT
cargo build --release --locked -p ex_cubecl_benches --no-default-features --features cuda --bin bench --bin launch_cost
tests="$(cargo test --no-run --locked -p ex_cubecl_conformance --no-default-features --features cuda \
    --test module_pool_attention --test matmul --test module --test layout --test reduce --message-format=json |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$CARGO_TARGET_DIR/release/bench" "$CARGO_TARGET_DIR/release/launch_cost" "$stage/"
for t in $tests; do
    name="$(basename "$t")"
    cp "$t" "$stage/${name%-*}_test"
done
strip "$stage"/*
mkdir -p .bin
tar -C "$stage" -cJf .bin/speed.tar.xz .
ls -la .bin/speed.tar.xz
