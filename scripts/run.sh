#!/usr/bin/env bash
# The main job: the example run on ExCubecl (wgpu; lavapipe where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run --locked --release --example regression -- "$@"
