#!/usr/bin/env bash
# The Nx toolchain for `nif/ex_burn`: Elixir >= 1.17 (Nx 0.13 needs it), Hex, and Nx, complex,
# telemetry, Axon and Polaris. Sourced by scripts/test.sh after scripts/setup_elixir.sh (which
# provides Debian's OTP); also usable by hand:
#
#     source scripts/setup.sh && source scripts/setup_elixir.sh && source scripts/setup_nx.sh
#     cd nif/ex_burn && mix test
#
# Where the offline folder exists (`EXBURN_OFFLINE`, default `../shared/elixir-offline` beside
# the clone: source tarballs with a SHA256SUMS file), everything comes from it, checked against
# its checksums and built or unpacked once into a cache outside the clone (`EXBURN_CACHE`,
# default beside the cargo target directory), keyed by those checksums, so a second run costs
# nothing:
#   - Elixir 1.18.4, built with Debian's OTP where `elixir` is missing or older than 1.17;
#   - Hex, built by that Elixir and installed into a MIX_HOME in the cache (Mix asks for Hex as
#     soon as a dependency names a Hex package, even one overridden by a path);
#   - nx, complex, telemetry, axon and polaris, unpacked side by side; EXBURN_DEPS names them,
#     and nif/ex_burn/mix.exs turns them into path dependencies.
# Where the folder is absent, Mix resolves from Hex as for any user (EXBURN_DEPS, when the
# caller sets it, still wins). Nothing is downloaded here.
#
# Leaves EXBURN_NX_MISSING empty when the toolchain is ready; otherwise (no offline folder, and
# an Elixir older than 1.17) it says what is missing, for scripts/test.sh's one skip line. A
# present but unusable offline folder (a checksum that doesn't match, a failed build) is an
# error, not a skip: CI must not pass with the suite silently left out.
set -euo pipefail

EXBURN_NX_MISSING=""
_exburn_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${EXBURN_OFFLINE:-}" ] && [ -d "$_exburn_root/../shared/elixir-offline" ]; then
    EXBURN_OFFLINE="$(cd "$_exburn_root/../shared/elixir-offline" && pwd)"
fi
EXBURN_CACHE="${EXBURN_CACHE:-$(dirname "${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}")/nx}"

_exburn_elixir_ok() {
    command -v elixir >/dev/null &&
        elixir -e 'System.halt(if Version.match?(System.version(), ">= 1.17.0"), do: 0, else: 1)' 2>/dev/null
}

# The offline folder's checksum of FILE (its first 12 hex digits name the cache entry).
_exburn_sum() {
    local sum
    sum="$(awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$EXBURN_OFFLINE/SHA256SUMS")"
    if [ -z "$sum" ]; then
        echo "ex_burn: $EXBURN_OFFLINE/SHA256SUMS has no line for $1" >&2
        return 1
    fi
    echo "$sum"
}

# Unpacks tarball FILE into DIR (which then holds the tarball's one top-level folder), after
# checking it against SHA256SUMS. DIR/.complete marks a finished unpack; a half-finished one
# (an interrupted run) is removed and redone.
_exburn_unpack() {
    local file="$1" dir="$2" sum
    [ -f "$dir/.complete" ] && return 0
    sum="$(_exburn_sum "$file")"
    if ! echo "$sum  $EXBURN_OFFLINE/$file" | sha256sum -c --status; then
        echo "ex_burn: $EXBURN_OFFLINE/$file does not match its checksum in SHA256SUMS; not using it" >&2
        return 1
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    tar -xJf "$EXBURN_OFFLINE/$file" -C "$dir" || return 1
    touch "$dir/.complete"
}

_exburn_offline_toolchain() {
    local key dir hex_sum hex_ez
    # Elixir 1.18.4 from source, where the machine's is missing or too old.
    if ! _exburn_elixir_ok; then
        key="$(_exburn_sum elixir-1.18.4.tar.xz | cut -c1-12)"
        dir="$EXBURN_CACHE/elixir-1.18.4-$key"
        if [ ! -f "$dir/.built" ]; then
            echo "ex_burn: building Elixir 1.18.4 from $EXBURN_OFFLINE into $dir (once; about a minute)" >&2
            _exburn_unpack elixir-1.18.4.tar.xz "$dir" || return 1
            make -C "$dir/elixir" compile >"$dir/build.log" 2>&1 || {
                echo "ex_burn: building Elixir 1.18.4 failed; the log is $dir/build.log" >&2
                tail -20 "$dir/build.log" >&2
                return 1
            }
            touch "$dir/.built"
        fi
        export PATH="$dir/elixir/bin:$PATH"
    fi

    # Hex in a MIX_HOME of the cache's own, keyed by Hex's checksum.
    hex_sum="$(_exburn_sum hex-2.5.1.tar.xz | cut -c1-12)"
    export MIX_HOME="$EXBURN_CACHE/mix-$(elixir --short-version)-hex-$hex_sum"
    export HEX_OFFLINE=1
    if [ ! -f "$MIX_HOME/.hex-installed" ]; then
        dir="$EXBURN_CACHE/hex-2.5.1-$hex_sum"
        _exburn_unpack hex-2.5.1.tar.xz "$dir" || return 1
        hex_ez="$dir/hex-2.5.1.ez"
        (cd "$dir/hex" && MIX_ENV=prod mix archive.build -o "$hex_ez" >"$dir/build.log" 2>&1) || {
            echo "ex_burn: building Hex 2.5.1 failed; the log is $dir/build.log" >&2
            tail -20 "$dir/build.log" >&2
            return 1
        }
        mix archive.install --force "$hex_ez" >/dev/null || return 1
        touch "$MIX_HOME/.hex-installed"
    fi

    # The dependencies, side by side in one folder keyed by their checksums.
    local deps="nx-0.13.1 complex-0.6.0-17344af telemetry-1.2.1 axon-0.8.1 polaris-0.1.0" d sums=""
    for d in $deps; do sums="$sums$(_exburn_sum "$d.tar.xz")"; done
    dir="$EXBURN_CACHE/deps-$(echo "$sums" | sha256sum | cut -c1-12)"
    if [ ! -f "$dir/.complete" ]; then
        echo "ex_burn: unpacking nx, complex, telemetry, axon and polaris from $EXBURN_OFFLINE into $dir" >&2
        rm -rf "$dir"
        for d in $deps; do _exburn_unpack "$d.tar.xz" "$dir/.tmp/$d" || return 1; done
        for d in $deps; do mv "$dir/.tmp/$d"/*/ "$dir/" || return 1; done
        rm -rf "$dir/.tmp"
        touch "$dir/.complete"
    fi
    export EXBURN_DEPS="${EXBURN_DEPS:-$dir}"
}

if [ -n "${EXBURN_OFFLINE:-}" ] && [ -f "$EXBURN_OFFLINE/SHA256SUMS" ]; then
    mkdir -p "$EXBURN_CACHE"
    if ! _exburn_offline_toolchain; then
        echo "ex_burn: the Nx toolchain from $EXBURN_OFFLINE could not be set up (see above)" >&2
        return 1 2>/dev/null || exit 1
    fi
elif ! _exburn_elixir_ok; then
    EXBURN_NX_MISSING="Nx 0.13 needs Elixir >= 1.17, this machine has $(elixir --short-version 2>/dev/null || echo none), and there is no offline folder (EXBURN_OFFLINE=${EXBURN_OFFLINE:-unset})"
fi
