//! What one layer's attention will do (`LayerPlan`), below `plan` (attention/mod.rs), which
//! resolves it, and `soft`, which builds the soft-gate plans; the soft gate itself (`gate_of`),
//! whole or a block of rows at a time (`SoftGate`).

use crate::error::Result;
use crate::focus::adapter::{AdapterConfig, Gate};
use crate::focus::mask::local_mask_rows;
use candle_core::Tensor;

/// How one layer attends, resolved from the mode, the adapter and the routing.
pub enum LayerPlan {
    Dense,
    /// Scores are multiplied by `factor` (T x T; paper gate) or `bias` is added (log gate):
    /// training's soft plans (`soft::soft_plan`), with gradients to the memberships.
    SoftFactor(Tensor),
    SoftBias(Tensor),
    /// Inference's soft gate, made a block of query rows at a time (`soft::soft_gate`).
    SoftGate(SoftGate),
    /// Exact hard top-k: per-token group bitmasks, the local window and the sink [ours].
    TopK { masks: Vec<u64>, window: usize, sink: usize },
    /// Dense attention with an explicit additive mask (0 kept, -inf pruned), T x T.
    Masked(Tensor),
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
    pub fn new(gq: &Tensor, gk: &Tensor, cfg: &AdapterConfig) -> Self {
        SoftGate { gq: gq.clone(), gk: gk.clone(), gate: cfg.gate, lambda: cfg.lambda, log_eps: cfg.log_eps, window: cfg.window, sink: cfg.sink }
    }

    /// The gate of query rows r0..r0+m against keys 0..n (m x n).
    pub fn rows(&self, r0: usize, m: usize, n: usize) -> Result<GateRows> {
        let affinity = self.gq.narrow(0, r0, m)?.matmul(&self.gk.narrow(0, 0, n)?.t()?)?;
        let local = local_mask_rows(r0, m, n, self.window, self.sink, affinity.device())?;
        gate_of(affinity, &local, self.gate, self.lambda, self.log_eps)
    }
}

/// The gate of the memberships' affinities (m x n, or B x T x T), local pairs left alone: the
/// one definition both plans use.
pub(crate) fn gate_of(affinity: Tensor, local: &Tensor, gate: Gate, lambda: f64, log_eps: f64) -> Result<GateRows> {
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
