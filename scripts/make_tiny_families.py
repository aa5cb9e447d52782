"""Tiny random-weight checkpoints of the families issue 49 adds, made by Hugging Face transformers,
and GGUFs made from every tiny checkpoint by llama.cpp's own converter (convert_hf_to_gguf.py).

The same recipe as experiments/gpu/make_tiny_hf.py: a fixed seed, norm weights perturbed (so a
loader that skips a norm, or adds 1 where it should not, is caught), the Q and K projections
scaled by 8 (sharp attention, so RoPE and the window matter), save_pretrained
(config.json + model.safetensors, float32) and reference.safetensors holding input_ids (int64,
1 x 40, ids < 512) and the logits transformers computed for them (1 x 40 x 512). vocab 512,
hidden 64, 4 heads / 2 KV heads, head dim 16, max positions 128, 2 to 4 layers.

  llama3   Llama with rope_type llama3 (factor 8, low 1, high 4, original 32: the 40-token input
           runs past the original context, and the 8 frequencies fall in all three bands)
  yarn     Llama with rope_type yarn (factor 4, original 32; the attention factor as
           transformers derives it)
  linear   Llama with rope_type linear (factor 2)
  mistral  Mistral with sliding_window 8 (every layer runs it; the input crosses it)
  qwen3    Qwen3 (per-head QK-norm, no Q/K/V bias)
  gemma3   Gemma 3 text (gemma3_text), 6 layers (ffn 96): five sliding layers (window 8) with
           their own RoPE base, a global one with linear scaling (factor 8), QK-norm;
           query_pre_attn_scalar = head_dim, as in every Gemma 3 but the 27B (llama.cpp takes the
           scale from the layer count, not from the file: src/models/gemma3.cpp)
  gemma3_mm  the multimodal Gemma 3 (model_type gemma3): 2 text layers nested in text_config,
           under language_model., beside a tiny vision tower
  phi3     Phi-3 (fused qkv_proj and gate_up_proj)

GGUFs (--gguf): each checkpoint of OUT_DIR/hf_tiny (the new ones and the existing gpt2, llama,
qwen2, gemma2, olmo2 given with --existing) is copied with a tiny byte-level BPE tokenizer (512
tokens trained here with the `tokenizers` package: the converter needs one) and converted with
`--outtype f32`. Two documented patches of the converter, both about the vocabulary only: the
pre-tokenizer lookup (a hash of known tokenizers; ours is new) answers "gpt-2", and every family
writes its vocabulary the GPT-2 way (`_set_vocab_gpt2`; Gemma's and Phi-3's read a SentencePiece
model the tiny checkpoints do not have). Weights and metadata are the converter's own.

Usage: python3 scripts/make_tiny_families.py OUT_DIR [--gguf LLAMA_CPP_DIR --existing FIXTURES_HF_TINY]
(torch, transformers, safetensors, tokenizers; the converter also needs numpy, sentencepiece)."""
import argparse, json, os, shutil, subprocess, sys, tempfile

import torch
import transformers
from safetensors.torch import save_file

common = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128)


def make(out, name, cfg, cls):
    torch.manual_seed(0)
    model = cls(cfg).eval().to(torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.2 * torch.randn_like(p))
            # Sharper attention than the init's (scores x 64), so that what changes the scores
            # (RoPE scaling, the window, QK-norm) moves the logits well past the tests' 1e-4.
            if n.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(8.0)
            if n.endswith("qkv_proj.weight"):
                p[: (cfg.num_attention_heads + cfg.num_key_value_heads) * 16].mul_(8.0)
            # With QK-norm the projections' scale is normalised away: the norms' weights carry
            # it (Gemma stores w of 1 + w).
            if n.endswith(("q_norm.weight", "k_norm.weight")):
                if cfg.model_type.startswith("gemma3"):
                    p.add_(3.0)
                else:
                    p.mul_(4.0)
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (1, 40), generator=g)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
    save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous()}, os.path.join(d, "reference.safetensors"))
    print(name, "logits", tuple(logits.shape), "max |logit|", float(logits.abs().max()), "transformers", transformers.__version__)


def checkpoints(out):
    llama = dict(common, rms_norm_eps=1e-5, tie_word_embeddings=True)
    scalings = {
        "llama3": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32},
        "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    }
    for name, rp in scalings.items():
        c = transformers.LlamaConfig(**llama, rope_parameters=rp)
        c._attn_implementation = "eager"
        make(out, name, c, transformers.LlamaForCausalLM)
    c = transformers.MistralConfig(**llama, sliding_window=8, rope_theta=10000.0)
    c._attn_implementation = "eager"
    make(out, "mistral", c, transformers.MistralForCausalLM)
    c = transformers.Qwen3Config(**dict(common, num_hidden_layers=3), rms_norm_eps=1e-6, tie_word_embeddings=False,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    c._attn_implementation = "eager"
    make(out, "qwen3", c, transformers.Qwen3ForCausalLM)
    # Six layers, the default pattern (five slide, the last is global): llama.cpp's converter
    # does not write transformers' layer_types, and llama.cpp reads the default period 6.
    c = transformers.Gemma3TextConfig(**dict(common, num_hidden_layers=6, intermediate_size=96), sliding_window=8, query_pre_attn_scalar=16,
                                      rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                                      hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
    c._attn_implementation = "eager"
    make(out, "gemma3", c, transformers.Gemma3ForCausalLM)
    # The multimodal Gemma 3 (model_type gemma3): the decoder's config nested in text_config,
    # its weights under language_model., a tiny SigLIP tower beside them that text-only input
    # does not use (the image token id lies outside the vocabulary, as Gemma 3's does).
    tc = dict(common, num_hidden_layers=2, intermediate_size=96, sliding_window=8, query_pre_attn_scalar=16,
              layer_types=["sliding_attention", "full_attention"], hidden_activation="gelu_pytorch_tanh")
    vc = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)
    c = transformers.Gemma3Config(text_config=tc, vision_config=vc, mm_tokens_per_image=4, image_token_index=600,
                                  boi_token_index=509, eoi_token_index=510, tie_word_embeddings=True)
    c._attn_implementation = "eager"
    c.text_config._attn_implementation = "eager"
    make(out, "gemma3_mm", c, transformers.Gemma3ForConditionalGeneration)
    p3 = {k: v for k, v in common.items() if k != "head_dim"}
    c = transformers.Phi3Config(**p3, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    c._attn_implementation = "eager"
    make(out, "phi3", c, transformers.Phi3ForCausalLM)


def tokenizer_json():
    """A 512-token byte-level BPE, trained on a fixed text (the converter needs a vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # Seeded random words: enough pairs that the merges fill all 512 ids (Gemma 3's converter
    # cuts the embedding to the tokenizer's size).
    import random
    rng = random.Random(0)
    text = [" ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(200)) for _ in range(100)]
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text, trainer)
    assert tok.get_vocab_size() == 512, tok.get_vocab_size()
    return tok.to_str()


CONVERT = r'''
import sys
sys.path.insert(0, sys.argv[1])
import convert_hf_to_gguf as C
from conversion.base import TextModel
real = C.get_model_class
def patched(name, mmproj=False):
    cls = real(name, mmproj)
    # The vocabulary only: a tiny tokenizer's pre-tokenizer hash is not in the converter's list,
    # and Gemma's / Phi-3's set_vocab wants a SentencePiece model.
    cls.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    cls.set_vocab = TextModel._set_vocab_gpt2
    return cls
C.get_model_class = patched
sys.argv = ["convert_hf_to_gguf.py", "--outtype", "f32", "--outfile", sys.argv[3], sys.argv[2]]
C.main()
'''


def ggufs(out, llama_cpp, existing):
    tok = tokenizer_json()
    os.makedirs(os.path.join(out, "gguf_tiny"), exist_ok=True)
    sources = {n: os.path.join(out, "hf_tiny", n) for n in ("llama3", "yarn", "linear", "qwen3", "gemma3", "phi3")}
    for n in ("gpt2", "llama", "qwen2", "gemma2", "olmo2"):
        sources[n] = os.path.join(existing, n)
    for name, src in sources.items():
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(src, "model.safetensors"), tmp)
            with open(os.path.join(src, "config.json")) as f:
                config = json.load(f)
            # The converter reads GPT-2's context from n_ctx, which the Hub's GPT-2 configs carry
            # (equal to n_positions) and transformers 5's save_pretrained no longer writes.
            if config.get("model_type") == "gpt2":
                config.setdefault("n_ctx", config["n_positions"])
            # Special-token ids name tokens of the tiny tokenizer: GPT-2's default 50256 is not one.
            for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
                if isinstance(config.get(k), int) and config[k] >= config["vocab_size"]:
                    config[k] = None
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(config, f)
            with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
                f.write(tok)
            with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
                json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
            dst = os.path.join(out, "gguf_tiny", name + ".gguf")
            subprocess.run([sys.executable, "-c", CONVERT, llama_cpp, tmp, dst], check=True)
            print(name, "->", dst, os.path.getsize(dst), "bytes")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gguf", help="a llama.cpp source tree (convert_hf_to_gguf.py, conversion/, gguf-py/)")
    ap.add_argument("--existing", help="tests/fixtures/hf_tiny, for the GGUFs of gpt2, llama, qwen2, gemma2, olmo2")
    ap.add_argument("--skip-hf", action="store_true", help="only the GGUFs, from the checkpoints already in OUT/hf_tiny")
    a = ap.parse_args()
    if not a.skip_hf:
        checkpoints(os.path.join(a.out, "hf_tiny"))
    if a.gguf:
        ggufs(a.out, a.gguf, a.existing)
