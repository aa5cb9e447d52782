//! The hard top-k mask of FOCUS-METHOD section 1, defined once:
//!
//! ```text
//! M(i, j) = [j <= i] and ( [i - j <= w] or [j < s] or [G(i) and G(j) share a group] )
//! ```
//!
//! `s` is the adapter's `sink` **[ours]**: the first s tokens of the sequence stay attendable by
//! every later query (attention sinks), s = 0 (the default) being the paper's rule. A sink pair
//! is treated as a local pair everywhere: `classify` calls it `PairClass::Local` (there is no
//! class of its own), the soft gates leave it ungated, hard top-k always keeps it, and the exact
//! decomposition puts it in the "always attend" set B (local or sink pairs sharing no group).
//!
//! `G(i)` is token i's top-k group set, held as a bitmask (`topk_mask`; K <= 64). Every user of
//! the rule goes through this module: the reference kernel and its tests, the pair statistics,
//! the benchmarks' pair counts, the partners view, the GUI's mask image, and the tensors the
//! dense paths add to their scores. The fast kernels do not test pairs one by one; they walk the
//! sets this rule defines (the local band, the sink keys past it (`sink_keys`), and the tokens
//! whose sets meet the query's).

use crate::error::{Error, Result};
use candle_core::{Device, Tensor};
use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What the hard mask does with the pair (query i, key j).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairClass {
    /// j > i: never attended (causality), whatever the routing.
    Future,
    /// 0 <= i - j <= w, or j < s (a sink [ours]): always attends. Sink pairs are counted as
    /// local everywhere (pair statistics, the soft gates, the exact decomposition).
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

/// k of hard top-k routing, checked once against an adapter's K (1 <= k <= K) and carried
/// from there: whoever holds a `TopK` needs no other check of k. Made by `TopK::new` or
/// `AdapterConfig::topk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopK {
    k: usize,
    groups: usize,
}

impl TopK {
    pub fn new(k: usize, groups: usize) -> Result<TopK> {
        if !(1..=groups).contains(&k) {
            return Err(Error::Invalid(format!("top-k k = {k} must be in 1..={groups} (the adapter's K)")));
        }
        Ok(TopK { k, groups })
    }

    pub fn k(self) -> usize {
        self.k
    }

    /// The K this k was checked against.
    pub fn groups(self) -> usize {
        self.groups
    }

    /// k, for an adapter of `groups` groups: an error when it was chosen for another K.
    pub fn of(self, groups: usize) -> Result<usize> {
        if groups != self.groups {
            return Err(Error::Invalid(format!("top-k k = {} was chosen for K = {}, not for this adapter's K = {groups}", self.k, self.groups)));
        }
        Ok(self.k)
    }
}

impl std::fmt::Display for TopK {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.k)
    }
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

/// The largest `sink` an adapter may have [ours]: sinks are a few tokens (typically 1 or 4); the
/// exact kernels walk them one by one beside the band.
pub const MAX_SINK: usize = 1024;

/// Whether the causal pair (i, j), j <= i, always attends: local (i - j <= w) or a sink (j < s).
#[inline(always)]
pub fn always(i: usize, j: usize, window: usize, sink: usize) -> bool {
    i - j <= window || j < sink
}

/// The sink keys of query i outside its local band: 0 <= j < min(s, i - w), in position order
/// (empty when i <= w or s = 0). The exact kernels add these (when they share no group with i)
/// to the band's set.
#[inline(always)]
pub fn sink_keys(i: usize, window: usize, sink: usize) -> std::ops::Range<usize> {
    0..sink.min(i.saturating_sub(window))
}

/// The class of the pair (i, j), given the top-k sets `mi` of i and `mj` of j, the window and
/// the sink.
#[inline(always)]
pub fn classify(i: usize, j: usize, mi: u64, mj: u64, window: usize, sink: usize) -> PairClass {
    if j > i {
        PairClass::Future
    } else if always(i, j, window, sink) {
        PairClass::Local
    } else if share_group(mi, mj) {
        PairClass::SharedGroup((mi & mj).trailing_zeros() as usize)
    } else {
        PairClass::Pruned
    }
}

/// M(i, j) for a sequence's top-k sets.
#[inline(always)]
pub fn kept(masks: &[u64], window: usize, sink: usize, i: usize, j: usize) -> bool {
    classify(i, j, masks[i], masks[j], window, sink).kept()
}

/// Every causal pair is local when no query is more than `window` tokens after position 0: the
/// mask then keeps everything, and the dense kernel computes exactly the same function (a sink
/// adds nothing then).
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
    /// Pairs within the local window, or with a sink key [ours] (always kept).
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
pub fn pair_stats(masks: &[u64], window: usize, sink: usize) -> PairStats {
    let t = masks.len() as u64;
    let causal = t * (t + 1) / 2;
    // Query i keeps min(i, w) + 1 local keys and its sink keys past the band.
    let local: u64 = (0..masks.len()).map(|i| (i.min(window) + 1 + sink_keys(i, window, sink).len()) as u64).sum();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut distant = 0u64;
    for i in 0..masks.len() {
        // Key i - w - 1 becomes distant for query i (and stays distant for later queries);
        // sink keys are local, never distant.
        if i > window && i - window - 1 >= sink {
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
pub fn pair_stats_within(masks: &[u64], window: usize, sink: usize, span: Option<usize>, routed: bool) -> PairStats {
    if span.is_none() && routed {
        return pair_stats(masks, window, sink);
    }
    let t = masks.len();
    let causal: u64 = (0..t).map(|i| span.map_or(i + 1, |w| (i + 1).min(w)) as u64).sum();
    if !routed {
        return PairStats { causal, local: causal, same_group_distant: 0, retained: if causal == 0 { 0.0 } else { 1.0 } };
    }
    let w = span.expect("a sliding layer");
    let band = window.min(w.saturating_sub(1));
    // Sink keys past the band that the layer's own window still holds: i - W < j < min(s, i - w).
    let sinks = |i: usize| sink_keys(i, window, sink).filter(|&j| in_window(i, j, span)).count();
    let local: u64 = (0..t).map(|i| (i.min(band) + 1 + sinks(i)) as u64).sum();
    let mut distant = 0u64;
    if w > window + 1 {
        // Keys i - W < j < i - w: key i - w - 1 joins at query i, key i - W leaves (sink keys,
        // counted as local, never join).
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for i in 0..t {
            if i > window && i - window - 1 >= sink {
                *seen.entry(masks[i - window - 1]).or_default() += 1;
            }
            if i >= w && i - w >= sink {
                *seen.get_mut(&masks[i - w]).expect("joined earlier") -= 1;
            }
            distant += seen.iter().filter(|(&m, _)| share_group(m, masks[i])).map(|(_, c)| c).sum::<u64>();
        }
    }
    let retained = if causal == 0 { 0.0 } else { (local + distant) as f64 / causal as f64 };
    PairStats { causal, local, same_group_distant: distant, retained }
}

/// Query positions r0..r0+m as an (m, 1) column and key positions 0..n as a (1, n) row, f32 on
/// `dev`: the masks below are comparisons of the two, made on the device (built pair by pair on
/// the host, a T x T mask took seconds a layer at 16K tokens and then crossed to the GPU).
/// Positions are exact in f32 below 2^24.
fn positions(r0: usize, m: usize, n: usize, dev: &Device) -> Result<(Tensor, Tensor)> {
    if (r0 + m).max(n) >= 1 << 24 {
        return Err(Error::Invalid(format!("{} positions: the attention masks take fewer than 2^24", (r0 + m).max(n))));
    }
    Ok((Tensor::arange(r0 as f32, (r0 + m) as f32, dev)?.reshape((m, 1))?, Tensor::arange(0f32, n as f32, dev)?.reshape((1, n))?))
}

/// 0 where `keep` (u8) is set, -inf elsewhere (f32, `keep`'s shape).
fn additive(keep: &Tensor) -> Result<Tensor> {
    let (zero, ninf) = (Tensor::new(0f32, keep.device())?, Tensor::new(f32::NEG_INFINITY, keep.device())?);
    Ok(keep.where_cond(&zero.broadcast_as(keep.shape())?, &ninf.broadcast_as(keep.shape())?)?)
}

/// Additive causal mask (T x T): 0 on and below the diagonal, -inf above.
pub fn causal_bias(t: usize, dev: &Device) -> Result<Tensor> {
    causal_bias_rows(0, t, t, dev)
}

/// Rows r0..r0+m of `causal_bias`, against keys 0..n.
pub fn causal_bias_rows(r0: usize, m: usize, n: usize, dev: &Device) -> Result<Tensor> {
    let (i, j) = positions(r0, m, n, dev)?;
    additive(&i.broadcast_ge(&j)?)
}

/// A sliding-window layer's own mask (T x T, additive): -inf where i - j >= w (the keys its
/// window has left), 0 elsewhere; the causal mask is separate. The Focus mask composes with it:
/// a sliding layer keeps a pair only when both keep it.
pub fn sliding_bias(t: usize, w: usize, dev: &Device) -> Result<Tensor> {
    sliding_bias_rows(0, t, t, w, dev)
}

/// Rows r0..r0+m of `sliding_bias`, against keys 0..n.
pub fn sliding_bias_rows(r0: usize, m: usize, n: usize, w: usize, dev: &Device) -> Result<Tensor> {
    let (i, j) = positions(r0, m, n, dev)?;
    additive(&i.broadcast_lt(&(j + w as f64)?)?)
}

/// Whether a sliding layer of window `w` (None: a global layer) sees the pair (i, j), j <= i.
#[inline(always)]
pub fn in_window(i: usize, j: usize, w: Option<usize>) -> bool {
    w.is_none_or(|w| i - j < w)
}

/// 1 where the pair is local (0 <= i - j <= window, or a sink key j < s [ours], and for j > i,
/// which the causal mask removes anyway), else 0; T x T u8. The soft gates leave these pairs
/// alone.
pub fn local_mask(t: usize, window: usize, sink: usize, dev: &Device) -> Result<Tensor> {
    local_mask_rows(0, t, t, window, sink, dev)
}

/// Rows r0..r0+m of `local_mask`, against keys 0..n.
pub fn local_mask_rows(r0: usize, m: usize, n: usize, window: usize, sink: usize, dev: &Device) -> Result<Tensor> {
    let (i, j) = positions(r0, m, n, dev)?;
    let near = i.broadcast_le(&(&j + window as f64)?)?;
    Ok(if sink == 0 { near } else { near.broadcast_maximum(&j.lt(sink as f64)?)? })
}

/// The hard mask as an additive T x T tensor (0 kept, -inf pruned; future pairs are left to the
/// causal mask): the explicit reference the fast kernels are tested against.
pub fn topk_mask_bias(masks: &[u64], window: usize, sink: usize, dev: &Device) -> Result<Tensor> {
    let t = masks.len();
    let v: Vec<f32> = (0..t * t)
        .map(|n| match classify(n / t, n % t, masks[n / t], masks[n % t], window, sink) {
            PairClass::Pruned => f32::NEG_INFINITY,
            _ => 0.0,
        })
        .collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

/// Top-k memberships balanced as Sinkhorn leaves them: every token gets a uniformly random set
/// of k of the K groups, drawn so that all sets (hence all groups) are used equally often:
/// whole rounds of every k-subset, the remainder a random sample of them, in shuffled order.
/// Where C(K, k) is too large to enumerate, token i takes k consecutive groups from a balanced
/// random start instead.
pub fn balanced_masks(t: usize, groups: usize, k: usize, seed: u64) -> Result<Vec<u64>> {
    if groups == 0 || groups > 64 || k == 0 || k > groups {
        return Err(Error::Invalid(format!("need 1 <= k ({k}) <= K ({groups}) <= 64")));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let subsets = k_subsets(groups, k, 1 << 16);
    let mut masks: Vec<u64> = match subsets {
        Some(all) => {
            let mut m = Vec::with_capacity(t);
            while m.len() + all.len() <= t {
                m.extend_from_slice(&all);
            }
            let mut rest = all.clone();
            rest.shuffle(&mut rng);
            m.extend_from_slice(&rest[..t - m.len()]);
            m
        }
        None => (0..t)
            .map(|i| {
                let start = i % groups;
                (0..k).fold(0u64, |m, r| m | 1 << ((start + r) % groups))
            })
            .collect(),
    };
    masks.shuffle(&mut rng);
    Ok(masks)
}

/// All k-subsets of 0..n as bitmasks, or None when there are more than `limit`.
fn k_subsets(n: usize, k: usize, limit: usize) -> Option<Vec<u64>> {
    let mut count: u128 = 1;
    for i in 0..k {
        // Exact at every step (a binomial coefficient), and < 2^70 for n <= 64.
        count = count * (n - i) as u128 / (i + 1) as u128;
    }
    if count > limit as u128 {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize);
    // Gosper's hack: the next larger integer with the same number of set bits.
    let mut m: u64 = if k == 64 { u64::MAX } else { (1u64 << k) - 1 };
    let end: u128 = 1u128 << n;
    while (m as u128) < end {
        out.push(m);
        let c = m & m.wrapping_neg();
        let r = m.wrapping_add(c);
        m = (((r ^ m) >> 2) / c) | r;
        if r == 0 {
            break;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn masks_made_on_the_device_follow_the_pair_rules() {
        // The causal, sliding-window and local masks (made by comparing position tensors) against
        // the pair-by-pair rules, whole and as blocks of query rows against the keys they can see.
        let dev = Device::Cpu;
        for (t, window, sink, w) in [(1, 0, 0, 1), (9, 2, 1, 3), (40, 5, 0, 7), (40, 0, 3, 40), (33, 40, 2, 1)] {
            for (r0, m, n) in [(0, t, t), (t / 3, t - t / 3, t), (t / 2, 1, t / 2 + 1)] {
                let causal = causal_bias_rows(r0, m, n, &dev).unwrap().to_vec2::<f32>().unwrap();
                let sliding = sliding_bias_rows(r0, m, n, w, &dev).unwrap().to_vec2::<f32>().unwrap();
                let local = local_mask_rows(r0, m, n, window, sink, &dev).unwrap().to_vec2::<u8>().unwrap();
                for (a, i) in (r0..r0 + m).enumerate() {
                    for j in 0..n {
                        let bias = |keep: bool| if keep { 0.0 } else { f32::NEG_INFINITY };
                        assert_eq!(causal[a][j], bias(j <= i), "causal ({i}, {j}) of {t}");
                        assert_eq!(sliding[a][j], bias(j > i || in_window(i, j, Some(w))), "window {w} ({i}, {j}) of {t}");
                        let want = matches!(classify(i, j, 0, 0, window, sink), PairClass::Local | PairClass::Future);
                        assert_eq!(local[a][j] == 1, want, "local w {window} s {sink} ({i}, {j}) of {t}");
                    }
                }
            }
            assert_eq!(causal_bias(t, &dev).unwrap().dims2().unwrap(), (t, t));
        }
        assert!(causal_bias_rows(1 << 24, 1, 1, &dev).is_err(), "positions past 2^24 are not exact in f32");
    }

    #[test]
    fn balanced_masks_have_equal_groups_and_k_bits() {
        for (t, g, k) in [(1000, 8, 1), (1200, 4, 2), (700, 8, 3), (50, 6, 6)] {
            let m = balanced_masks(t, g, k, 1).unwrap();
            assert_eq!(m.len(), t);
            assert!(m.iter().all(|x| x.count_ones() as usize == k && *x < 1 << g));
            let sizes: Vec<usize> = (0..g).map(|b| m.iter().filter(|&&x| x >> b & 1 == 1).count()).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            // Whole rounds of all subsets are exactly balanced; the last partial round is sampled.
            let per_round = k_subsets(g, k, usize::MAX).unwrap().len();
            assert!(hi - lo <= per_round, "{sizes:?}");
        }
        assert!(balanced_masks(10, 4, 5, 0).is_err());
        assert!(balanced_masks(10, 65, 1, 0).is_err());
        // 1000 = 125 rounds of the 8 singletons: exactly balanced.
        let m = balanced_masks(1000, 8, 1, 3).unwrap();
        assert!((0..8).all(|b| m.iter().filter(|&&x| x == 1 << b).count() == 125));
    }

    #[test]
    fn k_subsets_enumerates_all() {
        let s = k_subsets(8, 3, 1000).unwrap();
        assert_eq!(s.len(), 56);
        let mut u = s.clone();
        u.sort();
        u.dedup();
        assert_eq!(u.len(), 56);
        assert!(k_subsets(64, 32, 1 << 16).is_none());
        assert_eq!(k_subsets(64, 64, 10).unwrap(), vec![u64::MAX]);
    }


    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn classes_follow_the_rule() {
        let w = 2;
        assert_eq!(classify(3, 4, 1, 1, w, 0), PairClass::Future);
        assert_eq!(classify(4, 2, 0b01, 0b10, w, 0), PairClass::Local);
        assert_eq!(classify(5, 2, 0b0110, 0b1100, w, 0), PairClass::SharedGroup(2));
        assert_eq!(classify(5, 2, 0b01, 0b10, w, 0), PairClass::Pruned);
        // Sinks [ours]: keys j < s are local for every later query, never future.
        assert_eq!(classify(5, 2, 0b01, 0b10, w, 3), PairClass::Local);
        assert_eq!(classify(9, 0, 0b01, 0b01, w, 1), PairClass::Local);
        assert_eq!(classify(9, 1, 0b01, 0b10, w, 1), PairClass::Pruned);
        assert_eq!(classify(0, 1, 1, 1, w, 4), PairClass::Future);
        assert_eq!(sink_keys(9, 2, 4), 0..4);
        assert_eq!(sink_keys(5, 2, 4), 0..3);
        assert_eq!(sink_keys(2, 2, 4), 0..0);
        assert!(!PairClass::Future.kept() && !PairClass::Pruned.kept());
    }

    #[test]
    fn pair_stats_match_brute_force() {
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..30 {
            let t = rng.gen_range(1..300);
            let w = rng.gen_range(0..50);
            let sink = [0, 1, 4, rng.gen_range(0..60)][rng.gen_range(0..4)];
            let masks: Vec<u64> = (0..t).map(|_| 1u64 << rng.gen_range(0..4) | 1u64 << rng.gen_range(0..4)).collect();
            let p = pair_stats(&masks, w, sink);
            let (mut local, mut distant) = (0u64, 0u64);
            for i in 0..t {
                for j in 0..=i {
                    match classify(i, j, masks[i], masks[j], w, sink) {
                        PairClass::Local => local += 1,
                        PairClass::SharedGroup(_) => distant += 1,
                        _ => {}
                    }
                }
            }
            assert_eq!((p.local, p.same_group_distant, p.causal), (local, distant, (t * (t + 1) / 2) as u64));
        }
    }

    #[test]
    fn pair_stats_within_a_sliding_window_match_brute_force() {
        let mut rng = StdRng::seed_from_u64(8);
        for _ in 0..40 {
            let t = rng.gen_range(1..200);
            let w = rng.gen_range(0..30);
            let sink = [0, 1, 4, rng.gen_range(0..40)][rng.gen_range(0..4)];
            let span = [None, Some(rng.gen_range(1..60)), Some(w + 1), Some(w + 2)][rng.gen_range(0..4)];
            let masks: Vec<u64> = (0..t).map(|_| 1u64 << rng.gen_range(0..4) | 1u64 << rng.gen_range(0..4)).collect();
            let (mut causal, mut kept) = (0u64, 0u64);
            for i in 0..t {
                for j in (0..=i).filter(|&j| in_window(i, j, span)) {
                    causal += 1;
                    kept += classify(i, j, masks[i], masks[j], w, sink).kept() as u64;
                }
            }
            let p = pair_stats_within(&masks, w, sink, span, true);
            assert_eq!((p.causal, p.kept()), (causal, kept), "t {t} w {w} s {sink} span {span:?}");
            let u = pair_stats_within(&masks, w, sink, span, false);
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
