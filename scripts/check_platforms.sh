#!/usr/bin/env bash
# Compiles (cargo check) the NIF crate for the platforms this machine doesn't run: iOS and
# macOS with `metal`, Android with `vulkan`, Windows with `wgpu`, each with
# `--no-default-features` plus that feature, as the README's platform table gives them.
# Installs the missing rustup targets first; fails if any target fails. No Xcode, NDK or
# MSVC is needed: `cargo check` links nothing, and the one assembly file of the dependencies
# (psm's stack switching) is assembled for the target by LLVM's llvm-mc
# (scripts/check_platforms_cc.sh). Usage:
#   bash scripts/check_platforms.sh [TARGET...]     # default: the four below
# EX_CUBECL_CHECK_DIR: the cargo target directory (default ~/.cache/ex_cubecl/check), one
# for these checks alone, so that they never rebuild the host's artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A features=(
    [aarch64-apple-ios]=metal
    [aarch64-apple-darwin]=metal
    [aarch64-linux-android]=vulkan
    [x86_64-pc-windows-msvc]=wgpu
)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(aarch64-apple-ios aarch64-apple-darwin aarch64-linux-android x86_64-pc-windows-msvc)
fi

installed="$(rustup target list --installed)"
for target in "${targets[@]}"; do
    if [ -z "${features[$target]:-}" ]; then
        echo "check_platforms: no feature set for $target (known: ${!features[*]})" >&2
        exit 2
    fi
    if ! grep -qx "$target" <<<"$installed"; then
        rustup target add "$target"
    fi
done

dir="${EX_CUBECL_CHECK_DIR:-$HOME/.cache/ex_cubecl/check}"
cc="$PWD/scripts/check_platforms_cc.sh"
ar="$(command -v llvm-ar || command -v ar)"
sdk="$(mktemp -d)"
trap 'rm -rf "$sdk"' EXIT
failed=()
for target in "${targets[@]}"; do
    var="${target//-/_}"
    echo "check_platforms: $target --no-default-features --features ${features[$target]}"
    # The cc crate reads CC_<target> and AR_<target>; SDKROOT keeps it from asking xcrun
    # for an Apple SDK (nothing is linked, so none is needed).
    if env "CC_$var=$cc" "AR_$var=$ar" SDKROOT="$sdk" \
        cargo check --locked -p ex_cubecl_nif --target "$target" --no-default-features \
        --features "${features[$target]}" --target-dir "$dir"; then
        echo "check_platforms: $target ok"
    else
        failed+=("$target")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "check_platforms: failed: ${failed[*]}" >&2
    exit 1
fi
echo "check_platforms: all ${#targets[@]} targets compile"
