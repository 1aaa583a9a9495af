#!/usr/bin/env bash
# Exits with work in flight, many times in a row: a Rust program (examples/src/bin/
# exit_in_flight.rs: training steps never read, commands never waited for, threads launching
# kernels as `main` returns) and an Elixir script (nif/ex_burn/test/scripts/exit_in_flight.exs:
# an Axon MLP compiled, fitted, evaluated, saved, serialized, served and stopped, then
# commands and kernel launches left in flight as the script ends). Every run must exit with
# status 0: before the runtime wound itself down at exit, cubecl's device thread could still be
# inside lavapipe's LLVM while the process tore it down (a segmentation fault after the
# program had printed everything). Prints the runs, the failures (with their exit status or
# signal) and the time per run; exits 1 when any run failed.
#
#     bash scripts/exit_check.sh [RUNS (50)] [rust|elixir|all (all)]
#
# EX_CUBECL_EXIT_SHUTDOWN=0 turns the winding down at exit off, to count the crashes it
# prevents. scripts/test.sh runs 5 of each on the debug builds.
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-50}"
which="${2:-all}"
set -e
source scripts/setup.sh
set +e
profile="${EX_CUBECL_PROFILE:-debug}"
failed_any=0

# Runs "$@" $runs times; prints one summary line for $1's label.
repeat() {
    local label="$1"; shift
    local failed=0 statuses="" start end total=0 rc
    for i in $(seq 1 "$runs"); do
        start=$(date +%s%N)
        "$@" >/tmp/exit_check.$$.log 2>&1
        rc=$?
        end=$(date +%s%N)
        total=$((total + (end - start) / 1000000))
        if [ "$rc" != 0 ]; then
            failed=$((failed + 1))
            if [ "$rc" -gt 128 ]; then statuses="$statuses run $i: signal $((rc - 128));"; else statuses="$statuses run $i: status $rc;"; fi
            echo "exit_check: $label run $i exited with $rc; its last lines:" >&2
            tail -5 /tmp/exit_check.$$.log | grep -v XDG_RUNTIME_DIR >&2
        fi
    done
    rm -f /tmp/exit_check.$$.log
    echo "exit_check: $label: $runs runs, $failed failed${statuses:+ ($statuses)}; $((total / runs)) ms per run"
    [ "$failed" = 0 ] || failed_any=1
}

if [ "$which" = rust ] || [ "$which" = all ]; then
    flag=""; [ "$profile" = release ] && flag="--release"
    cargo build --locked $flag -p ex_cubecl_examples --bin exit_in_flight || exit 1
    repeat "rust (exit_in_flight)" "$CARGO_TARGET_DIR/$profile/exit_in_flight"
fi

if [ "$which" = elixir ] || [ "$which" = all ]; then
    set -e
    source scripts/setup_elixir.sh
    source scripts/setup_nx.sh
    set +e
    if [ -n "${EXBURN_NX_MISSING:-}" ]; then
        echo "exit_check: elixir: not run: $EXBURN_NX_MISSING"
    else
        export EX_CUBECL_PROFILE="$profile"
        (cd nif/ex_burn && MIX_ENV=test mix compile >/dev/null) || exit 1
        repeat "elixir (exit_in_flight.exs)" bash -c 'cd nif/ex_burn && MIX_ENV=test mix run test/scripts/exit_in_flight.exs'
    fi
fi
exit "$failed_any"
