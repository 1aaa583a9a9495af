#!/usr/bin/env python3
"""PyTorch's side of the `scale` binary (examples/src/bin/scale.rs), on the same GPUs:
torch.distributed's NCCL all-reduce bus bandwidth (f32, 1 MiB to 1 GiB), and weak scaling
(a fixed batch per GPU) of DistributedDataParallel training steps of the MLP 784-4096-4096-10
(f32, TF32 products, batch 1024 per GPU) and of ResNet-50 (`torch_resnet.py`, bf16 autocast,
224x224, batch 128 per GPU).

    python3 benches/torch_ddp.py [--devices 1,2,4] [--only allreduce,mlp,resnet]
        [--mlp-batch N] [--resnet-batch N] [--warmup N] [--steps N] [--max-bytes N]
        [--quick] [--out FILE]

Each device count runs in fresh processes, one per GPU (torch.multiprocessing.spawn, the
NCCL backend; `--device cpu` uses gloo on the CPU, to check the script without a GPU). ResNet-50 runs in
the NCHW layout, as ours does; `--channels-last` gives PyTorch its faster layout for bf16
convolutions (on two H200s, 2026-11-28, NCHW trained 2257 images/s per GPU). The
timing is the scale binary's: an all-reduce is timed per call, each call followed by
`torch.cuda.synchronize()`, the median of `iters` calls on rank 0; a training run is
`--warmup` steps, a barrier, then `--steps` steps each ending in a synchronize; the step time
is the slowest rank's mean. On one GPU the model is not wrapped in DDP (no all-reduce), as the
scale binary does no all-reduce on one device. SGD, lr 0.01, no momentum. The output is
the JSON object the scale binary writes (keys `allreduce`, `train`), for
`benches/scale_report.py`; a table goes to stdout and progress to stderr.
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_resnet import RESNET50_BLOCKS, ResNet, synthetic_batch  # noqa: E402

MLP_WIDTHS = [784, 4096, 4096, 10]


def mlp(widths):
    layers = []
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bandwidth(device, world, sizes, quick):
    out = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4, device=device)
        iters = 3 if quick else (10 if nbytes >= 256 << 20 else 20)
        for _ in range(2):
            dist.all_reduce(t)
        sync(device)
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.all_reduce(t)
            sync(device)
            times.append(time.perf_counter() - start)
        times.sort()
        seconds = times[len(times) // 2]
        algbw = nbytes / seconds
        busbw = algbw * 2 * (world - 1) / world
        out.append({"devices": world, "bytes": nbytes, "ms": seconds * 1e3, "algbw_gbs": algbw / 1e9, "busbw_gbs": busbw / 1e9})
        del t
    return out


def train(name, device, rank, world, opts):
    if name == "mlp":
        widths = [784, 64, 64, 10] if opts.quick else MLP_WIDTHS
        batch = 8 if opts.quick else opts.mlp_batch
        model = mlp(widths).to(device)
        g = torch.Generator(device=device).manual_seed(100 + rank)
        x = torch.rand([batch, widths[0]], generator=g, device=device) * 2 - 1
        y = (torch.arange(batch, device=device) * 7 + 3) % widths[-1]
        bf16, dtype = False, "f32"
    else:
        blocks, side, classes = ((1, 1, 1, 1), 32, 10) if opts.quick else (RESNET50_BLOCKS, 224, 1000)
        batch = 2 if opts.quick else opts.resnet_batch
        model = ResNet(blocks, classes).to(device)
        x, y = synthetic_batch(batch, side, classes, device, 200 + rank)
        if opts.channels_last:
            model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
        bf16 = not opts.quick and device.type == "cuda"
        dtype = "bf16" if bf16 else "f32"
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    warmup, steps = (1, 2) if opts.quick else (opts.warmup, opts.steps)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
        sync(device)
        return loss.detach()

    for _ in range(warmup):
        step()
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(max(steps, 1)):
        loss = step()
    elapsed = torch.tensor([time.perf_counter() - start], device=device, dtype=torch.float64)
    if world > 1:
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    step_seconds = float(elapsed) / max(steps, 1)
    return {
        "model": "resnet50" if name == "resnet" else "mlp",
        "dtype": dtype,
        "devices": world,
        "batch_per_device": batch,
        "ms_per_step": step_seconds * 1e3,
        "samples_per_s": world * batch / step_seconds,
        "loss": float(loss),
    }


def worker(rank, world, port, opts, path):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cuda = opts.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    init = dict(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None, **init)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl" if cuda else "gloo", **init)
    result = {"allreduce": [], "train": []}
    try:
        if "allreduce" in opts.only and world > 1:
            sizes = [1 << k for k in range(12, 19, 2)] if opts.quick else [1 << k for k in range(20, 31) if (1 << k) <= opts.max_bytes]
            result["allreduce"] = bandwidth(device, world, sizes, opts.quick)
        for name in ("mlp", "resnet"):
            if name in opts.only:
                start = time.perf_counter()
                row = train(name, device, rank, world, opts)
                if rank == 0:
                    print(f"torch_ddp: {name} on {world} device(s): {row['ms_per_step']:.2f} ms a step, {row['samples_per_s']:.0f} samples/s ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
                result["train"].append(row)
                if cuda:
                    torch.cuda.empty_cache()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(path, "w") as f:
            json.dump(result, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="1,2", help="device counts, e.g. 1,2,4 (default 1,2)")
    parser.add_argument("--only", default="allreduce,mlp,resnet")
    parser.add_argument("--mlp-batch", type=int, default=1024)
    parser.add_argument("--resnet-batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--channels-last", action="store_true", help="ResNet-50 in channels-last layout (NCHW by default, the layout ours uses)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the script")
    parser.add_argument("--out", help="write the JSON here")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    opts = parser.parse_args()
    opts.only = opts.only.split(",")
    counts = [int(c) for c in opts.devices.split(",")]
    if opts.device == "cuda" and max(counts) > torch.cuda.device_count():
        sys.exit(f"torch_ddp: {max(counts)} GPUs asked for, {torch.cuda.device_count()} present")
    merged = {"who": "pytorch", "torch": torch.__version__, "quick": opts.quick, "allreduce": [], "train": []}
    if opts.device == "cuda":
        merged["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    for world in counts:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "result.json")
            mp.spawn(worker, args=(world, free_port(), opts, path), nprocs=world, join=True)
            with open(path) as f:
                result = json.load(f)
        for a in result["allreduce"]:
            print(f"torch_ddp: all-reduce {world} devices {a['bytes'] >> 10} KiB: {a['ms']:.3f} ms, busbw {a['busbw_gbs']:.1f} GB/s", file=sys.stderr)
        merged["allreduce"] += result["allreduce"]
        merged["train"] += result["train"]
        if opts.out:
            with open(opts.out, "w") as f:
                json.dump(merged, f, indent=1)
    print(json.dumps(merged, indent=1))


if __name__ == "__main__":
    main()
