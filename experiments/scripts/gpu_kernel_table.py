#!/usr/bin/env python3
"""Markdown tables from one GPU kernel run (experiments/gpu/kernels.sh output copied to DIR):
ours (bf16 and f32) vs PyTorch SDPA flash, same session. With --by-length the bf16 table has one
row per length and one column per (K, k): Focus ms (SDPA / Focus), as in docs/RESULTS.md.
usage: gpu_kernel_table.py [--by-length] DIR"""
import json
import sys
from pathlib import Path

PAPER = {16384: 1.3, 65536: 3.5, 262144: 6.4, 1048576: 8.0}  # SDPA-built decomposition, K=8 k=1


def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def by_length(f, sdpa):
    rr = rows(f)
    cols = sorted({(r["groups"], r["k"]) for r in rr})
    print("| n | SDPA flash ms | our dense ms | dense / SDPA | " + " | ".join(f"K={g} k={k}" for g, k in cols) + " | paper, K=8 k=1 |")
    print("|---" * (5 + len(cols)) + "|")
    for n in sorted({r["n"] for r in rr}):
        at = {(r["groups"], r["k"]): r for r in rr if r["n"] == n}
        s, dense = sdpa[n], next(iter(at.values()))["dense_ms"]
        cells = [f"{at[c]['focus_ms']:.3f} ({s / at[c]['focus_ms']:.2f}x)" if c in at else "-" for c in cols]
        paper = PAPER.get(n)
        print(f"| {n} | {s:.3f} | {dense:.3f} | {dense / s:.2f} | " + " | ".join(cells) + f" | {f'{paper}x' if paper else '-'} |")


def main(d, wide=False):
    d = Path(d)
    sdpa = {r["n"]: r["sdpa_flash_ms"] for r in rows(d / "sdpa.jsonl")}
    for f in sorted(d.glob("bench_bf16_r*.jsonl")):
        rr = rows(f)
        print(f"\n`{f.name}` (bf16, {rr[0]['heads']} heads x {rr[0]['head_dim']}, window {rr[0]['window']}):\n")
        if wide:
            by_length(f, sdpa)
            continue
        print("| n | SDPA flash ms | our dense ms | dense / SDPA | K | k | Focus ms | SDPA / Focus | paper | Focus vs our dense | bound | eff |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rr:
            s = sdpa[r["n"]]
            paper = PAPER.get(r["n"]) if (r["groups"], r["k"]) == (8, 1) else None
            print(f"| {r['n']} | {s:.3f} | {r['dense_ms']:.3f} | {r['dense_ms'] / s:.2f} | {r['groups']} | {r['k']} | "
                  f"{r['focus_ms']:.3f} | {s / r['focus_ms']:.2f}x | {f'{paper}x' if paper else '-'} | "
                  f"{r['speedup']:.2f}x | {r['bound']:.2f}x | {r['efficiency'] * 100:.0f}% |")
    f = d / "bench_f32.jsonl"
    if f.exists():
        print("\n`bench_f32.jsonl` (f32, plain-FMA kernels):\n")
        print("| n | K | k | our dense ms | Focus ms | speedup | bound | eff |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows(f):
            print(f"| {r['n']} | {r['groups']} | {r['k']} | {r['dense_ms']:.3f} | {r['focus_ms']:.3f} | "
                  f"{r['speedup']:.2f}x | {r['bound']:.2f}x | {r['efficiency'] * 100:.0f}% |")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[-1], wide="--by-length" in args)
