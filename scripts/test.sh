#!/usr/bin/env bash
# Every test: unit tests of the runtime and the conformance suite against burn-ndarray, on
# wgpu (lavapipe on machines without a GPU). Each suite prints how many op x dtype x case
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
