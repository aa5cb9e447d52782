#!/usr/bin/env python3
"""The table of README.md from the runs' train_log.jsonl and ppl.json: structure of the probe
(15K bytes each of Persuasion and Hamlet, from a quarter in) at the run's first evaluation and
its last, the worst dominance on the first held-out window (the console's figure) beside it,
and the perplexities (Persuasion fixture, ctx 1024; "-" for a run stopped before it wrote them).
Then each run's worst dominance and median NMI / most pure centroids along the run. Only the
layers an adapter routes count: the log's `routed` flag where it has one, else (logs written
before it) for `router_layers: global` on Gemma 3 the global layers (every 6th, from 5). Twins
(the untrained router on the same probe, for the median NMI ratio): SmolLM2 K=8 -> step 0 of
../sinks_pca_h200/r_p30_s1; Gemma 3 K=8 with the input scale -> step 0 of
../long_sharpen_scale_h200/g_sc_rand, over the same layers; K=4 -> structure_smollm2.txt (the
`structure` example). Also the table of ../gain_h200 (`summary.py ../gain_h200`, whose stopped
runs have a log and no config). Usage: summary.py [DIR]."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from results_log import glob_logs, open_log  # the large logs are stored as train_log.jsonl.xz

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
evals = lambda path: [r for r in (json.loads(l) for l in open_log(path)) if r.get("structure")]
twins = {"smollm2_k8": evals(f"{d}/../sinks_pca_h200/r_p30_s1/train_log.jsonl")[0], "gemma_scaled": evals(f"{d}/../long_sharpen_scale_h200/g_sc_rand/train_log.jsonl")[0]}

def routed(cfg, layer, row=None):
    flags = {l["layer"]: l["routed"] for l in (row or {}).get("structure", []) if "routed" in l}
    return flags.get(layer, cfg.get("router_layers", "all") != "global" or layer % 6 == 5)

def med(r, cfg, by=None):
    """Over the layers `by` (a row of the run; default r itself) routes: a twin's over the run's."""
    return statistics.median(l["category"]["value"] for l in r["structure"] if l["layer"] >= 1 and routed(cfg, l["layer"], by or r))

def worst(r, cfg):
    return max(l["dominance"] for l in r["structure"] if routed(cfg, l["layer"], r))

def pure(r, cfg):
    return max(l["pure60"] for l in r["structure"] if routed(cfg, l["layer"], r))

print("| run | tokens | median NMI (first) | twin | ratio | best layer: pure60 | worst dominance, probe (first) | first held-out window | soft | top-1 | top-2 | top-3 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
traj, nmi = [], []
for p in glob_logs(f"{d}/*/train_log.jsonl"):
    run = os.path.basename(os.path.dirname(p))
    ev = evals(p)
    s0, s1 = ev[0], ev[-1]
    path = f"{d}/{run}/adapter_config.json"
    cfg = json.load(open(path)) if os.path.exists(path) else {}
    groups = len(s1["group_mass"][0])
    gemma = len(s1["structure"]) == 18
    t0 = None if groups != 8 else twins["gemma_scaled"] if gemma else twins["smollm2_k8"]
    b = max((l for l in s1["structure"] if routed(cfg, l["layer"], s1)), key=lambda l: (l["pure60"], l["category"]["value"]))
    window = max(x for i, x in enumerate(s1["dominance"]) if x is not None and routed(cfg, i, s1))
    ppl = {p["mode"]: p["ppl"] for p in json.load(open(f"{d}/{run}/ppl.json"))} if os.path.exists(f"{d}/{run}/ppl.json") else {}
    pp = lambda m: f"{100 * (ppl[m] / ppl['dense'] - 1):+.2f}%" if m in ppl else "-"
    tw = f"{med(t0, cfg, s1):.3f} | {med(s1, cfg) / med(t0, cfg, s1):.2f}x" if t0 else "- | -"
    print(f"| {run} | {s1['tokens_seen'] / 1e6:.2f}M | {med(s1, cfg):.3f} ({med(s0, cfg):.3f}) | {tw} | {b['layer']}: {b['pure60']} | "
          f"{worst(s1, cfg):.3f} ({worst(s0, cfg):.3f}) | {window:.3f} | {pp('soft')} | {pp('topk(1)')} | {pp('topk(2)')} | {pp('topk(3)')} |")
    traj.append(f"{run}: " + ", ".join(f"{e['tokens_seen'] / 1e6:.1f}M {worst(e, cfg):.3f}" for e in ev))
    nmi.append(f"{run}: " + ", ".join(f"{e['tokens_seen'] / 1e6:.1f}M {med(e, cfg):.3f} / {pure(e, cfg)}" for e in ev))
print("\nWorst-layer dominance on the probe along each run (tokens seen in this run, dominance):")
print("\n".join(traj))
print("\nMedian NMI(top group, category) over the routed layers / the most centroids >= 60% pure in one routed layer, along each run:")
print("\n".join(nmi))
