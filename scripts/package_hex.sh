#!/usr/bin/env bash
# The Hex packages `ex_cubecl` and `ex_burn` as `mix hex.build` makes them for Hex, into
# OUT_DIR (default $CARGO_TARGET_DIR/hex): ex_cubecl-<version>.tar and ex_burn-<version>.tar.
#
# Each package is built from a copy of its folder outside the repository, where its mix.exs
# declares what a user gets (ex_burn: {:ex_cubecl, "~> 0.1"}, Nx, Axon and Polaris from Hex;
# ex_cubecl: rustler_precompiled and the precompiled NIF) instead of this repository's
# development overrides (path dependencies, source build). ex_cubecl's copy gets the cargo
# workspace's Cargo.lock beside the NIF crate's manifest, so that a source build from the
# tarball (EX_CUBECL_BUILD=true) resolves the same crates as here. EX_CUBECL_CHECKSUM_FILE
# replaces the committed checksum-Elixir.ExCubecl.Native.exs (the install test's, for the
# artifacts it serves itself).
#
# Needs Mix with Hex (scripts/setup_nx.sh provides it from the offline folder); fetches nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
out="$(mkdir -p "${1:-$CARGO_TARGET_DIR/hex}" && cd "${1:-$CARGO_TARGET_DIR/hex}" && pwd)"

if ! mix help hex.build >/dev/null 2>&1; then
    echo "package_hex.sh: Mix has no Hex (source scripts/setup_nx.sh first)" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The package's own files, as git sees them (tracked, or new and not ignored): never _build,
# deps, priv or a test's leftovers.
copy_package() {
    local from="$1" to="$2"
    mkdir -p "$to"
    (cd "$from" && git ls-files --cached --others --exclude-standard -z | xargs -0 cp --parents -t "$to")
}

build() {
    local name="$1" dir="$2"
    # The user's view: none of this repository's development settings.
    (cd "$dir" && env -u EXBURN_DEPS -u EX_CUBECL_DOCS_DEPS -u EX_CUBECL_BUILD -u EX_CUBECL_NIF \
        -u RUSTLER_PRECOMPILED_FORCE_BUILD_ALL MIX_ENV=prod mix hex.build --output "$out/$name.tar") >"$work/$name.log" 2>&1 || {
        cat "$work/$name.log" >&2
        echo "package_hex.sh: mix hex.build of $name failed" >&2
        exit 1
    }
    if grep -i "warning" "$work/$name.log" >&2; then
        echo "package_hex.sh: mix hex.build of $name warned (above)" >&2
        exit 1
    fi
    sed -n '/Dependencies:/,/^  [A-Z]/p' "$work/$name.log" | grep '^    ' | sed -e "s/^ */package_hex.sh: $name depends on /" -e 's/ (app: [a-z_]*)//' || true
    # What a build needs: every source file of lib/ (and, for ex_cubecl, of the two crates).
    local got want
    got="$(tar -xOf "$out/$name.tar" contents.tar.gz | tar -tz | grep -E '^(lib|native/[a-z_]+/src)/' | grep -v '/$' | sort)"
    want="$(cd "$dir" && find lib $(ls -d native/*/src 2>/dev/null) -type f | sort)"
    if [ "$got" != "$want" ]; then
        echo "package_hex.sh: $name's sources differ from the package's folder (< packaged, > in the folder):" >&2
        diff <(echo "$got") <(echo "$want") >&2 || true
        exit 1
    fi
    # The licences the metadata names (MIT, Apache-2.0), as files rather than links.
    for f in LICENSE-MIT LICENSE-APACHE; do
        if [ "$(tar -xOf "$out/$name.tar" contents.tar.gz | tar -xzO "$f" 2>/dev/null | head -c 200 | grep -c -E 'MIT License|Apache License')" != 1 ]; then
            echo "package_hex.sh: $name has no $f (or not its text)" >&2
            exit 1
        fi
    done
    echo "package_hex.sh: $out/$name.tar ($(($(stat -c %s "$out/$name.tar") / 1024)) KiB, $(tar -xOf "$out/$name.tar" contents.tar.gz | tar -tz | grep -vc '/$') files)"
}

copy_package nif/ex_cubecl "$work/ex_cubecl"
cp Cargo.lock "$work/ex_cubecl/native/ex_cubecl_nif/Cargo.lock"
if [ -n "${EX_CUBECL_CHECKSUM_FILE:-}" ]; then
    cp "$EX_CUBECL_CHECKSUM_FILE" "$work/ex_cubecl/checksum-Elixir.ExCubecl.Native.exs"
fi
version="$(sed -n 's/^  @version "\(.*\)"$/\1/p' nif/ex_cubecl/mix.exs)"
build "ex_cubecl-$version" "$work/ex_cubecl"

copy_package nif/ex_burn "$work/ex_burn"
version="$(sed -n 's/^  @version "\(.*\)"$/\1/p' nif/ex_burn/mix.exs)"
build "ex_burn-$version" "$work/ex_burn"
