#!/usr/bin/env bash
# cargo's full verification of the crates, run by hand before a release (it compiles
# everything again; scripts/package_crates.sh is the cheap check the test command runs):
#
#  1. `cargo package` of ex_cubecl_kernels, ex_cubecl and ex_cubecl_record: each crate unpacked
#     from its .crate file and built there, from its packaged sources and its own Cargo.lock.
#  2. The NIF crate as the Hex package `ex_cubecl` carries it (native/ex_cubecl_nif and
#     native/ex_cubecl_record, from the tarball given as argument, else the same files from
#     this checkout), built outside this workspace with the workspace's Cargo.lock: it takes
#     ex_cubecl by version, and `--config patch` serves that version, and ex_cubecl_kernels,
#     from the packaged crates of step 1, as crates.io would.
#
#     scripts/package_verify.sh [ex_cubecl-<version>.tar]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/setup.sh
hex_tarball="${1:+$(cd "$(dirname "$1")" && pwd)/$(basename "$1")}"
start=$SECONDS

echo "package_verify: 1. cargo package (with its verification build)"
cargo package --locked --allow-dirty -p ex_cubecl_kernels -p ex_cubecl -p ex_cubecl_record

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
mkdir -p "$work/crates"
for crate in ex_cubecl_kernels ex_cubecl; do
    tar -xzf "$CARGO_TARGET_DIR/package/$crate-$version.crate" -C "$work/crates"
done

echo "package_verify: 2. the NIF crate outside the workspace"
mkdir -p "$work/pkg"
if [ -n "$hex_tarball" ]; then
    tar -xOf "$hex_tarball" contents.tar.gz | tar -xz -C "$work/pkg" native
else
    mkdir -p "$work/pkg/native"
    cp -r nif/ex_cubecl/native/ex_cubecl_nif nif/ex_cubecl/native/ex_cubecl_record "$work/pkg/native/"
    cp Cargo.lock "$work/pkg/native/ex_cubecl_nif/Cargo.lock"
fi
# The workspace's dev-profile overrides (cubecl's optimizer and runtime optimized), so that the
# dependencies already built in this target directory are reused.
profile_config=()
while read -r pkg level; do
    profile_config+=(--config "profile.dev.package.$pkg.opt-level=$level")
done < <(awk '/^\[profile\.dev\.package\./ { gsub(/^\[profile\.dev\.package\.|\]$/, ""); pkg = $0 }
              /^opt-level/ && pkg != "" { print pkg, $3; pkg = "" }' Cargo.toml)
(cd "$work/pkg/native/ex_cubecl_nif" &&
    cargo build --no-default-features --features wgpu \
        --config "patch.crates-io.ex_cubecl.path='$work/crates/ex_cubecl-$version'" \
        --config "patch.crates-io.ex_cubecl_kernels.path='$work/crates/ex_cubecl_kernels-$version'" \
        "${profile_config[@]}")
echo "package_verify: the crates and the NIF build from their packaged sources ($((SECONDS - start)) s)"
