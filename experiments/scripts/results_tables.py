#!/usr/bin/env python3
"""Turn the GPU session's raw outputs (experiments/gpu/{train,eval}.sh) into experiments/results/: the
machine-readable summary (results.json), the training logs, the collapse figure (SVG), and the
Markdown tables (rounds 1 and 3, pasted into docs/RESULTS.md at the time). Usage: results_tables.py RAW_DIR (runs/, ppl/, suites/)"""
import json, os, shutil, sys
from pathlib import Path

raw = Path(sys.argv[1])
out = Path("experiments/results")
out.mkdir(parents=True, exist_ok=True)
RUNS = ["k8_log", "k8_paper", "k4_log", "k4_paper"]
FX = "tests/fixtures/ppl_persuasion_60k.txt"


def log_rows(run):
    rows = {}
    for line in open(raw / "runs" / run / "train_log.jsonl"):
        if line.strip():
            r = json.loads(line)
            rows[r["step"]] = r  # a resumed run re-logs the steps after its checkpoint: keep the last
    return [rows[s] for s in sorted(rows)]


summary = {"ppl_file": FX, "ppl": {}, "suites": {}, "training": {}, "collapse": {}}
# Collapse runs are not repeated with every training round: keep the recorded ones.
previous = json.load(open(out / "results.json")) if (out / "results.json").exists() else {}
COLLAPSE = [r for r in ("collapse_softmax", "collapse_sinkhorn") if (raw / "runs" / r).exists()]
if not COLLAPSE:
    summary["collapse"] = previous.get("collapse", {})
# Perplexity: dense and every adapter x mode x ctx.
for f in sorted((raw / "ppl").glob("*.json")):
    d = json.load(open(f))
    summary["ppl"][f.stem] = {k: d[k] for k in ("ppl", "mode", "k", "ctx", "chunks", "scored_tokens", "per_chunk_nll")}
    summary["ppl"][f.stem]["seconds_h200"] = d["seconds"]
# Suites: keep the aggregates and comparisons (per-item scores stay in the raw files).
for f in sorted((raw / "suites").glob("*.json")):
    if f.stat().st_size == 0:
        continue
    d = json.load(open(f))
    summary["suites"][f.stem] = {
        "results": [{k: r[k] for k in r if k != "per_item"} for r in d["results"]],
        "comparisons": [{k: c[k] for k in c if k != "summary"} | {"summary": c["summary"]} for c in d["comparisons"]],
    }
# Training: the evaluation rows of each run.
for run in RUNS + COLLAPSE:
    rows = log_rows(run)
    evals = [{"step": r["step"], "tokens_seen": r["tokens_seen"], "heldout_ppl": r["heldout_ppl"], "dominance": r["dominance"]} for r in rows if "heldout_ppl" in r]
    cfg = json.load(open(raw / "runs" / run / "adapter_config.json"))
    summary["training" if run in RUNS else "collapse"][run] = {
        "groups": cfg["groups"], "gate": cfg["gate"], "sinkhorn_iters": cfg["sinkhorn_iters"],
        "score": cfg.get("score", "dot"), "sinkhorn_grad": cfg.get("training", {}).get("sinkhorn_grad", "full"),
        "seconds": rows[-1]["seconds"],
        "steps": rows[-1]["step"], "tokens_seen": rows[-1]["tokens_seen"], "evals": evals,
        "train_loss": [[r["step"], r["loss"]] for r in rows],
    }
(out / "results.json").write_text(json.dumps(summary, indent=1))

# Collapse figure: mean and worst-layer dominance over steps, softmax routing vs Sinkhorn.
W, H, L, B, T, R = 720, 360, 60, 40, 20, 20
steps = max(e["step"] for r in summary["collapse"].values() for e in r["evals"])
x = lambda s: L + (W - L - R) * s / steps
y = lambda v: T + (H - T - B) * (1 - v)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>']
for v in [0, 0.125, 0.25, 0.5, 0.75, 1.0]:
    svg.append(f'<line x1="{L}" x2="{W-R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/><text x="{L-6}" y="{y(v)+4:.1f}" text-anchor="end">{v:g}</text>')
for s in range(0, steps + 1, 100):
    svg.append(f'<text x="{x(s):.1f}" y="{H-B+16}" text-anchor="middle">{s}</text>')
svg.append(f'<text x="{(L+W-R)/2}" y="{H-6}" text-anchor="middle">training step (seq 512, batch 1, K=8)</text>')
svg.append(f'<text x="14" y="{(T+H-B)/2}" transform="rotate(-90 14 {(T+H-B)/2})" text-anchor="middle">dominance</text>')
svg.append(f'<line x1="{L}" x2="{W-R}" y1="{y(1/8):.1f}" y2="{y(1/8):.1f}" stroke="#888" stroke-dasharray="4 3"/><text x="{W-R-4}" y="{y(1/8)-4:.1f}" text-anchor="end" fill="#666">ideal 1/K</text>')
colors = {"collapse_softmax": "#d62728", "collapse_sinkhorn": "#1f77b4"}
names = {"collapse_softmax": "softmax routing (no Sinkhorn)", "collapse_sinkhorn": "Sinkhorn, 10 iterations"}
for i, (run, r) in enumerate(summary["collapse"].items()):
    for agg, dash in ((lambda d: sum(d) / len(d), ""), (max, ' stroke-dasharray="2 2"')):
        pts = " ".join(f"{x(e['step']):.1f},{y(agg(e['dominance'])):.1f}" for e in r["evals"])
        svg.append(f'<polyline points="{pts}" fill="none" stroke="{colors[run]}" stroke-width="1.6"{dash}/>')
    svg.append(f'<text x="{L+10}" y="{T+16+16*i}" fill="{colors[run]}">{names[run]}: solid = mean over layers, dotted = worst layer</text>')
svg.append("</svg>")
(out / "collapse.svg").write_text("\n".join(svg))

# Markdown tables.
P = summary["ppl"]
md = ["| adapter | ctx | dense | soft | top-1 | top-2 | top-3 | top-K |", "|---|---|---|---|---|---|---|---|"]
for run in RUNS:
    K = summary["training"][run]["groups"]
    for c in (512, 1024):
        g = lambda m: P.get(f"{run}_{m}_{c}", {}).get("ppl")
        cells = [g("soft"), g("topk1"), g("topk2"), g("topk3"), g(f"topk{K}")]
        md.append(f"| {run} | {c} | {P[f'dense_{c}']['ppl']:.2f} | " + " | ".join(f"{v:.2f}" if v else "-" for v in cells) + " |")
md.append("")
md.append("| run | steps | tokens seen | held-out soft PPL (first eval -> last) | dominance mean / worst layer (last) |")
md.append("|---|---|---|---|---|")
for run in RUNS:
    t = summary["training"][run]
    e0, e1 = t["evals"][0], t["evals"][-1]
    d = e1["dominance"]
    md.append(f"| {run} | {t['steps']} | {t['tokens_seen']:,} | {e0['heldout_ppl']:.2f} (step {e0['step']}) -> {e1['heldout_ppl']:.2f} | {sum(d)/len(d):.3f} / {max(d):.3f} |")
md.append("")
md.append("| suite | adapter | mode | accuracy | score | items | within window | identical to dense |")
md.append("|---|---|---|---|---|---|---|---|")
for name, s in summary["suites"].items():
    for r in s["results"]:
        same = next((c["identical_items"] for c in s["comparisons"] if c["suite"] == r["suite"] and c["mode"] == r["mode"]), None)
        md.append(f"| {r['suite']} | {name.rsplit('_', 1)[0] if 'soft' in name else name.split('_topk')[0]} | {r['mode']} | {r['accuracy']:.4f} | {r['score']:.4f} | {r['items']} | {r['items_within_window']} | {'' if same is None else same} |")
(out / "tables.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
