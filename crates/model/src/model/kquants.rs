//! The K-quants (Q2_K .. Q6_K: 256-value super-blocks) on the integer route, as llama.cpp's
//! `ggml_vec_dot_q*_K_q8_K` compute them: X quantized to Q8_K (one f32 scale per 256 values,
//! the sums of the quants per 16 values: `qmatmul_int8::quantize_k`), the weight's sub-block scales and mins applied as
//! **integers**, so a super-block is scaled into f32 once, not once per 16 or 32 values (the
//! per-block f32 work, not the integer products, was what bounded the K-quants' products).
//!
//! **The form.** A super-block of a weight row is unpacked (`unpack`) to 256 unsigned quants u,
//! per 16 values h an integer scale sc(h) and min m(h), the type's offset o and two f32 factors
//! d and dmin, with w = d * sc(h) * (u - o) - dmin * m(h):
//! Q4_K / Q5_K sc, m the 6-bit scale and min of the 32-value sub-block, o = 0; Q6_K sc the
//! signed 8-bit scale, o = 32, no mins; Q3_K sc the 6-bit scale less 32, o = 4, no mins; Q2_K
//! sc, m 4 bits each, o = 0. With X's quants x, scale dx and per-16 sums bsum(h):
//!     S = sum over h of sc(h) * (sum of u * x over h  -  o * bsum(h))    (an exact i32)
//!     M = sum over h of m(h) * bsum(h)                                    (an exact i32)
//! and a row's dot is, super-block after super-block,
//!     acc = S * (d * dx) + acc,   then   acc = M * (-dmin * dx) + acc  (types with mins)
//! one fused multiply-add each (`dot_reference`). The integer sums do not depend on the order
//! a kernel adds them in, so every kernel (the VNNI panels here, the AMX tiles in
//! `qmatmul_amx`, the one-row kernels in `qmatvec_int8`) gives a row the same bits.
//! |S| <= 256 * 127 * 4096 < 2^31 (Q6_K's largest |sc (u - o)| is 128 * 32).

use super::qmatmul_int8::{q3k_scales, scale_min_k4, unpack_with as unpack_block_with, Q8Rows, SendPtr, XKind};
use super::qmatvec::{f16_at, QMatrix, QType};
use rayon::prelude::*;

/// Whether a type is a K-quant (256-value super-blocks, X in Q8_K).
pub fn is_k(ty: QType) -> bool {
    matches!(ty, QType::Q2K | QType::Q3K | QType::Q4K | QType::Q5K | QType::Q6K)
}

/// The offset o of a type's quants (w is proportional to u - o).
pub fn offset(ty: QType) -> i32 {
    match ty {
        QType::Q3K => 4,
        QType::Q6K => 32,
        _ => 0,
    }
}

/// Whether a type has mins (a `dmin * m` term).
pub fn has_mins(ty: QType) -> bool {
    matches!(ty, QType::Q2K | QType::Q4K | QType::Q5K)
}

/// One super-block in the form of the module's comment.
#[derive(Clone, Copy, Debug)]
pub struct KBlock {
    pub u: [u8; 256],
    pub sc: [i32; 16],
    pub m: [i32; 16],
    pub d: f32,
    pub dmin: f32,
}

impl Default for KBlock {
    fn default() -> Self {
        KBlock { u: [0; 256], sc: [0; 16], m: [0; 16], d: 0.0, dmin: 0.0 }
    }
}

/// Super-block `s` of a weight row of type `ty` (`row` its bytes), unpacked. The quants come
/// from `qmatmul_int8::unpack_with` (llama.cpp's layouts), the scales as llama.cpp's
/// dequantize_row_q*_K read them.
pub fn unpack(ty: QType, row: &[u8], s: usize, out: &mut KBlock) {
    unpack_with::<false>(ty, row, s, out)
}

/// `unpack` with the f16 factors converted by F16C (`F16C`) or in software (the same values).
#[inline(always)]
pub(crate) fn unpack_with<const F16C: bool>(ty: QType, row: &[u8], s: usize, out: &mut KBlock) {
    for j in 0..8 {
        let u: &mut [u8; 32] = (&mut out.u[32 * j..32 * j + 32]).try_into().expect("32 values");
        unpack_block_with::<F16C>(ty, row, 8 * s + j, u);
    }
    let (sc, m) = (&mut out.sc, &mut out.m);
    match ty {
        QType::Q4K | QType::Q5K => {
            let blk = &row[if ty == QType::Q4K { 144 } else { 176 } * s..];
            for j in 0..8 {
                let (a, b) = scale_min_k4(j, &blk[4..16]);
                (sc[2 * j], sc[2 * j + 1], m[2 * j], m[2 * j + 1]) = (a as i32, a as i32, b as i32, b as i32);
            }
            (out.d, out.dmin) = (f16_at::<F16C>(blk, 0), f16_at::<F16C>(blk, 2));
        }
        QType::Q6K => {
            let blk = &row[210 * s..];
            for h in 0..16 {
                (sc[h], m[h]) = (blk[192 + h] as i8 as i32, 0);
            }
            (out.d, out.dmin) = (f16_at::<F16C>(blk, 208), 0.0);
        }
        QType::Q3K => {
            let blk = &row[110 * s..];
            let raw = q3k_scales(&blk[96..108]);
            for h in 0..16 {
                (sc[h], m[h]) = (raw[h] as i32 - 32, 0);
            }
            (out.d, out.dmin) = (f16_at::<F16C>(blk, 108), 0.0);
        }
        QType::Q2K => {
            let blk = &row[84 * s..];
            for h in 0..16 {
                (sc[h], m[h]) = ((blk[h] & 15) as i32, (blk[h] >> 4) as i32);
            }
            (out.d, out.dmin) = (f16_at::<F16C>(blk, 80), f16_at::<F16C>(blk, 82));
        }
        _ => unreachable!("{ty:?} is not a K-quant"),
    }
}

/// Weight row `row` (K-quant `ty`) . X row i (Q8_K): the definition of the module's comment.
pub fn dot_reference(ty: QType, row: &[u8], x: &Q8Rows, i: usize) -> f32 {
    assert_eq!(x.kind, XKind::Q8K, "{ty:?} takes X in Q8_K");
    let ns = x.cols / 256;
    let o = offset(ty);
    let mut kb = KBlock::default();
    let mut acc = 0f32;
    for s in 0..ns {
        unpack(ty, row, s, &mut kb);
        let at = i * ns + s;
        let xq = &x.q[at * 256..][..256];
        let bs = &x.bsum[at * 16..][..16];
        let (mut si, mut mi) = (0i32, 0i32);
        for h in 0..16 {
            let dot: i32 = (16 * h..16 * h + 16).map(|k| kb.u[k] as i32 * xq[k] as i32).sum();
            si += kb.sc[h] * (dot - o * bs[h] as i32);
            mi += kb.m[h] * bs[h] as i32;
        }
        let dx = x.d[at];
        acc = (si as f32).mul_add(kb.d * dx, acc);
        if has_mins(ty) {
            acc = (mi as f32).mul_add(-kb.dmin * dx, acc);
        }
    }
    acc
}

/// Weight rows per panel (the 16 i32 lanes of a register).
const R: usize = 16;

/// Y = X W^T by the VNNI panels (CPUs without AMX); `x` in Q8_K, `y` (m, q.rows) overwritten.
pub fn matmul(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    assert!(is_k(q.ty) && x.kind == XKind::Q8K && x.cols == q.cols && y.len() == x.m * q.rows, "{q:?} by the K-quant panels");
    let (out, m, cols) = (q.rows, x.m, q.cols);
    // X's quants widened to i16 once (`vpdpwssd` multiplies i16 pairs).
    let x16: Vec<i16> = x.q.iter().map(|&v| v as i16).collect();
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(R)).into_par_iter().for_each_init(
        || Panel::new(cols),
        |p, c| {
            let (r0, n) = (c * R, R.min(out - c * R));
            p.fill(q, r0, n);
            let yp = &yp;
            for i0 in (0..m).step_by(4) {
                let mut acc = [[0f32; R]; 4];
                let rows = 4.min(m - i0);
                p.times(x, &x16, i0, rows, &mut acc);
                for (i, a) in acc.iter().enumerate().take(rows) {
                    // SAFETY: row i0 + i, columns r0..r0 + n of Y: this task's alone.
                    let dst = unsafe { std::slice::from_raw_parts_mut(yp.0.add((i0 + i) * out + r0), n) };
                    dst.copy_from_slice(&a[..n]);
                }
            }
        },
    );
}

/// 16 weight rows as i16 products sc(h) (u - o), pairs interleaved for `vpdpwssd`: for
/// super-block s and value pair p, the 64 bytes at (s * 128 + p) * 32 i16s are rows 0..16's
/// values 2p, 2p + 1. `m` the mins the same way per pair of 16-value groups, (s * 8 + p) * 32;
/// `d` and `mn` (-dmin) per (s * 16 + row). Rows past the matrix are zeros.
struct Panel {
    w: Vec<i16>,
    m: Vec<i16>,
    d: Vec<f32>,
    mn: Vec<f32>,
    mins: bool,
}

impl Panel {
    fn new(cols: usize) -> Panel {
        let ns = cols / 256;
        Panel { w: vec![0; cols * R], m: vec![0; ns * 16 * R], d: vec![0.0; ns * R], mn: vec![0.0; ns * R], mins: false }
    }

    fn fill(&mut self, q: &QMatrix, r0: usize, n: usize) {
        if n < R {
            self.w.fill(0);
            self.m.fill(0);
            self.d.fill(0.0);
            self.mn.fill(0.0);
        }
        let rb = q.row_bytes();
        self.mins = has_mins(q.ty);
        fill_panel(q.ty, &q.data()[r0 * rb..(r0 + n) * rb], rb, q.cols / 256, self);
    }

    fn times(&self, x: &Q8Rows, x16: &[i16], i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            // SAFETY: the CPU has the features.
            return unsafe { avx512::times(self, x, x16, i0, rows, acc) };
        }
        self.times_portable(x, x16, i0, rows, acc)
    }

    /// `times` in plain Rust: the same integer sums, the same f32 operations.
    fn times_portable(&self, x: &Q8Rows, x16: &[i16], i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        let ns = x.cols / 256;
        for (i, a) in acc.iter_mut().enumerate().take(rows) {
            let xi = i0 + i;
            for s in 0..ns {
                let at = xi * ns + s;
                for r in 0..R {
                    let (mut si, mut mi) = (0i32, 0i32);
                    for k in 0..256 {
                        si += self.w[(s * 128 + k / 2) * 32 + 2 * r + k % 2] as i32 * x16[xi * x.cols + 256 * s + k] as i32;
                    }
                    for h in 0..16 {
                        mi += self.m[(s * 8 + h / 2) * 32 + 2 * r + h % 2] as i32 * x.bsum[at * 16 + h] as i32;
                    }
                    let dx = x.d[at];
                    a[r] = (si as f32).mul_add(self.d[s * R + r] * dx, a[r]);
                    if self.mins {
                        a[r] = (mi as f32).mul_add(self.mn[s * R + r] * dx, a[r]);
                    }
                }
            }
        }
    }
}

/// `Panel::fill` of the rows in `rows` (`rb` bytes each, `ns` super-blocks), compiled for the
/// CPUs the route runs on.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+f16c+fma"))]
fn fill_panel(ty: QType, rows: &[u8], rb: usize, ns: usize, p: &mut Panel) {
    let f16c = multiversion::target::target_cfg_f!(target_feature = "f16c");
    let o = offset(ty);
    let mut kb = KBlock::default();
    for (r, row) in rows.chunks_exact(rb).enumerate() {
        for s in 0..ns {
            if f16c {
                unpack_with::<true>(ty, row, s, &mut kb)
            } else {
                unpack_with::<false>(ty, row, s, &mut kb)
            };
            for k in 0..256 {
                p.w[(s * 128 + k / 2) * 32 + 2 * r + k % 2] = (kb.sc[k / 16] * (kb.u[k] as i32 - o)) as i16;
            }
            for h in 0..16 {
                p.m[(s * 8 + h / 2) * 32 + 2 * r + h % 2] = kb.m[h] as i16;
            }
            p.d[s * R + r] = kb.d;
            p.mn[s * R + r] = -kb.dmin;
        }
    }
}

/// The portable panel on the first 16 rows of `q` for `rows` (<= 4) rows of X: for the tests.
#[cfg(test)]
pub(crate) fn panel_portable(q: &QMatrix, x: &Q8Rows, rows: usize, acc: &mut [[f32; R]; 4]) {
    let mut p = Panel::new(q.cols);
    p.fill(q, 0, R.min(q.rows));
    let x16: Vec<i16> = x.q.iter().map(|&v| v as i16).collect();
    p.times_portable(x, &x16, 0, rows, acc);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Panel, Q8Rows, R};
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("avx512vnni")
    }

    /// `Panel::times` with `vpdpwssd`: per super-block, 128 of them per X row (each a pair of
    /// X's quants broadcast against 16 rows' pairs), 8 for the mins, then the two f32 terms.
    ///
    /// # Safety
    /// AVX-512F and VNNI (`available`).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn times(p: &Panel, x: &Q8Rows, x16: &[i16], i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        let ns = x.cols / 256;
        let mut f = [_mm512_setzero_ps(); 4];
        for s in 0..ns {
            let (mut si, mut mi) = ([_mm512_setzero_si512(); 4], [_mm512_setzero_si512(); 4]);
            let w = p.w.as_ptr().add(s * 128 * 32);
            for pr in 0..128 {
                let wv = _mm512_loadu_si512(w.add(32 * pr).cast());
                for (i, sv) in si.iter_mut().enumerate().take(rows) {
                    let xx = x16.as_ptr().add((i0 + i) * x.cols + 256 * s + 2 * pr).cast::<i32>().read_unaligned();
                    *sv = _mm512_dpwssd_epi32(*sv, wv, _mm512_set1_epi32(xx));
                }
            }
            let mw = p.m.as_ptr().add(s * 8 * 32);
            for pr in 0..8 {
                let mv = _mm512_loadu_si512(mw.add(32 * pr).cast());
                for (i, mvi) in mi.iter_mut().enumerate().take(rows) {
                    let bb = x.bsum.as_ptr().add(((i0 + i) * ns + s) * 16 + 2 * pr).cast::<i32>().read_unaligned();
                    *mvi = _mm512_dpwssd_epi32(*mvi, mv, _mm512_set1_epi32(bb));
                }
            }
            let (dv, mnv) = (_mm512_loadu_ps(p.d.as_ptr().add(s * R)), _mm512_loadu_ps(p.mn.as_ptr().add(s * R)));
            for (i, fi) in f.iter_mut().enumerate().take(rows) {
                let dx = _mm512_set1_ps(x.d[(i0 + i) * ns + s]);
                *fi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si[i]), _mm512_mul_ps(dv, dx), *fi);
                if p.mins {
                    *fi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mi[i]), _mm512_mul_ps(mnv, dx), *fi);
                }
            }
        }
        for i in 0..rows {
            _mm512_storeu_ps(acc[i].as_mut_ptr(), f[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatmul_int8::tests::block_types;
    use crate::model::qmatvec::tests::random;
    use rand::{rngs::StdRng, SeedableRng};

    /// `unpack` gives back candle's dequantized values, d sc (u - o) - dmin m, to f32 rounding,
    /// for every K-quant and every super-block of a row.
    #[test]
    fn unpack_gives_candles_values() {
        let mut rng = StdRng::seed_from_u64(31);
        for dtype in block_types() {
            let q_ty = QType::of(dtype).unwrap();
            if !is_k(q_ty) {
                continue;
            }
            let (rows, cols) = (3, 768);
            let (raw, want) = random(dtype, rows, cols, &mut rng);
            let q = QMatrix::new(dtype, &raw, rows, cols).unwrap();
            let mut kb = KBlock::default();
            for r in 0..rows {
                let row = &q.data()[r * q.row_bytes()..(r + 1) * q.row_bytes()];
                for s in 0..cols / 256 {
                    unpack(q.ty, row, s, &mut kb);
                    assert!(has_mins(q.ty) || (kb.dmin == 0.0 && kb.m == [0; 16]), "{dtype:?}");
                    for k in 0..256 {
                        let h = k / 16;
                        let a = kb.d * (kb.sc[h] * (kb.u[k] as i32 - offset(q.ty))) as f32;
                        let b = kb.dmin * kb.m[h] as f32;
                        let w = want[r * cols + 256 * s + k];
                        assert!((a - b - w).abs() <= 1e-6 * (a.abs() + b.abs()), "{dtype:?} row {r} super-block {s} value {k}: {} vs candle {w}", a - b);
                    }
                }
            }
        }
    }
}
