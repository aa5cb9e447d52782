//! Tiled causal attention on the CPU with an online softmax ("flash" style): scores are made one
//! query-block x key-block tile at a time and never materialised as a T x T matrix, so memory
//! stays linear in length. Inner loops are written so that the compiler vectorises them, and
//! compiled for AVX-512 and AVX2+FMA with a run-time choice (multiversion).

use crate::attention::cpu::simd::exp;
use crate::attention::cpu::Shape;
use multiversion::multiversion;
use rayon::prelude::*;

/// Query rows per task and keys per tile.
pub const BQ: usize = 64;
pub const BK: usize = 64;
/// Query rows whose scores are accumulated together (register blocking).
pub const RB: usize = 4;
/// Keys per register chunk.
pub const JC: usize = 16;

/// K of one KV head transposed to (D, Tp), Tp = T rounded up to BK, zero padded: score tiles
/// then read contiguous key runs for every feature.
pub fn transpose_keys(k: &[f32], t: usize, d: usize) -> Vec<f32> {
    let tp = t.div_ceil(BK) * BK;
    let mut kt = vec![0f32; d * tp];
    for j in 0..t {
        for c in 0..d {
            kt[c * tp + j] = k[j * d + c];
        }
    }
    kt
}

/// Per-row state of the online softmax over a query block.
pub struct RowState {
    pub max: Vec<f32>,
    pub sum: Vec<f32>,
    /// (rows, D) unnormalised output.
    pub acc: Vec<f32>,
}

impl RowState {
    pub fn new(rows: usize, d: usize) -> Self {
        RowState { max: vec![f32::NEG_INFINITY; rows], sum: vec![0.0; rows], acc: vec![0.0; rows * d] }
    }
}

/// The working set of one block of query rows, shared by the dense kernel and the Focus band
/// pass: the queries times `scale`, padded with zero rows to a multiple of RB (their outputs
/// are dropped at the end), the online-softmax state, one score tile and the per-row rescale
/// factors.
pub struct QueryBlock {
    pub q: Vec<f32>,
    pub rows_p: usize,
    pub st: RowState,
    pub sc: Vec<f32>,
    pub corr: Vec<f32>,
}

impl QueryBlock {
    /// The `rows` query rows of width `d` at the start of `q`.
    pub fn new(q: &[f32], rows: usize, d: usize, scale: f32) -> Self {
        let rows_p = rows.div_ceil(RB) * RB;
        let mut qs: Vec<f32> = q[..rows * d].iter().map(|x| x * scale).collect();
        qs.resize(rows_p * d, 0.0);
        QueryBlock { q: qs, rows_p, st: RowState::new(rows_p, d), sc: vec![0f32; rows_p * BK], corr: vec![1f32; rows_p] }
    }
}

/// Scores of query rows `q` (rows x D, already scaled; rows a multiple of RB, zero padded)
/// against keys j0..j0+nk of `kt`, into the first nk columns of `s` (rows x BK).
/// nk: a multiple of JC, at most BK.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
#[allow(clippy::too_many_arguments)]
pub fn score_tile(q: &[f32], rows: usize, d: usize, kt: &[f32], tp: usize, j0: usize, nk: usize, s: &mut [f32]) {
    debug_assert_eq!(rows % RB, 0);
    debug_assert!(nk.is_multiple_of(JC) && nk <= BK);
    for r0 in (0..rows).step_by(RB) {
        let qr: [&[f32]; RB] = std::array::from_fn(|r| &q[(r0 + r) * d..(r0 + r + 1) * d]);
        for jc in (0..nk).step_by(JC) {
            let mut acc = [[0f32; JC]; RB];
            for c in 0..d {
                let krow: &[f32; JC] = kt[c * tp + j0 + jc..c * tp + j0 + jc + JC].try_into().unwrap();
                for r in 0..RB {
                    let qv = qr[r][c];
                    for j in 0..JC {
                        acc[r][j] = qv.mul_add(krow[j], acc[r][j]);
                    }
                }
            }
            for r in 0..RB {
                s[(r0 + r) * BK + jc..(r0 + r) * BK + jc + JC].copy_from_slice(&acc[r]);
            }
        }
    }
}

/// Online-softmax update of one row: turns its tile scores `s` into probabilities relative to
/// the new running max (entries at -inf become exactly 0) and rescales the running sum and
/// output. Returns the factor the row's accumulator must be multiplied by.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
pub fn softmax_tile_row(s: &mut [f32], max: &mut f32, sum: &mut f32) -> f32 {
    // Lane-wise partial max and sum (8 lanes): a float reduction written as one running value
    // cannot be vectorised without reassociation.
    const L: usize = 8;
    debug_assert_eq!(s.len() % L, 0);
    let mut mx = [f32::NEG_INFINITY; L];
    for ch in s.chunks_exact(L) {
        for l in 0..L {
            mx[l] = if ch[l] > mx[l] { ch[l] } else { mx[l] };
        }
    }
    let tile_max = mx.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    if tile_max == f32::NEG_INFINITY {
        s.iter_mut().for_each(|x| *x = 0.0);
        return 1.0;
    }
    let m = max.max(tile_max);
    let corr = exp(*max - m);
    let mut sums = [0f32; L];
    for ch in s.chunks_exact_mut(L) {
        for l in 0..L {
            // A select, not a branch, so the loop vectorises; masked keys get exactly 0 weight.
            let e = exp(ch[l] - m);
            ch[l] = if ch[l] == f32::NEG_INFINITY { 0.0 } else { e };
            sums[l] += ch[l];
        }
    }
    *sum = *sum * corr + sums.iter().sum::<f32>();
    *max = m;
    corr
}

/// acc (rows x D) = acc * corr[row] + P (rows x nk, row stride BK) V (nk x D), register-blocked
/// over rows and feature chunks so that each loaded value of V feeds several rows.
/// Rows: a multiple of RB.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
pub fn pv_tile(p: &[f32], rows: usize, v: &[f32], d: usize, nk: usize, corr: &[f32], acc: &mut [f32]) {
    debug_assert_eq!(rows % RB, 0);
    let nr = RB;
    for r0 in (0..rows).step_by(RB) {
        let mut c0 = 0;
        while c0 < d {
            let nc = JC.min(d - c0);
            let mut a = [[0f32; JC]; RB];
            for r in 0..nr {
                let cr = corr[r0 + r];
                for c in 0..nc {
                    a[r][c] = acc[(r0 + r) * d + c0 + c] * cr;
                }
            }
            if nc == JC {
                for j in 0..nk {
                    let vj: &[f32; JC] = v[j * d + c0..j * d + c0 + JC].try_into().unwrap();
                    for r in 0..RB {
                        let pr = p[(r0 + r) * BK + j];
                        for c in 0..JC {
                            a[r][c] = pr.mul_add(vj[c], a[r][c]);
                        }
                    }
                }
            } else {
                for j in 0..nk {
                    for r in 0..nr {
                        let pr = p[(r0 + r) * BK + j];
                        for c in 0..nc {
                            a[r][c] += pr * v[j * d + c0 + c];
                        }
                    }
                }
            }
            for r in 0..nr {
                acc[(r0 + r) * d + c0..(r0 + r) * d + c0 + nc].copy_from_slice(&a[r][..nc]);
            }
            c0 += JC;
        }
    }
}

/// Causal dense attention. q: (H, T, D), k, v: (Hkv, T, D); returns (H, T, D).
pub fn causal_attention(q: &[f32], k: &[f32], v: &[f32], s: Shape) -> Vec<f32> {
    causal_attention_within(q, k, v, s, None)
}

/// The first key query i sees under a sliding window `span` (keys i - j < W; `None`: 0).
#[inline(always)]
pub fn first_key(i: usize, span: Option<usize>) -> usize {
    span.map_or(0, |w| (i + 1).saturating_sub(w))
}

/// `causal_attention` of a sliding-window layer: query i sees keys i - W < j <= i (`span` =
/// Some(W)); tiles wholly before a block's window are skipped, not computed and masked.
pub fn causal_attention_within(q: &[f32], k: &[f32], v: &[f32], s: Shape, span: Option<usize>) -> Vec<f32> {
    let Shape { heads, kv_heads, t, d } = s;
    let rep = heads / kv_heads;
    let tp = t.div_ceil(BK) * BK;
    let scale = 1.0 / (d as f32).sqrt();
    let kts: Vec<Vec<f32>> = (0..kv_heads).into_par_iter().map(|h| transpose_keys(&k[h * t * d..(h + 1) * t * d], t, d)).collect();
    // Values padded to Tp rows so that a tile never reads past the end.
    let vp: Vec<Vec<f32>> = (0..kv_heads)
        .map(|h| {
            let mut x = v[h * t * d..(h + 1) * t * d].to_vec();
            x.resize(tp * d, 0.0);
            x
        })
        .collect();
    let n_qb = t.div_ceil(BQ);
    let mut out = vec![0f32; heads * t * d];
    // Heavier (later) query blocks first for better load balance.
    let mut tasks: Vec<(usize, usize)> = (0..heads).flat_map(|h| (0..n_qb).map(move |b| (h, b))).collect();
    tasks.sort_by_key(|&(_, b)| std::cmp::Reverse(b));
    let results: Vec<((usize, usize), Vec<f32>)> = tasks
        .into_par_iter()
        .map(|(h, b)| {
            let kh = h / rep;
            let i0 = b * BQ;
            let rows = BQ.min(t - i0);
            let QueryBlock { q: qb, rows_p, mut st, mut sc, mut corr } = QueryBlock::new(&q[(h * t + i0) * d..], rows, d, scale);
            let last_key = i0 + rows - 1;
            for j0 in (first_key(i0, span) / BK * BK..=last_key).step_by(BK) {
                score_tile(&qb, rows_p, d, &kts[kh], tp, j0, BK, &mut sc);
                for r in 0..rows_p {
                    let i = i0 + r;
                    let srow = &mut sc[r * BK..(r + 1) * BK];
                    // Causal mask on the diagonal tile (also hides the zero padding past T).
                    if j0 + BK > i {
                        srow[(i + 1).saturating_sub(j0).min(BK)..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                    }
                    // The sliding window's lower edge (padding rows past T take row T-1's).
                    let lo = first_key(i.min(t - 1), span).saturating_sub(j0).min(BK);
                    srow[..lo].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                    corr[r] = softmax_tile_row(srow, &mut st.max[r], &mut st.sum[r]);
                }
                pv_tile(&sc, rows_p, &vp[kh][j0 * d..(j0 + BK) * d], d, BK, &corr, &mut st.acc);
            }
            st.acc.truncate(rows * d);
            for r in 0..rows {
                let inv = 1.0 / st.sum[r];
                st.acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= inv);
            }
            ((h, b), st.acc)
        })
        .collect();
    for ((h, b), acc) in results {
        let i0 = b * BQ;
        out[(h * t + i0) * d..(h * t + i0) * d + acc.len()].copy_from_slice(&acc);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::reference::masked_dense_reference;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn equals_causal_reference() {
        let mut rng = StdRng::seed_from_u64(21);
        for _ in 0..25 {
            let kv_heads = rng.gen_range(1..=3);
            let heads = kv_heads * rng.gen_range(1..=3);
            let t = rng.gen_range(1..=300);
            let d = [4, 13, 16, 64][rng.gen_range(0..4)];
            let s = Shape { heads, kv_heads, t, d };
            let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
            let q = r(heads * t * d, 3.0);
            let k = r(kv_heads * t * d, 3.0);
            let v = r(kv_heads * t * d, 1.0);
            let fast = causal_attention(&q, &k, &v, s);
            let want = masked_dense_reference(&q, &k, &v, s, |_, _| true);
            let err = fast.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err <= 1e-5, "max abs error {err} (t={t} d={d})");
            // A sliding-window layer: keys i - j < W only.
            let w = rng.gen_range(1..=t + 2);
            let fast = causal_attention_within(&q, &k, &v, s, Some(w));
            let want = masked_dense_reference(&q, &k, &v, s, |i, j| i - j < w);
            let err = fast.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err <= 1e-5, "sliding window {w}: max abs error {err} (t={t} d={d})");
        }
    }
}
