//! The soft-gate plans of FOCUS-METHOD section 1, built from candle ops so that gradients flow
//! to the memberships when they come from trainable routers: the paper's multiplicative gate,
//! our additive log gate, and the straight-through plan that trains through the hard mask.

use super::layer_plan::LayerPlan;
use crate::error::Result;
use crate::focus::adapter::{AdapterConfig, Gate};
use crate::focus::mask::{local_mask, local_mask_rows, topk_mask, TopK};
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
    LayerPlan::SoftGate(SoftGate { gq: g.clone(), gk: g.clone(), gate: cfg.gate, lambda: cfg.lambda, log_eps: cfg.log_eps, window: cfg.window, sink: cfg.sink })
}

/// `soft_gate` with the affinity of query memberships `gq` and key memberships `gk` (T x K
/// each): a_ij = gq_i . gk_j. The same as `soft_gate` when they are equal; an intervention
/// (`analysis::intervene`) edits one side.
pub fn soft_plan_pair(gq: &Tensor, gk: &Tensor, cfg: &AdapterConfig) -> LayerPlan {
    LayerPlan::SoftGate(SoftGate { gq: gq.clone(), gk: gk.clone(), gate: cfg.gate, lambda: cfg.lambda, log_eps: cfg.log_eps, window: cfg.window, sink: cfg.sink })
}

/// A soft gate kept as the memberships of the queries and the keys (T x K each): at 32K tokens
/// one T x T plan is 4 GB, and the gate of a block of rows is all the attention needs at once.
pub struct SoftGate {
    gq: Tensor,
    gk: Tensor,
    gate: Gate,
    lambda: f64,
    log_eps: f64,
    window: usize,
    sink: usize,
}

/// A block of a gate: it multiplies the scaled scores (the paper's gate) or adds to them (log).
pub enum GateRows {
    Factor(Tensor),
    Bias(Tensor),
}

impl SoftGate {
    /// The gate of query rows r0..r0+m against keys 0..n (m x n).
    pub fn rows(&self, r0: usize, m: usize, n: usize) -> Result<GateRows> {
        let affinity = self.gq.narrow(0, r0, m)?.matmul(&self.gk.narrow(0, 0, n)?.t()?)?;
        let local = local_mask_rows(r0, m, n, self.window, self.sink, affinity.device())?;
        gate_of(affinity, &local, self.gate, self.lambda, self.log_eps)
    }
}

/// `soft_plan` with the local mask (`local_mask`, T x T) given.
fn gate_plan(g: &Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
    Ok(match gate_of(g.matmul(&g.t()?)?, local, cfg.gate, cfg.lambda, cfg.log_eps)? {
        GateRows::Factor(f) => LayerPlan::SoftFactor(f),
        GateRows::Bias(b) => LayerPlan::SoftBias(b),
    })
}

/// The gate of the memberships' affinities (m x n, or B x T x T), local pairs left alone: the
/// one definition both plans use.
fn gate_of(affinity: Tensor, local: &Tensor, gate: Gate, lambda: f64, log_eps: f64) -> Result<GateRows> {
    let local = local.broadcast_as(affinity.shape())?;
    Ok(match gate {
        Gate::Paper => {
            let f = candle_nn::ops::sigmoid(&(affinity * lambda)?)?;
            GateRows::Factor(local.where_cond(&f.ones_like()?, &f)?)
        }
        Gate::Log => {
            let b = (affinity + log_eps)?.log()?;
            GateRows::Bias(local.where_cond(&b.zeros_like()?, &b)?)
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
