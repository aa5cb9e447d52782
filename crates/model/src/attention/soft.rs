//! The soft-gate plans of FOCUS-METHOD section 1, built from candle ops so that gradients flow
//! to the memberships when they come from trainable routers: the paper's multiplicative gate,
//! our additive log gate, and the straight-through plan that trains through the hard mask.

use super::layer_plan::{gate_of, GateRows, LayerPlan, SoftGate};
use crate::error::Result;
use crate::focus::adapter::{AdapterConfig, Gate};
use crate::focus::mask::{local_mask, topk_mask, TopK};
use candle_core::Tensor;

/// The soft gate of FOCUS-METHOD section 1 from memberships `g` (T x K), as a T x T plan
/// (B x T x K gives B x T x T, for a batch of sequences). Built from candle ops, so gradients
/// flow to `g` when it comes from trainable routers. Training's plan; inference keeps the
/// memberships instead (`soft_gate`).
pub fn soft_plan(g: &Tensor, cfg: &AdapterConfig) -> Result<LayerPlan> {
    gate_plan(g, cfg, &local_mask(g.dim(g.rank() - 2)?, cfg.window, cfg.sink, g.device())?)
}

/// Inference's soft plan from memberships `g` (T x K): the gate of each block of query rows is
/// made as `attention::attend` applies it (`SoftGate::rows`), so no T x T tensor is held.
pub fn soft_gate(g: &Tensor, cfg: &AdapterConfig) -> LayerPlan {
    soft_gate_pair(g, g, cfg)
}

/// `soft_gate` with the affinity of query memberships `gq` and key memberships `gk` (T x K
/// each): a_ij = gq_i . gk_j. The same as `soft_gate` when they are equal; an intervention
/// (`analysis::intervene`) edits one side.
pub fn soft_gate_pair(gq: &Tensor, gk: &Tensor, cfg: &AdapterConfig) -> LayerPlan {
    LayerPlan::SoftGate(SoftGate::new(gq, gk, cfg))
}

/// `soft_plan` with the local mask (`local_mask`, T x T) given.
fn gate_plan(g: &Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
    Ok(match gate_of(g.matmul(&g.t()?)?, local, cfg.gate, cfg.lambda, cfg.log_eps)? {
        GateRows::Factor(f) => LayerPlan::SoftFactor(f),
        GateRows::Bias(b) => LayerPlan::SoftBias(b),
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
