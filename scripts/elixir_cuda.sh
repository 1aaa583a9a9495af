#!/usr/bin/env bash
# Packs ExBurn for a GPU machine that has CUDA's driver but no Rust, Erlang or Elixir: the NIF
# built here in release with the `cuda` feature (stripped), the compiled beams of ex_burn and
# its dependencies (MIX_ENV=prod), Debian's OTP runtime (the applications Elixir needs) and
# the Elixir that scripts/setup_nx.sh built, into .bin/elixir.tar.xz (a git-ignored folder to
# carry). scripts/elixir_gpu.sh unpacks it there and runs an Elixir script with it:
#   bash scripts/elixir_cuda.sh                         # here
#   bash scripts/elixir_gpu.sh nif/ex_burn/bench/train_step.exs --batches 64,1024   # there
#   bash scripts/elixir_gpu.sh nif/ex_burn/test/gpu/doctests.exs     # Nx's doctests there
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/setup_elixir.sh
source scripts/setup_nx.sh
if [ -n "$EXBURN_NX_MISSING" ]; then
    echo "elixir_cuda: $EXBURN_NX_MISSING" >&2
    exit 1
fi
cargo build --release --locked -p ex_cubecl_nif --no-default-features --features cuda

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/exb/apps" "$stage/exb/elixir/lib" "$stage/exb/erlang/lib" "$stage/exb/so"
nif="$stage/libex_cubecl_nif.so"
cp "$CARGO_TARGET_DIR/release/libex_cubecl_nif.so" "$nif"
strip "$nif"

# ex_burn and its dependencies, compiled against that library into a build folder of our own.
(cd nif/ex_burn && MIX_ENV=prod EX_CUBECL_NIF="$nif" MIX_BUILD_PATH="$stage/build" mix do deps.compile + compile)
for app in "$stage"/build/lib/*; do
    name="$(basename "$app")"
    mkdir -p "$stage/exb/apps/$name"
    cp -rL "$app/ebin" "$stage/exb/apps/$name/"
    if [ -d "$app/priv" ]; then cp -rL "$app/priv" "$stage/exb/apps/$name/"; fi
done
# The protocols as `mix run` in prod has them: consolidated (scripts/elixir_gpu.sh puts them
# first in the code path), else every dispatch looks its implementation up at run time.
cp -rL "$stage/build/lib/ex_burn/consolidated" "$stage/exb/consolidated"

# Elixir: its launcher scripts and the applications a script run needs.
elixir_home="$(dirname "$(dirname "$(command -v elixir)")")"
cp -r "$elixir_home/bin" "$stage/exb/elixir/"
for app in elixir logger eex ex_unit; do
    mkdir -p "$stage/exb/elixir/lib/$app"
    cp -r "$elixir_home/lib/$app/ebin" "$stage/exb/elixir/lib/$app/"
done

# OTP: the runtime system (relocatable: bin/erl finds erts beside it) and its core applications.
otp="$(erl -noshell -eval 'io:put_chars(code:root_dir()), halt().')"
cp -r "$otp/bin" "$otp/releases" "$otp"/erts-* "$stage/exb/erlang/"
# Debian's bin/erl names its root (/usr/lib/erlang); the bundle's finds it from where it lies.
sed -i 's|^\( *\)ROOTDIR=.*$|\1ROOTDIR="$(cd "$(dirname "$0")/.." \&\& pwd)"|' "$stage/exb/erlang/bin/erl"
for app in kernel stdlib compiler crypto tools; do
    cp -r "$otp"/lib/"$app"-* "$stage/exb/erlang/lib/"
done
# beam.smp's libraries that a CUDA image may lack.
cp -L "$(ldd "$otp"/erts-*/bin/beam.smp | awk '/libtinfo/ {print $3}')" "$stage/exb/so/"

mkdir -p .bin
tar -C "$stage" -cJf .bin/elixir.tar.xz exb
ls -la .bin/elixir.tar.xz
