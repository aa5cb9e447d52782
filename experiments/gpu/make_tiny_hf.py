"""Tiny random-weight Gemma 2 and OLMo-2 checkpoints made by Hugging Face transformers (issue 18),
the same recipe as the gpt2/llama/qwen2 fixtures in tests/fixtures/hf_tiny: a fixed seed,
save_pretrained (config.json + model.safetensors, float32) and reference.safetensors holding
input_ids (int64, 1 x 40, ids < 512) and the logits transformers computed for them (1 x 40 x 512).
vocab 512, hidden 64, 4 layers (two sliding/global pairs for Gemma 2), 4 heads / 2 KV heads, head
dim 16, max positions 128. Gemma 2's sliding window is 8 so that the 40-token input crosses it,
and both soft-caps are small enough to bite on random weights.
Usage (on the GPU machine, which has torch + transformers): python3 make_tiny_hf.py OUT_DIR"""
import os, sys, json
import torch
import transformers
from safetensors.torch import save_file

out = sys.argv[1]
common = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128)

def make(name, cfg, cls):
    torch.manual_seed(0)
    model = cls(cfg).eval().to(torch.float32)
    # Random init leaves norm weights at their identity values; perturb every parameter a little
    # so that a loader that skips a norm (or adds 1 where it should not) is caught.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.2 * torch.randn_like(p))
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (1, 40), generator=g)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
    save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous()}, os.path.join(d, "reference.safetensors"))
    print(name, "logits", tuple(logits.shape), "max |logit|", float(logits.abs().max()), "transformers", transformers.__version__)

g2 = transformers.Gemma2Config(**common, sliding_window=8, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                               query_pre_attn_scalar=16, hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0,
                               tie_word_embeddings=True)
g2._attn_implementation = "eager"
make("gemma2", g2, transformers.Gemma2ForCausalLM)
o2 = transformers.Olmo2Config(**{k: v for k, v in common.items() if k != "head_dim"}, rope_theta=500000.0,
                              tie_word_embeddings=False, rms_norm_eps=1e-6)
make("olmo2", o2, transformers.Olmo2ForCausalLM)
for n in ("gemma2", "olmo2"):
    print(n, json.load(open(os.path.join(out, n, "config.json"))).get("layer_types"))
