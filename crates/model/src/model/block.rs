//! One transformer block, written once: attention and MLP with a residual around each. The
//! block owns its weights and the tensor plumbing (norms, Q/K/V projections, QK-norm, RoPE,
//! output projection, MLP); which pairs attend is decided by the caller (`Decoder::run`), which
//! hands `Block::finish` the attention output. The parts only some families have are optional
//! data, not other forwards: the pre-norms (absent in OLMo-2), QK-norm (Gemma 3 per head,
//! OLMo-2 over the whole projection), the post-norms of the attention and MLP outputs (Gemma
//! 2/3, OLMo-2), GeGLU, and each layer's own attention (`LayerAttention`: RoPE base, sliding
//! window, soft-cap). Every pass (inference, generation, the composed training ops, inspection)
//! goes through `attention_inputs` and `finish`, except the fused training step, which goes
//! through its own entry points over the same block (`train::block`).

use super::config::{MlpKind, ModelConfig, NormKind, Positions, RopeScaling};
use super::linear::Linear;
use crate::attention::LayerAttention;
use crate::error::Result;
use candle_core::{Device, Tensor};

#[derive(Debug, Clone)]
pub struct Norm {
    pub kind: NormKind,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub eps: f64,
}

impl Norm {
    /// `differentiable`: the composed version with a backward pass (the fused one has none).
    pub fn forward(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        let eps = self.eps as f32;
        Ok(match self.kind {
            NormKind::Rms if differentiable => candle_nn::ops::rms_norm_slow(x, &self.weight, eps)?,
            NormKind::Rms => super::fused::rms_norm(x, &self.weight, eps)?,
            NormKind::Layer => {
                let zeros;
                let bias = match &self.bias {
                    Some(b) => b,
                    None => {
                        zeros = self.weight.zeros_like()?;
                        &zeros
                    }
                };
                if differentiable {
                    candle_nn::ops::layer_norm_slow(x, &self.weight, bias, eps)?
                } else {
                    candle_nn::ops::layer_norm(x, &self.weight, bias, eps)?
                }
            }
        })
    }

    /// QK-norm of a projection `y` ((rows, n * head_dim)) by `norm`: per head when the weight
    /// has head_dim entries (Gemma 3), else over the whole row (OLMo-2). `norm` is this norm's
    /// `forward`, or the fused training step's op (`train::block`).
    pub fn qk_with(&self, y: &Tensor, head_dim: usize, norm: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let (rows, cols) = y.dims2()?;
        let per_head = self.weight.dim(0)? == head_dim && cols != head_dim;
        let z = if per_head { y.reshape((rows * cols / head_dim, head_dim))? } else { y.clone() };
        Ok(norm(&z)?.reshape((rows, cols))?)
    }
}

/// (x + y, its norm): one fused kernel for an RMS norm outside training (`fused`).
fn add_then_norm(x: &Tensor, y: &Tensor, norm: &Option<Norm>, differentiable: bool) -> Result<(Tensor, Tensor)> {
    match norm {
        Some(n) if n.kind == NormKind::Rms && !differentiable => super::fused::add_rms_norm(x, y, &n.weight, n.eps as f32),
        _ => {
            let r = (x + y)?;
            let h = maybe(norm, &r, differentiable)?;
            Ok((r, h))
        }
    }
}

/// A norm that may be absent (identity).
fn maybe(norm: &Option<Norm>, x: &Tensor, differentiable: bool) -> Result<Tensor> {
    match norm {
        Some(n) => n.forward(x, differentiable),
        None => Ok(x.clone()),
    }
}

#[derive(Debug, Clone)]
pub struct Mlp {
    pub kind: MlpKind,
    /// SwiGLU / GeGLU: up; GELU: fc.
    pub up_or_fc: Linear,
    pub gate: Option<Linear>,
    pub down: Linear,
}

impl Mlp {
    /// `differentiable`: the composed ops (with a backward pass), else fused ones.
    pub fn forward(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        self.down.forward(&self.hidden(x, differentiable)?)
    }

    /// The row before the down projection.
    fn hidden(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        Ok(match self.kind {
            MlpKind::SwiGlu => {
                let gate = self.gate.as_ref().expect("SwiGLU MLP has a gate");
                // A step's row on CUDA: gate, up and silu(gate) * up as one kernel.
                if let (false, None, None, Some(g), Some(u)) = (differentiable, &gate.b, &self.up_or_fc.b, gate.w.tensor(), self.up_or_fc.w.tensor()) {
                    if let Some(h) = super::fused::swiglu_row(x, g, u, None)? {
                        return Ok(h);
                    }
                }
                let [gate, up] = Linear::forward_many([gate, &self.up_or_fc], x)?;
                if differentiable {
                    (candle_nn::ops::silu(&gate)? * up)?
                } else {
                    super::fused::silu_mul(&gate, &up)?
                }
            }
            MlpKind::GeluTanh => self.up_or_fc.forward(x)?.gelu()?,
            MlpKind::GeGlu => {
                let gate = self.gate.as_ref().expect("GeGLU MLP has a gate").forward(x)?;
                (gate.gelu()? * self.up_or_fc.forward(x)?)?
            }
        })
    }

    /// `Some(hidden(rms_norm(x)))` as one kernel for a step's row on CUDA (SwiGLU without
    /// biases, an RMS norm): the norm runs in the gate and up product; `None` elsewhere.
    fn hidden_of_normed(&self, x: &Tensor, norm: &Norm) -> Result<Option<Tensor>> {
        match (&self.kind, &self.gate, norm.kind) {
            (MlpKind::SwiGlu, Some(gate), NormKind::Rms) if gate.b.is_none() && self.up_or_fc.b.is_none() => match (gate.w.tensor(), self.up_or_fc.w.tensor()) {
                (Some(g), Some(u)) => super::fused::swiglu_row(x, g, u, Some((&norm.weight, norm.eps as f32))),
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Block {
    /// Pre-attention norm; its output feeds Q/K/V and the router (OLMo-2 has none: x itself).
    pub attn_norm: Option<Norm>,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    /// QK-norm of the projected queries and keys, before RoPE.
    pub q_norm: Option<Norm>,
    pub k_norm: Option<Norm>,
    pub o: Linear,
    /// Norm of the attention output before the residual add.
    pub post_attn_norm: Option<Norm>,
    pub mlp_norm: Option<Norm>,
    pub mlp: Mlp,
    /// Norm of the MLP output before the residual add.
    pub post_mlp_norm: Option<Norm>,
    /// This layer's own attention (RoPE base, sliding window, soft-cap, scale).
    pub attn: LayerAttention,
}

/// What every layer of one pass shares: the batch shape, the RoPE tables, and whether only ops
/// with a backward pass may be used (training).
pub struct Pass {
    /// Sequences in the batch (1 for inference) and their common length.
    pub b: usize,
    pub t: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    /// cos/sin tables per RoPE key (base and scaling: Gemma's sliding layers have their own
    /// base, its global layers may be scaled) and the rotation layout, for RoPE models.
    ropes: Vec<RopeTables>,
    interleaved: bool,
    /// Use the composed ops (they have a backward pass; the fused ones have none).
    pub differentiable: bool,
}

/// The cos/sin tables (T, head_dim / 2) of the layers whose `LayerAttention::rope_key` is `key`.
pub type RopeTables = ((f64, bool), Tensor, Tensor);

impl Pass {
    pub fn new(cfg: &ModelConfig, b: usize, t: usize, differentiable: bool, dev: &Device) -> Result<Pass> {
        Self::at(cfg, b, t, 0, differentiable, dev)
    }

    /// A pass over positions `start..start + t` (generation's step runs one token at `start`).
    pub fn at(cfg: &ModelConfig, b: usize, t: usize, start: usize, differentiable: bool, dev: &Device) -> Result<Pass> {
        let interleaved = matches!(cfg.positions, Positions::Rope { interleaved: true, .. });
        let mut ropes: Vec<RopeTables> = Vec::new();
        for l in 0..cfg.n_layers {
            let la = cfg.layer_attention(l);
            if let Some(key) = la.rope_key() {
                if !ropes.iter().any(|r| r.0 == key) {
                    let (cos, sin) = rope_tables_scaled(start, t, cfg.head_dim, key.0, cfg.rope_scaling_of(&la), dev)?;
                    ropes.push((key, cos, sin));
                }
            }
        }
        Ok(Pass { b, t, n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads, head_dim: cfg.head_dim, ropes, interleaved, differentiable })
    }

    /// A generation step's pass on a GPU: one token, whose RoPE rows per key (`ropes`, each
    /// (1, head_dim / 2)) the device step took by index (`model::step`).
    pub fn at_step(cfg: &ModelConfig, ropes: Vec<RopeTables>) -> Pass {
        let interleaved = matches!(cfg.positions, Positions::Rope { interleaved: true, .. });
        Pass { b: 1, t: 1, n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads, head_dim: cfg.head_dim, ropes, interleaved, differentiable: false }
    }

    /// The RoPE tables (T, head_dim / 2) of a layer and whether adjacent pairs rotate
    /// (interleaved); `None` without RoPE.
    pub fn rope(&self, attn: &LayerAttention) -> Option<(Tensor, Tensor, bool)> {
        let key = attn.rope_key()?;
        self.ropes.iter().find(|r| r.0 == key).map(|(_, c, s)| (c.clone(), s.clone(), self.interleaved))
    }
}

/// A block's attention inputs: the normalised state `h` that feeds Q/K/V and the router
/// ((B*T, d_model)), and the heads q (B, H, T, D), k and v (B, Hkv, T, D), after RoPE. On a
/// GPU step `h` may be the residual row with its RMS norm in `h_norm`, which the Q/K/V product
/// and the routing kernel apply themselves (`Block::prenorm_in_kernels`); `normed` gives the
/// normalised state either way.
pub struct AttentionInputs {
    pub h: Tensor,
    pub h_norm: Option<Norm>,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
}

impl AttentionInputs {
    /// The normalised state (the router's input).
    pub fn normed(&self) -> Result<Tensor> {
        maybe(&self.h_norm, &self.h, false)
    }
}

impl Block {
    /// The attention inputs of this block from the residual stream `x` ((B*T, d_model)).
    pub fn attention_inputs(&self, x: &Tensor, pass: &Pass) -> Result<AttentionInputs> {
        self.attention_heads(self.attention_norm(x, pass)?, pass)
    }

    /// The normalised state `h` that feeds Q/K/V and the router.
    pub fn attention_norm(&self, x: &Tensor, pass: &Pass) -> Result<Tensor> {
        maybe(&self.attn_norm, x, pass.differentiable)
    }

    /// The attention inputs from the normalised state `h` (`attention_norm`).
    pub fn attention_heads(&self, h: Tensor, pass: &Pass) -> Result<AttentionInputs> {
        self.attention_heads_with(h, None, pass)
    }

    /// Whether a step's residual row `x` may skip the pre-norm's own kernel: an RMS pre-norm
    /// and one f32 row on CUDA, whose Q/K/V product (and routing kernel) apply the norm.
    pub fn prenorm_in_kernels(&self, x: &Tensor) -> bool {
        self.attn_norm.as_ref().is_some_and(|n| n.kind == NormKind::Rms) && super::fused::is_cuda_row(x)
    }

    /// `attention_heads` of `h`, or, with `h_norm`, of `h`'s norm by it (the residual row and
    /// the pre-norm: `prenorm_in_kernels`), which the one-row product applies itself.
    pub fn attention_heads_with(&self, h: Tensor, h_norm: Option<Norm>, pass: &Pass) -> Result<AttentionInputs> {
        let (b, t, hd) = (pass.b, pass.t, pass.head_dim);
        let (nq, nkv) = (pass.n_heads * hd, pass.n_kv_heads * hd);
        // A step's row on CUDA: Q, K and V as one product (one kernel), else one each.
        let qkv = match (self.q.w.tensor(), self.k.w.tensor(), self.v.w.tensor()) {
            (Some(q), Some(k), Some(v)) => Some([(q, self.q.b.as_ref()), (k, self.k.b.as_ref()), (v, self.v.b.as_ref())]),
            _ => None,
        };
        // The kernel applies an RMS norm only; any other pre-norm runs first, below.
        let row_norm = h_norm.as_ref().filter(|n| n.kind == NormKind::Rms).map(|n| (&n.weight, n.eps as f32));
        let fused = match qkv {
            Some(qkv) if !pass.differentiable && (h_norm.is_none() || row_norm.is_some()) => super::fused::rows_times(&h, &qkv, None, row_norm)?,
            _ => None,
        };
        let (yq, yk, yv) = match fused {
            Some(y) => (y.narrow(1, 0, nq)?, y.narrow(1, nq, nkv)?, y.narrow(1, nq + nkv, nkv)?),
            None => {
                let hn = maybe(&h_norm, &h, pass.differentiable)?;
                let [q, k, v] = Linear::forward_many([&self.q, &self.k, &self.v], &hn)?;
                (q, k, v)
            }
        };
        let heads = |mut y: Tensor, norm: &Option<Norm>, n: usize| -> Result<Tensor> {
            if let Some(nm) = norm {
                y = nm.qk_with(&y, hd, |z| nm.forward(z, pass.differentiable))?;
            }
            Ok(y.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous()?)
        };
        let mut q = heads(yq, &self.q_norm, pass.n_heads)?;
        let mut k = heads(yk, &self.k_norm, pass.n_kv_heads)?;
        let v = heads(yv, &None, pass.n_kv_heads)?;
        if let Some((cos, sin, interleaved)) = pass.rope(&self.attn) {
            use candle_nn::rotary_emb as re;
            let rot = |x: &Tensor| match (pass.differentiable, interleaved) {
                (false, false) => re::rope(x, &cos, &sin),
                (false, true) => re::rope_i(x, &cos, &sin),
                (true, false) => re::rope_slow(x, &cos, &sin),
                (true, true) => re::rope_i_slow(x, &cos, &sin),
            };
            q = rot(&q)?;
            k = rot(&k)?;
        }
        if let Some(m) = q_mult(&self.attn, hd) {
            q = (q * m)?;
        }
        Ok(AttentionInputs { h, h_norm, q, k, v })
    }

    /// The rest of the block, given the attention output `o` (B, H, T, D): the output
    /// projection and residual, then the MLP and its residual. Returns the new residual stream.
    pub fn finish(&self, x: &Tensor, o: &Tensor, pass: &Pass) -> Result<Tensor> {
        let o = o.transpose(1, 2)?.reshape((pass.b * pass.t, pass.n_heads * pass.head_dim))?;
        let dif = pass.differentiable;
        // A step's row on CUDA without post-norms: the residual add in the output product and
        // the MLP's norm inside the gate and up product (no norm kernel between them).
        if let (false, None, None, Some(n)) = (dif, &self.post_attn_norm, &self.post_mlp_norm, &self.mlp_norm) {
            if super::fused::is_cuda_row(x) && super::fused::is_cuda_row(&o) {
                let x = self.o.forward_plus(&o, x)?;
                if let Some(h) = self.mlp.hidden_of_normed(&x, n)? {
                    return self.mlp.down.forward_plus(&h, &x);
                }
                return self.mlp.down.forward_plus(&self.mlp.hidden(&n.forward(&x, dif)?, dif)?, &x);
            }
        }
        let y = maybe(&self.post_attn_norm, &self.o.forward(&o)?, dif)?;
        let (x, h) = add_then_norm(x, &y, &self.mlp_norm, dif)?;
        if self.post_mlp_norm.is_none() {
            // The residual add in the down product (one kernel for a step's row on CUDA).
            return self.mlp.down.forward_plus(&self.mlp.hidden(&h, dif)?, &x);
        }
        let m = self.mlp.forward(&h, dif)?;
        Ok((&x + maybe(&self.post_mlp_norm, &m, dif)?)?)
    }
}

/// The factor on q that turns the kernels' 1/sqrt(head_dim) into the layer's own score scale
/// (`None` when it is 1).
pub fn q_mult(attn: &LayerAttention, head_dim: usize) -> Option<f64> {
    attn.scale.map(|s| s * (head_dim as f64).sqrt()).filter(|&m| (m - 1.0).abs() > 1e-12)
}

/// cos/sin tables (T, head_dim/2) for rotary embeddings.
pub fn rope_tables(t: usize, head_dim: usize, theta: f64, dev: &Device) -> Result<(Tensor, Tensor)> {
    rope_tables_from(0, t, head_dim, theta, dev)
}

/// The rows `start..start + t` of the RoPE tables.
pub fn rope_tables_from(start: usize, t: usize, head_dim: usize, theta: f64, dev: &Device) -> Result<(Tensor, Tensor)> {
    rope_tables_scaled(start, t, head_dim, theta, None, dev)
}

/// The rows `start..start + t` of the RoPE tables of base `theta`, the frequencies stretched by
/// `scaling` (YaRN also scales cos and sin, as transformers and llama.cpp do).
pub fn rope_tables_scaled(start: usize, t: usize, head_dim: usize, theta: f64, scaling: Option<&RopeScaling>, dev: &Device) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let (inv, mag) = RopeScaling::inv_freq(scaling, theta, head_dim);
    let mut ang = Vec::with_capacity(t * half);
    for p in start..start + t {
        for f in &inv {
            ang.push(p as f32 * f);
        }
    }
    let ang = Tensor::from_vec(ang, (t, half), dev)?;
    if mag == 1.0 {
        return Ok((ang.cos()?, ang.sin()?));
    }
    Ok(((ang.cos()? * mag as f64)?, (ang.sin()? * mag as f64)?))
}
