//! The shape of a decoder, whatever file it came from. The loader (`load.rs`) fills one of these
//! from a family's table (`family.rs`) and the file's metadata. The parts
//! only some families have (QK-norm, soft-capping, sliding-window layers with their own RoPE
//! base, an embedding scale) are data here, read by the one forward in block.rs / decoder.rs.

use crate::attention::LayerAttention;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Gpt2,
    Gemma3,
    Gemma2,
    Olmo2,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gpt2 => "gpt2",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma2 => "gemma2",
            Arch::Olmo2 => "olmo2",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Positions {
    /// Rotary embeddings. `interleaved`: rotate adjacent pairs (GGUF llama, whose converter
    /// permutes Q/K) rather than the two halves of each head (Hugging Face layout).
    Rope { theta: f64, interleaved: bool },
    /// Learned absolute position embeddings (GPT-2).
    Learned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NormKind {
    Rms,
    Layer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MlpKind {
    /// down(silu(gate(x)) * up(x))
    SwiGlu,
    /// proj(gelu_tanh(fc(x)))
    GeluTanh,
    /// down(gelu_tanh(gate(x)) * up(x)) (Gemma's GeGLU)
    GeGlu,
}

/// Where QK-norm (an RMSNorm of the projected queries and keys, before RoPE) applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QkNorm {
    /// Each head's vector on its own, one weight of head_dim shared by all heads (Gemma 3).
    PerHead,
    /// The whole projection (n_heads * head_dim) before the heads are split (OLMo-2).
    Full,
}

/// Interleaved sliding-window and global layers (Gemma 2 and 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sliding {
    /// W: a sliding layer's query i sees keys j with i - j < W (llama.cpp and transformers).
    pub window: usize,
    /// Per layer: true for a sliding layer, false for a global one.
    pub layers: Vec<bool>,
    /// The RoPE base of the sliding layers (Gemma 3: 10000; global layers use `positions`).
    pub rope_theta: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub name: String,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab: usize,
    /// The longest sequence the model was trained for.
    pub context: usize,
    pub norm: NormKind,
    pub norm_eps: f64,
    pub mlp: MlpKind,
    pub positions: Positions,
    pub qkv_bias: bool,
    pub tied_embeddings: bool,
    /// The token embeddings are multiplied by this (Gemma: sqrt(d_model)).
    #[serde(default)]
    pub embed_scale: Option<f64>,
    #[serde(default)]
    pub qk_norm: Option<QkNorm>,
    /// Each block normalises its attention and MLP outputs before the residual add (Gemma 2
    /// and 3 have these besides the pre-norms; OLMo-2 has only these).
    #[serde(default)]
    pub post_norms: bool,
    /// The score scale when it is not 1/sqrt(head_dim).
    #[serde(default)]
    pub attn_scale: Option<f64>,
    /// Soft-capping of the attention logits and of the final logits (Gemma 2).
    #[serde(default)]
    pub attn_softcap: Option<f64>,
    #[serde(default)]
    pub final_softcap: Option<f64>,
    /// Interleaved sliding-window / global layers; `None`: every layer is global.
    #[serde(default)]
    pub sliding: Option<Sliding>,
}

impl ModelConfig {
    /// Whether layer `l` is a sliding-window layer.
    pub fn is_sliding(&self, l: usize) -> bool {
        self.sliding.as_ref().is_some_and(|s| s.layers.get(l).copied().unwrap_or(false))
    }

    /// Layer `l`'s own attention: its RoPE base, window, soft-cap and scale.
    pub fn layer_attention(&self, l: usize) -> LayerAttention {
        let global_theta = match self.positions {
            Positions::Rope { theta, .. } => Some(theta),
            Positions::Learned => None,
        };
        let (window, rope_theta) = match &self.sliding {
            Some(s) if self.is_sliding(l) => (Some(s.window), s.rope_theta.or(global_theta)),
            _ => (None, global_theta),
        };
        LayerAttention { rope_theta, window, softcap: self.attn_softcap, scale: self.attn_scale }
    }

    /// Sanity limits that keep a corrupt header from driving huge allocations.
    pub fn validate(&self) -> Result<(), String> {
        let checks: [(&str, usize, usize); 7] = [
            ("n_layers", self.n_layers, 1024),
            ("d_model", self.d_model, 65536),
            ("n_heads", self.n_heads, 1024),
            ("n_kv_heads", self.n_kv_heads, 1024),
            ("head_dim", self.head_dim, 1024),
            ("ffn_dim", self.ffn_dim, 1 << 20),
            ("vocab", self.vocab, 1 << 22),
        ];
        for (name, v, max) in checks {
            if v == 0 || v > max {
                return Err(format!("{name} = {v} is outside 1..={max}"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(format!("n_heads {} is not a multiple of n_kv_heads {}", self.n_heads, self.n_kv_heads));
        }
        if self.context == 0 {
            return Err("context length is 0".into());
        }
        if matches!(self.positions, Positions::Rope { .. }) && !self.head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {} must be even for RoPE", self.head_dim));
        }
        // Out-of-range values here give NaN logits, not an error, so they are refused up front.
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0 && self.norm_eps <= 1.0) {
            return Err(format!("the norm epsilon {} must be in (0, 1]", self.norm_eps));
        }
        if let Positions::Rope { theta, .. } = self.positions {
            if !(theta.is_finite() && theta > 1.0 && theta <= 1e12) {
                return Err(format!("the RoPE base (theta) {theta} must be in (1, 1e12]"));
            }
        }
        let positive = |name: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0 && x <= 1e6) => Err(format!("{name} = {x} must be in (0, 1e6]")),
            _ => Ok(()),
        };
        positive("embed_scale", self.embed_scale)?;
        positive("attn_scale", self.attn_scale)?;
        positive("attn_softcap", self.attn_softcap)?;
        positive("final_softcap", self.final_softcap)?;
        if let Some(s) = &self.sliding {
            if s.window == 0 || s.layers.len() != self.n_layers {
                return Err(format!("sliding window {} over {} layer flags for {} layers", s.window, s.layers.len(), self.n_layers));
            }
            if let Some(theta) = s.rope_theta {
                if !(theta.is_finite() && theta > 1.0 && theta <= 1e12) {
                    return Err(format!("the sliding layers' RoPE base {theta} must be in (1, 1e12]"));
                }
            }
        }
        Ok(())
    }
}
