#!/usr/bin/env python3
"""The table of README.md from the runs' train_log.jsonl and ppl.json: structure of the probe
(two held-out books, 15K bytes each of Persuasion and Hamlet from a quarter in) at every
evaluation and the last, beside the run's own step 0 and the random twin on the same probe:
SmolLM2 K=8 -> step 0 of ../sinks_pca_h200/r_p30_s1 (seed 0, the same random routers, sink 1);
Gemma 3 with the input scale -> step 0 of g_sc_rand (random W_g behind the same scale: the fair
twin of a scaled router); Gemma 3 without it -> ../sharpen_gemma_h200/g_rand_lr3e4's step 0;
SmolLM2 K=4 -> none logged (`focus-lens analyze` measures its twin). Perplexity: Persuasion,
ctx 1024. Usage: summary.py [DIR] (default: this folder)."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from results_log import glob_logs, open_log  # the large logs are stored as train_log.jsonl.xz

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
def evals(path):
    return [r for r in (json.loads(l) for l in open_log(path)) if r.get("structure")]
med = lambda r: statistics.median(l["category"]["value"] for l in r["structure"] if l["layer"] >= 1)
worst = lambda r: max(l["dominance"] for l in r["structure"])
twins = {"smollm2_k8": evals(f"{d}/../sinks_pca_h200/r_p30_s1/train_log.jsonl")[0], "gemma_scaled": evals(f"{d}/g_sc_rand/train_log.jsonl")[0]}
print("| run | tokens | median NMI (init) | twin | ratio | best layer: pure60 | worst dominance (init) | soft | top-1 | top-2 | top-3 |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
traj = []
for p in glob_logs(f"{d}/*/train_log.jsonl"):
    run = os.path.basename(os.path.dirname(p))
    ev = evals(p)
    s0, s1 = ev[0], ev[-1]
    cfg = json.load(open(f"{d}/{run}/adapter_config.json"))
    t0 = twins["gemma_scaled"] if run.startswith("g_") else twins["smollm2_k8"] if cfg["groups"] == 8 else None
    b = max(s1["structure"], key=lambda l: (l["pure60"], l["category"]["value"]))
    ppl = {p["mode"]: p["ppl"] for p in json.load(open(f"{d}/{run}/ppl.json"))}
    dense = ppl["dense"]
    pp = lambda m: f"{100 * (ppl[m] / dense - 1):+.2f}%" if m in ppl else "-"
    tw = f"{med(t0):.3f} | {med(s1) / med(t0):.2f}x" if t0 else "- | -"
    print(f"| {run} | {s1['tokens_seen'] / 1e6:.2f}M | {med(s1):.3f} ({med(s0):.3f}) | {tw} | {b['layer']}: {b['pure60']} | "
          f"{worst(s1):.3f} ({worst(s0):.3f}) | {pp('soft')} | {pp('topk(1)')} | {pp('topk(2)')} | {pp('topk(3)')} |")
    traj.append(f"{run}: " + ", ".join(f"{e['tokens_seen'] / 1e6:.1f}M {worst(e):.3f}" for e in ev))
print("\nWorst-layer dominance along each run (tokens seen, dominance):")
print("\n".join(traj))
