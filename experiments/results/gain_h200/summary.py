#!/usr/bin/env python3
"""The table of README.md from the runs' train_log.jsonl and ppl.json: structure of the probe
(15K bytes each of Persuasion and Hamlet, from a quarter in) at the run's first evaluation and
its last, the worst dominance on the first held-out window (the console's figure) beside it,
and the perplexities (Persuasion fixture, ctx 1024; "-" for the two runs stopped at ~1,700
steps, which wrote no perplexities). Only the layers an adapter routes count (Gemma 3's global
layers, every 6th from 5). Twin (the untrained router on the same probe, for the median NMI
ratio): step 0 of ../long_sharpen_scale_h200/g_sc_rand (Gemma 3, input scale, random W_g), over
the same layers; K=4 -> none here (structure_trained.txt has the `structure` example's twins).
Copied from ../balance_h200/summary.py. Usage: summary.py [DIR]."""
import glob, json, os, statistics, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
evals = lambda path: [r for r in (json.loads(l) for l in open(path)) if r.get("structure")]
twins = {"gemma_scaled": evals(f"{d}/../long_sharpen_scale_h200/g_sc_rand/train_log.jsonl")[0]}

def routed(cfg, layer):
    return cfg["router_layers"] != "global" or layer % 6 == 5

def med(r, cfg):
    return statistics.median(l["category"]["value"] for l in r["structure"] if l["layer"] >= 1 and routed(cfg, l["layer"]))

def worst(r, cfg):
    return max(l["dominance"] for l in r["structure"] if routed(cfg, l["layer"]))

print("| run | tokens | median NMI (first) | twin | ratio | best layer: pure60 | worst dominance, probe (first) | first held-out window | soft | top-1 | top-2 | top-3 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
traj, nmi = [], []
for p in sorted(glob.glob(f"{d}/*/train_log.jsonl")):
    run = os.path.basename(os.path.dirname(p))
    ev = evals(p)
    s0, s1 = ev[0], ev[-1]
    cfg = {"router_layers": "global", "groups": 4 if "k4" in run else 8}
    t0 = twins["gemma_scaled"] if cfg["groups"] == 8 else None
    b = max((l for l in s1["structure"] if routed(cfg, l["layer"])), key=lambda l: (l["pure60"], l["category"]["value"]))
    window = max(x for i, x in enumerate(s1["dominance"]) if x is not None and routed(cfg, i))
    ppl = {p["mode"]: p["ppl"] for p in json.load(open(f"{d}/{run}/ppl.json"))} if os.path.exists(f"{d}/{run}/ppl.json") else {}
    pp = lambda m: f"{100 * (ppl[m] / ppl['dense'] - 1):+.2f}%" if m in ppl else "-"
    tw = f"{med(t0, cfg):.3f} | {med(s1, cfg) / med(t0, cfg):.2f}x" if t0 else "- | -"
    print(f"| {run} | {s1['tokens_seen'] / 1e6:.2f}M | {med(s1, cfg):.3f} ({med(s0, cfg):.3f}) | {tw} | {b['layer']}: {b['pure60']} | "
          f"{worst(s1, cfg):.3f} ({worst(s0, cfg):.3f}) | {window:.3f} | {pp('soft')} | {pp('topk(1)')} | {pp('topk(2)')} | {pp('topk(3)')} |")
    traj.append(f"{run}: " + ", ".join(f"{e['tokens_seen'] / 1e6:.1f}M {worst(e, cfg):.3f}" for e in ev))
    nmi.append(f"{run}: " + ", ".join(f"{e['tokens_seen'] / 1e6:.1f}M {med(e, cfg):.3f} / {max(l['pure60'] for l in e['structure'] if routed(cfg, l['layer']))}" for e in ev))
print("\nWorst-layer dominance on the probe along each run (tokens seen in this run, dominance):")
print("\n".join(traj))
print("\nMedian NMI(top group, category) over the routed layers / the most centroids >= 60% pure in one routed layer, along each run:")
print("\n".join(nmi))
