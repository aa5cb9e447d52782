//! The block's training entry points: what `Block::attention_inputs` and `Block::finish`
//! compute, for the fused training step, with the frozen weights in the form of `TrainBlock`
//! (concatenated projections in the compute dtype, no weight gradients), the residual stream in
//! f32 and the fused norms, SwiGLU and GeGLU of `ops.rs`. tests/differentiable.rs checks that it
//! computes the same function as the inference block.

use super::ops::{geglu, rms_norm, swiglu};
use super::weights::TrainBlock;
use crate::error::Result;
use crate::model::block::{q_mult, Block, Norm};
use crate::model::config::{MlpKind, ModelConfig, NormKind};
use candle_core::{DType, Tensor};

/// A norm of the f32 residual stream in the fused step, output in `out`: RMSNorm as one op each
/// way (`ops::rms_norm`), layer norm composed.
fn norm_in(n: &Norm, x: &Tensor, out: DType) -> Result<Tensor> {
    match n.kind {
        NormKind::Rms => rms_norm(x, &n.weight, n.eps, out),
        NormKind::Layer => Ok(n.forward(&x.to_dtype(DType::F32)?, true)?.to_dtype(out)?),
    }
}

/// A norm that may be absent (identity), in f32.
fn maybe(norm: &Option<Norm>, x: &Tensor) -> Result<Tensor> {
    match norm {
        Some(n) => norm_in(n, x, DType::F32),
        None => Ok(x.clone()),
    }
}

/// The fused step's attention inputs of `blk` from the f32 residual stream `x` ((B*T,
/// d_model)): the normalised state `h` in f32 (it feeds the router) and the concatenated Q/K/V
/// projection ((B*T, (H + 2 Hkv) * D), before RoPE) in `tb`'s dtype. With QK-norm or a score
/// scale, the Q and K columns are normalised (and Q scaled) here.
pub fn attention_inputs(blk: &Block, x: &Tensor, tb: &TrainBlock, cfg: &ModelConfig) -> Result<(Tensor, Tensor)> {
    let h = maybe(&blk.attn_norm, x)?;
    let dt = tb.qkv.dtype();
    let mut qkv = tb.qkv.forward(&h, dt)?;
    let mult = q_mult(&blk.attn, cfg.head_dim);
    if blk.q_norm.is_some() || blk.k_norm.is_some() || mult.is_some() {
        let (nq, nk) = (cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim);
        let part = |off: usize, n: usize, norm: &Option<Norm>| -> Result<Tensor> {
            let y = qkv.narrow(1, off, n)?;
            match norm {
                Some(nm) => nm.qk_with(&y, cfg.head_dim, |z| norm_in(nm, z, dt)),
                None => Ok(y),
            }
        };
        let mut q = part(0, nq, &blk.q_norm)?;
        if let Some(m) = mult {
            q = (q * m)?;
        }
        let k = part(nq, nk, &blk.k_norm)?;
        qkv = Tensor::cat(&[&q, &k, &qkv.narrow(1, nq + nk, nk)?], 1)?;
    }
    Ok((h, qkv))
}

/// The rest of `blk` in the fused step, given the attention output `o` ((B*T, H*D), as
/// `attention::SoftAttention` gives it): what `Block::finish` computes, with the residual
/// stream in f32 and the projections in `tb`'s dtype.
pub fn finish(blk: &Block, x: &Tensor, o: &Tensor, tb: &TrainBlock) -> Result<Tensor> {
    let x = (x + maybe(&blk.post_attn_norm, &tb.o.forward(o, DType::F32)?)?)?;
    let h = maybe(&blk.mlp_norm, &x)?;
    let a = match blk.mlp.kind {
        MlpKind::SwiGlu => swiglu(&tb.mlp_in.forward(&h, tb.mlp_in.dtype())?)?,
        MlpKind::GeluTanh => tb.mlp_in.forward(&h, DType::F32)?.gelu()?,
        MlpKind::GeGlu => geglu(&tb.mlp_in.forward(&h, tb.mlp_in.dtype())?)?,
    };
    Ok((&x + maybe(&blk.post_mlp_norm, &tb.down.forward(&a, DType::F32)?)?)?)
}

/// The final norm of the fused step, in f32.
pub fn final_norm(n: &Norm, x: &Tensor) -> Result<Tensor> {
    norm_in(n, x, DType::F32)
}
