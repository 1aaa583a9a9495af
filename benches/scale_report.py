#!/usr/bin/env python3
"""Puts the `scale` binary's figures (examples/src/bin/scale.rs, one or more JSON files) beside
PyTorch's (benches/torch_ddp.py) in one markdown report, for `scripts/scale_gpu.sh`.

    python3 benches/scale_report.py --ours A.json [B.json ...] [--torch T.json]
        [--title TEXT] [--note TEXT ...]

All-reduce: each device count and size with our bus bandwidth, PyTorch's and ours / PyTorch's
(the target: at least 0.9 at 64 MiB and above). Weak scaling: each model and device count
with samples per second of both, ours / PyTorch's, and each one's speed-up over its own run on
one device (targets on 2 and 4 GPUs: ResNet-50 1.9x and 3.6x, the MLP at least PyTorch's own
scaling). Only the standard library is used.
"""
import argparse
import json


def load(paths):
    merged = {"allreduce": [], "train": []}
    meta = {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            meta.setdefault("missing", []).append(f"{path}: {e}")
            continue
        merged["allreduce"] += data.get("allreduce", [])
        merged["train"] += data.get("train", [])
        for key in ("who", "runtime", "torch", "nccl", "quick"):
            if key in data:
                meta[key] = data[key]
    return merged, meta


def size(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", nargs="+", required=True)
    parser.add_argument("--torch", nargs="*", default=[])
    parser.add_argument("--title", default="Scaling on one host: ExCubecl beside PyTorch")
    parser.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    args = parser.parse_args()
    ours, ours_meta = load(args.ours)
    torch, torch_meta = load(args.torch)

    out = [f"# {args.title}", ""]
    out += [f"- {n}" for n in args.note]
    if "torch" in torch_meta:
        out.append(f"- PyTorch {torch_meta['torch']}" + (f", NCCL {torch_meta['nccl']}" if "nccl" in torch_meta else ""))
    for meta, who in ((ours_meta, "ours"), (torch_meta, "PyTorch")):
        for m in meta.get("missing", []):
            out.append(f"- {who}: no figures from {m}")
    out.append("")

    out += ["## All-reduce f32 (sum): bus bandwidth, GB/s (nccl-tests' busbw = algbw * 2 (n - 1) / n)", ""]
    out += ["| devices | size | ours (ms) | ours busbw | PyTorch (ms) | PyTorch busbw | ours / PyTorch |", "|---|---|---|---|---|---|---|"]
    keys = sorted({(a["devices"], a["bytes"]) for a in ours["allreduce"] + torch["allreduce"]})
    pick = lambda rows, k: next((a for a in rows if (a["devices"], a["bytes"]) == k), None)
    for k in keys:
        o, t = pick(ours["allreduce"], k), pick(torch["allreduce"], k)
        ob, tb = o and o["busbw_gbs"], t and t["busbw_gbs"]
        out.append(f"| {k[0]} | {size(k[1])} | {fmt(o and o['ms'], 3)} | {fmt(ob)} | {fmt(t and t['ms'], 3)} | {fmt(tb)} | {ratio(ob, tb)} |")
    if not keys:
        out.append("| - | - | - | - | - | - | - |")
    out.append("")

    out += ["## Weak scaling: one data-parallel training step, fixed batch per device", ""]
    out += [
        "| model | dtype (ours / PyTorch) | devices | batch per device | ours (samples/s) | PyTorch (samples/s) | ours / PyTorch | ours speed-up | PyTorch speed-up | ours step (ms) | PyTorch step (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    models = []
    for row in ours["train"] + torch["train"]:
        if row["model"] not in models:
            models.append(row["model"])
    for model in models:
        counts = sorted({r["devices"] for r in ours["train"] + torch["train"] if r["model"] == model})
        find = lambda rows, n: next((r for r in rows if r["model"] == model and r["devices"] == n), None)
        o1, t1 = find(ours["train"], 1), find(torch["train"], 1)
        for n in counts:
            o, t = find(ours["train"], n), find(torch["train"], n)
            os_, ts = o and o["samples_per_s"], t and t["samples_per_s"]
            dtype = f"{o['dtype'] if o else '-'} / {t['dtype'] + (' autocast' if t['dtype'] == 'bf16' else '') if t else '-'}"
            batch = (o or t)["batch_per_device"]
            out.append(
                f"| {model} | {dtype} | {n} | {batch} | {fmt(os_, 0)} | {fmt(ts, 0)} | {ratio(os_, ts)} | "
                f"{ratio(os_, o1 and o1['samples_per_s'])} | {ratio(ts, t1 and t1['samples_per_s'])} | "
                f"{fmt(o and o['ms_per_step'], 2)} | {fmt(t and t['ms_per_step'], 2)} |"
            )
    if not models:
        out.append("| - | - | - | - | - | - | - | - | - | - | - |")
    out.append("")
    out.append(
        "Ours: one thread per GPU, each replica's gradients all-reduced (mean, NCCL) after its "
        "backward pass (during it, in 25 MiB buckets, where a note says `--grad-sync overlap`: "
        "`ex_cubecl::distributed::start_gradient_sync`, host-staged only for now), then SGD; "
        "PyTorch: DDP (its bucketed all-reduce overlaps "
        "the backward pass), autocast bf16 for ResNet-50. One device: no all-reduce on either "
        "side. Every step ends in a device sync on both."
    )
    print("\n".join(out))


if __name__ == "__main__":
    main()
