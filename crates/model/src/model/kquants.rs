//! The K-quants (Q2_K .. Q6_K: 256-value super-blocks) on the integer route, as llama.cpp's
//! `ggml_vec_dot_q*_K_q8_K` compute them: X quantized to Q8_K (one f32 scale per 256 values,
//! the sums of the quants per 16 values), the weight's sub-block scales and mins applied as
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

/// X's rows in Q8_K: llama.cpp's `quantize_row_q8_K_ref`, value for value (its scale's sign
/// included: iscale = -127 / the value of largest magnitude, d = 1 / iscale).
pub fn quantize(x: &[f32], m: usize, cols: usize) -> Q8Rows {
    assert!(cols % 256 == 0 && x.len() == m * cols, "{m} rows of {cols} from {} values (Q8_K needs multiples of 256)", x.len());
    let ns = m * cols / 256;
    let mut r = Q8Rows { m, cols, kind: XKind::Q8K, q: vec![0i8; m * cols], d: vec![0f32; ns], xs: Vec::new(), bsum: vec![0i16; 16 * ns] };
    const PER_TASK: usize = 64;
    r.q.par_chunks_mut(256 * PER_TASK)
        .zip(x.par_chunks(256 * PER_TASK))
        .zip(r.d.par_chunks_mut(PER_TASK).zip(r.bsum.par_chunks_mut(16 * PER_TASK)))
        .for_each(|((q, x), (d, bsum))| {
            #[cfg(target_arch = "x86_64")]
            if avx512::available() {
                // SAFETY: the CPU has AVX-512 F/BW/VL/VNNI (`available`).
                return unsafe { avx512::quantize_blocks(x, q, d, bsum) };
            }
            quantize_blocks(x, q, d, bsum)
        });
    r
}

/// `quantize` of whole super-blocks in plain Rust (the AVX-512 version computes the same).
fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], bsum: &mut [i16]) {
    for (s, (xb, qb)) in x.chunks_exact(256).zip(q.chunks_exact_mut(256)).enumerate() {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                (amax, max) = (v.abs(), v);
            }
        }
        if amax == 0.0 {
            qb.fill(0);
            d[s] = 0.0;
            bsum[16 * s..16 * s + 16].fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (o, &v) in qb.iter_mut().zip(xb) {
            // llama.cpp's nearest_int (ties to even) of a value within +-127.
            *o = (((iscale * v + 12_582_912.0) - 12_582_912.0) as i32).min(127) as i8;
        }
        for h in 0..16 {
            bsum[16 * s + h] = qb[16 * h..16 * h + 16].iter().map(|&v| v as i16).sum();
        }
        d[s] = 1.0 / iscale;
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

    /// `super::quantize_blocks` in AVX-512: the same amax and first value of that magnitude,
    /// the same iscale, products and rounding, the same clamp.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], bsum: &mut [i16]) {
        let ns = x.len() / 256;
        assert!(q.len() == 256 * ns && d.len() == ns && bsum.len() == 16 * ns);
        let magic = _mm512_set1_ps(12_582_912.0);
        for s in 0..ns {
            let xs = x.as_ptr().add(256 * s);
            let mut v = [_mm512_setzero_ps(); 16];
            let mut am = _mm512_setzero_ps();
            for (h, vh) in v.iter_mut().enumerate() {
                *vh = _mm512_loadu_ps(xs.add(16 * h));
                am = _mm512_max_ps(am, _mm512_abs_ps(*vh));
            }
            let amax = _mm512_reduce_max_ps(am);
            if amax == 0.0 || amax.is_nan() {
                // The reference skips NaNs in its search; leave those rare blocks to it.
                super::quantize_blocks(&x[256 * s..256 * s + 256], &mut q[256 * s..256 * s + 256], &mut d[s..s + 1], &mut bsum[16 * s..16 * s + 16]);
                continue;
            }
            // The first value of largest magnitude (the reference's strict `>`).
            let want = _mm512_set1_ps(amax);
            let mut max = 0f32;
            for (h, vh) in v.iter().enumerate() {
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(*vh), want);
                if hit != 0 {
                    max = *xs.add(16 * h + hit.trailing_zeros() as usize);
                    break;
                }
            }
            let iscale = -127.0 / max;
            let is = _mm512_set1_ps(iscale);
            let top = _mm512_set1_epi32(127);
            for (h, vh) in v.iter().enumerate() {
                let r = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(is, *vh), magic), magic));
                let r = _mm512_min_epi32(r, top);
                _mm_storeu_si128(q.as_mut_ptr().add(256 * s + 16 * h).cast(), _mm512_cvtepi32_epi8(r));
                bsum[16 * s + h] = _mm512_reduce_add_epi32(r) as i16;
            }
            d[s] = 1.0 / iscale;
        }
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
    use rand::{rngs::StdRng, Rng, SeedableRng};

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

    /// The AVX-512 quantization equals the reference (quants, scales, sums): random blocks at
    /// magnitudes 2^0..2^6, a block of zeros, a block whose largest magnitude is negative and
    /// one where +a and -a tie (the first wins, as in llama.cpp).
    #[test]
    fn quantize_simd_equals_reference() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut x: Vec<f32> = (0..256 * 12).map(|i| rng.gen_range(-1f32..1.0) * (1 << (i % 7)) as f32).collect();
        x[256..512].fill(0.0);
        x[512 + 7] = -100.0;
        x[768 + 3] = 1000.0;
        x[768 + 200] = -1000.0;
        let ns = x.len() / 256;
        let (mut q1, mut d1, mut b1) = (vec![0i8; 256 * ns], vec![0f32; ns], vec![0i16; 16 * ns]);
        quantize_blocks(&x, &mut q1, &mut d1, &mut b1);
        assert!(d1[2] > 0.0 && q1[512 + 7] == -127 && d1[3] < 0.0 && q1[768 + 3] == -127 && q1[768 + 200] == 127, "llama.cpp's signs");
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            let (mut q2, mut d2, mut b2) = (q1.clone(), d1.clone(), b1.clone());
            q2.fill(9);
            // SAFETY: `available`.
            unsafe { avx512::quantize_blocks(&x, &mut q2, &mut d2, &mut b2) };
            assert_eq!(q1, q2);
            assert_eq!(b1, b2);
            assert_eq!(d1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), d2.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
    }
}
