#!/usr/bin/env python3
"""Summarise one GPU training experiment (raw outputs of experiments/gpu/train.sh and eval.sh: runs/,
ppl/, optionally suites/) into one JSON file: per run its settings, held-out evaluations over
steps (soft PPL, dominance per layer) and the perplexity / suite figures.
Usage: experiment_summary.py RAW_DIR OUT.json"""
import json, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
summary = {"ppl_file": "tests/fixtures/ppl_persuasion_60k.txt", "runs": {}, "ppl": {}, "suites": {}}
for cfg_path in sorted((raw / "runs").glob("*/adapter_config.json")):
    run = cfg_path.parent.name
    cfg = json.load(open(cfg_path))
    rows = [json.loads(l) for l in open(cfg_path.parent / "train_log.jsonl") if l.strip()]
    summary["runs"][run] = {
        "groups": cfg["groups"], "gate": cfg["gate"], "score": cfg.get("score", "dot"),
        "training": cfg.get("training"),
        "evals": [{"step": r["step"], "tokens_seen": r["tokens_seen"], "seconds": r["seconds"], "heldout_ppl": r["heldout_ppl"],
                   "dominance": r["dominance"]} for r in rows if "heldout_ppl" in r],
    }
for f in sorted((raw / "ppl").glob("*.json")):
    d = json.load(open(f))
    summary["ppl"][f.stem] = {k: d[k] for k in ("ppl", "mode", "k", "ctx", "chunks", "scored_tokens", "per_chunk_nll") if k in d}
for f in sorted((raw / "suites").glob("*.json")) if (raw / "suites").exists() else []:
    if f.stat().st_size:
        d = json.load(open(f))
        summary["suites"][f.stem] = [{k: r[k] for k in r if k != "per_item"} for r in d["results"]]
out.write_text(json.dumps(summary, indent=1))
for run, r in summary["runs"].items():
    e0, e1 = r["evals"][0], r["evals"][-1]
    dm = lambda e: sum(e["dominance"]) / len(e["dominance"])
    print(f"{run} ({r['score']}): held-out soft PPL {e0['heldout_ppl']:.2f} (step {e0['step']}) -> {e1['heldout_ppl']:.2f} (step {e1['step']}, {e1['tokens_seen']:,} tokens, {e1['seconds']:.0f} s); dominance mean {dm(e1):.3f}, worst {max(e1['dominance']):.3f}")
for name, p in summary["ppl"].items():
    print(f"  {name}: {p['ppl']:.2f}")
