//! Llama-style decoders (Llama, Mistral, SmolLM2; Qwen2 adds Q/K/V biases): RMSNorm, RoPE, GQA,
//! SwiGLU. From GGUF (arch `llama` or `qwen2`) or from a Hugging Face directory. `load_weights`
//! also builds the families whose blocks add optional parts to this layout (gemma3.rs,
//! gemma2.rs, olmo2.rs): their `Names` say which parts their checkpoints hold.

use super::config::{Arch, MlpKind, ModelConfig, NormKind, Positions, QkNorm};
use super::block::{Block, Linear, Mlp, Norm};
use super::decoder::Decoder;
use super::hf::{self, HfConfig};
use super::weights::WeightSource;
use crate::error::{Error, Result};
use crate::model::gguf::GgufFile;
use candle_core::Device;
use std::sync::Arc;

/// From a GGUF file of arch `llama` (Llama, SmolLM2) or `qwen2` (Llama-style blocks with Q/K/V
/// biases): both store their tensors under the same names.
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig> {
    let arch_name = g.str("general.architecture")?;
    // The GGUF converter permutes llama's Q/K rows so that ggml's rope rotates adjacent pairs;
    // qwen2 keeps the Hugging Face layout (llama.cpp's NEOX rope: the two halves rotate).
    let (arch, qkv_bias, interleaved) = match arch_name {
        "llama" => (Arch::Llama, false, true),
        "qwen2" => (Arch::Qwen2, true, false),
        other => return Err(Error::Unsupported(format!("GGUF architecture {other:?} (supported: llama, qwen2, gemma3)"))),
    };
    let key = |k: &str| format!("{arch_name}.{k}");
    let n = |k: &str| -> Result<usize> { Ok(g.u64(&key(k))? as usize) };
    let d_model = n("embedding_length")?;
    let n_heads = n("attention.head_count")?;
    let n_kv_heads = g.get(&key("attention.head_count_kv")).and_then(|v| v.as_u64()).map_or(n_heads, |v| v as usize);
    let head_dim = match g.get(&key("rope.dimension_count")).and_then(|v| v.as_u64()) {
        Some(d) => d as usize,
        None => d_model / n_heads.max(1),
    };
    let vocab = g.info("token_embd.weight")?.shape.first().copied().unwrap_or(0);
    let cfg = ModelConfig {
        arch,
        name: g.get("general.name").and_then(|v| v.as_str()).unwrap_or(arch_name).to_string(),
        n_layers: n("block_count")?,
        d_model,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: n("feed_forward_length")?,
        vocab,
        context: n("context_length")?,
        norm: NormKind::Rms,
        norm_eps: g.f64(&key("attention.layer_norm_rms_epsilon"))?,
        mlp: MlpKind::SwiGlu,
        positions: Positions::Rope { theta: if g.get(&key("rope.freq_base")).is_some() { g.f64(&key("rope.freq_base"))? } else { 10000.0 }, interleaved },
        qkv_bias,
        tied_embeddings: !g.tensors.contains_key("output.weight"),
        embed_scale: None, qk_norm: None, post_norms: false, attn_scale: None, attn_softcap: None, final_softcap: None, sliding: None,
    };
    cfg.validate().map_err(|e| Error::bad_file(&g.path, format!("invalid model header: {e}")))?;
    Ok(cfg)
}

/// Tensor names of a Llama-style checkpoint, GGUF or Hugging Face, and which optional block
/// parts it holds (the config says whether QK-norm and post-norms exist).
pub struct Names {
    pub embed: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
    /// Block part -> tensor name prefix. Parts: attn_norm, q, k, v, o, mlp_norm, gate, up,
    /// down, and the optional q_norm, k_norm, post_attn_norm, post_mlp_norm.
    pub block: fn(usize, &str) -> String,
    /// Whether blocks have pre-attention and pre-MLP norms (OLMo-2 has only post-norms).
    pub pre_norms: bool,
    /// Added to every stored norm weight: Gemma's RMSNorm scales by (1 + w) and Hugging Face
    /// stores w (1.0); llama.cpp's converter stores 1 + w already (0.0).
    pub norm_offset: f64,
}

pub const GGUF_NAMES: Names = Names {
    pre_norms: true,
    norm_offset: 0.0,
    embed: "token_embd.weight",
    final_norm: "output_norm.weight",
    lm_head: "output.weight",
    block: |l, part| {
        let p = match part {
            "attn_norm" => "attn_norm",
            "q" => "attn_q",
            "k" => "attn_k",
            "v" => "attn_v",
            "o" => "attn_output",
            "mlp_norm" => "ffn_norm",
            "gate" => "ffn_gate",
            "up" => "ffn_up",
            "down" => "ffn_down",
            other => other,
        };
        format!("blk.{l}.{p}")
    },
};

pub const HF_NAMES: Names = Names {
    pre_norms: true,
    norm_offset: 0.0,
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
            "mlp_norm" => "post_attention_layernorm",
            "gate" => "mlp.gate_proj",
            "up" => "mlp.up_proj",
            "down" => "mlp.down_proj",
            other => other,
        };
        format!("model.layers.{l}.{p}")
    },
};

/// Builds a Llama-style decoder (also Qwen2, which adds Q/K/V biases, and the families with
/// QK-norm, post-norms, GeGLU and sliding-window layers).
pub fn load_weights(cfg: ModelConfig, src: &WeightSource, names: &Names, dev: &Device) -> Result<Decoder> {
    let (d, hd) = (cfg.d_model, cfg.head_dim);
    let get = |name: &str, shape: &[usize]| src.tensor(name, shape, dev);
    // The GGUF blocks too, for one-row products on the CPU (`qmatvec`); call after `get`,
    // which checks the shape and the values.
    let quantized = |name: &str, rows: usize, cols: usize| if dev.is_cpu() { src.quantized(name, rows, cols).map(Arc::new) } else { None };
    let norm_of = |name: &str, n: usize| -> Result<Norm> {
        let w = get(name, &[n])?;
        let weight = if names.norm_offset != 0.0 { (w + names.norm_offset)? } else { w };
        Ok(Norm { kind: NormKind::Rms, weight, bias: None, eps: cfg.norm_eps })
    };
    let norm = |name: &str| norm_of(name, d);
    let block_norm = |l: usize, part: &str, n: usize| norm_of(&format!("{}.weight", (names.block)(l, part)), n);
    // `bias`: the bias is required. Other projections use one when the checkpoint has it
    // (Llama's `attention_bias` also puts one on o_proj, `mlp_bias` on the MLP).
    let lin = |l: usize, part: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
        let base = (names.block)(l, part);
        let bias_name = format!("{base}.bias");
        let b = if bias || src.has(&bias_name) { Some(get(&bias_name, &[out])?) } else { None };
        let name = format!("{base}.weight");
        Ok(Linear { w: get(&name, &[out, inp])?, b, q: quantized(&name, out, inp) })
    };
    let (nq, nkv) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
    // QK-norm weights: one head's width (shared by the heads) or the whole projection's.
    let qk = |l: usize, part: &str, full: usize| -> Result<Option<Norm>> {
        Ok(match cfg.qk_norm {
            None => None,
            Some(QkNorm::PerHead) => Some(block_norm(l, part, hd)?),
            Some(QkNorm::Full) => Some(block_norm(l, part, full)?),
        })
    };
    let opt = |present: bool, l: usize, part: &str| -> Result<Option<Norm>> { if present { Ok(Some(block_norm(l, part, d)?)) } else { Ok(None) } };
    let mut blocks = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        blocks.push(Block {
            attn_norm: opt(names.pre_norms, l, "attn_norm")?,
            q: lin(l, "q", nq, d, cfg.qkv_bias)?,
            k: lin(l, "k", nkv, d, cfg.qkv_bias)?,
            v: lin(l, "v", nkv, d, cfg.qkv_bias)?,
            q_norm: qk(l, "q_norm", nq)?,
            k_norm: qk(l, "k_norm", nkv)?,
            o: lin(l, "o", d, nq, false)?,
            post_attn_norm: opt(cfg.post_norms, l, "post_attn_norm")?,
            mlp_norm: opt(names.pre_norms, l, "mlp_norm")?,
            mlp: Mlp {
                kind: cfg.mlp,
                gate: Some(lin(l, "gate", cfg.ffn_dim, d, false)?),
                up_or_fc: lin(l, "up", cfg.ffn_dim, d, false)?,
                down: lin(l, "down", d, cfg.ffn_dim, false)?,
            },
            post_mlp_norm: opt(cfg.post_norms, l, "post_mlp_norm")?,
            attn: cfg.layer_attention(l),
        });
    }
    // As llama.cpp: a checkpoint with blocks beyond its layer count is refused, not truncated.
    let extra = (names.block)(cfg.n_layers, "");
    if let Some(name) = src.names().into_iter().find(|n| n.starts_with(&extra)) {
        return Err(Error::Unsupported(format!("the model says it has {} layers but holds tensor {name}: the layer count disagrees with the weights", cfg.n_layers)));
    }
    let embed = get(names.embed, &[cfg.vocab, d])?;
    let lm_head = if cfg.tied_embeddings { embed.clone() } else { get(names.lm_head, &[cfg.vocab, d])? };
    let lm_head_q = quantized(if cfg.tied_embeddings { names.embed } else { names.lm_head }, cfg.vocab, d);
    Ok(Decoder { final_norm: norm(names.final_norm)?, embed, pos_embed: None, blocks, lm_head, lm_head_q, device: dev.clone(), config: cfg, passes: Default::default() })
}

pub fn config_from_hf(c: &HfConfig) -> Result<ModelConfig> {
    hf::llama_style_config(c, Arch::Llama, c.bool_or("attention_bias", false))
}
