#!/usr/bin/env python3
"""Rewrites one shipped adapter's entry of tests/fixtures/trained_adapters_nll.json (the
reference per-chunk NLL that tests/trained_adapters.rs reproduces on the CPU to 1e-3), e.g.
after a retrained adapter replaced the weights of sample_adapters/smollm2-135m-k8.

Usage (from the repository root):
  scripts/gen-adapter-nll-fixture.py ADAPTER_DIR --ppl-json RUN/ppl.json
      copies the first 2 chunks of the soft and top-2 rows at ctx 1024 of the training run's
      ppl.json (train_paper's held-out perplexity on the GPU, on the Persuasion fixture or the
      whole book it begins): an independent reference (other kernels, other device). Preferred.
  scripts/gen-adapter-nll-fixture.py ADAPTER_DIR --measure [--bin target/release/focus-lens]
      measures them on this CPU with `focus-lens ppl --ctx 1024 --json` on the first 12,000
      characters of the fixture (the first 2 chunks; for a run without a ppl.json).

The entry replaced is the one naming ADAPTER_DIR with the adapter's own Sinkhorn iterations
(`sinkhorn_iters: null`); it is added if there is none. Other entries are kept as they are.
Standard library only.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

FIXTURE = "tests/fixtures/trained_adapters_nll.json"


def from_ppl_json(path, ctx, chunks):
    # A run may measure several contexts (train_paper --ctx 1024,4096,8192): the rows at ctx.
    every = json.load(open(path))
    rows = {r["mode"]: r for r in every if r["ctx"] == ctx} or {r["mode"]: r for r in every}
    out = {}
    for key, mode in (("soft", "soft"), ("topk2", "topk(2)")):
        r = rows.get(mode)
        if r is None:
            sys.exit(f"{path}: no '{mode}' row (modes: {', '.join(rows)})")
        if r["ctx"] != ctx or len(r["per_chunk_nll"]) < chunks:
            sys.exit(f"{path}: the '{mode}' row has ctx {r['ctx']} and {len(r['per_chunk_nll'])} chunks; need ctx {ctx}, >= {chunks}")
        out[key] = r["per_chunk_nll"][:chunks]
    return out, {
        "measured_on": "the GPU (train_paper's held-out perplexity after training): the CPU must reproduce the CUDA kernels",
        "from": f"{path}, ctx {ctx}: the first {chunks} of its {len(rows['soft']['per_chunk_nll'])} chunks (the fixture, or a text it begins)",
    }


def measure(adapter, text_path, ctx, chunks, binary):
    text = open(text_path, encoding="utf-8").read()[:12000]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        cut = os.path.join(d, "first12000.txt")
        open(cut, "w", encoding="utf-8").write(text)
        for key, mode in (("soft", ["--mode", "soft"]), ("topk2", ["--mode", "topk", "--k", "2"])):
            cmd = [binary, "ppl", "--ctx", str(ctx), "--adapter", adapter, *mode, "--json", cut]
            print("running:", " ".join(cmd), file=sys.stderr)
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
            nll = json.loads(r.stdout)["per_chunk_nll"]
            if len(nll) < chunks:
                sys.exit(f"only {len(nll)} chunks of {ctx} tokens in the first 12,000 characters")
            out[key] = nll[:chunks]
    return out, {
        "measured_on": f"the CPU, the adapter as shipped ({datetime.date.today()}, {binary})",
        "from": f"focus-lens ppl --ctx {ctx} on the first 12,000 characters of the fixture",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("adapter", help="e.g. sample_adapters/smollm2-135m-k8 (as the fixture names it)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ppl-json", help="the training run's ppl.json")
    src.add_argument("--measure", action="store_true", help="measure on this CPU with focus-lens ppl")
    ap.add_argument("--bin", default="target/release/focus-lens")
    ap.add_argument("--fixture", default=FIXTURE)
    a = ap.parse_args()
    adapter = a.adapter.rstrip("/")
    if not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
        sys.exit(f"{adapter}: no adapter_config.json (run from the repository root)")
    fx = json.load(open(a.fixture))
    ctx, chunks = fx["ctx"], fx["chunks"]
    if a.ppl_json:
        nll, origin = from_ppl_json(a.ppl_json, ctx, chunks)
    else:
        nll, origin = measure(adapter, fx["text"], ctx, chunks, a.bin)
    entry = {"adapter": adapter, "sinkhorn_iters": None, **origin, "per_chunk_nll": nll}
    at = [i for i, e in enumerate(fx["adapters"]) if e["adapter"] == adapter and e.get("sinkhorn_iters") is None]
    if at:
        fx["adapters"][at[0]] = entry
    else:
        fx["adapters"].append(entry)
    tmp = a.fixture + ".tmp"
    with open(tmp, "w") as f:
        json.dump(fx, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.fixture)
    print(f"{a.fixture}: {adapter} soft {nll['soft']} top-2 {nll['topk2']}", file=sys.stderr)


if __name__ == "__main__":
    main()
