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
    Qwen3,
    Phi3,
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
            Arch::Qwen3 => "qwen3",
            Arch::Phi3 => "phi3",
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

/// How a RoPE's frequencies are stretched for a context longer than the one the model was
/// first trained on. It applies to the global layers (Gemma 3's sliding layers keep their
/// own base unscaled, as transformers and llama.cpp do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (position interpolation; transformers `linear`).
    Linear { factor: f64 },
    /// Llama 3.1's: wavelengths above original / low_freq_factor divided by `factor`, those
    /// below original / high_freq_factor kept, a smooth blend between (transformers `llama3`).
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_context: usize },
    /// YaRN: a ramp between interpolated and kept frequencies over the dimensions whose
    /// rotations over the original context lie between beta_slow and beta_fast, and cos/sin
    /// scaled by `attention_factor`.
    Yarn { factor: f64, original_context: usize, beta_fast: f64, beta_slow: f64, attention_factor: f64 },
    /// Per-frequency divisors, as a file stores them (the GGUF `rope_freqs.weight` that
    /// llama.cpp's converter writes for `llama3`).
    Divisors { divisors: Vec<f32> },
}

impl RopeScaling {
    /// The inverse frequencies (head_dim / 2) of base `theta`, and the factor on cos and sin.
    pub fn inv_freq(scaling: Option<&RopeScaling>, theta: f64, head_dim: usize) -> (Vec<f32>, f32) {
        let half = head_dim / 2;
        let plain: Vec<f64> = (0..half).map(|i| 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)).collect();
        let (inv, mag): (Vec<f64>, f64) = match scaling {
            None => (plain, 1.0),
            Some(RopeScaling::Linear { factor }) => (plain.iter().map(|f| f / factor).collect(), 1.0),
            Some(RopeScaling::Llama3 { factor, low_freq_factor: lo, high_freq_factor: hi, original_context }) => {
                let orig = *original_context as f64;
                let (low_wavelen, high_wavelen) = (orig / lo, orig / hi);
                let inv = plain
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (orig / wavelen - lo) / (hi - lo);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect();
                (inv, 1.0)
            }
            Some(RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor }) => {
                // transformers' _compute_yarn_parameters (truncate: true), llama.cpp's
                // ggml_rope_yarn_corr_dims and rope_yarn_ramp.
                let d = head_dim as f64;
                let corr = |rot: f64| d * (*original_context as f64 / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
                let low = corr(*beta_fast).floor().max(0.0);
                let high = corr(*beta_slow).ceil().min(d - 1.0);
                let span = if high == low { 0.001 } else { high - low };
                let inv = plain
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let keep = 1.0 - ((i as f64 - low) / span).clamp(0.0, 1.0);
                        f / factor * (1.0 - keep) + f * keep
                    })
                    .collect();
                (inv, *attention_factor)
            }
            Some(RopeScaling::Divisors { divisors: d }) => (plain.iter().zip(d).map(|(f, &x)| f / x as f64).collect(), 1.0),
        };
        (inv.into_iter().map(|f| f as f32).collect(), mag as f32)
    }

    /// Values that would give NaN or absurd tables are refused.
    fn validate(&self, head_dim: usize) -> Result<(), String> {
        let pos = |name: &str, x: f64| if x.is_finite() && x > 0.0 && x <= 1e6 { Ok(()) } else { Err(format!("RoPE scaling {name} = {x} must be in (0, 1e6]")) };
        match self {
            RopeScaling::Linear { factor } => pos("factor", *factor),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
                pos("factor", *factor)?;
                pos("low_freq_factor", *low_freq_factor)?;
                pos("high_freq_factor", *high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(format!("RoPE scaling high_freq_factor {high_freq_factor} must exceed low_freq_factor {low_freq_factor}"));
                }
                pos("original_max_position_embeddings", *original_context as f64)
            }
            RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor } => {
                pos("factor", *factor)?;
                pos("original_max_position_embeddings", *original_context as f64)?;
                pos("beta_fast", *beta_fast)?;
                pos("beta_slow", *beta_slow)?;
                pos("attention_factor", *attention_factor)
            }
            RopeScaling::Divisors { divisors: d } => {
                if d.len() != head_dim / 2 {
                    return Err(format!("{} RoPE frequency divisors for head_dim {head_dim} (expected {})", d.len(), head_dim / 2));
                }
                d.iter().try_for_each(|&x| pos("divisor", x as f64))
            }
        }
    }
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
    /// The global layers' RoPE frequencies stretched (Llama 3.1, YaRN, linear); `None`: plain.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
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
        // The scaling stretches every layer's RoPE but a sliding layer's own base (Gemma 3's
        // local layers, as transformers and llama.cpp do); a window alone (Mistral) keeps it.
        let own_base = self.is_sliding(l) && self.sliding.as_ref().is_some_and(|s| s.rope_theta.is_some());
        let rope_scaled = !own_base && rope_theta.is_some() && self.rope_scaling.is_some();
        LayerAttention { rope_theta, rope_scaled, window, softcap: self.attn_softcap, scale: self.attn_scale }
    }

    /// The scaling of a layer's RoPE (`None`: plain frequencies).
    pub fn rope_scaling_of(&self, attn: &LayerAttention) -> Option<&RopeScaling> {
        self.rope_scaling.as_ref().filter(|_| attn.rope_scaled)
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
        if let Some(r) = &self.rope_scaling {
            r.validate(self.head_dim)?;
        }
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
