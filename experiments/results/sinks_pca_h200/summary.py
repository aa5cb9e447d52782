#!/usr/bin/env python3
"""The tables of README.md from the runs' train_log.jsonl and ppl.json. Structure (the probe's
per-layer NMI of top group with word category, logged at step 0 and every evaluation) at the
last evaluation, beside two baselines on the same probe: the run's own step 0 (its
initialisation: random, k-means or PCA) and the random twin (step 0 of the random-init run with
the same sink: r_p30 for sink 0, r_p30_s1 for sink 1, r_p30_s4 for sink 4). Perplexity:
Persuasion, ctx 1024. Usage: summary.py [DIR] (default: this folder)."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from results_log import glob_logs, open_log  # the large logs are stored as train_log.jsonl.xz

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
logs = {os.path.basename(os.path.dirname(p)): [json.loads(l) for l in open_log(p)] for p in glob_logs(f"{d}/*/train_log.jsonl")}
evals = {k: [r for r in v if r.get("structure")] for k, v in logs.items()}
med = lambda r: statistics.median(l["category"]["value"] for l in r["structure"] if l["layer"] >= 1)
sink = lambda run: json.load(open(f"{d}/{run}/adapter_config.json")).get("sink", 0)
twin = {0: "r_p30", 1: "r_p30_s1", 4: "r_p30_s4"}
print("| run | tokens | median NMI | at init | random twin | ratio to twin | best layer: pure60 (twin) | worst dominance | soft | top-1 | top-2 | top-3 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for run, ev in evals.items():
    s0, s1 = ev[0], ev[-1]
    t0 = evals[twin[sink(run)]][0]
    b = max(s1["structure"], key=lambda l: (l["pure60"], l["category"]["value"]))
    ppl = {p["mode"]: p["ppl"] for p in json.load(open(f"{d}/{run}/ppl.json"))}
    dense = ppl["dense"]
    pp = lambda m: f"{ppl[m]:.2f} ({100 * (ppl[m] / dense - 1):+.1f}%)"
    print(f"| {run} | {s1['tokens_seen']/1e6:.2f}M | {med(s1):.3f} | {med(s0):.3f} | {med(t0):.3f} | {med(s1)/med(t0):.2f} | "
          f"{b['layer']}: {b['pure60']} ({t0['structure'][b['layer']]['pure60']}) | {max(s1['dominance']):.3f} | "
          f"{pp('soft')} | {pp('topk(1)')} | {pp('topk(2)')} | {pp('topk(3)')} |")
print(f"\ndense: {dense:.2f}")
