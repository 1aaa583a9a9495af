# Sourced on a GPU machine: makes NCCL loadable the way cudarc loads it (`libnccl.so`).
# Where only `libnccl.so.2` exists (NCCL's runtime package, or PyTorch's pip wheel
# `nvidia/nccl/lib/libnccl.so.2`), links libnccl.so to it in a folder of its own put first on
# LD_LIBRARY_PATH. Sets EX_CUBECL_NCCL_FOUND to a line saying what it found (or that nothing
# was found: our all-reduces then run host-staged). Used by scale_gpu.sh and elixir_gpu.sh.
nccl_dir=/tmp/ex_cubecl_nccl
nccl=""
if ldconfig -p 2>/dev/null | grep -q 'libnccl\.so '; then
    nccl="$(ldconfig -p | awk '/libnccl\.so / {print $NF; exit}')"
    EX_CUBECL_NCCL_FOUND="NCCL: $nccl (system, unversioned link present)"
else
    candidates=()
    sys="$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')"
    [ -n "$sys" ] && candidates+=("$sys")
    wheel="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)"
    [ -n "$wheel" ] && candidates+=("$wheel")
    ld_path="${LD_LIBRARY_PATH:-}"
    for dir in ${ld_path//:/ } /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/local/cuda*/lib64 /opt/conda/lib; do
        [ -e "$dir/libnccl.so.2" ] && candidates+=("$dir/libnccl.so.2")
    done
    for c in "${candidates[@]}"; do
        if [ -e "$c" ]; then nccl="$(readlink -f "$c")"; break; fi
    done
    if [ -n "$nccl" ]; then
        rm -rf "$nccl_dir" && mkdir -p "$nccl_dir"
        ln -s "$nccl" "$nccl_dir/libnccl.so"
        ln -s "$nccl" "$nccl_dir/libnccl.so.2"
        export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        EX_CUBECL_NCCL_FOUND="NCCL: $nccl, linked as $nccl_dir/libnccl.so (only libnccl.so.2 was installed)"
    else
        EX_CUBECL_NCCL_FOUND="NCCL: NOT FOUND (no libnccl.so or libnccl.so.2 in ldconfig, LD_LIBRARY_PATH, /usr/lib, /usr/local/cuda*, nor PyTorch's nvidia-nccl wheel): our all-reduces ran HOST-STAGED, not through NCCL; install libnccl2 or pip's nvidia-nccl-cu12"
    fi
fi

