//! What one layer's attention will do (`LayerPlan`), below `plan` (attention/mod.rs), which
//! resolves it, and `soft`, which builds the soft-gate plans.

use candle_core::Tensor;

/// How one layer attends, resolved from the mode, the adapter and the routing.
pub enum LayerPlan {
    Dense,
    /// Scores are multiplied by `factor` (T x T; paper gate) or `bias` is added (log gate):
    /// training's soft plans (`soft::soft_plan`), with gradients to the memberships.
    SoftFactor(Tensor),
    SoftBias(Tensor),
    /// Inference's soft gate, made a block of query rows at a time (`soft::soft_gate`).
    SoftGate(super::soft::SoftGate),
    /// Exact hard top-k: per-token group bitmasks, the local window and the sink [ours].
    TopK { masks: Vec<u64>, window: usize, sink: usize },
    /// Dense attention with an explicit additive mask (0 kept, -inf pruned), T x T.
    Masked(Tensor),
}
