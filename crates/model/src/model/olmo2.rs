//! OLMo-2 from a Hugging Face directory (`model_type` olmo2): Llama-style tensors with QK-norm
//! over the whole projected q and k (before the heads are split, as transformers does) and
//! norms after attention and after the MLP instead of before: x + norm(attn(x)), then
//! h + norm(mlp(h)). The router reads the block's input x, which feeds Q/K/V directly.

use super::config::{Arch, ModelConfig, QkNorm};
use super::hf::{self, HfConfig};
use super::llama::Names;
use crate::error::{Error, Result};

pub fn config_from_hf(c: &HfConfig) -> Result<ModelConfig> {
    let act = c.str_or("hidden_act", "silu");
    if act != "silu" {
        return Err(Error::Unsupported(format!("{}: hidden_act {act:?} (supported: silu)", c.path.display())));
    }
    let mut cfg = hf::decoder_config(c, Arch::Olmo2, c.bool_or("attention_bias", false), c.rope_theta(10000.0)?)?;
    cfg.qk_norm = Some(QkNorm::Full);
    cfg.post_norms = true;
    cfg.validate().map_err(|e| Error::bad_file(&c.path, format!("invalid config: {e}")))?;
    Ok(cfg)
}

pub const HF_NAMES: Names = Names {
    embed: "model.embed_tokens.weight",
    final_norm: "model.norm.weight",
    lm_head: "lm_head.weight",
    block: |l, part| {
        let p = match part {
            "q" => "self_attn.q_proj",
            "k" => "self_attn.k_proj",
            "v" => "self_attn.v_proj",
            "q_norm" => "self_attn.q_norm",
            "k_norm" => "self_attn.k_norm",
            "o" => "self_attn.o_proj",
            "post_attn_norm" => "post_attention_layernorm",
            "gate" => "mlp.gate_proj",
            "up" => "mlp.up_proj",
            "down" => "mlp.down_proj",
            "post_mlp_norm" => "post_feedforward_layernorm",
            other => other,
        };
        format!("model.layers.{l}.{p}")
    },
    pre_norms: false,
    norm_offset: 0.0,
};
