#!/usr/bin/env python3
"""Set a shipped adapter's Sinkhorn iterations at inference to N (it keeps the training's value
in training.sinkhorn_iters) and replace its recorded perplexities with the ones measured with N
iterations; the training-time figures move to results.ppl_with_<M>_sinkhorn_iters.
Usage: set_inference_iters.py ADAPTER_DIR N SUMMARY.json RUN NOTE
  SUMMARY.json: experiments/scripts/experiment_summary.py output holding RUN_{soft,topk1,topk2,topk3}_{512,1024}
  and dense_{512,1024}, measured with N iterations (focus-lens ppl --json files summarised by it)."""
import json, sys
from pathlib import Path

adapter, n, summary, run, note = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
s = json.load(open(summary))
p = adapter / "adapter_config.json"
c = json.load(open(p))
trained = c["sinkhorn_iters"]
c["sinkhorn_iters"] = n
c["training"]["sinkhorn_iters"] = trained
r = c["results"]
r[f"ppl_with_{trained}_sinkhorn_iters"] = r["ppl"]
K = c["groups"]
r["ppl"] = {}
for ctx in (512, 1024):
    g = lambda name: s["ppl"][f"{name}_{ctx}"]["ppl"]
    r["ppl"][f"ctx{ctx}"] = {"dense": g("dense"), "soft": g(f"{run}_soft")} | {f"topk{k}": g(f"{run}_topk{k}") for k in (1, 2, 3)} | {f"topk{K}": g("dense")}
r["measured_on"] = (f"ppl: this project's 2-core CPU with sinkhorn_iters {n} ({summary}; topk{K} = dense by construction); "
                    f"ppl_with_{trained}_sinkhorn_iters: NVIDIA H200, CUDA build, f32")
r["sinkhorn_iters_note"] = note
r["heldout_dominance_per_layer_note"] = f"from the training log's last held-out evaluation ({trained} iterations)"
p.write_text(json.dumps(c, indent=2) + "\n")
print(p, json.dumps(r["ppl"]))
