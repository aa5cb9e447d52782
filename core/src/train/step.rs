//! The training forward: the logits of a batch of sequences through the frozen model with
//! its routers, differentiable with respect to the routers. It runs one of two forms of the
//! same function (`TrainPath`):
//! - the fused step (the default): its own layer loop below, per layer one fused norm, one
//!   Q/K/V matmul, the router, fused Sinkhorn, one fused RoPE + gated attention op
//!   (`attention::SoftAttention`) and the block's fused rest (`block.rs`), with the frozen
//!   weights in bf16 on CUDA (`weights.rs`) and no T x T tensor;
//! - the composed ops: `Decoder::forward_differentiable`, the inference layer loop with
//!   candle's ops (f32, explicit T x T scores and gates), which the straight-through objective
//!   and the shapes the fused kernels do not take use.
//! tests/differentiable.rs checks that both compute what inference computes.

use super::attention::{SoftAttention, CUDA_MAX_GROUPS};
use super::block;
use super::sinkhorn::sinkhorn_fused;
use super::weights::TrainWeights;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::gate::GateFn;
use crate::focus::mask;
use crate::model::block::Pass;
use crate::model::decoder::{Decoder, ForwardOptions};
use candle_core::{Device, Tensor};
use std::sync::atomic::Ordering;

/// Which form of the training step runs (both compute the same function).
#[derive(Clone, Copy)]
pub struct TrainPath<'a> {
    /// The fused step; else the composed ops. The straight-through objective, models whose
    /// attention soft-caps or slides within the sequence, and on CUDA the shapes its kernels
    /// do not take (head dim other than 64, more than 16 groups), always run composed.
    pub fused: bool,
    /// Sinkhorn as one op each way (`sinkhorn::sinkhorn_fused`), in either form.
    pub fused_sinkhorn: bool,
    /// The frozen weights as the fused step reads them (`TrainWeights::new`); built for the
    /// call, in `TrainWeights::default_dtype`, when absent.
    pub weights: Option<&'a TrainWeights>,
}

impl Default for TrainPath<'_> {
    fn default() -> Self {
        TrainPath { fused: true, fused_sinkhorn: true, weights: None }
    }
}

/// The training forward (dense or soft mode) of several sequences of one length as one
/// batched graph: one backward pass per step, and B times fewer (larger) kernel launches on a
/// GPU. Each sequence is routed and balanced on its own, exactly as `Decoder::forward` with
/// `differentiable` set. Returns the logits (B*T, vocab), sequence after sequence (in the
/// fused step's compute dtype: bf16 on CUDA).
pub fn forward(dec: &Decoder, seqs: &[&[u32]], opts: &ForwardOptions, path: TrainPath) -> Result<Tensor> {
    let mut opts = ForwardOptions { differentiable: true, ..*opts };
    if path.fused_sinkhorn {
        opts.balance = sinkhorn_fused;
    }
    let t = seqs.first().map_or(0, |s| s.len());
    if !takes_fused(dec, &opts, t, path) {
        return dec.forward_differentiable(seqs, &opts);
    }
    let owned;
    let tw = match path.weights {
        Some(tw) => tw,
        None => {
            owned = TrainWeights::new(dec, TrainWeights::default_dtype(&dec.device))?;
            &owned
        }
    };
    fused(dec, seqs, &opts, tw)
}

/// Whether the fused step runs. Its attention op knows neither soft-capping nor a sliding
/// window, so a model with soft-capped attention, or a sliding window shorter than the
/// sequence, trains through the composed ops (which apply both).
fn takes_fused(dec: &Decoder, opts: &ForwardOptions, t: usize, path: TrainPath) -> bool {
    let cfg = &dec.config;
    let groups = opts.adapter.map_or(0, |a| a.config.groups);
    let kernels_take_it = match &dec.device {
        Device::Cpu => true,
        _ => cfg.head_dim == 64 && groups <= CUDA_MAX_GROUPS,
    };
    let own_masks = dec.blocks.iter().any(|b| b.attn.softcap.is_some() || b.attn.span(t).is_some());
    path.fused && opts.straight_through.is_none() && kernels_take_it && !own_masks
}

/// The fused step's layer loop.
fn fused(dec: &Decoder, seqs: &[&[u32]], opts: &ForwardOptions, tw: &TrainWeights) -> Result<Tensor> {
    dec.check(seqs, opts)?;
    let cfg = &dec.config;
    let (b, t) = (seqs.len(), seqs[0].len());
    let pass = Pass::new(cfg, b, t, true, &dec.device)?;
    let mut x = dec.embed_at(seqs, 0)?;
    for (l, blk) in dec.blocks.iter().enumerate() {
        if opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(Error::Cancelled);
        }
        let tb = &tw.blocks[l];
        let (h, qkv) = block::attention_inputs(blk, &x, tb, cfg)?;
        // The adapter, where it routes this layer (`RouterLayers`).
        let routed = opts.adapter.filter(|a| a.config.router_layers.routes(cfg.is_sliding(l)));
        let (gate, g, window) = match routed {
            Some(a) if opts.mode == Mode::Soft && !mask::all_local(t, a.config.window) => {
                (GateFn::of(&a.config), Some(a.route_tensor(l, &h, b, opts.sinkhorn_grad, opts.balance)?), a.config.window)
            }
            _ => (GateFn::None, None, 0),
        };
        let attn = SoftAttention { b, t, heads: cfg.n_heads, kv_heads: cfg.n_kv_heads, head_dim: cfg.head_dim, rope: pass.rope(blk.attn.rope_theta), gate, window };
        x = block::finish(blk, &x, &attn.forward(&qkv, g.as_ref())?, tb)?;
    }
    let logits = tw.lm_head.forward(&block::final_norm(&dec.final_norm, &x)?, tw.dtype)?;
    dec.softcap_logits(logits)
}
