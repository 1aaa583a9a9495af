#!/usr/bin/env bash
# The C compiler that scripts/check_platforms.sh gives the cc crate for targets this machine
# has no toolchain for (Xcode, the Android NDK, MSVC). The NIF's only C-family build step is
# psm's stack-switching assembly (a `.s` file through the C preprocessor): this preprocesses
# it with the host's gcc and assembles it with LLVM's llvm-mc for the target cargo builds for
# ($TARGET, which cargo gives build scripts), so that the assembly really is checked too.
# `cc -E FILE` (the cc crate's compiler detection) runs the host's preprocessor.
set -euo pipefail

out=""
src=""
mode="compile"
defines=()
while [ $# -gt 0 ]; do
    case "$1" in
        -E) mode="preprocess" ;;
        -o) out="$2"; shift ;;
        -o*) out="${1#-o}" ;;
        -D*|-I*) defines+=("$1") ;;
        -c) ;;
        -*) ;;
        *) src="$1" ;;
    esac
    shift
done

if [ -z "$src" ]; then
    echo "check_platforms_cc: no input file" >&2
    exit 1
fi
if [ "$mode" = "preprocess" ]; then
    exec gcc -E "${defines[@]}" "$src"
fi

case "${TARGET:?check_platforms_cc: cargo sets TARGET for build scripts}" in
    aarch64-apple-ios) triple="arm64-apple-ios" ;;
    aarch64-apple-darwin) triple="arm64-apple-macos" ;;
    *) triple="$TARGET" ;;
esac
case "$src" in
    *.s|*.S|*.asm) ;;
    *) echo "check_platforms_cc: only assembly is handled here, not $src" >&2; exit 1 ;;
esac
mc="$(command -v llvm-mc || true)"
if [ -z "$mc" ]; then
    echo "check_platforms_cc: llvm-mc is needed to assemble $src for $TARGET (apt-get install llvm)" >&2
    exit 1
fi
# The host's preprocessor defines its own platform (__linux__, __ELF__, __x86_64__): undefine
# them, and define the target's, as the target's compiler would.
case "$TARGET" in
    *-apple-*) platform=(-U__linux__ -U__ELF__ -U__x86_64__ -D__APPLE__ -D__aarch64__) ;;
    *-linux-android) platform=(-U__x86_64__ -D__aarch64__ -D__ANDROID__) ;;
    *-windows-*) platform=(-U__linux__ -U__ELF__ -D_WIN32) ;;
    *) platform=() ;;
esac
gcc -E -P -x assembler-with-cpp "${platform[@]}" -I "$(dirname "$src")" "${defines[@]}" "$src" |
    "$mc" -triple="$triple" -filetype=obj -o "${out:?check_platforms_cc: no -o}"
