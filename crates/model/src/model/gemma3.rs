//! Gemma 3 from GGUF (arch `gemma3`, llama.cpp's layout): embeddings scaled by sqrt(d_model),
//! four RMSNorms per block (pre/post attention, pre/post MLP), per-head QK-norm, GeGLU,
//! interleaved sliding-window and global layers with their own RoPE bases, GQA, tied
//! embeddings. llama.cpp's converter stores Gemma's norm weights as 1 + w (Gemma's RMSNorm
//! scales by 1 + w), so they are plain RMSNorm weights here. Rotation is NEOX (the two halves).

use super::config::{Arch, MlpKind, ModelConfig, NormKind, Positions, QkNorm, Sliding};
use super::llama::Names;
use crate::error::{Error, Result};
use crate::model::gguf::{GgufFile, Value};

/// llama.cpp's defaults when the file does not say (llama_model_gemma3::load_arch_hparams):
/// every 6th layer is global (the others slide), and the sliding layers' RoPE base is 10000.
const DEFAULT_PATTERN: usize = 6;
const DEFAULT_SWA_ROPE_BASE: f64 = 10000.0;

pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig> {
    let key = |k: &str| format!("gemma3.{k}");
    let n = |k: &str| -> Result<usize> { Ok(g.u64(&key(k))? as usize) };
    let opt_f = |k: &str| -> Result<Option<f64>> { if g.get(&key(k)).is_some() { Ok(Some(g.f64(&key(k))?)) } else { Ok(None) } };
    let d_model = n("embedding_length")?;
    let n_heads = n("attention.head_count")?;
    let n_layers = n("block_count")?;
    let n_kv_heads = g.get(&key("attention.head_count_kv")).and_then(Value::as_u64).map_or(n_heads, |v| v as usize);
    let head_dim = match g.get(&key("attention.key_length")).and_then(Value::as_u64) {
        Some(k) => k as usize,
        None => d_model / n_heads.max(1),
    };
    if let Some(v) = g.get(&key("attention.value_length")).and_then(Value::as_u64) {
        if v as usize != head_dim {
            return Err(Error::Unsupported(format!("{}: key length {head_dim} != value length {v}", g.path.display())));
        }
    }
    // A window of 0 (or none) means every layer is global, as in llama.cpp.
    let sliding = match g.get(&key("attention.sliding_window")).and_then(Value::as_u64) {
        Some(w) if w > 0 => {
            let layers = match g.get(&key("attention.sliding_window_pattern")) {
                // Per layer: true = sliding.
                Some(Value::Array(a)) => a.iter().map(|v| v.as_bool().unwrap_or(false)).collect::<Vec<bool>>(),
                other => {
                    let p = other.and_then(Value::as_u64).map_or(DEFAULT_PATTERN, |p| p as usize);
                    // llama.cpp's set_swa_pattern: layer l slides unless it is the last of each p.
                    (0..n_layers).map(|l| p == 0 || l % p < p - 1).collect()
                }
            };
            Some(Sliding { window: w as usize, layers, rope_theta: Some(opt_f("rope.freq_base_swa")?.unwrap_or(DEFAULT_SWA_ROPE_BASE)) })
        }
        _ => None,
    };
    let vocab = g.info("token_embd.weight")?.shape.first().copied().unwrap_or(0);
    let cfg = ModelConfig {
        arch: Arch::Gemma3,
        name: g.get("general.name").and_then(Value::as_str).unwrap_or("gemma3").to_string(),
        n_layers,
        d_model,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: n("feed_forward_length")?,
        vocab,
        context: n("context_length")?,
        norm: NormKind::Rms,
        norm_eps: g.f64(&key("attention.layer_norm_rms_epsilon"))?,
        mlp: MlpKind::GeGlu,
        positions: Positions::Rope { theta: opt_f("rope.freq_base")?.unwrap_or(10000.0), interleaved: false },
        qkv_bias: false,
        tied_embeddings: !g.tensors.contains_key("output.weight"),
        embed_scale: Some((d_model as f64).sqrt()),
        qk_norm: Some(QkNorm::PerHead),
        post_norms: true,
        // As llama.cpp (after gemma_pytorch): 27B (62 layers) scales by 1/sqrt(d_model / heads),
        // the others by 1/sqrt(head_dim), the kernels' default.
        attn_scale: (n_layers == 62).then(|| (n_heads as f64 / d_model as f64).sqrt()),
        attn_softcap: None,
        final_softcap: opt_f("final_logit_softcapping")?.filter(|&c| c > 0.0),
        sliding,
    };
    cfg.validate().map_err(|e| Error::bad_file(&g.path, format!("invalid model header: {e}")))?;
    Ok(cfg)
}

pub const GGUF_NAMES: Names = Names {
    embed: "token_embd.weight",
    final_norm: "output_norm.weight",
    lm_head: "output.weight",
    block: |l, part| {
        let p = match part {
            "attn_norm" => "attn_norm",
            "q" => "attn_q",
            "k" => "attn_k",
            "v" => "attn_v",
            "q_norm" => "attn_q_norm",
            "k_norm" => "attn_k_norm",
            "o" => "attn_output",
            "post_attn_norm" => "post_attention_norm",
            "mlp_norm" => "ffn_norm",
            "gate" => "ffn_gate",
            "up" => "ffn_up",
            "down" => "ffn_down",
            "post_mlp_norm" => "post_ffw_norm",
            other => other,
        };
        format!("blk.{l}.{p}")
    },
    pre_norms: true,
    norm_offset: 0.0,
};
