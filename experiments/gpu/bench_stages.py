#!/usr/bin/env python3
"""The rows of a `focus-lens bench forward --stages --json` report as a markdown table: the timed
passes (median, dense vs top-k) and each mode's pass split by stage, in ms.
Usage: bench_stages.py REPORT.json"""
import json, sys

rep = json.load(open(sys.argv[1]))
print(f"{rep['model']} on {rep['device']}, adapter {rep['adapter']}, {rep['repeats']} repeat(s)")
print("| tokens | mode | timed pass | stages in all | Q/K/V | routing | plan | attention | O + MLP |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rep["rows"]:
    for mode, timed in (("dense", r["dense_s"]), (f"top-{r['k']}", r["topk_s"])):
        st = r.get("dense_stages" if mode == "dense" else "topk_stages") or {}
        ms = lambda k: f"{1000 * st[k]:.1f}" if k in st else ""
        total = f"{1000 * sum(st.values()):.1f}" if st else ""
        print(f"| {r['tokens']} | {mode} | {1000 * timed:.1f} | {total} | {ms('qkv_s')} | {ms('route_s')} | {ms('plan_s')} | {ms('attend_s')} | {ms('finish_s')} |")
    print(f"| {r['tokens']} | top-{r['k']} vs dense | {r['topk_over_dense_speed']:.2f}x | | | | | | |")
