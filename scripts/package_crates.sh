#!/usr/bin/env bash
# The crates as crates.io would get them, cheaply (scripts/test.sh runs this): `cargo package
# --no-verify` of ex_cubecl_kernels, ex_cubecl and ex_cubecl_record (each package's manifest
# and metadata as crates.io checks them, its Cargo.lock, its file list), then a check of each
# .crate file: its sources are exactly the crate's tracked (or new, not ignored) `src/**/*.rs`,
# beside Cargo.toml, README.md, the two licence files (LICENSE-MIT and LICENSE-APACHE, links
# to the repository's in each crate's folder) and cargo's own files, and it stays small. A warning from cargo
# (a missing metadata field, say) fails the check too. cargo's full verification build, which
# compiles each crate again from its tarball, is scripts/package_verify.sh, run by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"

# crate name -> its folder in the repository
declare -A dirs=(
    [ex_cubecl_kernels]=kernels
    [ex_cubecl]=.
    [ex_cubecl_record]=nif/ex_cubecl/native/ex_cubecl_record
)
# Compressed size limit per crate (crates.io takes 10 MiB; these are sources alone).
max_bytes=$((1024 * 1024))

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
start=$SECONDS
# --allow-dirty: a checkout with uncommitted work checks what it would publish now.
if ! cargo package --no-verify --locked --allow-dirty -p ex_cubecl_kernels -p ex_cubecl -p ex_cubecl_record >"$log" 2>&1; then
    cat "$log"
    echo "cargo package: failed" >&2
    exit 1
fi
if grep -i "^warning" "$log"; then
    echo "cargo package: warnings (above); crates.io would show or refuse them" >&2
    exit 1
fi

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
failed=0
for crate in ex_cubecl_kernels ex_cubecl ex_cubecl_record; do
    file="$CARGO_TARGET_DIR/package/$crate-$version.crate"
    dir="${dirs[$crate]}"
    got="$(tar -tzf "$file" | sed "s|^$crate-$version/||" | grep -v -x -E 'Cargo.toml.orig|Cargo.lock|.cargo_vcs_info.json' | sort)"
    want="$( (echo Cargo.toml; echo README.md; echo LICENSE-MIT; echo LICENSE-APACHE; git -C "$dir" ls-files --cached --others --exclude-standard -- src tests | grep '\.rs$') | sort -u)"
    if [ "$got" != "$want" ]; then
        echo "cargo package: $crate's file list differs from its sources (< packaged, > in the repository):" >&2
        diff <(echo "$got") <(echo "$want") >&2 || true
        failed=1
    fi
    for f in Cargo.lock Cargo.toml.orig; do
        tar -tzf "$file" "$crate-$version/$f" >/dev/null 2>&1 || { echo "cargo package: $crate has no $f" >&2; failed=1; }
    done
    bytes="$(stat -c %s "$file")"
    if [ "$bytes" -gt "$max_bytes" ]; then
        echo "cargo package: $crate is $bytes bytes compressed, over $max_bytes" >&2
        failed=1
    fi
    echo "cargo package: $crate $version: $(echo "$got" | wc -l) files, $((bytes / 1024)) KiB compressed"
done
[ "$failed" = 0 ] || exit 1
echo "cargo package: 3 crates packaged and checked in $((SECONDS - start)) s (scripts/package_verify.sh builds them)"
