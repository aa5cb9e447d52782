//! The gate on distant pairs, part of the routing rule (FOCUS-METHOD section 1): how a pair's
//! attention score is changed by the affinity of its two tokens' memberships. Local pairs, and
//! sink pairs (key j < the adapter's `sink`, [ours]), are never gated: callers pass
//! `distant = !focus::mask::always(i, j, window, sink)`. Every attention path (training, soft inference, decode, the GUI's exact rows)
//! computes a pair's score through `GateFn::score`.

use crate::focus::adapter::{AdapterConfig, Gate};

/// The gate on distant pairs (i - j > window and j >= sink); local and sink pairs are never
/// gated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GateFn {
    /// No gate: plain causal attention (dense).
    None,
    /// s = u + ln(a + eps).
    Log { eps: f32 },
    /// s = u * sigmoid(lambda * a).
    Paper { lambda: f32 },
}

impl GateFn {
    pub fn of(cfg: &AdapterConfig) -> GateFn {
        match cfg.gate {
            Gate::Log => GateFn::Log { eps: cfg.log_eps as f32 },
            Gate::Paper => GateFn::Paper { lambda: cfg.lambda as f32 },
        }
    }

    /// The score of a pair from u = q.k / sqrt(d) and the affinity a (distant pairs only),
    /// and the gate factor f (paper gate; 1 otherwise).
    #[inline(always)]
    pub fn score(self, u: f32, a: f32, distant: bool) -> (f32, f32) {
        match (self, distant) {
            (GateFn::Log { eps }, true) => (u + (a + eps).ln(), 1.0),
            (GateFn::Paper { lambda }, true) => {
                let f = 1.0 / (1.0 + (-lambda * a).exp());
                (u * f, f)
            }
            _ => (u, 1.0),
        }
    }
}
