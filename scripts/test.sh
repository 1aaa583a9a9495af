#!/usr/bin/env bash
# Every test: unit tests of the runtime and the conformance suite against burn-ndarray, on
# wgpu (lavapipe on machines without a GPU), then the ExUnit suite of the Elixir package
# `nif/ex_cubecl` over the NIF. Each conformance suite prints how many op x dtype x case
# combinations it checked; the total comes last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --locked -- --nocapture --test-threads 2 2>&1 | grep -v "XDG_RUNTIME_DIR" | tee "$log"
sed -n 's/^conformance\[.*\]: \([0-9]*\) op x dtype x case combinations checked, \([0-9]*\) failed$/\1 \2/p' "$log" |
    awk '{ total += $1; failed += $2 }
         END { printf "conformance: %d op x dtype x case combinations checked in all, %d failed\n", total, failed }'

# The Elixir package: Debian's elixir is enough (it has no Hex dependencies); its Mix
# compiler builds the NIF crate in the same cargo target directory.
source scripts/setup_elixir.sh
(cd nif/ex_cubecl && MIX_ENV=test mix test 2>&1 | grep -v "XDG_RUNTIME_DIR")

# ExBurn (nif/ex_burn) is a Hex project: it needs Nx 0.13, so Elixir 1.17 or newer and
# either Hex or EXBURN_DEPS (a folder with checkouts of nx, complex and telemetry). Where
# Nx doesn't resolve (CI: Debian's Elixir 1.14, no Hex) one line says so.
if elixir -e 'System.halt(if Version.match?(System.version(), ">= 1.17.0"), do: 0, else: 1)' 2>/dev/null &&
    (cd nif/ex_burn && mix deps.get >/dev/null 2>&1); then
    (cd nif/ex_burn && MIX_ENV=test mix test 2>&1 | grep -v "XDG_RUNTIME_DIR")
else
    echo "ex_burn: tests not run: Nx 0.13 doesn't resolve here (it needs Elixir >= 1.17, this machine has $(elixir --short-version 2>/dev/null || echo none), and Hex or EXBURN_DEPS)"
fi
