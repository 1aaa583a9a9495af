#!/usr/bin/env bash
# The install test: ExBurn installed as a user installs it, on a machine without Rust.
#
#  1. Release artifacts: the NIF the test command already built (nothing compiles twice) is
#     packed as scripts/release_nif.sh packs a release, for this machine's target and NIF
#     versions 2.16 and 2.17 (a 2.16 library loads on both), with its own checksum file.
#  2. The Hex packages: scripts/package_hex.sh builds ex_cubecl (carrying that checksum file)
#     and ex_burn as `mix hex.build` makes them for Hex.
#  3. A loopback HTTP server (scripts/install_test/serve.exs) serves the artifacts; the user
#     project's ex_cubecl downloads from it (EX_CUBECL_PRECOMPILED_URL) into a fresh cache.
#  4. A fresh Mix project (scripts/install_test/user_mix.exs) with the two tarballs unpacked
#     into vendor/ as its dependencies, and their Hex dependencies from the offline folder;
#     `mix deps.compile` with no cargo or rustc on PATH, then scripts/install_test/smoke.exs:
#     the precompiled library is the one loaded, an Nx op on the device, a jitted function,
#     a tiny ExBurn.Training.fit.
#  5. A corrupted artifact: `mix deps.compile ex_cubecl --force` must fail with
#     rustler_precompiled's checksum message.
#
# Needs the offline folder (scripts/setup_nx.sh, scripts/setup_packaging.sh); without it one
# line says the test was not run. EX_CUBECL_NIF names the library to pack (default: the
# NIF crate's build in $CARGO_TARGET_DIR for EX_CUBECL_PROFILE, debug by default).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
start=$SECONDS
source scripts/setup.sh
source scripts/setup_elixir.sh
source scripts/setup_nx.sh
source scripts/setup_packaging.sh
if [ -n "$EXBURN_NX_MISSING" ] || [ -n "$EX_CUBECL_PKG_MISSING" ] || [ -z "${EXBURN_DEPS:-}" ]; then
    echo "install test: not run: ${EXBURN_NX_MISSING:-${EX_CUBECL_PKG_MISSING:-no offline Nx (EXBURN_DEPS)}}"
    exit 0
fi

nif="${EX_CUBECL_NIF:-$CARGO_TARGET_DIR/${EX_CUBECL_PROFILE:-debug}/libex_cubecl_nif.so}"
if [ ! -f "$nif" ]; then
    echo "install test: no NIF library at $nif (the ex_cubecl tests build it; or set EX_CUBECL_NIF)" >&2
    exit 1
fi

work="$(mktemp -d)"
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# 1-2. Artifacts, checksums, Hex packages. A debug build's library is mostly debug info (a
# release has none): stripped of it, it packs in seconds.
if command -v strip >/dev/null; then
    strip --strip-debug -o "$work/libex_cubecl_nif.so" "$nif"
    nif="$work/libex_cubecl_nif.so"
fi
scripts/release_nif.sh --lib "$nif" --out "$work/release" --nif 2.16,2.17 --variants default \
    --checksum-file "$work/checksum.exs" | sed 's/^/install test: /'
EX_CUBECL_CHECKSUM_FILE="$work/checksum.exs" scripts/package_hex.sh "$work/hex" | sed 's/^/install test: /'

# 3. The release server.
elixir scripts/install_test/serve.exs "$work/release" "$work/port" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.2; done
[ -s "$work/port" ] || { echo "install test: the release server did not start" >&2; exit 1; }
# (A path, even "/": rustler_precompiled appends the file name to the URL's path.)
url="http://127.0.0.1:$(cat "$work/port")/"

# 4. The user project.
app="$work/app"
mkdir -p "$app/vendor/ex_cubecl" "$app/vendor/ex_burn"
for pkg in ex_cubecl ex_burn; do
    tar -xOf "$work/hex/$pkg-"*.tar contents.tar.gz | tar -xz -C "$app/vendor/$pkg"
done
cp scripts/install_test/user_mix.exs "$app/mix.exs"
cp scripts/install_test/smoke.exs "$app/smoke.exs"

# PATH without cargo and rustc; the user's environment without this repository's variables
# and without proxies (the server is on the loopback); a fresh download cache.
user_path=""
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
    if [ -n "$d" ] && [ ! -x "$d/cargo" ] && [ ! -x "$d/rustc" ]; then user_path="$user_path${user_path:+:}$d"; fi
done
as_user() {
    (cd "$app" && env -u EXBURN_DEPS -u EX_CUBECL_DOCS_DEPS -u EX_CUBECL_BUILD -u EX_CUBECL_NIF \
        -u EX_CUBECL_FEATURES -u EX_CUBECL_PROFILE -u RUSTLER_PRECOMPILED_FORCE_BUILD_ALL -u CARGO_TARGET_DIR \
        -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy \
        PATH="$user_path" EXBURN_DEPS_DIR="$EXBURN_DEPS" EX_CUBECL_PKG_DEPS="$EX_CUBECL_PKG_DEPS" \
        EX_CUBECL_PRECOMPILED_URL="$url" RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH="$work/cache" MIX_ENV=dev "$@")
}
if as_user sh -c 'command -v cargo || command -v rustc'; then
    echo "install test: cargo or rustc is still on the user's PATH" >&2
    exit 1
fi
compile_start=$SECONDS
if ! as_user mix deps.compile >"$work/deps.log" 2>&1; then
    grep -v "XDG_RUNTIME_DIR" "$work/deps.log"
    echo "install test: mix deps.compile failed (above)" >&2
    exit 1
fi
echo "install test: mix deps.compile without cargo: $(grep -c "^==> " "$work/deps.log") dependencies compiled in $((SECONDS - compile_start)) s"
as_user mix run smoke.exs 2>&1 | grep -v "XDG_RUNTIME_DIR"
echo "install test: dependencies compiled and smoke test passed in $((SECONDS - compile_start)) s"

# 5. A corrupted artifact fails rustler_precompiled's checksum.
for f in "$work/release/"*.tar.gz; do printf 'corrupted' >>"$f"; done
rm -rf "$work/cache"
if as_user mix deps.compile ex_cubecl --force >"$work/corrupt.log" 2>&1; then
    cat "$work/corrupt.log"
    echo "install test: a corrupted artifact compiled" >&2
    exit 1
fi
if ! grep -q "the integrity check failed because the checksum of files does not match" "$work/corrupt.log"; then
    cat "$work/corrupt.log"
    echo "install test: a corrupted artifact failed without rustler_precompiled's checksum message" >&2
    exit 1
fi
echo "install test: ok: a corrupted artifact fails: $(grep -o "Error while downloading precompiled NIF: the integrity check failed[^.]*" "$work/corrupt.log" | head -1)"
echo "install test: passed in $((SECONDS - start)) s"
