//! One transformer block, written once: pre-norm attention and MLP with a residual around each.
//! The block owns its weights and the tensor plumbing (norms, Q/K/V projections, RoPE, output
//! projection, MLP); which pairs attend is decided by the caller (`Decoder::run`), which hands
//! `Block::finish` the attention output. Every pass (inference, training, inspection) goes
//! through `attention_inputs` and `finish`, except the fused training step, which goes through
//! `train_inputs` and `train_finish`: the same block with the frozen weights in the form of
//! `train_ops::TrainBlock` (concatenated projections in the compute dtype, no weight
//! gradients) and fused norms and SwiGLU; tests/differentiable.rs checks that it computes the
//! same function.

use super::config::{MlpKind, ModelConfig, NormKind, Positions};
use super::train_ops::{rms_norm, swiglu, TrainBlock};
use crate::error::Result;
use candle_core::{DType, Device, Tensor};

/// y = x W^T + b, with W stored as (out, in) like PyTorch's nn.Linear.
#[derive(Debug, Clone)]
pub struct Linear {
    pub w: Tensor,
    pub b: Option<Tensor>,
}

impl Linear {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // A generation step's single row: a plain matrix-vector product (`matvec`).
        if let Some(y) = super::matvec::row_times(x, &self.w, self.b.as_ref())? {
            return Ok(y);
        }
        let y = x.matmul(&self.w.t()?)?;
        Ok(match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

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
            NormKind::Rms => candle_nn::ops::rms_norm(x, &self.weight, eps)?,
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

    /// The fused training step's norm of the f32 residual stream, in f32: RMSNorm as one op
    /// each way (`train_ops::rms_norm`), layer norm composed.
    pub fn forward_train(&self, x: &Tensor) -> Result<Tensor> {
        match self.kind {
            NormKind::Rms => rms_norm(x, &self.weight, self.eps, DType::F32),
            NormKind::Layer => self.forward(x, true),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Mlp {
    pub kind: MlpKind,
    /// SwiGLU: gate; GELU: fc.
    pub up_or_fc: Linear,
    pub gate: Option<Linear>,
    pub down: Linear,
}

impl Mlp {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = match self.kind {
            MlpKind::SwiGlu => {
                let gate = self.gate.as_ref().expect("SwiGLU MLP has a gate").forward(x)?;
                (candle_nn::ops::silu(&gate)? * self.up_or_fc.forward(x)?)?
            }
            MlpKind::GeluTanh => self.up_or_fc.forward(x)?.gelu()?,
        };
        self.down.forward(&h)
    }
}

#[derive(Debug, Clone)]
pub struct Block {
    pub attn_norm: Norm,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub mlp_norm: Norm,
    pub mlp: Mlp,
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
    /// cos/sin tables and the rotation layout, for RoPE models.
    rope: Option<(Tensor, Tensor, bool)>,
    /// Use the composed ops (they have a backward pass; the fused ones have none).
    pub differentiable: bool,
}

impl Pass {
    pub fn new(cfg: &ModelConfig, b: usize, t: usize, differentiable: bool, dev: &Device) -> Result<Pass> {
        Self::at(cfg, b, t, 0, differentiable, dev)
    }

    /// A pass over positions `start..start + t` (generation's step runs one token at `start`).
    pub fn at(cfg: &ModelConfig, b: usize, t: usize, start: usize, differentiable: bool, dev: &Device) -> Result<Pass> {
        let rope = match cfg.positions {
            Positions::Rope { theta, interleaved } => {
                let (cos, sin) = rope_tables_from(start, t, cfg.head_dim, theta, dev)?;
                Some((cos, sin, interleaved))
            }
            Positions::Learned => None,
        };
        Ok(Pass { b, t, n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads, head_dim: cfg.head_dim, rope, differentiable })
    }

    /// The RoPE tables (T, head_dim / 2) and whether adjacent pairs rotate (interleaved).
    pub fn rope(&self) -> Option<&(Tensor, Tensor, bool)> {
        self.rope.as_ref()
    }
}

/// A block's attention inputs: the normalised state `h` that feeds Q/K/V and the router
/// ((B*T, d_model)), and the heads q (B, H, T, D), k and v (B, Hkv, T, D), after RoPE.
pub struct AttentionInputs {
    pub h: Tensor,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
}

impl Block {
    /// The attention inputs of this block from the residual stream `x` ((B*T, d_model)).
    pub fn attention_inputs(&self, x: &Tensor, pass: &Pass) -> Result<AttentionInputs> {
        let (b, t, hd) = (pass.b, pass.t, pass.head_dim);
        let h = self.attn_norm.forward(x, pass.differentiable)?;
        let heads = |lin: &Linear, n: usize| -> Result<Tensor> {
            Ok(lin.forward(&h)?.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous()?)
        };
        let mut q = heads(&self.q, pass.n_heads)?;
        let mut k = heads(&self.k, pass.n_kv_heads)?;
        let v = heads(&self.v, pass.n_kv_heads)?;
        if let Some((cos, sin, interleaved)) = &pass.rope {
            use candle_nn::rotary_emb as re;
            let rot = |x: &Tensor| match (pass.differentiable, interleaved) {
                (false, false) => re::rope(x, cos, sin),
                (false, true) => re::rope_i(x, cos, sin),
                (true, false) => re::rope_slow(x, cos, sin),
                (true, true) => re::rope_i_slow(x, cos, sin),
            };
            q = rot(&q)?;
            k = rot(&k)?;
        }
        Ok(AttentionInputs { h, q, k, v })
    }

    /// The rest of the block, given the attention output `o` (B, H, T, D): the output
    /// projection and residual, then the MLP and its residual. Returns the new residual stream.
    pub fn finish(&self, x: &Tensor, o: &Tensor, pass: &Pass) -> Result<Tensor> {
        let o = o.transpose(1, 2)?.reshape((pass.b * pass.t, pass.n_heads * pass.head_dim))?;
        let x = (x + self.o.forward(&o)?)?;
        Ok((&x + self.mlp.forward(&self.mlp_norm.forward(&x, pass.differentiable)?)?)?)
    }

    /// The fused training step's attention inputs from the f32 residual stream `x` ((B*T,
    /// d_model)): the normalised state `h` in f32 (it feeds the router) and the concatenated
    /// Q/K/V projection ((B*T, (H + 2 Hkv) * D), before RoPE) in `tb`'s dtype.
    pub fn train_inputs(&self, x: &Tensor, tb: &TrainBlock) -> Result<(Tensor, Tensor)> {
        let h = self.attn_norm.forward_train(x)?;
        let qkv = tb.qkv.forward(&h, tb.qkv.w.dtype())?;
        Ok((h, qkv))
    }

    /// The rest of the block in the fused training step, given the attention output `o`
    /// ((B*T, H*D), as `attention::fused` gives it): what `finish` computes, with the residual
    /// stream in f32 and the projections in `tb`'s dtype.
    pub fn train_finish(&self, x: &Tensor, o: &Tensor, tb: &TrainBlock) -> Result<Tensor> {
        let x = (x + tb.o.forward(o, DType::F32)?)?;
        let h = self.mlp_norm.forward_train(&x)?;
        let a = match self.mlp.kind {
            MlpKind::SwiGlu => swiglu(&tb.mlp_in.forward(&h, tb.mlp_in.w.dtype())?)?,
            MlpKind::GeluTanh => tb.mlp_in.forward(&h, DType::F32)?.gelu()?,
        };
        Ok((&x + tb.down.forward(&a, DType::F32)?)?)
    }
}

/// cos/sin tables (T, head_dim/2) for rotary embeddings.
pub fn rope_tables(t: usize, head_dim: usize, theta: f64, dev: &Device) -> Result<(Tensor, Tensor)> {
    rope_tables_from(0, t, head_dim, theta, dev)
}

/// The rows `start..start + t` of the RoPE tables.
pub fn rope_tables_from(start: usize, t: usize, head_dim: usize, theta: f64, dev: &Device) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half).map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32).collect();
    let mut ang = Vec::with_capacity(t * half);
    for p in start..start + t {
        for f in &inv {
            ang.push(p as f32 * f);
        }
    }
    let ang = Tensor::from_vec(ang, (t, half), dev)?;
    Ok((ang.cos()?, ang.sin()?))
}
