//! Routing statistics of one analysed text: one serializable type shared by the CLI's
//! `analyze` and the GUI, computed from each layer's `LayerRouting`.

use crate::router::{sinkhorn, LayerRouting};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRouting {
    /// Soft memberships after Sinkhorn (sum to 1).
    pub memberships: Vec<f32>,
    /// Top-k groups, largest membership first.
    pub top: Vec<usize>,
    /// Largest membership.
    pub confidence: f32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PairStats {
    /// Causal pairs (i >= j) in the text: T (T + 1) / 2.
    pub causal: u64,
    /// Pairs within the local window (always kept).
    pub local: u64,
    /// Distant pairs kept because their top-k groups intersect.
    pub same_group_distant: u64,
    /// (local + same_group_distant) / causal.
    pub retained: f64,
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
    /// Per token, when requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<TokenRouting>>,
}

/// Counts kept pairs of the hard top-k mask without visiting every pair: distinct group sets are
/// few (at most C(K, k)), so each query sums counts of earlier, distant tokens per set.
pub fn pair_stats(masks: &[u64], window: usize) -> PairStats {
    let t = masks.len() as u64;
    let causal = t * (t + 1) / 2;
    let w = window as u64;
    // Query i keeps min(i, w) + 1 local keys.
    let local: u64 = (0..t).map(|i| i.min(w) + 1).sum();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut distant = 0u64;
    for i in 0..masks.len() {
        // Keys j <= i - w - 1 become "distant" for query i.
        if i > window {
            *seen.entry(masks[i - window - 1]).or_default() += 1;
        }
        distant += seen.iter().filter(|(m, _)| *m & masks[i] != 0).map(|(_, c)| c).sum::<u64>();
    }
    let retained = if causal == 0 { 0.0 } else { (local + distant) as f64 / causal as f64 };
    PairStats { causal, local, same_group_distant: distant, retained }
}

pub fn layer_stats(layer: usize, r: &LayerRouting, tau: f64, k: usize, window: usize, keep_tokens: bool) -> LayerStats {
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
        pairs: pair_stats(&r.topk_masks(k), window),
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn pair_stats_match_brute_force() {
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..30 {
            let t = rng.gen_range(1..300);
            let w = rng.gen_range(0..50);
            let masks: Vec<u64> = (0..t).map(|_| 1u64 << rng.gen_range(0..4) | 1u64 << rng.gen_range(0..4)).collect();
            let p = pair_stats(&masks, w);
            let (mut local, mut distant) = (0u64, 0u64);
            for i in 0..t {
                for j in 0..=i {
                    if i - j <= w {
                        local += 1;
                    } else if masks[i] & masks[j] != 0 {
                        distant += 1;
                    }
                }
            }
            assert_eq!((p.local, p.same_group_distant, p.causal), (local, distant, (t * (t + 1) / 2) as u64));
            let (a, b) = crate::topk::pair_counts(&masks, w);
            assert_eq!(a + b, local + distant);
        }
    }
}
