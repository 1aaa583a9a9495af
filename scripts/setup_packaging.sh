#!/usr/bin/env bash
# The Hex packages that packaging needs beside Nx's, from the offline folder: rustler_precompiled
# and castore (the install test's user project), and, with `docs` as argument, ExDoc and its
# dependencies (`mix docs`). Sourced after scripts/setup_nx.sh, whose offline folder, cache and
# checksum-checked unpacking it reuses; the sources are unpacked once into a cache folder keyed
# by their checksums, as setup_nx.sh does for Nx:
#
#   EX_CUBECL_PKG_DEPS    rustler_precompiled/ and castore/ side by side
#   EX_CUBECL_DOCS_DEPS   ex_doc/, earmark_parser/, makeup/, makeup_elixir/, makeup_erlang/,
#                         nimble_parsec/ side by side (nif/*/mix.exs turn them into path deps)
#
# Leaves EX_CUBECL_PKG_MISSING empty when they are ready; otherwise (no offline folder) it says
# what is missing, for one skip line. A present but unusable offline folder is an error.
set -euo pipefail

EX_CUBECL_PKG_MISSING=""

# Unpacks the tarballs NAME-VERSION.tar.xz named in $2 into one folder of the cache, keyed by
# their checksums, and prints its path.
_ex_cubecl_offline_set() {
    local label="$1" deps="$2" d sums="" dir
    for d in $deps; do sums="$sums$(_exburn_sum "$d.tar.xz")" || return 1; done
    dir="$EXBURN_CACHE/$label-$(echo "$sums" | sha256sum | cut -c1-12)"
    if [ ! -f "$dir/.complete" ]; then
        echo "ex_cubecl: unpacking $deps from $EXBURN_OFFLINE into $dir" >&2
        rm -rf "$dir"
        for d in $deps; do _exburn_unpack "$d.tar.xz" "$dir/.tmp/$d" || return 1; done
        for d in $deps; do mv "$dir/.tmp/$d"/*/ "$dir/" || return 1; done
        rm -rf "$dir/.tmp"
        touch "$dir/.complete"
    fi
    echo "$dir"
}

if [ -n "${EXBURN_OFFLINE:-}" ] && [ -f "$EXBURN_OFFLINE/SHA256SUMS" ]; then
    _ex_cubecl_dir="$(_ex_cubecl_offline_set pkgdeps "rustler_precompiled-0.8.4 castore-1.0.19")" || {
        echo "ex_cubecl: rustler_precompiled and castore from $EXBURN_OFFLINE could not be unpacked (see above)" >&2
        return 1 2>/dev/null || exit 1
    }
    export EX_CUBECL_PKG_DEPS="$_ex_cubecl_dir"
    if [ "${1:-}" = docs ]; then
        _ex_cubecl_dir="$(_ex_cubecl_offline_set docdeps "ex_doc-0.40.3 earmark_parser-1.4.46 makeup-1.2.2 makeup_elixir-1.0.1 makeup_erlang-1.0.3 nimble_parsec-1.4.2")" || {
            echo "ex_cubecl: ExDoc from $EXBURN_OFFLINE could not be unpacked (see above)" >&2
            return 1 2>/dev/null || exit 1
        }
        export EX_CUBECL_DOCS_DEPS="$_ex_cubecl_dir"
    fi
else
    EX_CUBECL_PKG_MISSING="no offline folder (EXBURN_OFFLINE=${EXBURN_OFFLINE:-unset}) for rustler_precompiled, castore and ExDoc, and Hex is not used here"
fi
