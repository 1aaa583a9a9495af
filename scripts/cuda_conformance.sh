#!/usr/bin/env bash
# Builds the conformance suite against ExCuda here (cubecl loads CUDA and NVRTC at run time,
# so no CUDA toolkit is needed to build) and packs the test binaries into .bin/tests.tar.xz,
# a git-ignored folder to carry to a GPU machine. There, run:
#   mkdir -p /tmp/t && tar -C /tmp/t -xJf .bin/tests.tar.xz
#   export LD_LIBRARY_PATH=$(ls -d /usr/local/cuda-*/lib64 | head -1):$LD_LIBRARY_PATH
#   for t in /tmp/t/*; do $t --nocapture --test-threads 2; done
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cargo test -p ex_cubecl_conformance --no-default-features --features cuda --no-run --locked \
    --message-format=json 2>/dev/null |
    python3 -c 'import sys, json
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])' |
    while read -r name exe; do cp "$exe" "$stage/$name" && strip "$stage/$name"; done
mkdir -p .bin
tar -C "$stage" -cJf .bin/tests.tar.xz .
ls -la .bin/tests.tar.xz
