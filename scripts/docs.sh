#!/usr/bin/env bash
# The HexDocs of both Elixir packages: `mix docs` (ExDoc 0.40, from the offline folder) in
# nif/ex_cubecl and nif/ex_burn, into each folder's doc/, with ExBurn's guides
# (nif/ex_burn/guides/*.md, by glob) as extras. A warning from ExDoc (a reference to a module,
# type or function that doesn't exist, say) or from compiling the package fails the run.
# nif/*/test/**/docs_test.exs (in the suite) check that every public function has a @doc.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/setup_elixir.sh
source scripts/setup_nx.sh
source scripts/setup_packaging.sh docs
if [ -n "$EXBURN_NX_MISSING" ] || [ -n "$EX_CUBECL_PKG_MISSING" ]; then
    echo "docs: not built: ${EXBURN_NX_MISSING:-$EX_CUBECL_PKG_MISSING}" >&2
    exit 1
fi
export EX_CUBECL_PROFILE="${EX_CUBECL_PROFILE:-debug}"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
failed=0
for pkg in ex_cubecl ex_burn; do
    # The dependencies first, on their own: their compiler warnings (Nx 0.13's one about -0.0
    # on OTP 25) are theirs, not the docs'.
    if ! (cd "nif/$pkg" && MIX_ENV=dev mix deps.compile) >"$log" 2>&1; then
        grep -v "XDG_RUNTIME_DIR" "$log"
        echo "docs: mix deps.compile in nif/$pkg failed" >&2
        exit 1
    fi
    if ! (cd "nif/$pkg" && MIX_ENV=dev mix docs --formatter html) >"$log" 2>&1; then
        grep -v "XDG_RUNTIME_DIR" "$log"
        echo "docs: mix docs in nif/$pkg failed" >&2
        exit 1
    fi
    if grep -n -i -A4 "warning" "$log" >&2; then
        echo "docs: mix docs in nif/$pkg warned (above)" >&2
        failed=1
    fi
    echo "docs: nif/$pkg/doc/index.html ($(find "nif/$pkg/doc" -name '*.html' | wc -l) pages)"
done
exit "$failed"
