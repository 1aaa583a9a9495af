#!/usr/bin/env bash
# Release artifacts of the NIF, as rustler_precompiled downloads them: for one cargo target,
# one library per NIF version (2.16: OTP 24 and later; 2.17: OTP 26 and later) and variant
# (`default`: wgpu; `cuda`: wgpu and CUDA, x86_64 Linux), each packed alone as
#
#     libex_cubecl_nif-v<version>-nif-<nif>-<target>[--<variant>].so.tar.gz
#
# (Windows: no `lib`, `.dll`; macOS: `.so` too), then rustler_precompiled's checksum file over
# every artifact in the output folder. The Hex package carries that file; the artifacts go
# to the GitHub release `v<version>`, where ExCubecl.Native.Loader's base URL points.
#
#     scripts/release_nif.sh                      # this machine's target, 2.16 and 2.17,
#                                                 # default and cuda: four release builds
#     scripts/release_nif.sh --target aarch64-apple-darwin --variants default
#     scripts/release_nif.sh --checksums-only DIR # the checksum file for artifacts gathered
#                                                 # from every target (the release workflow)
#
# Options: --out DIR (default $CARGO_TARGET_DIR/nif-release), --target TRIPLE, --nif LIST,
# --variants LIST, --lib FILE (pack a library built before instead of building: the install
# test packs the one the test command built), --checksum-file FILE (default
# nif/ex_cubecl/checksum-Elixir.ExCubecl.Native.exs).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ex_cubecl/target}"

out="$CARGO_TARGET_DIR/nif-release"
target=""
nifs="2.16,2.17"
variants=""
lib=""
checksum_file="$root/nif/ex_cubecl/checksum-Elixir.ExCubecl.Native.exs"
checksums_only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --target) target="$2"; shift 2 ;;
        --nif) nifs="$2"; shift 2 ;;
        --variants) variants="$2"; shift 2 ;;
        --lib) lib="$2"; shift 2 ;;
        --checksum-file) checksum_file="$2"; shift 2 ;;
        --checksums-only) checksums_only=1; out="$2"; shift 2 ;;
        *) echo "release_nif.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
    esac
done

version="$(sed -n 's/^  @version "\(.*\)"$/\1/p' nif/ex_cubecl/mix.exs)"
[ -n "$version" ] || { echo "release_nif.sh: no @version in nif/ex_cubecl/mix.exs" >&2; exit 1; }

sha256() {
    if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1; else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# rustler_precompiled's checksum file (the format `mix rustler_precompiled.download` writes):
# a map from artifact name to "sha256:<hex>", sorted by name.
write_checksums() {
    local f n=0
    {
        echo "# rustler_precompiled's checksums of this version's precompiled NIFs (artifact name =>"
        echo "# \"sha256:<hex>\"), which ExCubecl.Native checks every download against; written by"
        echo "# scripts/release_nif.sh over the release's artifacts."
        echo "%{"
        for f in $(cd "$out" && ls -1 -- *ex_cubecl_nif-v"$version"-nif-*.tar.gz 2>/dev/null | sort); do
            echo "  \"$f\" => \"sha256:$(sha256 "$out/$f")\","
            n=$((n + 1))
        done
        echo "}"
    } >"$checksum_file.tmp"
    [ "$n" -gt 0 ] || { rm -f "$checksum_file.tmp"; echo "release_nif.sh: no artifacts of v$version in $out" >&2; exit 1; }
    mv "$checksum_file.tmp" "$checksum_file"
    echo "release_nif.sh: $n checksums written to $checksum_file"
}

if [ -n "$checksums_only" ]; then
    write_checksums
    exit 0
fi

host="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)"
triple="${target:-$host}"
[ -n "$triple" ] || { echo "release_nif.sh: no --target, and rustc can't name this machine's" >&2; exit 1; }
if [ -z "$variants" ]; then
    if [ "$triple" = x86_64-unknown-linux-gnu ]; then variants="default,cuda"; else variants="default"; fi
fi
case "$triple" in
    *windows*) prefix=""; built_ext="dll"; ext="dll" ;;
    *apple*) prefix="lib"; built_ext="dylib"; ext="so" ;;
    *) prefix="lib"; built_ext="so"; ext="so" ;;
esac
# A NIF library resolves enif_* from the VM that loads it; macOS's linker wants that said.
if [[ "$triple" == *apple-darwin ]]; then
    export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-undefined -C link-arg=dynamic_lookup"
fi

mkdir -p "$out"
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
for nif in ${nifs//,/ }; do
    for variant in ${variants//,/ }; do
        name="${prefix}ex_cubecl_nif-v$version-nif-$nif-$triple"
        features="wgpu"
        case "$variant" in
            default) ;;
            cuda) name="$name--cuda"; features="wgpu,cuda" ;;
            *) echo "release_nif.sh: unknown variant $variant (default, cuda)" >&2; exit 2 ;;
        esac
        case "$nif" in
            2.16) ;;
            2.17) features="$features,nif_version_2_17" ;;
            *) echo "release_nif.sh: unknown NIF version $nif (2.16, 2.17)" >&2; exit 2 ;;
        esac
        if [ -n "$lib" ]; then
            built="$lib"
        else
            echo "release_nif.sh: cargo build --release -p ex_cubecl_nif --features $features ${target:+--target $target}"
            (cd nif/ex_cubecl/native/ex_cubecl_nif &&
                cargo build --release --locked -p ex_cubecl_nif --no-default-features --features "$features" ${target:+--target "$target"})
            built="$CARGO_TARGET_DIR/${target:+$target/}release/${prefix}ex_cubecl_nif.$built_ext"
        fi
        cp "$built" "$staging/$name.$ext"
        tar -czf "$out/$name.$ext.tar.gz" -C "$staging" "$name.$ext"
        rm "$staging/$name.$ext"
        echo "release_nif.sh: $out/$name.$ext.tar.gz ($(($(stat -c %s "$out/$name.$ext.tar.gz" 2>/dev/null || stat -f %z "$out/$name.$ext.tar.gz") / 1024)) KiB)"
    done
done
write_checksums
