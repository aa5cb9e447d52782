#!/usr/bin/env python3
"""The table of README.md from the runs' train_log.jsonl: per run, at its last evaluation beside
its step-0 evaluation (the untrained twin: the same routers before training, on the same probe),
the median over layers >= 1 of NMI(top group, word category), the best layer's centroids >= 60%
pure (>= 50 tokens), the worst layer's dominance, ||W_g||_F (min-max over layers) and the range
of S / tau. Usage: summary.py [DIR] (default: this folder)."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from results_log import glob_logs, open_log  # the large logs are stored as train_log.jsonl.xz

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
print("| run | step | tokens | median NMI (twin) | ratio | best layer: pure60 (twin), NMI, null max | worst dominance | ||W_g|| | S/tau |")
print("|---|---|---|---|---|---|---|---|---|")
for log in glob_logs(f"{d}/*/train_log.jsonl"):
    rows = [json.loads(l) for l in open_log(log)]
    ev = [r for r in rows if r.get("structure")]
    s0, s1 = ev[0], ev[-1]
    med = lambda r: statistics.median(l["category"]["value"] for l in r["structure"] if l["layer"] >= 1)
    b = max(s1["structure"], key=lambda l: (l["pure60"], l["category"]["value"]))
    wn = [x["w_norm"] for x in s1["routers"]]
    lo, hi = min(x["score_min"] for x in s1["routers"]), max(x["score_max"] for x in s1["routers"])
    print(f"| {os.path.basename(os.path.dirname(log))} | {s1['step']} | {s1['tokens_seen']/1e6:.2f}M | {med(s1):.3f} ({med(s0):.3f}) | {med(s1)/med(s0):.2f} | "
          f"{b['layer']}: {b['pure60']} ({s0['structure'][b['layer']]['pure60']}), {b['category']['value']:.3f}, {b['category']['null_max']:.3f} | "
          f"{max(s1['dominance']):.3f} | {min(wn):.1f}-{max(wn):.1f} | {lo:.0f}..{hi:.0f} |")
