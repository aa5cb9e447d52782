#!/usr/bin/env python3
"""Copy a trained run (experiments/gpu/train.sh) into sample_adapters/ with its full provenance and
measured results in adapter_config.json: data files relative to the corpus, the split, the
schedule, the command, and the held-out perplexities of `experiments/gpu/eval.sh ppl`.
Usage: ship_adapter.py RAW_DIR RUN DEST SCHEDULE   (RAW_DIR holds runs/RUN and ppl/)"""
import json, shutil, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from provenance import corpus_provenance

raw, run, dest, schedule = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
src = raw / "runs" / run
cfg = json.load(open(src / "adapter_config.json"))
t = cfg["training"]
rows = [json.loads(l) for l in open(src / "train_log.jsonl") if l.strip()]
last_eval = [r for r in rows if "heldout_ppl" in r][-1]
K = cfg["groups"]
cfg["training"] = {
    **corpus_provenance(t),
    "steps": t["steps"], "seq_len": t["seq_len"], "batch": t["batch"], "tokens_seen": t["tokens_seen"],
    "lr": t["lr"], "cosine_decay": t.get("cosine_decay", False), "weight_decay": t["weight_decay"],
    "seed": t["seed"], "optimizer": t["optimizer"], "sinkhorn_grad": t.get("sinkhorn_grad", "full"),
    "device": t["device"], "seconds": t["seconds_this_run"], "schedule": schedule,
    "heldout_ppl_final": t.get("heldout_ppl", t.get("heldout_ppl_soft")), "heldout_mode": t.get("heldout_mode", "soft"),
    "command": (f"focus-lens train --device cuda --data corpus/train --heldout corpus/heldout --groups {K} "
                f"--gate {cfg['gate']} --score {cfg.get('score', 'dot')} --tau {cfg['tau']} --sinkhorn-grad "
                f"{t.get('sinkhorn_grad', 'full')} --seq-len {t['seq_len']} --batch {t['batch']} --lr {t['lr']} "
                f"--cosine-decay --steps {t['steps']} --seed {t['seed']} --eval-every 50 --eval-seqs 8 "
                f"(experiments/gpu/train.sh)"),
    "date": "2026-11-30",
}
ppl = {}
for c in (512, 1024):
    get = lambda name: json.load(open(raw / "ppl" / f"{name}_{c}.json"))["ppl"]
    ppl[f"ctx{c}"] = {"dense": get("dense"), "soft": get(f"{run}_soft")} | {
        f"topk{k}": get(f"{run}_topk{k}") for k in sorted({1, 2, 3, K})}
cfg["results"] = {
    "ppl_file": "tests/fixtures/ppl_persuasion_60k.txt (held-out Persuasion; llama-perplexity convention)",
    "ppl": ppl,
    "heldout_dominance_per_layer": last_eval["dominance"],
    "measured_on": "NVIDIA H200, CUDA build, f32 (CPU reproduces per-chunk NLL: tests/trained_adapters.rs)",
}
dest.mkdir(parents=True, exist_ok=True)
(dest / "adapter_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
shutil.copy(src / "adapter_model.safetensors", dest / "adapter_model.safetensors")
print(dest, json.dumps(ppl))
