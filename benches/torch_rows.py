#!/usr/bin/env python3
"""Times the benchmark cases of `benches/src/cases/*.rs` that have a PyTorch equivalent, for
the `PyTorch (ms)` column of the `bench` report (`bench --torch FILE`).

    python3 benches/torch_rows.py [--filter TEXT] [--iters N] [--warmup N] [--out FILE]

Each case is the Rust case's op at its `--size full` size, on the same kind of inputs
(uniform in [-1, 1), random indices), keyed by the Rust row key `"<Case::name> <Case::size>"`
so that the two line up; `--filter` keeps the cases whose key contains TEXT, or one of its
`|`-separated alternatives, as the Rust CLI does. The timing is the Rust runner's
(`benches/src/lib.rs`, `time`): `--warmup` runs, then at least `--iters` timed runs (more for
short cases, up to 2000 or about half a second), each the op and `torch.cuda.synchronize()`
timed with `time.perf_counter()`; the median is reported. The output of the last run is kept
and summed, so nothing is skipped. The settings match ours: f32 products on TF32 tensor
cores (cuBLAS and cuDNN), cuDNN picking its fastest convolution (`cudnn.benchmark`, its
search done in the warm-up), the default attention backend. The MLP step is burn's: the
same models (the MLP and the small CNN) and Adam, as per-parameter tensor ops
(`foreach=False`) for the plain row and as `fused=True` for the fused row. The ResNet-50 step
is `torch_resnet.py`'s (bf16 through autocast).

The output is a JSON object, row key to median milliseconds, written to `--out` after every
case (a run cut short keeps its rows), or to stdout at the end without `--out`; progress
goes to stderr.
`--device cpu --size small` runs the small sizes on the CPU, to check the script without a
GPU. Only the standard library and `torch` are used.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

# The most timed runs of one case, as the Rust runner's `MAX_ITERS`.
MAX_ITERS = 2000
WIDTHS = [784, 256, 128, 10]


def count(n):
    """`2^k` for powers of two, the number otherwise (the Rust `count`)."""
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def shape(dims):
    """A shape as Rust's `{:?}` prints an array: `[4096, 4096]`."""
    return "[" + ", ".join(map(str, dims)) + "]"


def conv_size(x, c_out, k=3):
    b, c, h, w = x
    return f"[{b},{c},{h},{w}]x[{c_out},{c},{k},{k}]"


class Inputs:
    """Makes inputs on one device, each uniform in [-1, 1) from its own seed."""

    def __init__(self, device):
        self.device = device

    def uniform(self, dims, seed, dtype=torch.float32):
        g = torch.Generator(device=self.device).manual_seed(seed)
        return (torch.rand(dims, generator=g, device=self.device) * 2 - 1).to(dtype)

    def columns(self, dims):
        """Random indices in `0..dims[1]` (int64: what `gather` and `scatter_add` take)."""
        g = torch.Generator(device=self.device).manual_seed(7)
        return torch.randint(0, dims[1], dims, generator=g, device=self.device)


def elementwise(full):
    n = 1 << 26 if full else 1 << 16

    def add(t):
        a, b = t.uniform([n], 1), t.uniform([n], 2)
        return lambda: a + b

    def chain(t):
        a, b, c = t.uniform([n], 1), t.uniform([n], 2), t.uniform([n], 3)
        return lambda: ((a + b) * c).exp().sqrt().neg()

    def chain_compiled(t):
        # PyTorch's own fusion: torch.compile's generated kernel (the fused row's peer).
        a, b, c = t.uniform([n], 1), t.uniform([n], 2), t.uniform([n], 3)
        f = torch.compile(lambda a, b, c: ((a + b) * c).exp().sqrt().neg())
        return lambda: f(a, b, c)

    def tiny(t):
        a, b = t.uniform([16], 1), t.uniform([16], 2)
        return lambda: a + b

    def function(name):
        def make(t):
            a = t.uniform([n], 4) * 3
            f = getattr(torch, name)
            return lambda: f(a)
        return make

    return [
        ("add f32", count(n), add),
        ("5 elementwise ops f32 (add, mul, exp, sqrt, neg)", count(n), chain),
        ("5 elementwise ops f32, fused (ours)", count(n), chain_compiled),
        ("add f32, fused kernel (ours)", count(n), add),
        ("exp f32", count(n), function("exp")),
        ("tanh f32", count(n), function("tanh")),
        ("erf f32", count(n), function("erf")),
        ("tiny add f32 + sync (latency)", "16", tiny),
    ]


def reduce(full):
    n, rows, soft = (1 << 26, [8192, 8192], [4096, 4096]) if full else (1 << 16, [256, 256], [256, 256])

    def total(t):
        x = t.uniform([n], 1)
        return lambda: x.sum()

    def last_dim(t):
        x = t.uniform(rows, 1)
        return lambda: x.sum(1)

    def softmax(t):
        x = t.uniform(soft, 1)
        return lambda: torch.softmax(x, 1)

    return [
        ("sum f32 (all)", count(n), total),
        ("sum f32 (last dim)", shape(rows), last_dim),
        ("softmax f32 (last dim)", shape(soft), softmax),
    ]


def composite(full):
    """`cases/composite.rs`: softmax, layer norm, GELU and a linear layer with its activation
    written as tensor ops; eager, and under torch.compile (keys ending in `, torch.compile`,
    for the text beside the table)."""
    rows, n = ([16384, 4096], 1 << 26) if full else ([256, 512], 1 << 16)
    m, k, o = (8192, 1024, 1024) if full else (256, 128, 128)

    def softmax(x):
        e = (x - x.amax(1, keepdim=True)).exp()
        return e / e.sum(1, keepdim=True)

    def layer_norm(x, gamma, beta):
        centred = x - x.mean(1, keepdim=True)
        var = (centred * centred).mean(1, keepdim=True)
        return centred / (var + 1e-5).sqrt() * gamma + beta

    def gelu(x):
        return x * 0.5 * ((x + x * x * x * 0.044715) * (2.0 / 3.141592653589793) ** 0.5).tanh().add(1.0)

    def linear_relu(x, w, b):
        return (x @ w + b).relu()

    def make(f, inputs, compiled):
        def build(t):
            args = [t.uniform(dims, seed) for dims, seed in inputs]
            g = torch.compile(f) if compiled else f
            return lambda: g(*args)
        return build

    out = []
    for compiled in (False, True):
        tag = ", torch.compile" if compiled else ""
        out += [
            ("softmax f32 as ops (last dim)", shape(rows) + tag, make(softmax, [(rows, 1)], compiled)),
            ("layer norm f32 as ops (last dim)", shape(rows) + tag, make(layer_norm, [(rows, 1), ([1, rows[1]], 2), ([1, rows[1]], 3)], compiled)),
            ("gelu f32 as ops (tanh form)", count(n) + tag, make(gelu, [([n], 1)], compiled)),
            ("linear + relu f32 as ops (relu(x @ w + b))", f"[{m}, {k}] @ [{k}, {o}]" + tag,
             make(linear_relu, [([m, k], 1), ([k, o], 2), ([1, o], 3)], compiled)),
        ]
    return out


def index(full):
    dims = [4096, 4096] if full else [256, 256]

    def gather(t):
        x, idx = t.uniform(dims, 1), t.columns(dims)
        return lambda: torch.gather(x, 1, idx)

    def scatter_add(t):
        values, target, idx = t.uniform(dims, 2), torch.zeros(dims, device=t.device), t.columns(dims)
        return lambda: target.scatter_add(1, idx, values)

    def cat(t):
        parts = [t.uniform([dims[0], dims[1] // 4], 10 + seed) for seed in range(4)]
        return lambda: torch.cat(parts, 1)

    return [
        ("gather f32 (last dim)", shape(dims), gather),
        ("scatter add f32 (last dim)", shape(dims), scatter_add),
        ("cat f32 (4 tensors, last dim)", f"4x[{dims[0]}, {dims[1] // 4}]", cat),
    ]


def matmul(full):
    s, (bs, bn) = (4096, (64, 512)) if full else (256, (4, 64))
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def case(dtype, batch, m, transposed=False):
        def make(t):
            lhs = t.uniform([batch, m, m], 1, dtypes[dtype])
            rhs = t.uniform([batch, m, m], 2, dtypes[dtype])
            # Stored [batch, n, k] and used as a strided [batch, k, n] view, as the Rust case.
            rhs = rhs.transpose(1, 2) if transposed else rhs
            return lambda: lhs @ rhs

        name = f"matmul {dtype}" + (" (rhs transposed)" if transposed else "")
        size = (f"{batch}x" if batch > 1 else "") + f"{m}x{m}x{m}"
        return (name, size, make)

    return [
        case("f32", 1, s),
        case("f16", 1, s),
        case("bf16", 1, s),
        case("f32", 1, s, transposed=True),
        case("f16", 1, s, transposed=True),
        case("f16", bs, bn),
        case("f32", bs, bn),
    ]


def module(full):
    if full:
        x, c_out, back_x, back_c_out, pool, attn = [64, 64, 56, 56], 64, [64, 64, 56, 56], 64, [64, 64, 112, 112], [4, 16, 1024, 64]
        # (x, c_out, k, stride), as the Rust cases: a 1x1, a strided 3x3, a ResNet-like 3x3.
        shapes = [([32, 256, 56, 56], 64, 1, 1), ([64, 64, 56, 56], 128, 3, 2), ([32, 256, 14, 14], 256, 3, 1)]
    else:
        x, c_out, back_x, back_c_out, pool, attn = [2, 8, 16, 16], 8, [32, 8, 8, 8], 16, [2, 4, 32, 32], [1, 2, 64, 32]
        shapes = [([2, 16, 8, 8], 8, 1, 1), ([2, 8, 16, 16], 16, 3, 2), ([2, 16, 8, 8], 16, 3, 1)]
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def conv(dtype):
        def make(t):
            inp = t.uniform(x, 1, dtypes[dtype])
            w = t.uniform([c_out, x[1], 3, 3], 2, dtypes[dtype])
            return lambda: F.conv2d(inp, w, None, stride=1, padding=1)

        return (f"conv2d {dtype} 3x3", conv_size(x, c_out), make)

    def shaped(shape, dtype):
        sx, sc_out, k, stride = shape

        def make(t):
            inp = t.uniform(sx, 1, dtypes[dtype])
            w = t.uniform([sc_out, sx[1], k, k], 2, dtypes[dtype])
            return lambda: F.conv2d(inp, w, None, stride=stride, padding=k // 2)

        name = f"conv2d {dtype} {k}x{k}" + (f"/{stride}" if stride > 1 else "")
        return (name, conv_size(sx, sc_out, k), make)

    def backward(dtype, weight):
        def make(t):
            b, c, h, w = back_x
            inp = t.uniform(back_x, 4, dtypes[dtype])
            wt = t.uniform([back_c_out, c, 3, 3], 5, dtypes[dtype])
            grad = t.uniform([b, back_c_out, h, w], 6, dtypes[dtype])
            if weight:
                return lambda: torch.nn.grad.conv2d_weight(inp, wt.shape, grad, stride=1, padding=1)
            return lambda: torch.nn.grad.conv2d_input(inp.shape, wt, grad, stride=1, padding=1)

        wrt = "weight" if weight else "input"
        return (f"conv2d {dtype} 3x3 {wrt} grad", conv_size(back_x, back_c_out), make)

    def max_pool(t):
        inp = t.uniform(pool, 3)
        return lambda: F.max_pool2d(inp, 3, stride=2, padding=1, dilation=1, ceil_mode=False)

    def attention(dtype, causal):
        def make(t):
            q, k, v = (t.uniform(attn, seed, dtypes[dtype]) for seed in (4, 5, 6))
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return (f"attention {dtype}" + (" causal" if causal else ""), shape(attn), make)

    return [
        conv("f32"),
        conv("f16"),
        backward("f32", False),
        backward("f32", True),
        backward("f16", False),
        backward("f16", True),
        ("max_pool2d f32 3x3/2", shape(pool), max_pool),
        attention("f32", False),
        attention("f16", False),
        attention("f32", True),
        attention("f16", True),
        attention("bf16", False),
    ] + [shaped(shape, dtype) for shape in shapes for dtype in ("f32", "f16")]


def train(full):
    """The models of `cases/train.rs` on a fixed batch of 28x28 inputs: the 784-256-128-10 ReLU
    MLP and the small CNN (3x3 convolutions with padding 1 to 8 and 16 channels, each with ReLU
    and 2x2 max pooling, then linear 784-10). Every weight is held 2-d as there (`[in, out]`,
    a convolution's `[c_out, c_in * 9]`), biases `[1, out]`, scaled by `1/sqrt(fan_in)`;
    cross-entropy, Adam (lr 1e-3, betas 0.9 / 0.999, eps 1e-8); each run is one step and
    returns the loss before the update."""
    channels = [1, 8, 16]

    def mlp(x, params):
        h = x
        for layer in range(len(WIDTHS) - 1):
            h = h @ params[2 * layer] + params[2 * layer + 1]
            if layer + 2 < len(WIDTHS):
                h = torch.relu(h)
        return h

    def cnn(x, params):
        h = x.view(x.shape[0], 1, 28, 28)
        for layer, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
            w = params[2 * layer].view(c_out, c_in, 3, 3)
            h = F.max_pool2d(torch.relu(F.conv2d(h, w, params[2 * layer + 1].view(c_out), padding=1)), 2)
        return h.reshape(x.shape[0], 16 * 7 * 7) @ params[4] + params[5]

    models = {
        "MLP train step f32 (784-256-128-10": ([(n_in, n_out, False) for n_in, n_out in zip(WIDTHS, WIDTHS[1:])], mlp),
        "CNN train step f32 (28x28, conv 8-16, pool, linear": (
            [(c_in * 9, c_out, True) for c_in, c_out in zip(channels, channels[1:])] + [(16 * 7 * 7, 10, False)],
            cnn,
        ),
    }

    def case(model, batch, fused):
        layers, forward = models[model]

        def make(t):
            params = []
            for layer, (fan_in, out, conv) in enumerate(layers):
                scale = (1.0 / fan_in) ** 0.5
                seed = 10 + 2 * layer
                params.append((t.uniform([out, fan_in] if conv else [fan_in, out], seed) * scale).requires_grad_())
                params.append((t.uniform([1, out], seed + 1) * scale).requires_grad_())
            x = t.uniform([batch, WIDTHS[0]], 1)
            labels = (torch.arange(batch, device=t.device) * 7 + 3) % WIDTHS[-1]
            kind = {"fused": True} if fused else {"foreach": False}
            adam = torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **kind)

            def step():
                loss = F.cross_entropy(forward(x, params), labels)
                adam.zero_grad(set_to_none=True)
                loss.backward()
                adam.step()
                return loss.detach()

            return step

        adam = "fused Adam" if fused else "Adam"
        return (f"{model}, {adam})", f"batch {batch}", make)

    steps = [(m, b) for m in models for b in ([64, 1024] if full and m.startswith("MLP") else [64])]
    return [case(model, batch, fused) for model, batch in steps for fused in (False, True)]


def resnet(full):
    """`cases/resnet.rs`: one SGD step (lr 0.01, no momentum) of ResNet-50 (`torch_resnet.py`,
    1000 classes) on a fixed batch, f32 (TF32 convolutions and products) and bf16 (autocast:
    f32 weights, bf16 convolutions and products, as PyTorch users train); eager, and with the
    model under torch.compile (keys ending in `, torch.compile`, for the text beside the
    table; its compilation happens in the warm-up, a minute or two)."""
    from torch_resnet import ResNet, sgd_step, synthetic_batch

    batch, side = (64, 224) if full else (2, 32)

    def case(dtype, compiled):
        def make(t):
            model = ResNet().to(t.device)
            images, labels = synthetic_batch(batch, side, 1000, t.device, 1)
            return sgd_step(model, images, labels, bf16=dtype == "bf16", compiled=compiled)

        tag = ", torch.compile" if compiled else ""
        return (f"ResNet-50 SGD step {dtype}", f"batch {batch}, {side}x{side}" + tag, make)

    return [case(dtype, compiled) for compiled in (False, True) for dtype in ("f32", "bf16")]


def cases(full):
    """Every case with a PyTorch equivalent, in the order of `cases::all`; the variants of
    ours only (exact f32, tilings) have none."""
    return elementwise(full) + reduce(full) + composite(full) + index(full) + matmul(full) + module(full) + train(full) + resnet(full)


def time_case(run, sync, warmup, iters):
    """The Rust runner's `time`: the median seconds of one run ending in a sync, and the
    checksum of the last run's output."""
    sync()
    start = time.perf_counter()
    for _ in range(warmup):
        out = run()
        sync()
        del out
    per_run = (time.perf_counter() - start) / max(warmup, 1)
    iters = max(iters, min(int(0.5 / max(per_run, 1e-9)), max(MAX_ITERS, iters)))
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        out = run()
        sync()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2], float(out.double().sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", default="", help="keep the cases whose key contains TEXT (or one of its |-separated alternatives)")
    parser.add_argument("--iters", type=int, default=20, help="the fewest timed runs (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up runs before timing (default 3)")
    parser.add_argument("--out", help="write the JSON here too, after every case")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--size", choices=["small", "full"], default="full", help=argparse.SUPPRESS)
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    inputs = Inputs(device)
    alternatives = args.filter.split("|")
    rows = {}
    for name, size, make in cases(args.size == "full"):
        key = f"{name} {size}"
        if args.filter and not any(a in key for a in alternatives):
            continue
        start = time.perf_counter()
        try:
            median, checksum = time_case(make(inputs), sync, args.warmup, args.iters)
        except Exception as e:  # torch.compile where it can't run here: the row stays empty
            print(f"torch: {key}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        rows[key] = median * 1e3
        print(f"torch: {key}: {median * 1e3:.4f} ms (checksum {checksum:.6g}, {time.perf_counter() - start:.1f} s)", file=sys.stderr)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)
    if not args.out:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
