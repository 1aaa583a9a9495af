#!/usr/bin/env bash
# The Elixir main job: nif/ex_burn/examples/digits.exs trains an Axon MLP and a small CNN on
# ExBurn (wgpu; Mesa's lavapipe where there is no GPU) on the Rust job's digits: the Rust
# digits binary writes its seeded split (`--export-data`) and trains and saves its MLP, then
# the Elixir job trains, saves and reloads its models and loads the Rust MLP. Arguments go
# to digits.exs (e.g. `--model mlp --epochs 4`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/setup_elixir.sh
source scripts/setup_nx.sh
if [ -n "$EXBURN_NX_MISSING" ]; then
    echo "run_elixir: $EXBURN_NX_MISSING" >&2
    exit 1
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cargo build --locked --release -p ex_cubecl_examples --bin digits
digits="$CARGO_TARGET_DIR/release/digits"
"$digits" --export-data "$out/digits.mpk"
"$digits" --model mlp --out "$out" --no-progress
cd nif/ex_burn
MIX_ENV=prod mix run examples/digits.exs --data "$out/digits.mpk" \
    --rust-mlp "$out/ex_cubecl_digits_mlp_ex-cubecl.mpk" --out "$out" "$@"
