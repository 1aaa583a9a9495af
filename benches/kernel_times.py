"""Where a program's GPU time goes, from Nsight Compute's CSV of `gpu__time_duration.sum`
(what `scripts/profile_step_gpu.sh` records): the kernels grouped by name, their launches,
total and share of the time, largest first, and the sum over every kernel.

    python3 benches/kernel_times.py NCU_CSV [--steps N] [--top 40]

`--steps N` divides the totals by N (the steps the profiled run made, warm-up included), so
that the figures read per step. Names are cut at the first `<` or `(` (template arguments and
parameter lists), which groups a kernel family's launches.
"""
import argparse
import collections
import csv
import io
import sys

UNITS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def rows(path):
    """The CSV's rows, past the lines ncu writes before its header."""
    with open(path, newline="") as f:
        text = f.read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"kernel_times: no ncu CSV header in {path}")
    return csv.DictReader(io.StringIO(text[start:]))


def family(name):
    cut = min([i for i in (name.find("<"), name.find("(")) if i > 0] or [len(name)])
    return name[:cut]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--steps", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    total = collections.Counter()
    count = collections.Counter()
    for row in rows(args.csv):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNITS.get(row["Metric Unit"])
        if unit is None:
            sys.exit(f"kernel_times: unknown unit {row['Metric Unit']!r}")
        name = family(row["Kernel Name"])
        total[name] += float(row["Metric Value"].replace(",", "")) * unit
        count[name] += 1
    whole = sum(total.values())
    if whole == 0:
        sys.exit("kernel_times: no kernel times in the CSV")
    print(f"{sum(count.values()) / args.steps:.0f} launches and {whole / args.steps:.3f} ms of kernel time per step\n")
    print("| kernel | launches per step | ms per step | share |")
    print("|---|---|---|---|")
    for name, ms in total.most_common(args.top):
        print(f"| {name[:90]} | {count[name] / args.steps:.1f} | {ms / args.steps:.3f} | {100 * ms / whole:.1f}% |")


if __name__ == "__main__":
    main()
