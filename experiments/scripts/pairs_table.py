#!/usr/bin/env python3
"""Pairs kept and balance under hard top-k, per layer, for trained adapters: runs
`focus-lens analyze --mode topk --k K --segment 1024` on the first 25,000 bytes of the held-out
Persuasion fixture and writes experiments/results/pairs_topk.json (per layer: dominance, share of causal
pairs retained, share of distant pairs kept) plus a Markdown table of the means.
Usage: pairs_table.py [--k 2] ADAPTER_DIR...   (run from the repository root, release build)"""
import json, subprocess, sys, tempfile
from pathlib import Path

args = sys.argv[1:]
k = 2
if args[:1] == ["--k"]:
    k, args = int(args[1]), args[2:]
text = Path(tempfile.mkdtemp()) / "persuasion_25k.txt"
text.write_bytes(Path("tests/fixtures/ppl_persuasion_60k.txt").read_bytes()[:25000])
out = {"text": "first 25,000 bytes of tests/fixtures/ppl_persuasion_60k.txt", "k": k, "adapters": {}}
md = ["| adapter | dominance mean / worst layer | pairs retained | distant kept |", "|---|---|---|---|"]
for a in args:
    stats = Path(tempfile.mkdtemp()) / "stats.json"
    cmd = ["target/release/focus-lens", "analyze", "--adapter", a, "--mode", "topk", "--k", str(k), "--segment", "1024", str(text), "--out", str(stats)]
    subprocess.run(cmd, check=True, capture_output=True)
    d = json.load(open(stats))
    layers = [{"layer": l["layer"], "dominance": l["dominance"], "retained": l["pairs"]["retained"],
               "distant_kept": l["pairs"]["same_group_distant"] / max(1, l["pairs"]["causal"] - l["pairs"]["local"])} for l in d["layers"]]
    mean = lambda key: sum(l[key] for l in layers) / len(layers)
    out["adapters"][a] = {"command": " ".join(cmd[:10]) + " TEXT --out stats.json", "tokens": len(d["tokens"]) if isinstance(d["tokens"], list) else d["tokens"], "layers": layers,
                          "mean": {key: mean(key) for key in ("dominance", "retained", "distant_kept")}}
    md.append(f"| `{a}` | {mean('dominance'):.3f} / {max(l['dominance'] for l in layers):.3f} | {mean('retained'):.3f} | {mean('distant_kept'):.3f} |")
Path("experiments/results/pairs_topk.json").write_text(json.dumps(out, indent=1) + "\n")
print("\n".join(md))
