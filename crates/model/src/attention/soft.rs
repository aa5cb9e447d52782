//! The soft-gate plans of FOCUS-METHOD section 1, built from candle ops so that gradients flow
//! to the memberships when they come from trainable routers: the paper's multiplicative gate,
//! our additive log gate, and the straight-through plan that trains through the hard mask.

use super::layer_plan::LayerPlan;
use crate::error::Result;
use crate::focus::adapter::{AdapterConfig, Gate};
use crate::focus::mask::{local_mask, topk_mask, TopK};
use candle_core::Tensor;

/// The soft gate of FOCUS-METHOD section 1 from memberships `g` (T x K), as a T x T plan
/// (B x T x K gives B x T x T, for a batch of sequences). Built from candle ops, so gradients
/// flow to `g` when it comes from trainable routers.
pub fn soft_plan(g: &Tensor, cfg: &AdapterConfig) -> Result<LayerPlan> {
    gate_plan(g, cfg, &local_mask(g.dim(g.rank() - 2)?, cfg.window, cfg.sink, g.device())?)
}

/// `soft_plan` with the affinity of query memberships `gq` and key memberships `gk` (T x K
/// each): a_ij = gq_i . gk_j. The same as `soft_plan` when they are equal; an intervention
/// (`analysis::intervene`) edits one side.
pub fn soft_plan_pair(gq: &Tensor, gk: &Tensor, cfg: &AdapterConfig) -> Result<LayerPlan> {
    affinity_plan(gq.matmul(&gk.t()?)?, cfg, &local_mask(gq.dim(gq.rank() - 2)?, cfg.window, cfg.sink, gq.device())?)
}

/// `soft_plan` with the local mask (`local_mask`, T x T) given.
fn gate_plan(g: &Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
    affinity_plan(g.matmul(&g.t()?)?, cfg, local)
}

/// The gate of the memberships' affinities (T x T, or B x T x T), local pairs left alone.
fn affinity_plan(affinity: Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
    let local = local.broadcast_as(affinity.shape())?;
    Ok(match cfg.gate {
        Gate::Paper => {
            let f = candle_nn::ops::sigmoid(&(affinity * cfg.lambda)?)?;
            LayerPlan::SoftFactor(local.where_cond(&f.ones_like()?, &f)?)
        }
        Gate::Log => {
            let b = (affinity + cfg.log_eps)?.log()?;
            LayerPlan::SoftBias(local.where_cond(&b.zeros_like()?, &b)?)
        }
    })
}

/// Training through the hard top-k mask (a straight-through estimator): the plan's value is
/// the mask top-k inference applies (0 where it keeps a pair, -inf where it prunes it), its
/// gradient that of the log gate's soft bias log(a_ij + eps), whatever the adapter's gate (the
/// forward uses no gate). The loss is then hard inference's loss, while the routers still get
/// gradients through the soft memberships (of the pairs the mask keeps).
/// `g`: memberships (T x K) or (B x T x K).
pub fn straight_through_plan(g: &Tensor, cfg: &AdapterConfig, k: TopK) -> Result<LayerPlan> {
    let k = k.of(cfg.groups)?;
    let (kk, dev) = (cfg.groups, g.device());
    let local = local_mask(g.dim(g.rank() - 2)?, cfg.window, cfg.sink, dev)?;
    let log_gate = AdapterConfig { gate: Gate::Log, ..cfg.clone() };
    let LayerPlan::SoftBias(soft) = gate_plan(g, &log_gate, &local)? else {
        unreachable!("the log gate gives an additive bias")
    };
    // Top-k sets from the memberships' values, chosen as inference chooses them, as 0/1
    // indicators; the T x T mask itself is built on the device (a shared group = a positive
    // product of indicators), not pair by pair on the host.
    let rows = g.detach().to_dtype(candle_core::DType::F32)?.flatten_to(g.rank() - 2)?.to_vec2::<f32>()?;
    let ind: Vec<f32> = rows.iter().flat_map(|r| {
        let m = topk_mask(r, k);
        (0..kk).map(move |x| ((m >> x) & 1) as f32)
    }).collect();
    let ind = Tensor::from_vec(ind, g.shape(), dev)?.to_dtype(g.dtype())?;
    let shared = ind.matmul(&ind.t()?)?.gt(0.5)?;
    let keep = shared.maximum(&local.broadcast_as(shared.shape())?)?;
    let hard = keep.where_cond(&soft.zeros_like()?, &Tensor::full(f32::NEG_INFINITY, soft.shape(), dev)?.to_dtype(soft.dtype())?)?;
    Ok(LayerPlan::SoftBias((hard + (&soft - soft.detach())?)?))
}
