#!/usr/bin/env bash
# The main job: the digits example (examples/src/bin/digits.rs) trains an MLP and a small CNN
# on Autodiff<ExCubecl> on wgpu (Mesa's lavapipe where there is no GPU), in release. Arguments
# go to the example: e.g. `bash scripts/run.sh --model cnn --epochs 4`, `--help` lists them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run --locked --release -p ex_cubecl_examples --bin digits -- "$@"
