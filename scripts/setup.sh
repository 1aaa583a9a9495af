#!/usr/bin/env bash
# Set-up shared by every entry point: a Vulkan driver (Mesa's lavapipe when the machine has
# no Vulkan device) and one warm cargo target directory. Sourced by scripts/test.sh and
# scripts/run.sh; safe to run again.
set -euo pipefail

if ! command -v cargo >/dev/null; then
    echo "ex_cubecl: cargo is required (install Rust with rustup first)" >&2
    exit 1
fi

has_vulkan_driver() {
    # `ls` fails when one of the folders is empty; only whether any driver file exists counts.
    # `grep` without -q reads all its input: with pipefail, an early exit of `grep -q` can
    # fail the pipeline through the writer's SIGPIPE.
    { ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json 2>/dev/null || true; } | grep . >/dev/null &&
        ldconfig -p 2>/dev/null | grep libvulkan.so.1 >/dev/null
}

if ! has_vulkan_driver; then
    echo "ex_cubecl: no Vulkan driver found; installing Mesa's lavapipe (mesa-vulkan-drivers)" >&2
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi

# One target directory for every crate and every run, outside the clone so it stays warm.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"
# wgpu's Vulkan loader warns without it on headless machines.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
