#!/usr/bin/env python3
"""The decode anchor (issue 32): Hugging Face transformers on the same GGUF weights as
`focus-lens bench decode`, greedy decode steps over a static KV cache at the same contexts,
eager and (with --compile) torch.compile'd, printing tokens/s per (model, context, variant).

    python3 decode_anchor.py --model SmolLM2.gguf:1024,8150 --model Qwen.gguf:1024,32000 \
        [--steps 32] [--compile] [--dtype float32] [--json OUT] [--budget-s 300]

transformers dequantises the GGUF to --dtype (float32 by default: our GPU decode runs f32
weights and an f32 cache). Each context: random token ids prefilled in chunks into a fresh
StaticCache of (context + steps + 8) slots, then `--steps` timed greedy steps (argmax read on
the host every step, as generate() and our step do), after 3 untimed ones. The static cache's
attention spans its whole length, so the cache is sized per context. Compiled runs
(mode="reduce-overhead": CUDA graphs) compile per context; --budget-s skips variants that
would start after that many seconds. Needs transformers with GGUF support and the `gguf`
package (not on the GPU machine: install its wheel first).
"""
import argparse
import json
import os
import sys
import time


def fail(msg):
    print(f"decode_anchor: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
except ImportError as e:  # pragma: no cover - depends on the machine
    fail(f"needs torch and transformers: {e}")
try:
    import gguf  # noqa: F401  (transformers' GGUF loader imports it)
except ImportError:
    fail("the `gguf` package is missing: pip install --no-index --find-links WHEELS gguf")


def load(path, dtype):
    d, f = os.path.split(os.path.abspath(path))
    if not os.path.isfile(path):
        fail(f"no model file {path}")
    t0 = time.time()
    try:
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=dtype)
    except TypeError:  # transformers before `dtype=`
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=dtype)
    m = m.to("cuda").eval()
    print(f"# loaded {f} ({m.config.model_type}, {sum(p.numel() for p in m.parameters()) / 1e6:.0f}M params, {dtype}) in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    return m


def static_cache(model, length, dtype):
    from transformers import StaticCache
    # The constructor's arguments changed across versions: newest first.
    tries = [
        dict(config=model.config, max_cache_len=length),
        dict(config=model.config, max_batch_size=1, max_cache_len=length, device="cuda", dtype=dtype),
        dict(config=model.config, batch_size=1, max_cache_len=length, device="cuda", dtype=dtype),
    ]
    err = None
    for kw in tries:
        try:
            return StaticCache(**kw)
        except TypeError as e:
            err = e
    fail(f"cannot build a StaticCache with this transformers ({transformers.__version__}): {err}")


def forward(model, ids, cache, pos):
    """Logits of the last position only (a 32K prefill's full logits would not fit)."""
    kw = dict(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True)
    try:
        return model(**kw, logits_to_keep=1).logits
    except TypeError:
        return model(**kw, num_logits_to_keep=1).logits


@torch.no_grad()
def run(model, n, steps, dtype, compiled, seed=0):
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, n), generator=g).to("cuda")
    cache = static_cache(model, n + steps + 8, dtype)
    chunk = 2048
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        logits = forward(model, ids[:, a:b], cache, torch.arange(a, b, device="cuda"))
    step = forward
    if compiled:
        torch._dynamo.reset()
        step = torch.compile(forward, mode="reduce-overhead", fullgraph=False)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    warm = 3
    times = []
    t_compile = time.time()
    for s in range(warm + steps):
        pos = torch.tensor([n + s], device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = step(model, nxt, cache, pos)
        nxt = out[:, -1].argmax(-1, keepdim=True)
        int(nxt[0, 0])  # the host reads the token, as generate() and our steps do
        times.append(time.perf_counter() - t0)
        if s == warm - 1:
            t_compile = time.time() - t_compile
    timed = sorted(times[warm:])
    med = timed[len(timed) // 2]
    return {"median_step_ms": med * 1e3, "tokens_per_s": 1.0 / med, "mean_tokens_per_s": len(timed) / sum(timed), "warmup_s": t_compile}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="FILE.gguf:CTX[,CTX...]")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--compile", action="store_true", help="also torch.compile (reduce-overhead) runs")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no variant after this many seconds")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        fail("no CUDA device visible to torch")
    dtype = getattr(torch, a.dtype)
    start = time.time()
    rows = []
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name(0)}", file=sys.stderr)
    models = []
    for spec in a.model:
        path, _, ctxs = spec.rpartition(":")
        if not path or not ctxs:
            fail(f"--model takes FILE.gguf:CTX[,CTX...], not {spec!r}")
        try:
            contexts = [int(c) for c in ctxs.split(",")]
        except ValueError:
            fail(f"bad contexts in {spec!r}")
        models.append((path, load(path, dtype), contexts))
    # Eager everywhere first: compiled runs (each compiles anew) go last, within the budget.
    for compiled in ([False, True] if a.compile else [False]):
        for path, model, contexts in models:
            for n in contexts:
                name = os.path.basename(path)
                if time.time() - start > a.budget_s:
                    print(f"# skipped {name} ctx {n} {'compiled' if compiled else 'eager'}: past the budget", file=sys.stderr)
                    continue
                try:
                    r = run(model, n, a.steps, dtype, compiled)
                except Exception as e:  # report and go on: one variant failing is a result too
                    print(f"# {name} ctx {n} {'compiled' if compiled else 'eager'} failed: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
                    r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                row = {"model": name, "context": n, "variant": "compiled" if compiled else "eager", "dtype": a.dtype, **r}
                rows.append(row)
                if "tokens_per_s" in r:
                    print(f"{name:>40} ctx {n:>6} {row['variant']:>8}: {r['tokens_per_s']:8.1f} tok/s ({r['median_step_ms']:.2f} ms/step, warm-up {r['warmup_s']:.1f} s)", flush=True)
                torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
