//! Routing statistics of one analysed text: one serializable type shared by the CLI's
//! `analyze` and the GUI, computed from each layer's `LayerRouting`.

use crate::focus::mask::{pair_stats, PairStats};
use crate::focus::router::LayerRouting;
use crate::focus::sinkhorn::sinkhorn;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRouting {
    /// Soft memberships after Sinkhorn (sum to 1).
    pub memberships: Vec<f32>,
    /// Top-k groups, largest membership first.
    pub top: Vec<usize>,
    /// Largest membership.
    pub confidence: f32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerStats {
    pub layer: usize,
    /// Tokens whose argmax group is g.
    pub group_size: Vec<usize>,
    /// Share of membership mass per group before Sinkhorn (plain softmax of S / tau).
    pub mass_before: Vec<f64>,
    /// Share of membership mass per group after Sinkhorn.
    pub mass_after: Vec<f64>,
    /// Share of tokens in the most popular group (1/K is perfect balance).
    pub dominance: f64,
    pub mean_confidence: f64,
    /// Mean membership entropy in nats (ln K is uniform).
    pub mean_entropy: f64,
    pub pairs: PairStats,
    /// Whether the adapter routes this layer (`RouterLayers`). A layer it does not route
    /// attends densely: its groups are computed all the same, but shape nothing. (Exports
    /// written before this field existed read as routed.)
    #[serde(default = "routed_by_default")]
    pub routed: bool,
    /// Per token, when requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<TokenRouting>>,
}

/// Serde's default for the `routed` flags: files written before them read as routed.
pub(crate) fn routed_by_default() -> bool {
    true
}

/// One layer's figures from its routing (`routed` is true: `analyze` clears it for a layer the
/// adapter does not route).
pub fn layer_stats(layer: usize, r: &LayerRouting, tau: f64, k: usize, (window, sink): (usize, usize), keep_tokens: bool) -> LayerStats {
    let (t, kk) = (r.t, r.groups);
    let mut size = vec![0usize; kk];
    let mut after = vec![0f64; kk];
    let mut conf = 0f64;
    let mut ent = 0f64;
    for i in 0..t {
        let row = r.row(i);
        let (arg, &mx) = row
            .iter()
            .enumerate()
            .fold((0, &f32::NEG_INFINITY), |best, (g, v)| if v > best.1 { (g, v) } else { best });
        size[arg] += 1;
        conf += mx as f64;
        for (g, &p) in row.iter().enumerate() {
            after[g] += p as f64;
            if p > 0.0 {
                ent -= p as f64 * (p as f64).ln();
            }
        }
    }
    let before_g = sinkhorn(&r.scores, t, kk, tau, 0, false);
    let mut before = vec![0f64; kk];
    for i in 0..t {
        for g in 0..kk {
            before[g] += before_g[i * kk + g] as f64;
        }
    }
    let tf = t.max(1) as f64;
    let tokens = keep_tokens.then(|| {
        (0..t)
            .map(|i| {
                let row = r.row(i);
                TokenRouting { memberships: row.to_vec(), top: r.top_groups(i, k), confidence: row.iter().cloned().fold(0.0, f32::max) }
            })
            .collect()
    });
    LayerStats {
        layer,
        dominance: *size.iter().max().unwrap_or(&0) as f64 / tf,
        group_size: size,
        mass_before: before.iter().map(|m| m / tf).collect(),
        mass_after: after.iter().map(|m| m / tf).collect(),
        mean_confidence: conf / tf,
        mean_entropy: ent / tf,
        pairs: pair_stats(&r.topk_masks(k), window, sink),
        routed: true,
        tokens,
    }
}
