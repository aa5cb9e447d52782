//! Exact hard top-k Focus attention from the flash tiles of `cpu::dense` (score tile, online
//! softmax, P x V tile), multi-threaded and vectorised, with memory linear in length.
//!
//! The kept pairs (j <= i, and i - j <= w or masks[i] & masks[j] != 0) are split into two
//! disjoint sets, each run with an online softmax, then merged exactly by log-sum-exp:
//!   distant: i - j > w and the top-k sets of i and j intersect;
//!   band:    0 <= i - j <= w (every local pair, a dense diagonal band of tiles).
//! Distant pairs are computed per *class*: the queries whose top-k set is exactly the same set S
//! (bucketed stably, so in position order). They all attend the same keys, the tokens whose set
//! meets S, gathered into contiguous key tiles (once per call when the key lists are short, e.g.
//! k = 1, else tile by tile). Each query is in exactly one class, so a pair
//! that shares several groups is computed once (no lowest-group rule is needed and no pair is
//! computed only to be masked away); for k = 1 a class is a group, as in the paper.
//! Pairs outside the mask are computed only at tile edges (then masked), never in bulk.
//!
//! A sliding-window layer (`focus_attention_within`, keys i - j < W) keeps a pair only when its
//! own window and the Focus mask both keep it: the band becomes min(w, W - 1) wide and the
//! distant keys of query i are those with i - W < j < i - w.
//!
//! Attention sinks (`sink` = s > 0, [ours]): the keys j < s are kept for every later query, like
//! local ones. Those of query i past its band that share a group with it are already among its
//! distant pairs; the others (j < min(s, i - w), no shared group) are added to the query's
//! distant state one by one (`add_sinks`, s keys at most per query) before the merge, so each
//! kept pair is still computed exactly once.

use crate::attention::cpu::dense::{first_key, pv_tile, score_tile, softmax_tile_row, QueryBlock, RowState, BK, BQ, JC, RB};
use crate::attention::cpu::Shape;
use crate::focus::mask;
use rayon::prelude::*;
use std::collections::HashMap;

/// Queries with the same top-k set, in position order.
pub struct Class {
    pub set: u64,
    pub queries: Vec<u32>,
}

/// Tokens bucketed by their exact top-k set (classes in order of first appearance). Tokens in
/// no group (set 0) attend only their local band and form no class.
pub fn classes(masks: &[u64]) -> Vec<Class> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut out: Vec<Class> = Vec::new();
    for (i, &m) in masks.iter().enumerate() {
        if m == 0 {
            continue;
        }
        let c = *index.entry(m).or_insert_with(|| {
            out.push(Class { set: m, queries: Vec::new() });
            out.len() - 1
        });
        out[c].queries.push(i as u32);
    }
    out
}

/// Query rows per block of the local band (see `band_and_merge`).
const BAND_ROWS: usize = 16;
/// Query rows per block at the causal edge of a distant tile (see `distant_tile`).
const EDGE_ROWS: usize = 16;

/// Online-softmax state of every (head, position) over its distant pairs.
struct DistantStates {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

/// q: (heads, t, d), k and v: (kv_heads, t, d), row-major. Returns (heads, t, d).
/// `masks[i]` is the bitmask of token i's top-k groups.
pub fn focus_attention(q: &[f32], k: &[f32], v: &[f32], s: Shape, masks: &[u64], window: usize, sink: usize) -> Vec<f32> {
    focus_attention_within(q, k, v, s, masks, window, sink, None)
}

/// `focus_attention` on a layer with its own sliding window `span` = Some(W) (keys i - j < W).
#[allow(clippy::too_many_arguments)]
pub fn focus_attention_within(q: &[f32], k: &[f32], v: &[f32], s: Shape, masks: &[u64], window: usize, sink: usize, span: Option<usize>) -> Vec<f32> {
    let Shape { heads, kv_heads, t, d } = s;
    assert!(kv_heads > 0 && heads % kv_heads == 0, "heads {heads} must be a multiple of kv_heads {kv_heads}");
    assert_eq!(q.len(), heads * t * d, "q has the wrong size");
    assert_eq!(k.len(), kv_heads * t * d, "k has the wrong size");
    assert_eq!(v.len(), kv_heads * t * d, "v has the wrong size");
    assert_eq!(masks.len(), t, "one mask per token");
    if t == 0 || d == 0 {
        return vec![0.0; heads * t * d];
    }
    let scale = 1.0 / (d as f32).sqrt();
    // Within a window of W keys, the band reaches W - 1 back at most; past that nothing is distant.
    let band = span.map_or(window, |w| window.min(w.saturating_sub(1)));
    // (With band < w no key past the band is inside W, sinks included.)
    let distant = if band < window {
        DistantStates { max: vec![f32::NEG_INFINITY; heads * t], sum: vec![0.0; heads * t], acc: vec![0.0; heads * t * d] }
    } else {
        let mut st = distant_states(q, k, v, s, masks, window, span, scale, true);
        add_sinks(q, k, v, s, masks, window, sink, span, scale, &mut st);
        st
    };
    band_and_merge(q, k, v, s, band, scale, &distant)
}

/// The sink pairs [ours] of every query that its band and its distant pairs do not hold: keys
/// j < min(s, i - w) sharing no group with i (and, on a sliding layer, within its window), folded
/// into the query's distant online-softmax state. Nothing to do for s = 0.
#[allow(clippy::too_many_arguments)]
fn add_sinks(q: &[f32], k: &[f32], v: &[f32], s: Shape, masks: &[u64], window: usize, sink: usize, span: Option<usize>, scale: f32, st: &mut DistantStates) {
    let Shape { heads, kv_heads, t, d } = s;
    if sink == 0 || t <= window + 1 {
        return;
    }
    let rep = heads / kv_heads;
    st.acc
        .par_chunks_mut(d)
        .zip(st.max.par_iter_mut().zip(st.sum.par_iter_mut()))
        .enumerate()
        .for_each(|(row, (acc, (max, sum)))| {
            let (h, i) = (row / t, row % t);
            let kh = h / rep;
            let qi = &q[row * d..(row + 1) * d];
            for j in mask::sink_keys(i, window, sink) {
                if mask::share_group(masks[i], masks[j]) || !mask::in_window(i, j, span) {
                    continue;
                }
                let x = crate::attention::reference::dot(qi, &k[(kh * t + j) * d..(kh * t + j + 1) * d]) * scale;
                let vj = &v[(kh * t + j) * d..(kh * t + j + 1) * d];
                if x > *max {
                    // A new maximum rescales what was summed (nothing, from -inf).
                    let c = (*max - x).exp();
                    *sum = *sum * c + 1.0;
                    acc.iter_mut().zip(vj).for_each(|(a, &y)| *a = *a * c + y);
                    *max = x;
                } else {
                    let p = (x - *max).exp();
                    *sum += p;
                    acc.iter_mut().zip(vj).for_each(|(a, &y)| *a += p * y);
                }
            }
        });
}

/// `focus_attention` that always finds and gathers keys tile by tile (the path taken when there
/// are many classes), so that tests cover it on small inputs.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
fn focus_attention_scan(q: &[f32], k: &[f32], v: &[f32], s: Shape, masks: &[u64], window: usize, sink: usize, span: Option<usize>) -> Vec<f32> {
    let scale = 1.0 / (s.d as f32).sqrt();
    let band = span.map_or(window, |w| window.min(w.saturating_sub(1)));
    let mut distant = distant_states(q, k, v, s, masks, window, span, scale, false);
    add_sinks(q, k, v, s, masks, window, sink, span, scale, &mut distant);
    band_and_merge(q, k, v, s, band, scale, &distant)
}

/// Tasks (class, query tile): each task loops over all heads, so a class's key list is built
/// once and each gathered key tile serves every query head of its KV head.
#[allow(clippy::too_many_arguments)]
fn distant_states(q: &[f32], k: &[f32], v: &[f32], s: Shape, masks: &[u64], window: usize, span: Option<usize>, scale: f32, gather_once: bool) -> DistantStates {
    let Shape { heads, kv_heads, t, d } = s;
    let rep = heads / kv_heads;
    let classes = classes(masks);
    let mut tasks: Vec<(usize, usize)> = Vec::new();
    for (c, cl) in classes.iter().enumerate() {
        for (b, tile) in cl.queries.chunks(BQ).enumerate() {
            // Only tiles whose last query has a distant key do any work.
            if *tile.last().unwrap() as usize > window {
                tasks.push((c, b));
            }
        }
    }
    // Heavier tiles (later positions, more keys) first for better load balance.
    tasks.sort_by_key(|&(c, b)| {
        let tile = classes[c].queries.chunks(BQ).nth(b).unwrap();
        std::cmp::Reverse(tile.len() * *tile.last().unwrap() as usize)
    });
    let lists = if gather_once { key_lists(&classes, masks, window) } else { None };
    let pre = lists.as_ref().map(|l| pre_gather(k, v, s, l));
    let results: Vec<(usize, usize, Vec<RowState>)> = tasks
        .into_par_iter()
        .map(|(c, b)| {
            let cl = &classes[c];
            let qpos = &cl.queries[b * BQ..(b * BQ + BQ).min(cl.queries.len())];
            let src = match &pre {
                Some(p) => KeySource::Gathered(p, c, &lists.as_ref().unwrap()[c]),
                None => KeySource::Scan(masks, cl.set),
            };
            let states = distant_tile(q, k, v, s, rep, src, qpos, window, span, scale);
            (c, b, states)
        })
        .collect();
    let mut out = DistantStates {
        max: vec![f32::NEG_INFINITY; heads * t],
        sum: vec![0.0; heads * t],
        acc: vec![0.0; heads * t * d],
    };
    for (c, b, states) in results {
        let qpos = &classes[c].queries[b * BQ..(b * BQ + BQ).min(classes[c].queries.len())];
        for (h, st) in states.iter().enumerate() {
            for (r, &i) in qpos.iter().enumerate() {
                let row = h * t + i as usize;
                out.max[row] = st.max[r];
                out.sum[row] = st.sum[r];
                out.acc[row * d..(row + 1) * d].copy_from_slice(&st.acc[r * d..(r + 1) * d]);
            }
        }
    }
    out
}

/// Most classes whose key lists are gathered once per call; above it each tile finds its keys.
const MAX_LISTED_CLASSES: usize = 256;
/// Gathered copies of K and V may take at most this many times the memory of K and V. Above
/// it, gathering each key tile on the fly (in cache) is faster than writing and faulting in the
/// copies: K=4, k=2 (5x) at 1K tokens took 16.3 ms pre-gathered and 13.3 ms on the fly.
const MAX_GATHER_FACTOR: usize = 2;

/// Each class's distant keys (tokens j < last query - w whose set meets the class's), when
/// there are few classes and the lists are short enough to gather K and V along them once:
/// for k = 1 the lists are the groups themselves (T keys in all).
fn key_lists(classes: &[Class], masks: &[u64], window: usize) -> Option<Vec<Vec<u32>>> {
    if classes.len() > MAX_LISTED_CLASSES {
        return None;
    }
    let limit = |c: &Class| (*c.queries.last().unwrap() as usize).saturating_sub(window);
    let sizes: Vec<usize> = classes.par_iter().map(|c| masks[..limit(c)].iter().filter(|&&m| m & c.set != 0).count()).collect();
    if sizes.iter().sum::<usize>() > MAX_GATHER_FACTOR * masks.len() {
        return None;
    }
    Some(
        classes
            .par_iter()
            .map(|c| (0..limit(c)).filter(|&j| masks[j] & c.set != 0).map(|j| j as u32).collect())
            .collect(),
    )
}

/// Keys and values along every class's key list, gathered per KV head into consecutive tiles in
/// the layouts `score_tile` and `pv_tile` read: tile n of class c is tile `tile0[c] + n`.
struct PreGathered {
    kts: Vec<Vec<f32>>,
    vts: Vec<Vec<f32>>,
    tile0: Vec<usize>,
}

fn pre_gather(k: &[f32], v: &[f32], s: Shape, lists: &[Vec<u32>]) -> PreGathered {
    let Shape { kv_heads, t, d, .. } = s;
    let mut tile0 = Vec::with_capacity(lists.len());
    let mut n_tiles = 0;
    for l in lists {
        tile0.push(n_tiles);
        n_tiles += l.len().div_ceil(BK);
    }
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..kv_heads)
        .into_par_iter()
        .map(|kh| {
            let (kh_k, kh_v) = (&k[kh * t * d..(kh + 1) * t * d], &v[kh * t * d..(kh + 1) * t * d]);
            let mut kt = vec![0f32; n_tiles * d * BK];
            let mut vt = vec![0f32; n_tiles * BK * d];
            for (c, l) in lists.iter().enumerate() {
                for (n, idx) in l.chunks(BK).enumerate() {
                    let o = (tile0[c] + n) * d * BK;
                    gather_keys(kh_k, kh_v, idx, d, &mut kt[o..o + d * BK], &mut vt[o..o + d * BK]);
                }
            }
            (kt, vt)
        })
        .collect();
    let (kts, vts) = per_head.into_iter().unzip();
    PreGathered { kts, vts, tile0 }
}

/// Where a query tile's distant keys come from.
enum KeySource<'a> {
    /// Scan the masks for tokens whose set meets this set; gather each key tile on the fly.
    Scan(&'a [u64], u64),
    /// Keys gathered once per call (class index, the class's key list).
    Gathered(&'a PreGathered, usize, &'a [u32]),
}

/// The distant pairs of one tile of queries `qpos` (all with the same top-k set), for every
/// head: keys are the tokens j whose set meets it with j + window < i (and, on a sliding layer,
/// j >= `first_key(i, span)`), BK at a time.
#[allow(clippy::too_many_arguments)]
fn distant_tile(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    s: Shape,
    rep: usize,
    src: KeySource,
    qpos: &[u32],
    window: usize,
    span: Option<usize>,
    scale: f32,
) -> Vec<RowState> {
    let Shape { heads, kv_heads, t, d } = s;
    let rows = qpos.len();
    let rows_p = rows.div_ceil(RB) * RB;
    let last = *qpos.last().unwrap() as usize;
    let first = qpos[0] as usize;
    // Every key any query of the tile may use: first_key(first) <= j < last - window, in
    // position order.
    let lo = first_key(first, span);
    let scanned: Vec<u32>;
    let keys: &[u32] = match &src {
        KeySource::Scan(masks, set) => {
            scanned = (lo..last - window).filter(|&j| mask::share_group(masks[j], *set)).map(|j| j as u32).collect();
            &scanned
        }
        KeySource::Gathered(_, _, list) => &list[list.partition_point(|&j| (j as usize) < lo)..list.partition_point(|&j| j as usize + window < last)],
    };
    // Gathered tiles are numbered from the start of the class's list.
    let tile_base = match &src {
        KeySource::Gathered(_, _, list) => list.partition_point(|&j| (j as usize) < lo),
        KeySource::Scan(..) => 0,
    };
    let mut states: Vec<RowState> = (0..heads).map(|_| RowState::new(rows_p, d)).collect();
    let mut qb = vec![0f32; heads * rows_p * d];
    for h in 0..heads {
        for (r, &i) in qpos.iter().enumerate() {
            let src = &q[(h * t + i as usize) * d..(h * t + i as usize + 1) * d];
            qb[(h * rows_p + r) * d..(h * rows_p + r + 1) * d].iter_mut().zip(src).for_each(|(o, x)| *o = x * scale);
        }
    }
    let mut kt = vec![0f32; d * BK];
    let mut vt = vec![0f32; BK * d];
    let mut sc = vec![0f32; rows_p * BK];
    let mut corr = vec![1f32; rows_p];
    for kh in 0..kv_heads {
        let kh_k = &k[kh * t * d..(kh + 1) * t * d];
        let kh_v = &v[kh * t * d..(kh + 1) * t * d];
        for (tb, tile) in keys.chunks(BK).enumerate() {
            let n = tile.len();
            let (kt, vt): (&[f32], &[f32]) = match &src {
                // Pre-gathered tiles, unless a sliding window cut the list inside one.
                KeySource::Gathered(pre, c, _) if tile_base % BK == 0 => {
                    let o = (pre.tile0[*c] + tile_base / BK + tb) * d * BK;
                    (&pre.kts[kh][o..o + d * BK], &pre.vts[kh][o..o + d * BK])
                }
                _ => {
                    gather_keys(kh_k, kh_v, tile, d, &mut kt, &mut vt);
                    (&kt, &vt)
                }
            };
            // Every row sees the whole tile unless it is partial, some query is too close to
            // its last key (the causal edge), or too far from its first (a sliding window).
            let edge = n < BK || *tile.last().unwrap() as usize + window >= first || (tile[0] as usize) < first_key(last, span);
            for hr in 0..rep {
                let h = kh * rep + hr;
                let qh = &qb[h * rows_p * d..(h + 1) * rows_p * d];
                let st = &mut states[h];
                if !edge {
                    score_tile(qh, rows_p, d, kt, BK, 0, BK, &mut sc);
                    for r in 0..rows_p {
                        corr[r] = softmax_tile_row(&mut sc[r * BK..(r + 1) * BK], &mut st.max[r], &mut st.sum[r]);
                    }
                    pv_tile(&sc, rows_p, vt, d, BK, &corr, &mut st.acc);
                    continue;
                }
                // At the edge each row keeps a prefix of the (position-sorted) keys. A class's
                // queries are spread over ~K/k times their count in positions, so a full tile
                // would compute a wide masked staircase: run blocks of EDGE_ROWS rows, each over
                // only its longest prefix (rounded up to JC keys), as the band does.
                let keep = |r: usize| tile.partition_point(|&j| j as usize + window < qpos[r] as usize);
                let from = |r: usize| tile.partition_point(|&j| (j as usize) < first_key(qpos[r] as usize, span));
                for r0 in (0..rows).step_by(EDGE_ROWS) {
                    let nr_p = EDGE_ROWS.min(rows_p - r0);
                    let kmax = keep((r0 + nr_p).min(rows) - 1);
                    if kmax == 0 {
                        continue;
                    }
                    let nk = kmax.div_ceil(JC) * JC;
                    score_tile(&qh[r0 * d..(r0 + nr_p) * d], nr_p, d, kt, BK, 0, nk, &mut sc);
                    for r in 0..nr_p {
                        // Padding rows (past `rows`) keep finite scores of zero queries.
                        let (kf, kr) = if r0 + r < rows { (from(r0 + r).min(nk), keep(r0 + r)) } else { (0, nk) };
                        let srow = &mut sc[r * BK..r * BK + nk];
                        srow[kr..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                        srow[..kf].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                        corr[r] = softmax_tile_row(srow, &mut st.max[r0 + r], &mut st.sum[r0 + r]);
                    }
                    pv_tile(&sc, nr_p, vt, d, nk, &corr, &mut st.acc[r0 * d..(r0 + nr_p) * d]);
                }
            }
        }
    }
    states
}

/// Copies the keys `idx` into `kt` (D x BK, transposed for `score_tile`) and the values into
/// `vt` (BK x D), zero padding past `idx.len()`.
fn gather_keys(k: &[f32], v: &[f32], idx: &[u32], d: usize, kt: &mut [f32], vt: &mut [f32]) {
    for (jj, &j) in idx.iter().enumerate() {
        let j = j as usize;
        let kr = &k[j * d..(j + 1) * d];
        for c in 0..d {
            kt[c * BK + jj] = kr[c];
        }
        vt[jj * d..(jj + 1) * d].copy_from_slice(&v[j * d..(j + 1) * d]);
    }
    for jj in idx.len()..BK {
        for c in 0..d {
            kt[c * BK + jj] = 0.0;
        }
        vt[jj * d..(jj + 1) * d].iter_mut().for_each(|x| *x = 0.0);
    }
}

/// K of one KV head transposed to (D, tp), zero padded; tp leaves room for a tile starting
/// anywhere before T.
fn transpose_padded(k: &[f32], t: usize, d: usize, tp: usize) -> Vec<f32> {
    let mut kt = vec![0f32; d * tp];
    for j in 0..t {
        for c in 0..d {
            kt[c * tp + j] = k[j * d + c];
        }
    }
    kt
}

/// The local band (0 <= i - j <= w) of each (head, query tile) in position order, merged with
/// the query's distant state: o = (e^lA oA + e^lB oB) / (e^lA + e^lB) with unnormalised
/// accumulators, so one division remains.
fn band_and_merge(q: &[f32], k: &[f32], v: &[f32], s: Shape, window: usize, scale: f32, distant: &DistantStates) -> Vec<f32> {
    let Shape { heads, kv_heads, t, d } = s;
    let rep = heads / kv_heads;
    let tp = t + BK;
    let kts: Vec<Vec<f32>> = (0..kv_heads).into_par_iter().map(|h| transpose_padded(&k[h * t * d..(h + 1) * t * d], t, d, tp)).collect();
    let vps: Vec<Vec<f32>> = (0..kv_heads)
        .map(|h| {
            let mut x = v[h * t * d..(h + 1) * t * d].to_vec();
            x.resize(tp * d, 0.0);
            x
        })
        .collect();
    let n_qb = t.div_ceil(BQ);
    let tasks: Vec<(usize, usize)> = (0..heads).flat_map(|h| (0..n_qb).map(move |b| (h, b))).collect();
    let results: Vec<(usize, usize, Vec<f32>)> = tasks
        .into_par_iter()
        .map(|(h, b)| {
            let kh = h / rep;
            let i0 = b * BQ;
            let rows = BQ.min(t - i0);
            let QueryBlock { q: qb, mut st, mut sc, mut corr, .. } = QueryBlock::new(&q[(h * t + i0) * d..], rows, d, scale);
            // Row blocks of BAND_ROWS, each over exactly its key range [first - w, last] rounded
            // up to JC keys: the triangles computed only to be masked stay small.
            for r0 in (0..rows).step_by(BAND_ROWS) {
                let nr = BAND_ROWS.min(rows - r0);
                let nr_p = nr.div_ceil(RB) * RB;
                let (a, last) = (i0 + r0, i0 + r0 + nr - 1);
                let mut j0 = a.saturating_sub(window);
                while j0 <= last {
                    let nk = (last + 1 - j0).min(BK).div_ceil(JC) * JC;
                    score_tile(&qb[r0 * d..(r0 + nr_p) * d], nr_p, d, &kts[kh], tp, j0, nk, &mut sc);
                    for r in 0..nr_p {
                        // Padding rows keep the window of the last real row (finite scores).
                        let i = a + r.min(nr - 1);
                        let lo = i.saturating_sub(window).saturating_sub(j0).min(nk);
                        let hi = (i + 1).saturating_sub(j0).min(nk);
                        let srow = &mut sc[r * BK..r * BK + nk];
                        srow[..lo].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                        srow[hi..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                        corr[r] = softmax_tile_row(srow, &mut st.max[r0 + r], &mut st.sum[r0 + r]);
                    }
                    let acc = &mut st.acc[r0 * d..(r0 + nr_p) * d];
                    pv_tile(&sc, nr_p, &vps[kh][j0 * d..(j0 + nk) * d], d, nk, &corr, acc);
                    j0 += nk;
                }
            }
            let mut o = vec![0f32; rows * d];
            for r in 0..rows {
                let row = h * t + i0 + r;
                let (ma, sa) = (distant.max[row], distant.sum[row]);
                let (mb, sb) = (st.max[r], st.sum[r]);
                let m = ma.max(mb);
                let wa = if sa == 0.0 { 0.0 } else { (ma - m).exp() };
                let wb = if sb == 0.0 { 0.0 } else { (mb - m).exp() };
                let inv = 1.0 / (sa * wa + sb * wb);
                let acc_a = &distant.acc[row * d..(row + 1) * d];
                let acc_b = &st.acc[r * d..(r + 1) * d];
                for c in 0..d {
                    o[r * d + c] = (acc_a[c] * wa + acc_b[c] * wb) * inv;
                }
            }
            (h, b, o)
        })
        .collect();
    let mut out = vec![0f32; heads * t * d];
    for (h, b, o) in results {
        let i0 = b * BQ;
        out[(h * t + i0) * d..(h * t + i0) * d + o.len()].copy_from_slice(&o);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::reference::masked_dense_reference;
    use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};

    pub(super) fn randn(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * scale).collect()
    }

    /// Random top-k sets; with `few_sets`, only a handful of distinct sets (many ties).
    fn random_masks(rng: &mut StdRng, t: usize, groups: usize, k: usize, few_sets: bool) -> Vec<u64> {
        let draw = |rng: &mut StdRng| {
            let mut g: Vec<usize> = (0..groups).collect();
            g.shuffle(rng);
            g[..k].iter().fold(0u64, |m, &x| m | 1 << x)
        };
        let pool: Vec<u64> = (0..3).map(|_| draw(rng)).collect();
        (0..t).map(|_| if few_sets { pool[rng.gen_range(0..pool.len())] } else { draw(rng) }).collect()
    }

    fn max_err(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
    }

    /// Property: random shapes (T across tile boundaries, GQA, odd D), K 1..8, every k in 1..=K,
    /// windows 0 .. > T, and ties: equal to masked dense attention in f64.
    #[test]
    fn tiled_equals_masked_dense_reference() {
        let mut rng = StdRng::seed_from_u64(2024);
        let mut cases = 0;
        for round in 0..30 {
            let kv_heads = rng.gen_range(1..=2);
            let heads = kv_heads * rng.gen_range(1..=3);
            let t = if round % 3 == 0 { rng.gen_range(1..=70) } else { rng.gen_range(60..=330) };
            let d = [4, 13, 16, 64][rng.gen_range(0..4)];
            let groups = rng.gen_range(1..=8);
            let s = Shape { heads, kv_heads, t, d };
            let q = randn(&mut rng, heads * t * d, 3.0);
            let kk = randn(&mut rng, kv_heads * t * d, 3.0);
            let v = randn(&mut rng, kv_heads * t * d, 1.0);
            for k in 1..=groups {
                let window = [0, 1, 4, 7, 16, 64, 100, t + 5][rng.gen_range(0..8)];
                let few = rng.gen_bool(0.3);
                let masks = random_masks(&mut rng, t, groups, k, few);
                // Sinks [ours]: s = 0 (the paper's mask), 1 and 4.
                for sink in [0, 1, 4] {
                    let want = masked_dense_reference(&q, &kk, &v, s, |i, j| mask::kept(&masks, window, sink, i, j));
                    for (path, fast) in [("gathered", focus_attention(&q, &kk, &v, s, &masks, window, sink)), ("scan", focus_attention_scan(&q, &kk, &v, s, &masks, window, sink, None))] {
                        let err = max_err(&fast, &want);
                        assert!(err <= 1e-5, "{path}: max abs error {err} (t={t} d={d} H={heads}/{kv_heads} K={groups} k={k} w={window} s={sink})");
                    }
                    cases += 1;
                }
            }
        }
        assert!(cases >= 180, "{cases}");
    }

    /// Both layer kinds of an interleaved model: on a sliding-window layer (keys i - j < W) the
    /// Focus mask composes with the window (a pair is kept when both keep it), on a global
    /// layer it is the plain Focus mask. Windows below, at and above the Focus window w, and
    /// above T; both key paths; equal to masked dense attention in f64.
    #[test]
    fn sliding_and_global_layers_equal_masked_dense_reference() {
        let mut rng = StdRng::seed_from_u64(77);
        let mut cases = 0;
        for round in 0..16 {
            let kv_heads = rng.gen_range(1..=2);
            let heads = kv_heads * rng.gen_range(1..=2);
            let t = if round % 4 == 0 { rng.gen_range(1..=80) } else { rng.gen_range(100..=330) };
            let d = [4, 16, 64][rng.gen_range(0..3)];
            let groups = rng.gen_range(2..=8);
            let s = Shape { heads, kv_heads, t, d };
            let q = randn(&mut rng, heads * t * d, 3.0);
            let kk = randn(&mut rng, kv_heads * t * d, 3.0);
            let v = randn(&mut rng, kv_heads * t * d, 1.0);
            let k = rng.gen_range(1..=groups.min(3));
            let window = [0, 7, 32, 64][rng.gen_range(0..4)];
            let few = rng.gen_bool(0.3);
            let masks = random_masks(&mut rng, t, groups, k, few);
            let sink = [0, 1, 4][round % 3];
            for span in [None, Some(1), Some(window), Some(window + 1), Some(window + 2), Some(window + 70), Some(rng.gen_range(1..=t + 3))] {
                let want = masked_dense_reference(&q, &kk, &v, s, |i, j| mask::kept(&masks, window, sink, i, j) && mask::in_window(i, j, span));
                for (path, fast) in [("gathered", focus_attention_within(&q, &kk, &v, s, &masks, window, sink, span)), ("scan", focus_attention_scan(&q, &kk, &v, s, &masks, window, sink, span))] {
                    let err = max_err(&fast, &want);
                    assert!(err <= 1e-5, "{path}: max abs error {err} (t={t} d={d} H={heads}/{kv_heads} K={groups} k={k} w={window} s={sink} W={span:?})");
                }
                cases += 1;
            }
        }
        assert!(cases >= 100, "{cases}");
    }

    /// Tokens in no group attend only their band; a single group is the full causal mask.
    #[test]
    fn empty_and_single_group_masks() {
        let mut rng = StdRng::seed_from_u64(5);
        let (t, d) = (150, 16);
        let s = Shape { heads: 2, kv_heads: 1, t, d };
        let q = randn(&mut rng, 2 * t * d, 2.0);
        let k = randn(&mut rng, t * d, 2.0);
        let v = randn(&mut rng, t * d, 1.0);
        let masks: Vec<u64> = (0..t).map(|i| if i % 3 == 0 { 0 } else { 1 }).collect();
        for sink in [0, 1, 4] {
            let want = masked_dense_reference(&q, &k, &v, s, |i, j| mask::kept(&masks, 10, sink, i, j));
            assert!(max_err(&focus_attention(&q, &k, &v, s, &masks, 10, sink), &want) <= 1e-5);
        }
        let want = masked_dense_reference(&q, &k, &v, s, |_, _| true);
        assert!(max_err(&focus_attention(&q, &k, &v, s, &vec![1; t], 3, 0), &want) <= 1e-5);
        assert!(max_err(&focus_attention(&q, &k, &v, s, &vec![1; t], 3, 4), &want) <= 1e-5);
    }

    /// The tiled kernel and the one-query-at-a-time kernel of `attention::reference` agree on a longer input
    /// with large scores (online-softmax rescaling exercised across many tiles).
    #[test]
    fn agrees_with_rowwise_kernel_on_long_input() {
        let mut rng = StdRng::seed_from_u64(9);
        let (t, d) = (1500, 64);
        let s = Shape { heads: 4, kv_heads: 2, t, d };
        let q = randn(&mut rng, 4 * t * d, 4.0);
        let k = randn(&mut rng, 2 * t * d, 4.0);
        let v = randn(&mut rng, 2 * t * d, 1.0);
        for (groups, kk) in [(8, 1), (4, 2), (8, 3)] {
            let masks = random_masks(&mut rng, t, groups, kk, false);
            for sink in [0, 4] {
                let b = crate::attention::reference::focus_attention_rowwise(&q, &k, &v, s, &masks, 128, sink);
                for a in [focus_attention(&q, &k, &v, s, &masks, 128, sink), focus_attention_scan(&q, &k, &v, s, &masks, 128, sink, None)] {
                    assert!(max_err(&a, &b) <= 1e-5, "K={groups} k={kk} s={sink}: {}", max_err(&a, &b));
                }
            }
        }
    }

    #[test]
    fn classes_are_stable_and_partition_tokens() {
        let masks = [3u64, 1, 3, 0, 1, 2];
        let c = classes(&masks);
        let got: Vec<(u64, Vec<u32>)> = c.into_iter().map(|c| (c.set, c.queries)).collect();
        assert_eq!(got, vec![(3, vec![0, 2]), (1, vec![1, 4]), (2, vec![5])]);
    }
}

#[cfg(test)]
/// The kernel against the independent references of `attention::reference` (moved here from
/// there, so that the reference never imports the kernel it checks).
mod against_reference {
    use super::focus_attention;
    use super::tests::randn;
    use crate::attention::cpu::Shape;
    use crate::focus::mask;
    use crate::attention::reference::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The A/B split holds exactly the mask's kept pairs (`mask::pair_stats`), counted by brute
    /// force over the pair classes.
    #[test]
    fn ab_pair_counts_sum_to_the_kept_pairs() {
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..30 {
            let t = rng.gen_range(1..300);
            let w = rng.gen_range(0..50);
            let sink = [0, 1, 4, 60][rng.gen_range(0..4)];
            let masks: Vec<u64> = (0..t).map(|_| 1u64 << rng.gen_range(0..4) | 1u64 << rng.gen_range(0..4)).collect();
            let (mut local, mut distant) = (0u64, 0u64);
            for i in 0..t {
                for j in 0..=i {
                    match mask::classify(i, j, masks[i], masks[j], w, sink) {
                        mask::PairClass::Local => local += 1,
                        mask::PairClass::SharedGroup(_) => distant += 1,
                        _ => {}
                    }
                }
            }
            let (a, b) = ab_pair_counts(&masks, w, sink);
            assert_eq!(a + b, local + distant);
            let p = mask::pair_stats(&masks, w, sink);
            assert_eq!((p.local, p.same_group_distant), (local, distant));
        }
    }

    fn random_masks(rng: &mut StdRng, t: usize, groups: usize, k: usize) -> Vec<u64> {
        (0..t)
            .map(|_| {
                let mut m = 0u64;
                while (m.count_ones() as usize) < k {
                    m |= 1 << rng.gen_range(0..groups);
                }
                m
            })
            .collect()
    }

    /// Property: for random shapes, every k in 1..=K, several windows, and memberships with
    /// many ties (few distinct group sets), the kernel equals masked dense attention.
    #[test]
    fn topk_equals_masked_dense_reference() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut cases = 0;
        for _ in 0..40 {
            let kv_heads = rng.gen_range(1..=3);
            let heads = kv_heads * rng.gen_range(1..=3);
            let t = rng.gen_range(1..=96);
            let d = [4, 8, 13, 16, 64][rng.gen_range(0..5)];
            let groups = rng.gen_range(1..=8);
            let s = Shape { heads, kv_heads, t, d };
            let q = randn(&mut rng, heads * t * d, 3.0);
            let kk = randn(&mut rng, kv_heads * t * d, 3.0);
            let v = randn(&mut rng, kv_heads * t * d, 1.0);
            for k in 1..=groups {
                for (window, sink) in [(0, 0), (1, 0), (5, 0), (17, 0), (200, 0), (0, 1), (4, 1), (4, 4), (16, 4), (5, 30)] {
                    let masks = random_masks(&mut rng, t, groups, k);
                    let want =
                        masked_dense_reference(&q, &kk, &v, s, |i, j| mask::kept(&masks, window, sink, i, j));
                    for fast in [focus_attention(&q, &kk, &v, s, &masks, window, sink), focus_attention_rowwise(&q, &kk, &v, s, &masks, window, sink)] {
                        let err = fast.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                        assert!(err <= 1e-5, "max abs error {err} (t={t} d={d} K={groups} k={k} w={window} s={sink})");
                    }
                    cases += 1;
                }
            }
        }
        assert!(cases > 1000);
    }

    /// Pairs are counted once: |A| + |B| equals the number of pairs the mask keeps.
    #[test]
    fn sets_are_disjoint_and_cover_the_mask() {
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..50 {
            let t = rng.gen_range(1..200);
            let groups = rng.gen_range(1..=8);
            let k = rng.gen_range(1..=groups);
            let w = rng.gen_range(0..40);
            let sink = [0, 1, 4, 50][rng.gen_range(0..4)];
            let masks = random_masks(&mut rng, t, groups, k);
            let (a, b) = ab_pair_counts(&masks, w, sink);
            let mut kept = 0u64;
            for i in 0..t {
                for j in 0..=i {
                    kept += mask::kept(&masks, w, sink, i, j) as u64;
                }
            }
            assert_eq!(a + b, kept);
        }
    }

    /// All tokens in one group: the mask is the full causal mask.
    #[test]
    fn single_group_is_dense() {
        let mut rng = StdRng::seed_from_u64(3);
        let s = Shape { heads: 2, kv_heads: 1, t: 50, d: 16 };
        let q = randn(&mut rng, 2 * 50 * 16, 2.0);
        let k = randn(&mut rng, 50 * 16, 2.0);
        let v = randn(&mut rng, 50 * 16, 1.0);
        let fast = focus_attention(&q, &k, &v, s, &vec![1u64; 50], 3, 2);
        let want = masked_dense_reference(&q, &k, &v, s, |_, _| true);
        let err = fast.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err <= 1e-5, "{err}");
    }
}
