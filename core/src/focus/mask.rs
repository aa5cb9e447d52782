//! The hard top-k mask of FOCUS-METHOD section 1, defined once:
//!
//! ```text
//! M(i, j) = [j <= i] and ( [i - j <= w] or [G(i) and G(j) share a group] )
//! ```
//!
//! `G(i)` is token i's top-k group set, held as a bitmask (`topk_mask`; K <= 64). Every user of
//! the rule goes through this module: the reference kernel and its tests, the pair statistics,
//! the benchmarks' pair counts, the partners view, the GUI's mask image, and the tensors the
//! dense paths add to their scores. The fast kernels do not test pairs one by one; they walk the
//! sets this rule defines (the local band, and the tokens whose sets meet the query's).

use crate::error::Result;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What the hard mask does with the pair (query i, key j).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairClass {
    /// j > i: never attended (causality), whatever the routing.
    Future,
    /// 0 <= i - j <= w: always attends.
    Local,
    /// Distant, and the top-k sets share group `g` (the lowest shared one).
    SharedGroup(usize),
    /// Distant and no shared group: never computed.
    Pruned,
}

impl PairClass {
    pub fn kept(self) -> bool {
        matches!(self, PairClass::Local | PairClass::SharedGroup(_))
    }
}

/// Whether two top-k sets share a group.
#[inline(always)]
pub fn share_group(mi: u64, mj: u64) -> bool {
    mi & mj != 0
}

/// The groups of a top-k set, in ascending order.
pub fn groups(set: u64) -> impl Iterator<Item = usize> {
    let mut bits = set;
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let g = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            g
        })
    })
}

/// The tokens of each group in position order: `members[g]` lists every i whose set holds g.
pub fn group_members(masks: &[u64]) -> Vec<Vec<u32>> {
    let n = masks.iter().map(|m| 64 - m.leading_zeros() as usize).max().unwrap_or(0);
    let mut members = vec![Vec::new(); n];
    for (i, &m) in masks.iter().enumerate() {
        groups(m).for_each(|g| members[g].push(i as u32));
    }
    members
}

/// The class of the pair (i, j), given the top-k sets `mi` of i and `mj` of j and the window.
#[inline(always)]
pub fn classify(i: usize, j: usize, mi: u64, mj: u64, window: usize) -> PairClass {
    if j > i {
        PairClass::Future
    } else if i - j <= window {
        PairClass::Local
    } else if share_group(mi, mj) {
        PairClass::SharedGroup((mi & mj).trailing_zeros() as usize)
    } else {
        PairClass::Pruned
    }
}

/// M(i, j) for a sequence's top-k sets.
#[inline(always)]
pub fn kept(masks: &[u64], window: usize, i: usize, j: usize) -> bool {
    classify(i, j, masks[i], masks[j], window).kept()
}

/// Every causal pair is local when no query is more than `window` tokens after position 0: the
/// mask then keeps everything, and the dense kernel computes exactly the same function.
pub fn all_local(t: usize, window: usize) -> bool {
    t <= window + 1
}

/// The bitmask of the k largest entries of one membership row (ties to the lower group).
pub fn topk_mask(row: &[f32], k: usize) -> u64 {
    top_k_indices(row, k).iter().fold(0u64, |m, &g| m | 1 << g)
}

/// The k largest entries of a membership row, largest first; ties go to the lower index so that
/// the choice is deterministic.
pub fn top_k_indices(row: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    // Stable sort by descending value keeps lower indices first among ties.
    idx.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap_or(std::cmp::Ordering::Equal));
    idx.truncate(k.min(row.len()));
    idx
}

/// How many pairs of one sequence the mask keeps.
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

impl PairStats {
    pub fn kept(&self) -> u64 {
        self.local + self.same_group_distant
    }
}

/// Counts the pairs the mask keeps without visiting every pair: distinct top-k sets are few (at
/// most C(K, k)), so each query sums the counts of earlier, distant tokens per set. O(T x sets).
pub fn pair_stats(masks: &[u64], window: usize) -> PairStats {
    let t = masks.len() as u64;
    let causal = t * (t + 1) / 2;
    let w = window as u64;
    // Query i keeps min(i, w) + 1 local keys.
    let local: u64 = (0..t).map(|i| i.min(w) + 1).sum();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut distant = 0u64;
    for i in 0..masks.len() {
        // Key i - w - 1 becomes distant for query i (and stays distant for later queries).
        if i > window {
            *seen.entry(masks[i - window - 1]).or_default() += 1;
        }
        distant += seen.iter().filter(|(&m, _)| share_group(m, masks[i])).map(|(_, c)| c).sum::<u64>();
    }
    let retained = if causal == 0 { 0.0 } else { (local + distant) as f64 / causal as f64 };
    PairStats { causal, local, same_group_distant: distant, retained }
}

/// `pair_stats` on a layer with its own sliding window `span` = Some(W) (keys i - j < W): the
/// causal pairs are those of the window, and the Focus mask keeps the pairs both keep. A layer
/// the adapter does not route (`routed` false, `RouterLayers::Global` on a sliding layer) keeps
/// its whole window, counted as local.
pub fn pair_stats_within(masks: &[u64], window: usize, span: Option<usize>, routed: bool) -> PairStats {
    if span.is_none() && routed {
        return pair_stats(masks, window);
    }
    let t = masks.len();
    let causal: u64 = (0..t).map(|i| span.map_or(i + 1, |w| (i + 1).min(w)) as u64).sum();
    if !routed {
        return PairStats { causal, local: causal, same_group_distant: 0, retained: if causal == 0 { 0.0 } else { 1.0 } };
    }
    let w = span.expect("a sliding layer");
    let band = window.min(w.saturating_sub(1));
    let local: u64 = (0..t).map(|i| (i.min(band) + 1) as u64).sum();
    let mut distant = 0u64;
    if w > window + 1 {
        // Keys i - W < j < i - w: key i - w - 1 joins at query i, key i - W leaves.
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for i in 0..t {
            if i > window {
                *seen.entry(masks[i - window - 1]).or_default() += 1;
            }
            if i >= w {
                *seen.get_mut(&masks[i - w]).expect("joined earlier") -= 1;
            }
            distant += seen.iter().filter(|(&m, _)| share_group(m, masks[i])).map(|(_, c)| c).sum::<u64>();
        }
    }
    let retained = if causal == 0 { 0.0 } else { (local + distant) as f64 / causal as f64 };
    PairStats { causal, local, same_group_distant: distant, retained }
}

/// Additive causal mask (T x T): 0 on and below the diagonal, -inf above.
pub fn causal_bias(t: usize, dev: &Device) -> Result<Tensor> {
    let v: Vec<f32> = (0..t * t).map(|n| if n % t <= n / t { 0.0 } else { f32::NEG_INFINITY }).collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

/// A sliding-window layer's own mask (T x T, additive): -inf where i - j >= w (the keys its
/// window has left), 0 elsewhere; the causal mask is separate. The Focus mask composes with it:
/// a sliding layer keeps a pair only when both keep it.
pub fn sliding_bias(t: usize, w: usize, dev: &Device) -> Result<Tensor> {
    let v: Vec<f32> = (0..t * t).map(|n| if n / t >= n % t + w { f32::NEG_INFINITY } else { 0.0 }).collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

/// Whether a sliding layer of window `w` (None: a global layer) sees the pair (i, j), j <= i.
#[inline(always)]
pub fn in_window(i: usize, j: usize, w: Option<usize>) -> bool {
    w.is_none_or(|w| i - j < w)
}

/// 1 where the pair is local (0 <= i - j <= window, and for j > i, which the causal mask removes
/// anyway), else 0; T x T u8. The soft gates leave these pairs alone.
pub fn local_mask(t: usize, window: usize, dev: &Device) -> Result<Tensor> {
    let v: Vec<u8> = (0..t * t).map(|n| matches!(classify(n / t, n % t, 0, 0, window), PairClass::Local | PairClass::Future) as u8).collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

/// The hard mask as an additive T x T tensor (0 kept, -inf pruned; future pairs are left to the
/// causal mask): the explicit reference the fast kernels are tested against.
pub fn topk_mask_bias(masks: &[u64], window: usize, dev: &Device) -> Result<Tensor> {
    let t = masks.len();
    let v: Vec<f32> = (0..t * t)
        .map(|n| match classify(n / t, n % t, masks[n / t], masks[n % t], window) {
            PairClass::Pruned => f32::NEG_INFINITY,
            _ => 0.0,
        })
        .collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn classes_follow_the_rule() {
        let w = 2;
        assert_eq!(classify(3, 4, 1, 1, w), PairClass::Future);
        assert_eq!(classify(4, 2, 0b01, 0b10, w), PairClass::Local);
        assert_eq!(classify(5, 2, 0b0110, 0b1100, w), PairClass::SharedGroup(2));
        assert_eq!(classify(5, 2, 0b01, 0b10, w), PairClass::Pruned);
        assert!(!PairClass::Future.kept() && !PairClass::Pruned.kept());
    }

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
                    match classify(i, j, masks[i], masks[j], w) {
                        PairClass::Local => local += 1,
                        PairClass::SharedGroup(_) => distant += 1,
                        _ => {}
                    }
                }
            }
            assert_eq!((p.local, p.same_group_distant, p.causal), (local, distant, (t * (t + 1) / 2) as u64));
            let (a, b) = crate::attention::reference::ab_pair_counts(&masks, w);
            assert_eq!(a + b, local + distant);
        }
    }

    #[test]
    fn pair_stats_within_a_sliding_window_match_brute_force() {
        let mut rng = StdRng::seed_from_u64(8);
        for _ in 0..40 {
            let t = rng.gen_range(1..200);
            let w = rng.gen_range(0..30);
            let span = [None, Some(rng.gen_range(1..60)), Some(w + 1), Some(w + 2)][rng.gen_range(0..4)];
            let masks: Vec<u64> = (0..t).map(|_| 1u64 << rng.gen_range(0..4) | 1u64 << rng.gen_range(0..4)).collect();
            let (mut causal, mut kept) = (0u64, 0u64);
            for i in 0..t {
                for j in (0..=i).filter(|&j| in_window(i, j, span)) {
                    causal += 1;
                    kept += classify(i, j, masks[i], masks[j], w).kept() as u64;
                }
            }
            let p = pair_stats_within(&masks, w, span, true);
            assert_eq!((p.causal, p.kept()), (causal, kept), "t {t} w {w} span {span:?}");
            let u = pair_stats_within(&masks, w, span, false);
            assert_eq!((u.causal, u.kept()), (causal, causal));
        }
    }

    #[test]
    fn top_k_breaks_ties_by_index() {
        assert_eq!(top_k_indices(&[0.25; 4], 2), vec![0, 1]);
        assert_eq!(topk_mask(&[0.1, 0.5, 0.5, 0.2], 2), 0b0110);
        assert_eq!(groups(0b1010_0001).collect::<Vec<_>>(), vec![0, 5, 7]);
        assert_eq!(group_members(&[0b01, 0b11, 0b10]), vec![vec![0, 1], vec![1, 2]]);
    }
}
