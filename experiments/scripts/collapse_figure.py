#!/usr/bin/env python3
"""The softmax-vs-Sinkhorn collapse figure: mean and worst-layer dominance over training steps,
K=8 routers trained with softmax routing (--sinkhorn-iters 0) and with Sinkhorn (10 iterations).
Draws experiments/results/softmax_vs_sinkhorn_collapse.svg from
experiments/results/softmax_vs_sinkhorn_collapse.json. Given RAW_DIR (experiments/gpu/train.sh
output holding runs/collapse_softmax and runs/collapse_sinkhorn), it first rewrites that JSON's
runs from their adapter_config.json and train_log.jsonl.
Usage: collapse_figure.py [RAW_DIR]   (run from the repository root)"""
import json, sys
from pathlib import Path

out = Path("experiments/results")
data_path = out / "softmax_vs_sinkhorn_collapse.json"
data = json.load(open(data_path))
RUNS = ("collapse_softmax", "collapse_sinkhorn")


def log_rows(run_dir):
    rows = {}
    for line in open(run_dir / "train_log.jsonl"):
        if line.strip():
            r = json.loads(line)
            rows[r["step"]] = r  # a resumed run re-logs the steps after its checkpoint: keep the last
    return [rows[s] for s in sorted(rows)]


if len(sys.argv) > 1:
    raw = Path(sys.argv[1])
    for run in RUNS:
        rows = log_rows(raw / "runs" / run)
        cfg = json.load(open(raw / "runs" / run / "adapter_config.json"))
        data["collapse"][run] = {
            "groups": cfg["groups"], "gate": cfg["gate"], "sinkhorn_iters": cfg["sinkhorn_iters"],
            "score": cfg.get("score", "dot"), "sinkhorn_grad": cfg.get("training", {}).get("sinkhorn_grad", "full"),
            "seconds": rows[-1]["seconds"], "steps": rows[-1]["step"], "tokens_seen": rows[-1]["tokens_seen"],
            "evals": [{"step": r["step"], "tokens_seen": r["tokens_seen"], "heldout_ppl": r["heldout_ppl"], "dominance": r["dominance"]}
                      for r in rows if "heldout_ppl" in r],
            "train_loss": [[r["step"], r["loss"]] for r in rows],
        }
    data_path.write_text(json.dumps(data, indent=1))
collapse = data["collapse"]

W, H, L, B, T, R = 720, 360, 60, 40, 20, 20
steps = max(e["step"] for r in collapse.values() for e in r["evals"])
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
for i, (run, r) in enumerate(collapse.items()):
    for agg, dash in ((lambda d: sum(d) / len(d), ""), (max, ' stroke-dasharray="2 2"')):
        pts = " ".join(f"{x(e['step']):.1f},{y(agg(e['dominance'])):.1f}" for e in r["evals"])
        svg.append(f'<polyline points="{pts}" fill="none" stroke="{colors[run]}" stroke-width="1.6"{dash}/>')
    svg.append(f'<text x="{L+10}" y="{T+16+16*i}" fill="{colors[run]}">{names[run]}: solid = mean over layers, dotted = worst layer</text>')
svg.append("</svg>")
(out / "softmax_vs_sinkhorn_collapse.svg").write_text("\n".join(svg))
