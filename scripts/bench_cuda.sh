#!/usr/bin/env bash
# Builds the benchmark binary against CUDA here (cubecl loads CUDA and NVRTC at run time, so
# no CUDA toolkit is needed to build), strips it and packs it into .bin/bench.tar.xz, a
# git-ignored folder to carry to a GPU machine. There, `bash scripts/bench_gpu.sh OUT_DIR`
# runs every case and writes OUT_DIR/RESULTS.md (copy it to benches/RESULTS.md here), or by
# hand:
#   mkdir -p /tmp/b && tar -C /tmp/b -xJf .bin/bench.tar.xz
#   export LD_LIBRARY_PATH=$(ls -d /usr/local/cuda-*/lib64 | head -1):$LD_LIBRARY_PATH
#   /tmp/b/bench --size full            # add --filter TEXT, --iters N, --tune
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
# The report names the commit it measured; "+dirty" when the tree had uncommitted changes.
EX_CUBECL_COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!benches/RESULTS.md' || echo +dirty)"
export EX_CUBECL_COMMIT
cargo build --release --locked -p ex_cubecl_benches --no-default-features --features cuda --bin bench
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$CARGO_TARGET_DIR/release/bench" "$stage/bench"
strip "$stage/bench"
mkdir -p .bin
tar -C "$stage" -cJf .bin/bench.tar.xz .
ls -la .bin/bench.tar.xz
