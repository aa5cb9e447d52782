//! GPT-2: LayerNorm, learned absolute positions, GELU (tanh) MLP, multi-head attention, tied
//! embeddings. Hugging Face stores its projections as Conv1D, i.e. (in, out): we transpose them
//! to the (out, in) layout of `Linear`, and split the fused c_attn into Q, K and V.

use super::config::{Arch, MlpKind, ModelConfig, NormKind, Positions};
use super::block::{Block, Linear, Mlp, Norm};
use super::decoder::Decoder;
use super::hf::HfConfig;
use super::weights::WeightSource;
use crate::error::{Error, Result};
use candle_core::Device;

pub fn config_from_hf(c: &HfConfig) -> Result<ModelConfig> {
    let act = c.str_or("activation_function", "gelu_new");
    if !matches!(act.as_str(), "gelu_new" | "gelu_pytorch_tanh") {
        return Err(Error::Unsupported(format!("GPT-2 activation {act:?} (supported: gelu_new)")));
    }
    // Variants of the attention scaling the decoder does not implement.
    if c.bool_or("scale_attn_by_inverse_layer_idx", false) || !c.bool_or("scale_attn_weights", true) {
        return Err(Error::Unsupported(format!(
            "{}: GPT-2 attention scaling (scale_attn_by_inverse_layer_idx, or scale_attn_weights = false)",
            c.path.display()
        )));
    }
    let d_model = c.usize("n_embd")?;
    let n_heads = c.usize("n_head")?;
    let cfg = ModelConfig {
        arch: Arch::Gpt2,
        name: c.name(),
        n_layers: c.usize("n_layer")?,
        d_model,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: d_model / n_heads.max(1),
        ffn_dim: c.opt_usize("n_inner")?.unwrap_or(4 * d_model),
        vocab: c.usize("vocab_size")?,
        context: c.usize("n_positions")?,
        norm: NormKind::Layer,
        norm_eps: c.f64_or("layer_norm_epsilon", 1e-5)?,
        mlp: MlpKind::GeluTanh,
        positions: Positions::Learned,
        qkv_bias: true,
        tied_embeddings: true,
        embed_scale: None, qk_norm: None, post_norms: false, attn_scale: None, attn_softcap: None, final_softcap: None, sliding: None,
    };
    if d_model % n_heads.max(1) != 0 {
        return Err(Error::bad_file(&c.path, format!("n_embd {d_model} is not a multiple of n_head {n_heads}")));
    }
    cfg.validate().map_err(|e| Error::bad_file(&c.path, format!("invalid config: {e}")))?;
    Ok(cfg)
}

pub fn load_weights(cfg: ModelConfig, src: &WeightSource, dev: &Device) -> Result<Decoder> {
    // save_pretrained of GPT2LMHeadModel prefixes names with "transformer."; GPT2Model does not.
    let p = if src.has("transformer.wte.weight") { "transformer." } else { "" };
    let d = cfg.d_model;
    let get = |name: &str, shape: &[usize]| src.tensor(&format!("{p}{name}"), shape, dev);
    let ln = |name: &str| -> Result<Norm> {
        Ok(Norm { kind: NormKind::Layer, weight: get(&format!("{name}.weight"), &[d])?, bias: Some(get(&format!("{name}.bias"), &[d])?), eps: cfg.norm_eps })
    };
    // Conv1D weight (in, out) -> Linear (out, in).
    let conv = |name: &str, inp: usize, out: usize| -> Result<Linear> {
        Ok(Linear { w: get(&format!("{name}.weight"), &[inp, out])?.t()?.contiguous()?, b: Some(get(&format!("{name}.bias"), &[out])?), q: None })
    };
    let mut blocks = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        let h = format!("h.{l}");
        let qkv = conv(&format!("{h}.attn.c_attn"), d, 3 * d)?;
        let part = |i: usize| -> Result<Linear> {
            Ok(Linear { w: qkv.w.narrow(0, i * d, d)?.contiguous()?, b: Some(qkv.b.as_ref().unwrap().narrow(0, i * d, d)?.contiguous()?), q: None })
        };
        blocks.push(Block {
            attn_norm: Some(ln(&format!("{h}.ln_1"))?),
            q: part(0)?,
            k: part(1)?,
            v: part(2)?,
            q_norm: None,
            k_norm: None,
            o: conv(&format!("{h}.attn.c_proj"), d, d)?,
            post_attn_norm: None,
            mlp_norm: Some(ln(&format!("{h}.ln_2"))?),
            mlp: Mlp { kind: MlpKind::GeluTanh, up_or_fc: conv(&format!("{h}.mlp.c_fc"), d, cfg.ffn_dim)?, gate: None, down: conv(&format!("{h}.mlp.c_proj"), cfg.ffn_dim, d)? },
            post_mlp_norm: None,
            attn: cfg.layer_attention(l),
        });
    }
    let embed = get("wte.weight", &[cfg.vocab, d])?;
    Ok(Decoder {
        pos_embed: Some(get("wpe.weight", &[cfg.context, d])?),
        final_norm: ln("ln_f")?,
        lm_head: embed.clone(),
        lm_head_q: None,
        embed,
        blocks,
        device: dev.clone(),
        config: cfg,
        passes: Default::default(),
    })
}
