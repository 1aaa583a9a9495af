#!/usr/bin/env python3
"""What the tensor-core kernels run per K step. Splits a cubecl compilation log
(CUBECL_DEBUG_LOG=FILE) into kernel sources, compiles those that use `mma.sync` with nvcc for
sm_90a (cubin and PTX), and prints per kernel its registers, its PTX counts of the
instructions that matter, and the opcode mix of the largest SASS loop holding HMMAs (the main
loop, with the K slices it unrolls). Run by `scripts/speed_gpu.sh OUT sass FILTER` on the GPU
machine (nvcc and cuobjdump under /usr/local/cuda*/bin); `--sass` reads SASS listings that
came back from there (`cuobjdump -sass` output).

    python3 scripts/sass_loop.py CUBECL_LOG OUT_DIR
    python3 scripts/sass_loop.py --sass FILE.sass...
"""
import collections
import glob
import os
import re
import subprocess
import sys

PTX_OPS = ["mma.sync", "ldmatrix", "cp.async.cg", "cp.async.ca", "bar.sync", "cvt.rna.tf32", "ld.shared", "ld.global", "st.global"]


def main_loop(sass):
    """The opcode counts of the largest loop (a backward branch's span) holding HMMAs."""
    ins = [(int(m.group(1), 16), m.group(3), m.group(4))
           for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);", sass)]
    best = []
    for addr, op, rest in ins:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < addr:
            body = [o for a, o, _ in ins if int(target.group(1), 16) <= a <= addr]
            if any(o.startswith("HMMA") for o in body) and len(body) > len(best):
                best = body
    return len(ins), collections.Counter(best)


def report_sass(sass):
    total, loop = main_loop(sass)
    hmma = sum(v for k, v in loop.items() if k.startswith("HMMA"))
    print(f"sass: {total} instructions")
    if hmma:
        size = sum(loop.values())
        print(f"main loop: {size} instructions, {hmma} HMMA ({size / hmma:.2f} per HMMA): "
              + ", ".join(f"{k} {v}" for k, v in loop.most_common(24)))


def compile_log(log, out):
    cuda = sorted(glob.glob("/usr/local/cuda*/bin"))
    if not cuda:
        sys.exit("sass_loop.py: no /usr/local/cuda*/bin here (nvcc, cuobjdump)")
    cuda = cuda[-1]
    os.makedirs(out, exist_ok=True)
    text = open(log, errors="replace").read()
    blocks = re.findall(r"\[START_KERNEL_COMPILATION\]\nname: (.*?)\n.*?source:\n```[a-z]*\n(.*?)\n```\n\[END_KERNEL_COMPILATION\]", text, re.S)
    print(f"{len(blocks)} kernels in the log")
    seen = set()
    for i, (name, src) in enumerate(blocks):
        if "mma.sync" not in src or src in seen:
            continue
        seen.add(src)
        base = f"{out}/k{i}"
        # NVRTC's uint64_t is unsigned long long; nvcc's host headers make it unsigned long.
        open(base + ".cu", "w").write(src.replace("uint64 *mbar_ptr", "auto *mbar_ptr"))
        print(f"\n## kernel {i}: {name[:150]}")
        failed = False
        for args in (["-cubin", "-o", base + ".cubin"], ["-ptx", "-o", base + ".ptx"]):
            cmd = [f"{cuda}/nvcc", "-arch=sm_90a", "-std=c++17", "-lineinfo", base + ".cu"] + args
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                print("nvcc failed:", "\n".join(line for line in r.stderr.splitlines() if "error" in line)[:1500])
                failed = True
                break
        if failed:
            continue
        ptx = open(base + ".ptx").read()
        print("ptx: " + ", ".join(f"{op} {ptx.count(op)}" for op in PTX_OPS))
        res = subprocess.run([f"{cuda}/cuobjdump", "-res-usage", base + ".cubin"], capture_output=True, text=True).stdout
        print("resources:", " ".join(re.findall(r"REG:\d+|SHARED:\d+|STACK:\d+", res)))
        sass = subprocess.run([f"{cuda}/cuobjdump", "-sass", base + ".cubin"], capture_output=True, text=True).stdout
        open(base + ".sass", "w").write(sass)
        report_sass(sass)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--sass":
        for path in sys.argv[2:]:
            print(f"## {path}")
            report_sass(open(path).read())
    elif len(sys.argv) == 3:
        compile_log(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
