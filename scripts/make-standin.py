#!/usr/bin/env python3
"""Paper-scale stand-ins: models with the real shapes of Llama-3.2-1B, Llama-3.1-8B, Qwen2.5-7B and
Gemma-2-9B and random weights, for measuring memory and speed at those sizes (no real 1B-9B weights
are reachable from this project's machines). Their routers learn nothing worth showing. Never commit
their output.

    make-standin.py SHAPE --type Q4_0|Q4_1|Q5_0|Q8_0|F16 --tokenizer-from REAL.gguf --out FILE.gguf
    make-standin.py SHAPE --type Q4_K_M --llama-quantize BIN --tokenizer-from REAL.gguf --out FILE.gguf
    make-standin.py SHAPE --hf-bf16 DIR --tokenizer-from REAL.gguf|tokenizer.json [--layers N]
    make-standin.py --write-tokenizer tokenizer.json --tokenizer-from REAL.gguf

SHAPE (the table SHAPES below, from each model's Hugging Face config.json):
  llama-3.2-1b, llama-3.1-8b  LlamaForCausalLM: vocabulary 128256, RoPE base 500000 with Llama 3's
                              `llama3` frequency scaling;
  qwen2.5-7b                  Qwen2ForCausalLM: 28 layers, d 3584, 28/4 heads of 128, FFN 18944,
                              vocabulary 152064, biases on Q, K and V, RoPE base 1e6, untied;
  gemma2-9b                   Gemma2ForCausalLM: 42 layers, d 3584, 16/8 heads of 256, FFN 14336
                              (GeGLU, gelu tanh), vocabulary 256000, norms before and after attention
                              and the MLP, query_pre_attn_scalar 256, soft-caps 50 (attention) and 30
                              (logits), a 4096-token window on every other layer (from layer 0),
                              embeddings scaled by sqrt(d) and tied to the head.
`--layers N` writes the first N layers only (a quick local check of the format; the name says so).

GGUF (`--out`): architecture `llama`, `qwen2` or `gemma2`, tensors named and laid out as llama.cpp's
converter writes them, including for Llama 3 `rope_freqs.weight` (the per-frequency divisors of the
`llama3` scaling, computed as convert_hf_to_gguf.py computes them). Q4_0, Q4_1, Q5_0, Q8_0 and F16
are quantized here in numpy (the `gguf` package's `gguf.quants.quantize`); norms, biases and
`rope_freqs` stay F32, as the converter leaves them. Q4_K_M (the mix users download: Q4_K with Q6_K
for the output and half of the attn_v/ffn_down tensors) is made by llama.cpp's `llama-quantize` from
a Q8_0 stand-in written beside the output and deleted afterwards (scripts/build-llama-cpp.sh builds
llama-quantize).

HF (`--hf-bf16 DIR`): config.json (the real model's keys, as transformers' config class writes
them), the weights in bf16 as sharded model-0000N-of-0000M.safetensors (at most 5 GB a shard) with
model.safetensors.index.json, and tokenizer.json. Written by hand (a safetensors file is a JSON
header and raw bytes), so no torch is needed; with a tokenizer.json as `--tokenizer-from`, numpy is
all it needs (a GPU machine without the gguf package).

Weights: normal with std 0.02 (seeded, `--seed`), norms 1 + normal(0, 0.02) as the model applies
them (Gemma's RMSNorm scales by 1 + w and Hugging Face stores w: its HF norms are normal(0, 0.02),
its GGUF norms 1 + w as llama.cpp's converter stores them), so activations stay finite through 42
layers. One layer's arrays are reused for every layer (the file holds as many layers as the real
model, each identical), so the 8B takes minutes, not hours, to write; the embedding and output
matrices are random over all rows, made a few thousand rows at a time.

Tokenizer: the `tokenizer.ggml.*` metadata of a real GGUF (`--tokenizer-from`, e.g. the default
model SmolLM2-135M-Instruct, byte-level BPE, 49152 tokens), padded to the stand-in's vocabulary
with unused tokens `<|reserved_special_token_N|>` (token type 5, UNUSED, which no merge produces) so
that llama.cpp, whose vocabulary size is the token count, accepts the embedding's shape. Text is
tokenized as SmolLM2 would; ids >= 49152 never occur. For `--hf-bf16` the same vocabulary is
written as a tokenizer.json (the same document focus-lens builds from the GGUF). A tokenizer.json
given as `--tokenizer-from` (one `--write-tokenizer` wrote, unpadded, about 2 MB, or one an earlier
`--hf-bf16` run wrote) is padded or cut (its reserved tokens only) to the shape's vocabulary.

Needs: python3 >= 3.9, `pip install gguf==0.19.0 numpy` (a venv outside the repository; numpy alone
for `--hf-bf16` from a tokenizer.json), and for Q4_K_M a built `llama-quantize`. Writes about 1 GB
(1B) to 18.5 GB (Gemma-2-9B bf16) of disk.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
except ImportError:  # pragma: no cover - the header says what to install
    # `--hf-bf16` with a tokenizer.json needs numpy alone (a GPU machine without the package).
    gguf = QT = None

# The real models' shapes (their Hugging Face config.json). `arch`: the GGUF architecture and the
# config.json / tensor layout; `eps`: rms_norm_eps.
SHAPES = {
    "llama-3.2-1b": dict(
        arch="llama", name="Llama-3.2-1B", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64,
        ffn=8192, vocab=128256, tied=True, rope_theta=500000.0, context=131072, eps=1e-5, qkv_bias=False,
        rope_scaling=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192),
    ),
    "llama-3.1-8b": dict(
        arch="llama", name="Llama-3.1-8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128,
        ffn=14336, vocab=128256, tied=False, rope_theta=500000.0, context=131072, eps=1e-5, qkv_bias=False,
        rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192),
    ),
    # Qwen/Qwen2.5-7B: Llama's blocks with biases on Q, K and V; no RoPE scaling; the config's
    # sliding window is off (use_sliding_window false).
    "qwen2.5-7b": dict(
        arch="qwen2", name="Qwen2.5-7B", n_layers=28, d_model=3584, n_heads=28, n_kv_heads=4, head_dim=128,
        ffn=18944, vocab=152064, tied=False, rope_theta=1000000.0, context=131072, eps=1e-6, qkv_bias=True,
        rope_scaling=None,
    ),
    # google/gemma-2-9b: GeGLU (gelu_pytorch_tanh), four norms a block, soft-caps, every other
    # layer (0, 2, ...) sliding over 4096 tokens, embeddings x sqrt(d) and tied.
    "gemma2-9b": dict(
        arch="gemma2", name="Gemma-2-9B", n_layers=42, d_model=3584, n_heads=16, n_kv_heads=8, head_dim=256,
        ffn=14336, vocab=256000, tied=True, rope_theta=10000.0, context=8192, eps=1e-6, qkv_bias=False,
        rope_scaling=None, query_pre_attn_scalar=256, attn_softcap=50.0, final_softcap=30.0, sliding_window=4096,
    ),
}

# Types written here in numpy, and the GGUF general.file_type (llama_ftype) each one is.
NUMPY_TYPE_NAMES = ["Q4_0", "Q4_1", "Q5_0", "Q8_0", "F16"]


def numpy_types() -> dict:
    """GGUF type (gguf's enum, llama.cpp's file type) of each type quantized here."""
    need_gguf()
    return {"Q4_0": (QT.Q4_0, 2), "Q4_1": (QT.Q4_1, 3), "Q5_0": (QT.Q5_0, 8), "Q8_0": (QT.Q8_0, 7), "F16": (QT.F16, 1)}


def need_gguf() -> None:
    if gguf is None:
        sys.exit("make-standin.py needs the gguf package here: pip install gguf==0.19.0 numpy")
STD = 0.02
# Rows of the embedding generated and quantized at a time (bounds the f32 working set).
CHUNK_ROWS = 8192


def llama3_rope_factors(s: dict) -> np.ndarray:
    """`rope_freqs.weight` as llama.cpp's converter (conversion/llama.py) computes it."""
    base, dim, sc = s["rope_theta"], s["head_dim"], s["rope_scaling"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
    old = sc["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def normal(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(STD)


def norm_weight(rng: np.random.Generator, d: int) -> np.ndarray:
    return (1.0 + normal(rng, (d,))).astype(np.float32)


def quantize(a: np.ndarray, qt) -> np.ndarray:
    return gguf.quants.quantize(a, qt)


def big_matrix(rng, rows: int, cols: int, qt) -> np.ndarray:
    """A random rows x cols matrix quantized to `qt`, made CHUNK_ROWS rows at a time."""
    parts = [quantize(normal(rng, (min(CHUNK_ROWS, rows - r), cols)), qt) for r in range(0, rows, CHUNK_ROWS)]
    return np.concatenate(parts, axis=0)


def layer_arrays(rng, s: dict) -> dict[str, np.ndarray]:
    """One layer's f32 arrays, (out, in) as the converter lays them out, keyed by llama.cpp's
    name under `blk.N.` (`attn_q.weight`, `attn_q.bias`, ...). Norms are the factor the model
    applies (1 + w for Gemma: `hf_value` stores w)."""
    d, hd, ffn = s["d_model"], s["head_dim"], s["ffn"]
    nq, nkv = s["n_heads"] * hd, s["n_kv_heads"] * hd
    out = {
        "attn_norm.weight": norm_weight(rng, d),
        "attn_q.weight": normal(rng, (nq, d)),
        "attn_k.weight": normal(rng, (nkv, d)),
        "attn_v.weight": normal(rng, (nkv, d)),
        "attn_output.weight": normal(rng, (d, nq)),
        "ffn_norm.weight": norm_weight(rng, d),
        "ffn_gate.weight": normal(rng, (ffn, d)),
        "ffn_up.weight": normal(rng, (ffn, d)),
        "ffn_down.weight": normal(rng, (d, ffn)),
    }
    if s["qkv_bias"]:
        out.update({"attn_q.bias": normal(rng, (nq,)), "attn_k.bias": normal(rng, (nkv,)), "attn_v.bias": normal(rng, (nkv,))})
    if s["arch"] == "gemma2":
        out.update({"post_attention_norm.weight": norm_weight(rng, d), "post_ffw_norm.weight": norm_weight(rng, d)})
    return out


def stays_f32(name: str) -> bool:
    """Tensors llama.cpp's converter leaves in F32: norms, biases (and rope_freqs)."""
    return name.endswith("norm.weight") or name.endswith(".bias")


# llama.cpp's block names -> Hugging Face's, by layout. Gemma's post_attention_layernorm
# normalises the attention output; Llama's is the pre-MLP norm.
HF_BLOCK = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
HF_BLOCK_GEMMA = {
    **HF_BLOCK, "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}


def hf_name(s: dict, gguf_name: str) -> str:
    stem, _, kind = gguf_name.rpartition(".")
    table = HF_BLOCK_GEMMA if s["arch"] == "gemma2" else HF_BLOCK
    return f"{table[stem]}.{kind}"


def hf_value(s: dict, name: str, a: np.ndarray) -> np.ndarray:
    """A norm as Hugging Face stores it: Gemma's w of 1 + w."""
    return a - np.float32(1.0) if s["arch"] == "gemma2" and name.endswith("norm.weight") else a


def read_tokenizer(path: Path, vocab: int) -> list[tuple[str, object, object]]:
    """The `tokenizer.ggml.*` fields of a real GGUF as (key, value, gguf value type), the token
    lists padded to `vocab` entries."""
    need_gguf()
    r = gguf.GGUFReader(path)
    out = []
    n_tokens = None
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = f.types[0]
        val = f.contents()
        sub = f.types[1] if main == gguf.GGUFValueType.ARRAY else None
        if key == "tokenizer.ggml.tokens":
            n_tokens = len(val)
            if n_tokens > vocab:
                sys.exit(f"{path}: {n_tokens} tokens do not fit a vocabulary of {vocab}")
            val = list(val) + [f"<|reserved_special_token_{i}|>" for i in range(vocab - n_tokens)]
        out.append((key, val, main, sub))
    if n_tokens is None:
        sys.exit(f"{path}: no tokenizer.ggml.tokens")
    padded = []
    for key, val, main, sub in out:
        if key == "tokenizer.ggml.token_type":
            val = list(val) + [5] * (vocab - n_tokens)  # 5: UNUSED
        elif key == "tokenizer.ggml.scores":
            val = list(val) + [0.0] * (vocab - n_tokens)
        padded.append((key, val, main, sub))
    return padded


def write_gguf(s: dict, qname: str, tok_from: Path, out: Path, seed: int, final_type: str | None = None) -> None:
    qt, ftype = numpy_types()[qname]
    rng = np.random.default_rng(seed)
    t0 = time.time()
    w = gguf.GGUFWriter(str(out), s["arch"])
    w.add_name(f"standin-{s['name']} (random weights, {final_type or qname})")
    w.add_file_type(ftype)
    w.add_context_length(s["context"])
    w.add_embedding_length(s["d_model"])
    w.add_block_count(s["n_layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["n_heads"])
    w.add_head_count_kv(s["n_kv_heads"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_vocab_size(s["vocab"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    if s["arch"] == "gemma2":
        # As convert_hf_to_gguf.py's Gemma2Model (llama.cpp reads every other layer as sliding).
        w.add_attn_logit_softcapping(s["attn_softcap"])
        w.add_final_logit_softcapping(s["final_softcap"])
        w.add_sliding_window(s["sliding_window"])
    for key, val, main, sub in read_tokenizer(tok_from, s["vocab"]):
        w.add_key_value(key, val, main, sub_type=sub)

    w.add_tensor("token_embd.weight", big_matrix(rng, s["vocab"], s["d_model"], qt), raw_dtype=qt)
    if s["rope_scaling"]:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(s))
    layer = layer_arrays(rng, s)
    stored = {k: (v if stays_f32(k) else quantize(v, qt)) for k, v in layer.items()}
    del layer
    for i in range(s["n_layers"]):
        for k, v in stored.items():
            w.add_tensor(f"blk.{i}.{k}", v, raw_dtype=None if stays_f32(k) else qt)
    w.add_tensor("output_norm.weight", norm_weight(rng, s["d_model"]))
    if not s["tied"]:
        w.add_tensor("output.weight", big_matrix(rng, s["vocab"], s["d_model"], qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB, {qname}) in {time.time() - t0:.0f} s", file=sys.stderr)


def write_q4_k_m(s: dict, tok_from: Path, out: Path, seed: int, quantize_bin: str, threads: int) -> None:
    tmp = out.with_name(out.name + ".q8_0.tmp.gguf")
    try:
        write_gguf(s, "Q8_0", tok_from, tmp, seed, final_type="Q4_K_M")
        t0 = time.time()
        cmd = [quantize_bin, "--allow-requantize", str(tmp), str(out), "Q4_K_M", str(threads)]
        env = dict(os.environ)
        lib = Path(quantize_bin).resolve().parent.parent / "lib"
        if lib.is_dir():
            env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}"
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        print(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB, Q4_K_M) in {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        tmp.unlink(missing_ok=True)


def bf16_bytes(a: np.ndarray) -> bytes:
    """f32 -> bf16 with round-to-nearest-even (as torch's .to(torch.bfloat16)), little-endian."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype("<u2")
    return r.tobytes()


def tokenizer_json(tok: list) -> dict:
    """tokenizer.json for a byte-level BPE GGUF vocabulary: the document focus-lens builds from
    `tokenizer.ggml.*` (crates/model/src/model/tokenizer.rs, pre-tokenizer `smollm`/`default`)."""
    kv = {k: v for k, v, _, _ in tok}
    if kv.get("tokenizer.ggml.model") != "gpt2":
        sys.exit("--hf-bf16 writes a tokenizer.json only for a byte-level BPE (gpt2) tokenizer")
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
    pre = kv.get("tokenizer.ggml.pre", "default")
    regexes = {"smollm": [r"\p{N}", gpt2], "gpt2": [gpt2]}.get(pre)
    if regexes is None:
        sys.exit(f"--hf-bf16: tokenizer.ggml.pre {pre!r} has no tokenizer.json pre-tokenizer here (smollm, gpt2)")
    tokens, types = kv["tokenizer.ggml.tokens"], kv.get("tokenizer.ggml.token_type", [1] * len(kv["tokenizer.ggml.tokens"]))
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": types[i] in (2, 3)}
        for i, t in enumerate(tokens) if types[i] in (2, 3, 4)
    ]
    merges = [m.split(" ", 1) if not m.startswith(" ") else [m[:1 + m[1:].index(" ")], m[2 + m[1:].index(" "):]] for m in kv["tokenizer.ggml.merges"]]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes] + [byte_level]},
        "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def hf_config(s: dict) -> dict:
    """config.json: the real model's keys (transformers' LlamaConfig, Qwen2Config, Gemma2Config as
    the published checkpoints have them); token ids left out (the tokenizer is SmolLM2's)."""
    common = {
        "hidden_size": s["d_model"], "intermediate_size": s["ffn"], "num_hidden_layers": s["n_layers"],
        "num_attention_heads": s["n_heads"], "num_key_value_heads": s["n_kv_heads"], "vocab_size": s["vocab"],
        "max_position_embeddings": s["context"], "rms_norm_eps": s["eps"], "rope_theta": s["rope_theta"],
        "tie_word_embeddings": s["tied"], "torch_dtype": "bfloat16", "initializer_range": 0.02,
        "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": None,
    }
    if s["arch"] == "llama":
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", **common, "head_dim": s["head_dim"],
            "rope_scaling": {"rope_type": "llama3", **s["rope_scaling"]}, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False,
        }
    if s["arch"] == "qwen2":
        # Qwen2Config has no head_dim: hidden_size / num_attention_heads (128).
        assert s["d_model"] // s["n_heads"] == s["head_dim"]
        return {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **common, "hidden_act": "silu",
            "rope_scaling": None, "use_sliding_window": False, "sliding_window": s["context"], "max_window_layers": 28,
        }
    if s["arch"] == "gemma2":
        return {
            "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", **common, "head_dim": s["head_dim"],
            "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": s["query_pre_attn_scalar"], "attn_logit_softcapping": s["attn_softcap"],
            "final_logit_softcapping": s["final_softcap"], "sliding_window": s["sliding_window"],
            "attention_bias": False, "cache_implementation": "hybrid", "pad_token_id": None,
        }
    raise ValueError(s["arch"])


RESERVED = "<|reserved_special_token_"


def fit_tokenizer_json(doc: dict, vocab: int, path: Path) -> dict:
    """A byte-level BPE tokenizer.json with as many tokens as `vocab`: unused tokens
    `<|reserved_special_token_N|>` added (as `read_tokenizer` pads a GGUF's) or, where it has
    more, its trailing reserved tokens dropped."""
    v = doc["model"]["vocab"]
    n = len(v)
    if sorted(v.values()) != list(range(n)):
        sys.exit(f"{path}: the vocabulary's ids are not 0..{n - 1}")
    if n < vocab:
        first = min((i for t, i in v.items() if t.startswith(RESERVED)), default=n)
        for i in range(n, vocab):
            v[f"{RESERVED}{i - first}|>"] = i
    elif n > vocab:
        extra = [t for t, i in v.items() if i >= vocab]
        if not all(t.startswith(RESERVED) for t in extra):
            sys.exit(f"{path}: {n} tokens do not fit a vocabulary of {vocab}")
        for t in extra:
            del v[t]
        if any(a["id"] >= vocab for a in doc.get("added_tokens", [])):
            sys.exit(f"{path}: an added token lies beyond a vocabulary of {vocab}")
    return doc


def write_tokenizer(tok_from: Path, out: Path, vocab: int | None) -> None:
    """tokenizer.json of a GGUF's vocabulary (or of a tokenizer.json), padded to `vocab` tokens
    (None: as it is)."""
    if tok_from.suffix == ".json":
        doc = json.loads(tok_from.read_text())
        if vocab is not None:
            doc = fit_tokenizer_json(doc, vocab, tok_from)
    else:
        need_gguf()
        r = gguf.GGUFReader(tok_from)
        n = len(r.fields["tokenizer.ggml.tokens"].contents())
        doc = tokenizer_json(read_tokenizer(tok_from, vocab or n))
    out.write_text(json.dumps(doc, ensure_ascii=False))


def hf_chunks(rng, rows: int, cols: int):
    """The bf16 bytes of a random rows x cols matrix, CHUNK_ROWS rows at a time."""
    for r in range(0, rows, CHUNK_ROWS):
        yield bf16_bytes(normal(rng, (min(CHUNK_ROWS, rows - r), cols)))


def write_hf_bf16(s: dict, tok_from: Path, out: Path, seed: int, shard_bytes: int = 5 * 10**9) -> None:
    rng = np.random.default_rng(seed)
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    d, v = s["d_model"], s["vocab"]
    arrays = layer_arrays(rng, s)
    layer = {hf_name(s, k): (a.shape, bf16_bytes(hf_value(s, k, a))) for k, a in arrays.items()}
    del arrays
    # (name, shape, a function giving the bytes, in pieces): the big matrices are made when written.
    tensors = [("model.embed_tokens.weight", (v, d), lambda: hf_chunks(rng, v, d))]
    for i in range(s["n_layers"]):
        for k, (shape, b) in layer.items():
            tensors.append((f"model.layers.{i}.{k}", shape, (lambda b=b: [b])))
    tensors.append(("model.norm.weight", (d,), lambda: [bf16_bytes(hf_value(s, "output_norm.weight", norm_weight(rng, d)))]))
    if not s["tied"]:
        tensors.append(("lm_head.weight", (v, d), lambda: hf_chunks(rng, v, d)))
    # Shards: consecutive tensors while they fit shard_bytes.
    shards, cur, size = [], [], 0
    for t in tensors:
        n = 2 * int(np.prod(t[1]))
        if cur and size + n > shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += n
    shards.append(cur)
    weight_map, total = {}, 0
    for si, shard in enumerate(shards):
        fname = f"model-{si + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, _ in shard:
            n = 2 * int(np.prod(shape))
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[name] = fname
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(out / fname, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for name, shape, data in shard:
                n = 0
                for b in data():
                    f.write(b)
                    n += len(b)
                assert n == 2 * int(np.prod(shape)), name
        total += off
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    (out / "config.json").write_text(json.dumps(hf_config(s), indent=1))
    write_tokenizer(tok_from, out / "tokenizer.json", v)
    print(f"wrote {out} ({total / 1e9:.2f} GB bf16 in {len(shards)} shards) in {time.time() - t0:.0f} s", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", nargs="?", choices=sorted(SHAPES))
    p.add_argument("--type", choices=[*NUMPY_TYPE_NAMES, "Q4_K_M"], help="GGUF tensor type (with --out)")
    p.add_argument("--out", type=Path, help="the GGUF file to write")
    p.add_argument("--hf-bf16", type=Path, metavar="DIR", help="write a Hugging Face bf16 safetensors directory instead")
    p.add_argument("--tokenizer-from", type=Path, required=True, help="a real GGUF whose tokenizer.ggml.* to copy (byte-level BPE); with --hf-bf16 also a tokenizer.json (--write-tokenizer's, or one an earlier --hf-bf16 run wrote), padded to the shape's vocabulary")
    p.add_argument("--write-tokenizer", type=Path, metavar="FILE", help="write only the tokenizer.json of --tokenizer-from's vocabulary, unpadded (the --tokenizer-from of a later --hf-bf16 run without the gguf package)")
    p.add_argument("--layers", type=int, help="write only this many layers (a quick check of the format; default: the real model's count)")
    p.add_argument("--llama-quantize", default=os.environ.get("LLAMA_QUANTIZE", "llama-quantize"), help="llama.cpp's llama-quantize (for Q4_K_M)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.write_tokenizer:
        write_tokenizer(a.tokenizer_from, a.write_tokenizer, None)
        print(f"wrote {a.write_tokenizer} ({a.write_tokenizer.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
        return
    if a.shape is None:
        p.error("give a SHAPE (or --write-tokenizer FILE)")
    s = SHAPES[a.shape]
    if a.layers is not None:
        if not 1 <= a.layers <= s["n_layers"]:
            p.error(f"--layers: 1..={s['n_layers']} for {a.shape}")
        if a.layers != s["n_layers"]:
            s = dict(s, n_layers=a.layers, name=f"{s['name']}-{a.layers}-layers")
    if a.hf_bf16:
        write_hf_bf16(s, a.tokenizer_from, a.hf_bf16, a.seed)
    elif a.out and a.type:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        if a.type == "Q4_K_M":
            if shutil.which(a.llama_quantize) is None:
                sys.exit(f"Q4_K_M needs llama.cpp's llama-quantize ({a.llama_quantize!r} not found; scripts/build-llama-cpp.sh)")
            write_q4_k_m(s, a.tokenizer_from, a.out, a.seed, a.llama_quantize, a.threads)
        else:
            write_gguf(s, a.type, a.tokenizer_from, a.out, a.seed)
    else:
        p.error("give --out FILE.gguf with --type, or --hf-bf16 DIR")


if __name__ == "__main__":
    main()
