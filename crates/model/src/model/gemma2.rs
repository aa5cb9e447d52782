//! Gemma 2 from a Hugging Face directory (`model_type` gemma2): Llama-style tensors plus
//! post-attention and post-MLP norms, GeGLU, embeddings scaled by sqrt(d_model), attention
//! scaled by query_pre_attn_scalar^-0.5, tanh soft-capping of the attention logits and of the
//! final logits, and alternating sliding-window (even layers) / global layers. Gemma's RMSNorm
//! scales by 1 + w and the checkpoint stores w: the loader adds 1.

use super::config::{Arch, MlpKind, ModelConfig, Sliding};
use super::hf::{self, HfConfig};
use super::llama::Names;
use crate::error::{Error, Result};

pub fn config_from_hf(c: &HfConfig) -> Result<ModelConfig> {
    let act = c.str_or("hidden_activation", &c.str_or("hidden_act", "gelu_pytorch_tanh"));
    if !matches!(act.as_str(), "gelu_pytorch_tanh" | "gelu_new") {
        return Err(Error::Unsupported(format!("{}: hidden_activation {act:?} (supported: gelu_pytorch_tanh)", c.path.display())));
    }
    let mut cfg = hf::decoder_config(c, Arch::Gemma2, c.bool_or("attention_bias", false), c.rope_theta(10000.0)?)?;
    cfg.mlp = MlpKind::GeGlu;
    // Gemma ties its embeddings unless the config says otherwise.
    cfg.tied_embeddings = c.bool_or("tie_word_embeddings", true);
    cfg.embed_scale = Some((cfg.d_model as f64).sqrt());
    cfg.post_norms = true;
    let qpas = c.f64_or("query_pre_attn_scalar", cfg.head_dim as f64)?;
    cfg.attn_scale = Some(1.0 / qpas.sqrt());
    cfg.attn_softcap = hf::softcap(c, "attn_logit_softcapping")?;
    cfg.final_softcap = hf::softcap(c, "final_logit_softcapping")?;
    if let Some(w) = c.opt_usize("sliding_window")? {
        if w == 0 {
            return Err(Error::bad_file(&c.path, "sliding_window = 0: a window must hold at least 1 token"));
        }
        // transformers: layer i slides when i is even (layer_types, when given, says it).
        let layers = hf::sliding_layers(c, cfg.n_layers, |l| l % 2 == 0)?;
        cfg.sliding = Some(Sliding { window: w, layers, rope_theta: None });
    }
    cfg.validate().map_err(|e| Error::bad_file(&c.path, format!("invalid config: {e}")))?;
    Ok(cfg)
}

pub const HF_NAMES: Names = Names {
    embed: "model.embed_tokens.weight",
    final_norm: "model.norm.weight",
    lm_head: "lm_head.weight",
    block: |l, part| {
        let p = match part {
            "attn_norm" => "input_layernorm",
            "q" => "self_attn.q_proj",
            "k" => "self_attn.k_proj",
            "v" => "self_attn.v_proj",
            "o" => "self_attn.o_proj",
            // Gemma's post_attention_layernorm normalises the attention output (Llama's is the
            // pre-MLP norm).
            "post_attn_norm" => "post_attention_layernorm",
            "mlp_norm" => "pre_feedforward_layernorm",
            "gate" => "mlp.gate_proj",
            "up" => "mlp.up_proj",
            "down" => "mlp.down_proj",
            "post_mlp_norm" => "post_feedforward_layernorm",
            other => other,
        };
        format!("model.layers.{l}.{p}")
    },
    pre_norms: true,
    norm_offset: 1.0,
};
