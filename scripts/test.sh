#!/usr/bin/env bash
# Every test: unit tests of the runtime and the conformance suite against burn-ndarray, on
# wgpu (lavapipe on machines without a GPU), then the ExUnit suite of the Elixir package
# `nif/ex_cubecl` over the NIF. Each conformance suite prints how many op x dtype x case
# combinations it checked; the total comes last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
log="$(mktemp)"
digits="$(mktemp -d)"
trap 'rm -rf "$log" "$digits"' EXIT
cargo test --locked -- --nocapture --test-threads 2 2>&1 | grep -v "XDG_RUNTIME_DIR" | tee "$log"
# Scale-out (feature `distributed`, which can't join the run above: burn-autodiff's
# `distributed` feature breaks the conformance oracle, Autodiff<NdArray>): all-reduces, and
# data-parallel training equal to one device, on several logical wgpu devices of one process.
cargo test --locked -p ex_cubecl --features distributed --test distributed 2>&1 | grep -v "XDG_RUNTIME_DIR"
sed -n 's/^conformance\[.*\]: \([0-9]*\) op x dtype x case combinations checked, \([0-9]*\) failed$/\1 \2/p' "$log" |
    awk '{ total += $1; failed += $2 }
         END { printf "conformance: %d op x dtype x case combinations checked in all, %d failed\n", total, failed }'

# The crates as crates.io would get them: metadata and file lists (scripts/package_crates.sh;
# scripts/package_verify.sh, run by hand, builds them from their tarballs).
bash scripts/package_crates.sh

# The Elixir side, under one Elixir: Debian's OTP (and its elixir), then Elixir >= 1.17, Hex
# and Nx's dependencies from the offline sources where they are beside the clone
# (scripts/setup_nx.sh), else from Hex. Each package's Mix compiler builds the NIF crate in
# the same cargo target directory, in one debug build for both (ex_burn would otherwise build
# its dependency ex_cubecl in release: minutes of compilation for a suite that runs a minute
# faster).
source scripts/setup_elixir.sh
source scripts/setup_nx.sh
# FFmpeg's libraries (apt, where missing) and the NIF's `video` feature, so that the media
# tests (test/ex_cubecl/video_test.exs) round-trip a generated video; EX_CUBECL_NO_VIDEO=1
# builds without it (the test then checks the error that says so).
source scripts/setup_video.sh
export EX_CUBECL_PROFILE="${EX_CUBECL_PROFILE:-debug}"
(cd nif/ex_cubecl && MIX_ENV=test mix test 2>&1 | grep -v "XDG_RUNTIME_DIR")

# ExBurn (nif/ex_burn): Nx's doctests, the conformance suite against Nx.BinaryBackend, the
# defn compiler, the bad-input tests. Where Nx can't resolve (no Elixir >= 1.17, no offline
# folder, no Hex) one line says what is missing.
if [ -z "$EXBURN_NX_MISSING" ] && ! (cd nif/ex_burn && MIX_ENV=test mix deps.get >/dev/null 2>&1); then
    EXBURN_NX_MISSING="Nx 0.13 doesn't resolve (no offline folder, and Hex is unreachable)"
fi
if [ -z "$EXBURN_NX_MISSING" ]; then
    # The Elixir digits job (scripts/run_elixir.sh's, here on the debug builds): the Rust job
    # exports its split and trains and saves its MLP; the Elixir job trains the Axon MLP to
    # at least 95% test accuracy, saves and reloads it, and loads the Rust MLP, which must
    # classify as many test images right in Elixir as the Rust job printed.
    "$CARGO_TARGET_DIR/debug/digits" --export-data "$digits/digits.mpk" 2>&1 | grep -v "XDG_RUNTIME_DIR"
    "$CARGO_TARGET_DIR/debug/digits" --model mlp --epochs 3 --out "$digits" --no-progress 2>&1 | grep -v "XDG_RUNTIME_DIR" | tee "$log"
    hits="$(sed -n 's|^mlp: final test accuracy .* (\([0-9]*\)/[0-9]*);.*|\1|p' "$log")"
    (cd nif/ex_burn && MIX_ENV=test mix run examples/digits.exs --model mlp --epochs 5 --data "$digits/digits.mpk" \
        --rust-mlp "$digits/ex_cubecl_digits_mlp_ex-cubecl.mpk" --rust-hits "${hits:?no accuracy line from the Rust digits job}" \
        --out "$digits" 2>&1 | grep -v "XDG_RUNTIME_DIR")
    # The Rust job's CNN in Axon (two convolutions, a max pool, two dense layers): 4 epochs
    # to at least 95% test accuracy (97% on lavapipe), saved and reloaded.
    (cd nif/ex_burn && MIX_ENV=test mix run examples/digits.exs --model cnn --epochs 4 --data "$digits/digits.mpk" \
        --out "$digits" 2>&1 | grep -v "XDG_RUNTIME_DIR")
    # Exits with work in flight (scripts/exit_check.sh): 5 runs each of a Rust program and of
    # an Elixir script that train, save, serve and end with commands and kernel launches
    # still in flight; every run must exit with status 0.
    bash scripts/exit_check.sh 5
    # A serving under load (nif/ex_burn/bench/serving_soak.exs): 64 concurrent callers for
    # 40 s after 5 s of warm-up, every answer checked against Nx.BinaryBackend, a line every
    # 5 s; fails on any error, on device or BEAM memory that grew, or on a p99 that drifted
    # (the script's header gives the bounds). About 55 s.
    (cd nif/ex_burn && MIX_ENV=test mix run bench/serving_soak.exs --seconds 40 --every 5 2>&1 | grep -v "XDG_RUNTIME_DIR")
    # ExBurn installed as a user installs it: the two Hex tarballs in a fresh Mix project, the
    # NIF built above served as a precompiled release on the loopback, no cargo on PATH, a
    # smoke test, and a corrupted artifact refused (scripts/install_test.sh).
    bash scripts/install_test.sh
    # ExUnit's summary stays the last lines of the run (CI counts them).
    (cd nif/ex_burn && MIX_ENV=test mix test 2>&1 | grep -v "XDG_RUNTIME_DIR")
else
    echo "ex_burn: tests not run: $EXBURN_NX_MISSING"
fi
