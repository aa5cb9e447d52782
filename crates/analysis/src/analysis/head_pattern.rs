//! One head's full attention pattern over a range of tokens, for the GUI's head view (BertViz's
//! head view, with the Focus mask): for every query of the range, the weight it gives every key
//! of the range, dense and under Focus side by side, each pair classed by the top-k mask (kept
//! local, kept by a shared group, pruned), and the attention mass each class holds.
//!
//! Both patterns come from the same layer's queries and keys of the analysed run (`Heads`, the
//! analysis' kept pass): "dense" is that layer's causal softmax with no mask, "Focus" the run's
//! own attention (`Heads::row` with the mode's mask or gate; a dense run is shown against top-k
//! at its k). A row is normalised over all its keys (0..=query), keys before the range included:
//! their weight is reported per row as `before`. Exact (f64 softmax), tested against the masked
//! dense reference (`attention::reference::masked_dense_reference`).

use crate::analysis::partners::{distant, split, Distant, Heads};
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::adapter::AdapterConfig;
use crate::focus::mask::{self, PairClass, TopK};
use crate::focus::router::LayerRouting;

/// The most tokens a pattern covers (a 512 x 512 matrix).
pub const MAX_RANGE: usize = 512;

/// How the top-k mask treats a pair (`PairClass` without the group and the future).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Within the window, or a sink [ours]: always attended.
    Local,
    /// Beyond the window, sharing a top-k group: kept.
    Group,
    /// Beyond the window, no shared group: pruned.
    Pruned,
}

/// One head's pattern over queries and keys `a..=b` (indices within the sequence).
#[derive(Debug, Clone, PartialEq)]
pub struct HeadPattern {
    pub layer: usize,
    pub head: usize,
    pub a: usize,
    pub b: usize,
    /// k of the top-k mask the pairs are classed by.
    pub k: usize,
    /// `dense[r][c]`: the weight query a + r gives key a + c (c <= r), of its whole causal row.
    pub dense: Vec<Vec<f32>>,
    /// `focus[r][c]`: the same under Focus (the run's mode).
    pub focus: Vec<Vec<f32>>,
    /// `kind[r][c]`: the mask's class of the pair (c <= r).
    pub kind: Vec<Vec<Kind>>,
    /// Per query: the (dense, Focus) weight on keys before the range.
    pub before: Vec<[f32; 2]>,
    /// The mean over the range's queries of the share of each whole row on (local, group,
    /// pruned) pairs: dense, and under Focus (top-k: pruned is 0).
    pub mass_dense: [f32; 3],
    pub mass_focus: [f32; 3],
}

impl HeadPattern {
    pub fn len(&self) -> usize {
        self.b + 1 - self.a
    }
    pub fn is_empty(&self) -> bool {
        self.dense.is_empty()
    }
}

/// What both views of a head compare: per token its top-`k` groups (`masks`, which class the
/// pairs), and the Focus side, the run's own attention (a dense run is shown against top-k at
/// k) with its masks where it is top-k.
struct Sides {
    masks: Vec<u64>,
    focus_mode: Mode,
    run_masks: Option<Vec<u64>>,
}

impl Sides {
    fn new(routing: &LayerRouting, cfg: &AdapterConfig, mode: Mode, k: usize, t: usize) -> Result<Sides> {
        if routing.t != t {
            return Err(Error::Invalid(format!("the routing has {} tokens, the heads {t}", routing.t)));
        }
        let focus_mode = match mode {
            Mode::Dense => Mode::TopK(TopK::new(k, cfg.groups)?),
            m => m,
        };
        let run_masks = match focus_mode {
            Mode::TopK(kk) => Some(routing.topk_masks(kk.k())),
            _ => None,
        };
        Ok(Sides { masks: routing.topk_masks(TopK::new(k, cfg.groups)?.k()), focus_mode, run_masks })
    }

    /// The Focus side's distant pairs (`Heads::row`'s rule).
    fn focus_distant<'a>(&'a self, cfg: &AdapterConfig, routing: &'a LayerRouting, t: usize) -> Result<Distant<'a>> {
        distant(self.focus_mode, Some(cfg), Some(routing), self.run_masks.as_deref(), t)
    }
}

/// The pattern of `head` over `a..=b` from a layer's queries and keys and its routing, for a
/// run of `mode` with adapter `cfg`; pairs classed by the top-`k` groups.
#[allow(clippy::too_many_arguments)]
pub fn head_pattern(heads: &Heads, routing: &LayerRouting, cfg: &AdapterConfig, mode: Mode, k: usize, layer: usize, head: usize, (a, b): (usize, usize)) -> Result<HeadPattern> {
    let t = heads.tokens();
    if a > b || b >= t {
        return Err(Error::Invalid(format!("tokens {a}-{b} are not a range of the {t} tokens")));
    }
    if b + 1 - a > MAX_RANGE {
        return Err(Error::Invalid(format!("tokens {a}-{b} are {} tokens: the head view shows at most {MAX_RANGE}", b + 1 - a)));
    }
    if head >= heads.heads() {
        return Err(Error::Invalid(format!("head {head} is out of range (the layer has {} heads)", heads.heads())));
    }
    let sides = Sides::new(routing, cfg, mode, k, t)?;
    let (masks, focus_distant) = (&sides.masks, sides.focus_distant(cfg, routing, t)?);
    let n = b + 1 - a;
    let (mut dense, mut focus, mut kind, mut before) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut md, mut mf) = ([0f64; 3], [0f64; 3]);
    for i in a..=b {
        let d = heads.row(Distant::Attend, head, i)?;
        let f = heads.row(focus_distant, head, i)?;
        let sd = split(&d, masks, cfg.window, cfg.sink, i);
        let sf = split(&f, masks, cfg.window, cfg.sink, i);
        for c in 0..3 {
            md[c] += sd[c] as f64;
            mf[c] += sf[c] as f64;
        }
        before.push([d[..a].iter().sum(), f[..a].iter().sum()]);
        kind.push(
            (a..=i)
                .map(|j| match mask::classify(i, j, masks[i], masks[j], cfg.window, cfg.sink) {
                    PairClass::Local => Kind::Local,
                    PairClass::SharedGroup(_) => Kind::Group,
                    _ => Kind::Pruned,
                })
                .collect(),
        );
        dense.push(d[a..].to_vec());
        focus.push(f[a..].to_vec());
    }
    let mean = |m: [f64; 3]| m.map(|x| (x / n as f64) as f32);
    Ok(HeadPattern { layer, head, a, b, k, dense, focus, kind, before, mass_dense: mean(md), mass_focus: mean(mf) })
}

/// One head's attention over a whole segment at level of detail, for the head view on long
/// segments (issue 52: an 8192-token segment is 33.5M causal pairs, far past `MAX_RANGE`'s one
/// pixel per pair): the segment's queries and keys in blocks of `block` x `block` tokens, each
/// block with the summed weight its queries give its keys, dense and under Focus, and its pairs
/// counted by the mask's class. Every row is computed exactly as `head_pattern`'s (the same
/// `Heads::row`), so a block of one token is that pattern's cell.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadOverview {
    pub layer: usize,
    pub head: usize,
    pub k: usize,
    pub tokens: usize,
    /// Tokens per block side, and blocks per side.
    pub block: usize,
    pub side: usize,
    /// Per block (row-major: query block, key block), the summed dense and Focus weights.
    pub dense: Vec<f32>,
    pub focus: Vec<f32>,
    /// Per block, its causal pairs by class: (local, group, pruned).
    pub counts: Vec<[u32; 3]>,
    /// The mean over every query of the share of its row on (local, group, pruned) pairs.
    pub mass_dense: [f32; 3],
    pub mass_focus: [f32; 3],
}

/// `HeadOverview` of `head` over every token of `heads` in at most `max_side` blocks a side.
/// Rows run in parallel, a band of `block` queries at a time; `cancel` is checked between rows.
#[allow(clippy::too_many_arguments)]
pub fn head_overview(
    heads: &Heads,
    routing: &LayerRouting,
    cfg: &AdapterConfig,
    mode: Mode,
    k: usize,
    layer: usize,
    head: usize,
    max_side: usize,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<HeadOverview> {
    use rayon::prelude::*;
    use std::sync::atomic::Ordering;
    let t = heads.tokens();
    if t == 0 || head >= heads.heads() {
        return Err(Error::Invalid(format!("head {head} of {} heads over {t} tokens", heads.heads())));
    }
    let sides = Sides::new(routing, cfg, mode, k, t)?;
    let (masks, focus_distant) = (&sides.masks, sides.focus_distant(cfg, routing, t)?);
    let block = t.div_ceil(max_side.max(1)).max(1);
    let side = t.div_ceil(block);
    // One band of query blocks: (dense, focus, counts) of its `side` blocks, and its masses.
    type Band = (Vec<f32>, Vec<f32>, Vec<[u32; 3]>, [f64; 3], [f64; 3]);
    let bands: Vec<Band> = (0..side)
        .into_par_iter()
        .map(|bi| -> Result<Band> {
            let (mut dense, mut focus, mut counts) = (vec![0f32; side], vec![0f32; side], vec![[0u32; 3]; side]);
            let (mut md, mut mf) = ([0f64; 3], [0f64; 3]);
            for i in bi * block..((bi + 1) * block).min(t) {
                if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    return Err(Error::Cancelled);
                }
                let d = heads.row(Distant::Attend, head, i)?;
                let f = heads.row(focus_distant, head, i)?;
                for j in 0..=i {
                    let c = match mask::classify(i, j, masks[i], masks[j], cfg.window, cfg.sink) {
                        PairClass::Local => 0,
                        PairClass::SharedGroup(_) => 1,
                        _ => 2,
                    };
                    let b = j / block;
                    dense[b] += d[j];
                    focus[b] += f[j];
                    counts[b][c] += 1;
                    md[c] += d[j] as f64;
                    mf[c] += f[j] as f64;
                }
            }
            Ok((dense, focus, counts, md, mf))
        })
        .collect::<Result<_>>()?;
    let (mut dense, mut focus, mut counts) = (Vec::with_capacity(side * side), Vec::with_capacity(side * side), Vec::with_capacity(side * side));
    let (mut md, mut mf) = ([0f64; 3], [0f64; 3]);
    for (d, f, c, bd, bf) in bands {
        dense.extend(d);
        focus.extend(f);
        counts.extend(c);
        for x in 0..3 {
            md[x] += bd[x];
            mf[x] += bf[x];
        }
    }
    let mean = |m: [f64; 3]| m.map(|x| (x / t as f64) as f32);
    Ok(HeadOverview { layer, head, k, tokens: t, block, side, dense, focus, counts, mass_dense: mean(md), mass_focus: mean(mf) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::cpu::Shape;
    use crate::attention::reference::masked_dense_reference;
    use crate::focus::adapter::AdapterSpec;
    use candle_core::{Device, Tensor};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The whole-segment overview is the pattern in blocks: with blocks of one token each cell
    /// is the pattern's (weights and class), with larger blocks each is the sum of its cells;
    /// its masses are the pattern's over every query.
    #[test]
    fn overview_is_the_pattern_in_blocks() {
        let mut rng = StdRng::seed_from_u64(5);
        let (heads, kv_heads, t, d, groups) = (2usize, 1usize, 37usize, 8usize, 4usize);
        let id = crate::focus::identity::BaseModel { arch: "llama".into(), name: "t".into(), n_layers: 1, d_model: 8, n_heads: 1, n_kv_heads: 1, vocab: 8, fingerprint: String::new() };
        let cfg = crate::focus::adapter::Adapter::random(&id, &Device::Cpu, &AdapterSpec { groups, window: 5, sink: 1, ..Default::default() }, 1).unwrap().config;
        let q: Vec<f32> = (0..heads * t * d).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect();
        let kk: Vec<f32> = (0..kv_heads * t * d).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect();
        let memberships: Vec<f32> = (0..t * groups).map(|_| rng.gen::<f32>()).collect();
        let routing = LayerRouting { t, groups, scores: memberships.clone(), memberships, vectors: None, d_g: 0 };
        let dev = Device::Cpu;
        let hq = Heads::new(&Tensor::from_vec(q, (heads, t, d), &dev).unwrap(), &Tensor::from_vec(kk, (kv_heads, t, d), &dev).unwrap()).unwrap();
        let mode = Mode::TopK(TopK::new(2, groups).unwrap());
        let p = head_pattern(&hq, &routing, &cfg, mode, 2, 3, 1, (0, t - 1)).unwrap();
        let one = head_overview(&hq, &routing, &cfg, mode, 2, 3, 1, t, None).unwrap();
        assert_eq!((one.block, one.side), (1, t));
        for i in 0..t {
            for j in 0..t {
                let b = i * t + j;
                if j > i {
                    assert_eq!((one.dense[b], one.focus[b], one.counts[b]), (0.0, 0.0, [0, 0, 0]), "future pair {i},{j}");
                    continue;
                }
                assert_eq!((one.dense[b], one.focus[b]), (p.dense[i][j], p.focus[i][j]), "{i},{j}");
                let c = match p.kind[i][j] {
                    Kind::Local => 0,
                    Kind::Group => 1,
                    Kind::Pruned => 2,
                };
                assert_eq!(one.counts[b].iter().sum::<u32>(), 1);
                assert_eq!(one.counts[b][c], 1, "{i},{j}");
            }
        }
        for c in 0..3 {
            assert!((one.mass_dense[c] - p.mass_dense[c]).abs() < 1e-5 && (one.mass_focus[c] - p.mass_focus[c]).abs() < 1e-5, "class {c}");
        }
        // Blocks of 4 x 4 (37 tokens: 10 a side, the last of one token): sums of the cells.
        let o = head_overview(&hq, &routing, &cfg, mode, 2, 3, 1, 10, None).unwrap();
        assert_eq!((o.block, o.side), (4, 10));
        for bi in 0..10 {
            for bj in 0..10 {
                let (mut dsum, mut fsum, mut n) = (0f32, 0f32, 0u32);
                for i in bi * 4..((bi + 1) * 4).min(t) {
                    for j in bj * 4..((bj + 1) * 4).min(i + 1) {
                        dsum += p.dense[i][j];
                        fsum += p.focus[i][j];
                        n += 1;
                    }
                }
                let b = bi * 10 + bj;
                assert!((o.dense[b] - dsum).abs() < 1e-5 && (o.focus[b] - fsum).abs() < 1e-5, "block {bi},{bj}");
                assert_eq!(o.counts[b].iter().sum::<u32>(), n, "block {bi},{bj}");
            }
        }
        assert!(o.counts.iter().map(|c| c[2]).sum::<u32>() > 0 && o.counts.iter().map(|c| c[1]).sum::<u32>() > 0, "pruned and kept distant pairs");
    }

    /// Dense and top-k patterns equal the masked dense reference's attention weights (read out
    /// through one-hot values: with V = I, a query's output is its weight row), pair classes
    /// equal the mask's, and the masses are the rows' sums over each class.
    #[test]
    fn pattern_equals_the_masked_dense_reference() {
        let mut rng = StdRng::seed_from_u64(11);
        let (heads, kv_heads, t) = (4usize, 2usize, 48usize);
        let d = t; // one-hot values need d >= t
        let groups = 4;
        let id = crate::focus::identity::BaseModel { arch: "llama".into(), name: "t".into(), n_layers: 1, d_model: 8, n_heads: 1, n_kv_heads: 1, vocab: 8, fingerprint: String::new() };
        let cfg = crate::focus::adapter::Adapter::random(&id, &Device::Cpu, &AdapterSpec { groups, window: 6, sink: 1, ..Default::default() }, 1).unwrap().config;
        let q: Vec<f32> = (0..heads * t * d).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect();
        let kk: Vec<f32> = (0..kv_heads * t * d).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect();
        let mut v = vec![0f32; kv_heads * t * d];
        for h in 0..kv_heads {
            for j in 0..t {
                v[(h * t + j) * d + j] = 1.0;
            }
        }
        let memberships: Vec<f32> = (0..t * groups).map(|_| rng.gen::<f32>()).collect();
        let routing = LayerRouting { t, groups, scores: memberships.clone(), memberships, vectors: None, d_g: 0 };
        let dev = Device::Cpu;
        let hq = Heads::new(&Tensor::from_vec(q.clone(), (heads, t, d), &dev).unwrap(), &Tensor::from_vec(kk.clone(), (kv_heads, t, d), &dev).unwrap()).unwrap();
        let s = Shape { heads, kv_heads, t, d };
        let k = 2;
        let masks = routing.topk_masks(k);
        let dense_ref = masked_dense_reference(&q, &kk, &v, s, |_, _| true);
        let topk_ref = masked_dense_reference(&q, &kk, &v, s, |i, j| mask::kept(&masks, cfg.window, cfg.sink, i, j));
        let mode = Mode::TopK(TopK::new(k, groups).unwrap());
        let (a, b) = (10, 47);
        for head in [0, 3] {
            let p = head_pattern(&hq, &routing, &cfg, mode, k, 5, head, (a, b)).unwrap();
            assert_eq!((p.len(), p.dense.len(), p.dense[3].len(), p.focus[37].len()), (38, 38, 4, 38), "row r holds keys a..=a + r");
            let mut mass = [[0f64; 3]; 2];
            for i in a..=b {
                let row = |r: &[f32]| r[(head * t + i) * d..][..t].to_vec();
                let (dr, fr) = (row(&dense_ref), row(&topk_ref));
                for j in a..=i {
                    assert!((p.dense[i - a][j - a] - dr[j]).abs() < 1e-5, "dense {i},{j}");
                    assert!((p.focus[i - a][j - a] - fr[j]).abs() < 1e-5, "top-k {i},{j}");
                    let want = match mask::classify(i, j, masks[i], masks[j], cfg.window, cfg.sink) {
                        PairClass::Local => Kind::Local,
                        PairClass::SharedGroup(_) => Kind::Group,
                        _ => Kind::Pruned,
                    };
                    assert_eq!(p.kind[i - a][j - a], want);
                    if want == Kind::Pruned {
                        assert_eq!(p.focus[i - a][j - a], 0.0, "a pruned pair gets nothing under top-k");
                    }
                }
                assert!((p.before[i - a][0] - dr[..a].iter().sum::<f32>()).abs() < 1e-5);
                assert!((p.before[i - a][1] - fr[..a].iter().sum::<f32>()).abs() < 1e-5);
                for (side, r) in [(0, &dr), (1, &fr)] {
                    for j in 0..=i {
                        let c = match mask::classify(i, j, masks[i], masks[j], cfg.window, cfg.sink) {
                            PairClass::Local => 0,
                            PairClass::SharedGroup(_) => 1,
                            _ => 2,
                        };
                        mass[side][c] += r[j] as f64 / 38.0;
                    }
                }
            }
            for (c, (d, f)) in mass[0].iter().zip(&mass[1]).enumerate() {
                assert!((p.mass_dense[c] as f64 - d).abs() < 1e-5 && (p.mass_focus[c] as f64 - f).abs() < 1e-5, "class {c}");
            }
            assert_eq!(p.mass_focus[2], 0.0);
            assert!(p.mass_dense[2] > 0.01 && p.mass_dense[1] > 0.01, "the range has pruned and kept distant pairs: {:?}", p.mass_dense);
        }
        // Ranges over the limit or outside the sequence are refused with what is wrong.
        assert!(head_pattern(&hq, &routing, &cfg, mode, k, 5, 0, (10, 48)).unwrap_err().to_string().contains("not a range"));
        assert!(head_pattern(&hq, &routing, &cfg, mode, k, 5, 4, (0, 3)).unwrap_err().to_string().contains("head 4"));
    }
}
