#!/usr/bin/env python3
"""Per-kernel time of one decode step from Nsight Compute's CSV (`ncu --csv --page raw --metrics
gpu__time_duration.sum --log-file F focus-lens bench decode ...`, as profile_decode.sh runs it).
A step ends with the logits' product (rows_times over the vocabulary: the largest grid; or
cuBLAS's gemv2T in builds before it); a step with route_newest is a top-k step.
Prints the last dense and last top-k step's kernels grouped by name: count, total, average (us).
ncu runs each kernel alone, so the sums are larger than a graph replay's step time; they say
where the time goes, not what a step costs. Usage: ncu_steps.py CSV..."""
import collections, csv, sys


def load(fn):
    with open(fn) as f:
        lines = [l for l in f if not l.startswith("==")]
    r = csv.reader(lines)
    hdr = next(r)
    next(r)  # units
    ki, ti, gi = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum"), hdr.index("Grid Size")
    return [(row[ki], float(row[ti].replace(",", "")) / 1000, row[gi]) for row in r]


def blocks(grid):
    """Blocks in a grid written as "(x, y, z)"."""
    n = 1
    for v in grid.strip("()").split(","):
        n *= int(v)
    return n


def logits(k, grid):
    return "gemv2T" in k or (k.startswith("rows_times") and blocks(grid) >= 4096)


def name(k):
    if "internal::kernel" in k:
        return "gemm (cuBLAS)"
    if "gemv2T" in k:
        return "gemv2T (logits)"
    return k.split("(")[0][:30]


for fn in sys.argv[1:]:
    steps, cur = [], []
    for x in load(fn):
        cur.append(x[:2])
        if logits(x[0], x[2]):
            steps.append(cur)
            cur = []
    print(f"{fn}: {len(steps)} steps")
    for topk in (False, True):
        s = [s for s in steps if any("route_newest" in x[0] for x in s) == topk]
        if not s:
            continue
        agg = collections.defaultdict(lambda: [0, 0.0])
        for k, t in s[-1]:
            a = agg[name(k)]
            a[0] += 1
            a[1] += t
        print(f"  {'top-k' if topk else 'dense'} step: {len(s[-1])} kernels, {sum(t for _, t in s[-1]):.1f} us")
        for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            print(f"    {k:30} {n:4}  {t:8.1f} us  {t / n:6.2f} us each")
