#!/usr/bin/env bash
# Starts one process per GPU of this host, all members of one NCCL communicator
# (ex_cubecl::distributed::init_from_env), as torchrun does:
#
#   scripts/launch_distributed.sh --nproc 2 -- target/release/process_group
#
# Several hosts: run it on every host with the same --nnodes and --id-file (a path every
# host sees, e.g. on NFS) and each host's --node-rank; rank 0 (node 0, process 0) writes
# NCCL's unique id there and the other ranks wait for it (up to 5 minutes). Without a shared
# file system, give every host the id in EX_CUBECL_NCCL_ID instead (256 hex digits, made on
# node 0: `process_group --print-id`). NCCL picks the network itself; NCCL_SOCKET_IFNAME and
# NCCL_IB_HCA select interfaces where it picks wrong.
#
# Each process gets EX_CUBECL_RANK (node_rank * nproc + i), EX_CUBECL_LOCAL_RANK (i: its GPU),
# EX_CUBECL_WORLD_SIZE (nnodes * nproc) and EX_CUBECL_NCCL_ID_FILE; the script waits for all
# of them and exits with the first failure's status (the others are stopped).
set -euo pipefail
usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    echo "usage: $0 --nproc N [--nnodes H --node-rank R] [--id-file PATH] -- COMMAND [ARGS...]"
    exit 2
}
nproc="" nnodes=1 node_rank=0 id_file=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nproc) nproc="$2"; shift 2 ;;
        --nnodes) nnodes="$2"; shift 2 ;;
        --node-rank) node_rank="$2"; shift 2 ;;
        --id-file) id_file="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "launch_distributed: unknown argument $1" >&2; usage ;;
    esac
done
[ -n "$nproc" ] && [ $# -gt 0 ] || usage
for n in "$nproc" "$nnodes" "$node_rank"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "launch_distributed: $n is not a number" >&2; exit 2; }
done
[ "$nproc" -ge 1 ] && [ "$node_rank" -lt "$nnodes" ] || { echo "launch_distributed: need --nproc >= 1 and --node-rank < --nnodes" >&2; exit 2; }
if [ "$nnodes" -gt 1 ] && [ -z "$id_file" ] && [ -z "${EX_CUBECL_NCCL_ID:-}" ]; then
    echo "launch_distributed: several hosts need --id-file on a shared file system, or EX_CUBECL_NCCL_ID" >&2
    exit 2
fi
cleanup_id=""
if [ -z "$id_file" ]; then
    id_file="$(mktemp -u "${TMPDIR:-/tmp}/ex_cubecl_nccl_id.XXXXXX")"
    cleanup_id="$id_file"
fi
# A stale id from an earlier run would send the ranks to a communicator that is gone.
[ "$node_rank" -eq 0 ] && rm -f "$id_file"
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop; [ -n "$cleanup_id" ] && rm -f "$cleanup_id"' EXIT
for ((i = 0; i < nproc; i++)); do
    EX_CUBECL_RANK=$((node_rank * nproc + i)) EX_CUBECL_LOCAL_RANK=$i \
        EX_CUBECL_WORLD_SIZE=$((nnodes * nproc)) EX_CUBECL_NCCL_ID_FILE="$id_file" "$@" &
    pids+=($!)
done
status=0
for p in "${pids[@]}"; do
    code=0
    wait "$p" || code=$?
    if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then status=$code; stop; fi
done
exit "$status"
