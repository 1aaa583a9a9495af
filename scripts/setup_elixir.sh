#!/usr/bin/env bash
# Elixir for the `nif/ex_cubecl` package: Debian's `elixir` (1.14 on OTP 25) and the Erlang
# headers, installed with apt where `mix` is missing. Sourced by scripts/test.sh, before
# scripts/setup_nx.sh (which builds a newer Elixir on this OTP where Nx needs one).
set -euo pipefail

if ! command -v mix >/dev/null || ! command -v erl >/dev/null; then
    echo "ex_cubecl: installing Debian's elixir and erlang-dev" >&2
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq elixir erlang-dev >/dev/null
fi
