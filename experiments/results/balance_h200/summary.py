#!/usr/bin/env python3
"""The table of README.md from the runs' train_log.jsonl and ppl.json: structure of the probe
(15K bytes each of Persuasion and Hamlet, from a quarter in) at the run's first evaluation and
its last, the worst dominance on the first held-out window (the console's figure) beside it,
and the perplexities (Persuasion fixture, ctx 1024). Only the layers an adapter routes count:
for `router_layers: global` on Gemma 3 those are the global layers (every 6th, from 5); the
logs were written before they marked it. Twins (the untrained router on the same probe, for
the median NMI ratio): SmolLM2 K=8 -> step 0 of ../sinks_pca_h200/r_p30_s1; Gemma 3 with the
input scale -> step 0 of ../long_sharpen_scale_h200/g_sc_rand, over the same layers; K=4 ->
structure_smollm2.txt (the `structure` example). Usage: summary.py [DIR]."""
import glob, json, os, statistics, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
evals = lambda path: [r for r in (json.loads(l) for l in open(path)) if r.get("structure")]
twins = {"smollm2_k8": evals(f"{d}/../sinks_pca_h200/r_p30_s1/train_log.jsonl")[0], "gemma_scaled": evals(f"{d}/../long_sharpen_scale_h200/g_sc_rand/train_log.jsonl")[0]}

def routed(cfg, layer):
    return cfg["router_layers"] != "global" or layer % 6 == 5

def med(r, cfg):
    return statistics.median(l["category"]["value"] for l in r["structure"] if l["layer"] >= 1 and routed(cfg, l["layer"]))

def worst(r, cfg):
    return max(l["dominance"] for l in r["structure"] if routed(cfg, l["layer"]))

print("| run | tokens | median NMI (first) | twin | ratio | best layer: pure60 | worst dominance, probe (first) | first held-out window | soft | top-1 | top-2 | top-3 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
traj = []
for p in sorted(glob.glob(f"{d}/*/train_log.jsonl")):
    run = os.path.basename(os.path.dirname(p))
    ev = evals(p)
    s0, s1 = ev[0], ev[-1]
    cfg = json.load(open(f"{d}/{run}/adapter_config.json"))
    t0 = twins["gemma_scaled"] if run.startswith("g_") else twins["smollm2_k8"] if cfg["groups"] == 8 else None
    b = max((l for l in s1["structure"] if routed(cfg, l["layer"])), key=lambda l: (l["pure60"], l["category"]["value"]))
    window = max(x for i, x in enumerate(s1["dominance"]) if x is not None and routed(cfg, i))
    ppl = {p["mode"]: p["ppl"] for p in json.load(open(f"{d}/{run}/ppl.json"))}
    pp = lambda m: f"{100 * (ppl[m] / ppl['dense'] - 1):+.2f}%" if m in ppl else "-"
    tw = f"{med(t0, cfg):.3f} | {med(s1, cfg) / med(t0, cfg):.2f}x" if t0 else "- | -"
    print(f"| {run} | {s1['tokens_seen'] / 1e6:.2f}M | {med(s1, cfg):.3f} ({med(s0, cfg):.3f}) | {tw} | {b['layer']}: {b['pure60']} | "
          f"{worst(s1, cfg):.3f} ({worst(s0, cfg):.3f}) | {window:.3f} | {pp('soft')} | {pp('topk(1)')} | {pp('topk(2)')} | {pp('topk(3)')} |")
    traj.append(f"{run}: " + ", ".join(f"{e['tokens_seen'] / 1e6:.1f}M {worst(e, cfg):.3f}" for e in ev))
print("\nWorst-layer dominance on the probe along each run (tokens seen in this run, dominance):")
print("\n".join(traj))
