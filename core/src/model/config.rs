//! The shape of a decoder, whatever file it came from. Each family file (llama.rs, qwen2.rs,
//! gpt2.rs) fills one of these from its own metadata.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Gpt2,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gpt2 => "gpt2",
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
}

impl ModelConfig {
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
        Ok(())
    }
}
