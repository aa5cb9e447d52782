//! Small CPU kernels shared by the attention paths (and the one-row products of
//! `model::matvec` and `model::qmatvec`): a vectorisable exp, a dot product and rows of them
//! (`rows_dot`), and a fused "scale + causal mask +
//! softmax" over score rows that touches only the causal triangle.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape};
use multiversion::multiversion;
use rayon::prelude::*;

/// exp(x) for f32, accurate to ~2 ulp over the whole range, branch-free so that loops over it
/// vectorise (libm's expf does not). exp(x) = 2^n * e^r with r in [-ln2/2, ln2/2], and e^r from
/// a degree-6 polynomial (Cephes coefficients).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits, which avoids a
    // float-to-int conversion that would not vectorise.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.7);
    let t = x.mul_add(LOG2E, MAGIC);
    let n = t - MAGIC;
    let ni = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = n.mul_add(-C2, n.mul_add(-C1, x));
    let p = 1.987_569_1e-4f32;
    let p = p.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 0.5);
    let e = (p * r).mul_add(r, r + 1.0);
    f32::from_bits(((ni + 127) << 23) as u32) * e
}

/// In-place softmax of `row[..=last]` after multiplying by `scale`; entries past `last` become 0.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
pub fn causal_softmax_row(row: &mut [f32], last: usize, scale: f32) {
    let (live, dead) = row.split_at_mut(last + 1);
    let mut m = f32::NEG_INFINITY;
    for x in live.iter_mut() {
        *x *= scale;
        m = m.max(*x);
    }
    if m == f32::NEG_INFINITY {
        // Every key masked (cannot happen for causal rows, which keep the diagonal).
        live.iter_mut().for_each(|x| *x = 0.0);
    } else {
        let mut s = 0f32;
        for x in live.iter_mut() {
            let e = if *x == f32::NEG_INFINITY { 0.0 } else { exp(*x - m) };
            *x = e;
            s += e;
        }
        let inv = 1.0 / s;
        live.iter_mut().for_each(|x| *x *= inv);
    }
    dead.iter_mut().for_each(|x| *x = 0.0);
}

/// softmax(scale * scores + causal mask) over the last dim of a (..., T, T) tensor, computing
/// only the causal triangle. Inference only (no backward); CPU only.
pub struct CausalSoftmax {
    pub scale: f32,
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "focus-causal-softmax"
    }
    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = layout.shape().dims();
        let t = *dims.last().ok_or_else(|| candle_core::Error::Msg("causal softmax needs a matrix".into()))?;
        if dims.len() < 2 || dims[dims.len() - 2] != t {
            candle_core::bail!("causal softmax needs square (..., T, T) scores, got {dims:?}");
        }
        let src = match storage {
            CpuStorage::F32(v) => v,
            _ => candle_core::bail!("causal softmax supports f32 only"),
        };
        let src = match layout.contiguous_offsets() {
            Some((a, b)) => &src[a..b],
            None => candle_core::bail!("causal softmax needs contiguous scores"),
        };
        let mut out = src.to_vec();
        out.par_chunks_mut(t).enumerate().for_each(|(r, row)| causal_softmax_row(row, r % t, self.scale));
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// A dot product with 16 independent lanes, so that it vectorises without reassociation; the
/// lanes are summed as a tree (summed in order, they were a chain of 15 dependent adds, which
/// dominated short products such as decode attention's over head dims of 64).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let mut acc = [0f32; L];
    let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..L {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let mut w = L / 2;
    while w > 0 {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
        w /= 2;
    }
    acc[0] + tail
}

/// ys[r] = w_r . x for the rows of `w` (row stride `inp`).
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
pub fn rows_dot(w: &[f32], inp: usize, x: &[f32], ys: &mut [f32]) {
    for (r, y) in ys.iter_mut().enumerate() {
        *y = dot(&w[r * inp..(r + 1) * inp], x);
    }
}

/// `out[j] = q . k_j` in f64 for the keys `j < out.len()`, the keys stored transposed (`kt[c *
/// stride + j]` is key j's component c), each product summed in component order from the first
/// (bit for bit `q.iter().zip(k_j).map(|(a, b)| a * b).sum::<f64>()`: -0.0 + x is x). The lanes
/// run over keys, never reassociating one sum, so it vectorises and stays exact: the f64 rows of
/// `analysis::partners::Heads`, every query of a layer (the pruned attention mass) at once.
/// Keys are taken `DOTS_LANES` at a time, their sums held in registers (4 AVX-512 or 8 AVX2
/// vectors: independent chains of adds) while the components stream by; with `stride` a
/// multiple of `DOTS_LANES` (and `kt` that long per component) the last keys are one such
/// block too, else they are summed one by one.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
pub fn dots_f64_columns(q: &[f64], kt: &[f64], stride: usize, out: &mut [f64]) {
    const L: usize = DOTS_LANES;
    let n = out.len();
    let Some((&q0, rest)) = q.split_first() else {
        out.fill(std::iter::empty::<f64>().sum());
        return;
    };
    if n == 0 {
        return;
    }
    assert!(n <= stride && kt.len() >= q.len() * stride, "{n} keys of stride {stride}, {} values for {} components", kt.len(), q.len());
    let block = |j: usize| -> [f64; L] {
        let mut acc = [0f64; L];
        for (a, &k) in acc.iter_mut().zip(&kt[j..j + L]) {
            *a = q0 * k;
        }
        for (row, &qc) in kt.chunks_exact(stride).skip(1).zip(rest) {
            for (a, &k) in acc.iter_mut().zip(&row[j..j + L]) {
                *a += qc * k;
            }
        }
        acc
    };
    let mut chunks = out.chunks_exact_mut(L);
    for (b, o) in (&mut chunks).enumerate() {
        o.copy_from_slice(&block(b * L));
    }
    let tail = chunks.into_remainder();
    let j0 = n - tail.len();
    if !tail.is_empty() && j0 + L <= stride {
        tail.copy_from_slice(&block(j0)[..tail.len()]);
    } else {
        for (o, j) in tail.iter_mut().zip(j0..) {
            let mut a = q0 * kt[j];
            for (row, &qc) in kt.chunks_exact(stride).skip(1).zip(rest) {
                a += qc * row[j];
            }
            *o = a;
        }
    }
}

/// The keys `dots_f64_columns` takes at a time: pad its `stride` to a multiple of this.
pub const DOTS_LANES: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    /// The column sweep gives each dot product bit for bit as the sequential sum does.
    #[test]
    fn f64_column_dots_are_the_sequential_sums() {
        let (d, t) = (37usize, 101usize);
        let mut s = 7u64;
        let mut rnd = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 3.0
        };
        let q: Vec<f64> = (0..d).map(|_| rnd()).collect();
        let keys: Vec<Vec<f64>> = (0..t).map(|_| (0..d).map(|_| rnd()).collect()).collect();
        // Unpadded (the last keys one by one) and padded (the last keys one block) strides.
        for stride in [t, t.next_multiple_of(DOTS_LANES)] {
            let mut kt = vec![0.0; d * stride];
            for (c, row) in kt.chunks_exact_mut(stride).enumerate() {
                for (j, k) in keys.iter().enumerate() {
                    row[j] = k[c];
                }
            }
            for n in [75, t] {
                let mut out = vec![0.0; n];
                dots_f64_columns(&q, &kt, stride, &mut out);
                for (j, &o) in out.iter().enumerate() {
                    let want: f64 = q.iter().zip(&keys[j]).map(|(a, b)| a * b).sum();
                    assert_eq!(o.to_bits(), want.to_bits(), "stride {stride}, {n} keys: key {j}");
                }
            }
        }
    }

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 3e-7, "relative error {worst}");
        assert!(exp(-200.0) < 1e-37);
    }

    #[test]
    fn causal_softmax_matches_reference() {
        let t = 37;
        let v: Vec<f32> = (0..t * t).map(|i| ((i * 7919) % 101) as f32 / 10.0 - 5.0).collect();
        let mut got = v.clone();
        got.chunks_mut(t).enumerate().for_each(|(r, row)| causal_softmax_row(row, r, 0.5));
        for r in 0..t {
            let xs: Vec<f64> = (0..=r).map(|j| v[r * t + j] as f64 * 0.5).collect();
            let m = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = xs.iter().map(|x| (x - m).exp()).sum();
            for j in 0..t {
                let want = if j <= r { (xs[j] - m).exp() / z } else { 0.0 };
                assert!((got[r * t + j] as f64 - want).abs() < 1e-6);
            }
        }
    }
}
