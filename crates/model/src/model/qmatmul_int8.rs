//! llama.cpp's route to a quantized product, for Q8_0 and Q4_0 weights: Y (m, out) = X (m, in)
//! W^T with X quantized to 8-bit blocks (Q8_0: 32 values, one f32 scale) and each block pair
//! an integer dot product, scaled once. Q4_0 weights take this route (`qmatmul::product`);
//! Q8_0 stays on `qmatmul`'s f32 panels for now (the real models' checks and fixtures were made
//! there); `focus-lens bench matmul` measures both side by side (docs/RESULTS.md).
//!
//! The integer product is AVX-512 VNNI's `vpdpbusd` (u8 x i8, 4 products summed into each of 16
//! i32 lanes). Its unsigned operand is the weight: a Q8_0 weight plus 128 (a Q4_0 nibble is
//! already 0..15, its offset 8), the offset taken out after by subtracting offset * sum(x
//! quants) of the block. A panel of 16 weight rows is interleaved per call (4 bytes of row 0,
//! 4 of row 1, ...) so that one 64-byte load feeds 16 output lanes (llama.cpp repacks its
//! weights once at load for the same reason); X's rows go 4 at a time over the panel. Without
//! VNNI: the same arithmetic in plain Rust (the reference the VNNI kernel is tested against).

use super::qmatvec::{f16_at, QMatrix, QType};
use rayon::prelude::*;

/// Weight rows per panel: the 16 i32 lanes of one register.
const R: usize = 16;

/// X's rows quantized to Q8_0: 32-value blocks of i8 with one f32 scale, and each block's
/// sum of quants (for the weights' offset).
pub struct Q8Rows {
    pub m: usize,
    pub cols: usize,
    q: Vec<i8>,
    d: Vec<f32>,
    sum: Vec<i32>,
}

impl Q8Rows {
    /// llama.cpp's `quantize_row_q8_0`: d = max|x| / 127, q = round(x / d).
    pub fn quantize(x: &[f32], m: usize, cols: usize) -> Q8Rows {
        assert!(cols % 32 == 0 && x.len() == m * cols);
        let nb = m * cols / 32;
        let (mut q, mut d, mut sum) = (vec![0i8; m * cols], vec![0f32; nb], vec![0i32; nb]);
        for (b, (xb, qb)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let db = amax / 127.0;
            let id = if db != 0.0 { 1.0 / db } else { 0.0 };
            let mut s = 0;
            for (o, v) in qb.iter_mut().zip(xb) {
                *o = (v * id).round() as i8;
                s += *o as i32;
            }
            d[b] = db;
            sum[b] = s;
        }
        Q8Rows { m, cols, q, d, sum }
    }
}

/// Whether `qmatmul_int8` takes this type.
pub fn supports(ty: QType) -> bool {
    matches!(ty, QType::Q8_0 | QType::Q4_0)
}

/// Y = X W^T by the integer route (`x` already quantized); `y` (m, q.rows) overwritten.
pub fn matmul(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    assert!(supports(q.ty) && x.cols == q.cols && y.len() == x.m * q.rows, "{q:?} by the int8 route");
    let (out, m) = (q.rows, x.m);
    let nb = q.cols / 32;
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(R)).into_par_iter().for_each_init(
        || Panel { w: vec![0u8; nb * 32 * R], d: vec![0f32; nb * R], off: 0 },
        |p, c| {
            let (r0, n) = (c * R, R.min(out - c * R));
            p.fill(q, r0, n);
            let yp = &yp;
            for i0 in (0..m).step_by(4) {
                let mut acc = [[0f32; R]; 4];
                let rows = 4.min(m - i0);
                p.times(x, i0, rows, &mut acc);
                for (i, a) in acc.iter().enumerate().take(rows) {
                    // SAFETY: row i0 + i, columns r0..r0 + n of Y: this task's alone.
                    let dst = unsafe { std::slice::from_raw_parts_mut(yp.0.add((i0 + i) * out + r0), n) };
                    dst.copy_from_slice(&a[..n]);
                }
            }
        },
    );
}

/// Y's base pointer, shared by the panel tasks, each of which writes its own columns.
struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint elements (see `matmul`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

/// 16 weight rows interleaved for `vpdpbusd`: for block b and 4-byte group g, the 64 bytes at
/// (b * 8 + g) * 64 are rows 0..16's bytes 4g..4g + 4 of that block, as unsigned values; `d`
/// the rows' scales per block; `off` what was added to make them unsigned.
struct Panel {
    w: Vec<u8>,
    d: Vec<f32>,
    off: i32,
}

impl Panel {
    /// Rows r0 .. r0 + n of `q` (rows past n are zero).
    fn fill(&mut self, q: &QMatrix, r0: usize, n: usize) {
        let (rb, nb) = (q.row_bytes(), q.cols / 32);
        self.w.fill(0);
        self.d.fill(0.0);
        let mut u = [0u8; 32];
        for r in 0..n {
            let row = &q.data()[(r0 + r) * rb..(r0 + r + 1) * rb];
            for b in 0..nb {
                let d = match q.ty {
                    QType::Q8_0 => {
                        let blk = &row[34 * b..34 * b + 34];
                        for j in 0..32 {
                            u[j] = blk[2 + j] ^ 0x80;
                        }
                        f16_at::<false>(blk, 0)
                    }
                    QType::Q4_0 => {
                        let blk = &row[18 * b..18 * b + 18];
                        for j in 0..16 {
                            u[j] = blk[2 + j] & 15;
                            u[j + 16] = blk[2 + j] >> 4;
                        }
                        f16_at::<false>(blk, 0)
                    }
                    t => unreachable!("{t:?} is not an int8-route type"),
                };
                self.d[b * R + r] = d;
                for g in 0..8 {
                    let at = (b * 8 + g) * 64 + 4 * r;
                    self.w[at..at + 4].copy_from_slice(&u[4 * g..4 * g + 4]);
                }
            }
        }
        self.off = if q.ty == QType::Q8_0 { 128 } else { 8 };
    }

    /// acc[i][r] = X row i0 + i . W row r, for `rows` (<= 4) rows of X.
    fn times(&self, x: &Q8Rows, i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        #[cfg(target_arch = "x86_64")]
        if vnni::available() {
            // SAFETY: the CPU has the features.
            return unsafe { vnni::times(self, x, i0, rows, acc) };
        }
        self.times_portable(x, i0, rows, acc)
    }

    /// `times` in plain Rust: the same integer sums, scaled per block.
    fn times_portable(&self, x: &Q8Rows, i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        let nb = x.cols / 32;
        for i in 0..rows {
            let xi = i0 + i;
            for b in 0..nb {
                let xq = &x.q[(xi * nb + b) * 32..][..32];
                let dx = x.d[xi * nb + b];
                let corr = self.off * x.sum[xi * nb + b];
                for r in 0..R {
                    let mut s = 0i32;
                    for g in 0..8 {
                        let wg = &self.w[(b * 8 + g) * 64 + 4 * r..][..4];
                        for k in 0..4 {
                            s += wg[k] as i32 * xq[4 * g + k] as i32;
                        }
                    }
                    acc[i][r] = ((s - corr) as f32).mul_add(self.d[b * R + r] * dx, acc[i][r]);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{Panel, Q8Rows, R};
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni")
    }

    /// `Panel::times` with `vpdpbusd`: per block, 8 of them per X row (32 bytes: 8 groups of 4,
    /// each broadcast to the 16 rows' lanes), the block's integer sums scaled into f32.
    ///
    /// # Safety
    /// AVX-512F and AVX-512 VNNI (`available`).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn times(p: &Panel, x: &Q8Rows, i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        let nb = x.cols / 32;
        let mut f = [_mm512_setzero_ps(); 4];
        let off = _mm512_set1_epi32(p.off);
        for b in 0..nb {
            let mut s = [_mm512_setzero_si512(); 4];
            let w = p.w.as_ptr().add(b * 8 * 64);
            for g in 0..8 {
                let wg = _mm512_loadu_si512(w.add(64 * g).cast());
                for i in 0..4 {
                    if i < rows {
                        let xg = x.q.as_ptr().add(((i0 + i) * nb + b) * 32 + 4 * g).cast::<i32>().read_unaligned();
                        s[i] = _mm512_dpbusd_epi32(s[i], wg, _mm512_set1_epi32(xg));
                    }
                }
            }
            let dw = _mm512_loadu_ps(p.d.as_ptr().add(b * R));
            for i in 0..4 {
                if i < rows {
                    let k = (i0 + i) * nb + b;
                    let corr = _mm512_mullo_epi32(off, _mm512_set1_epi32(x.sum[k]));
                    let v = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[i], corr));
                    f[i] = _mm512_fmadd_ps(v, _mm512_mul_ps(dw, _mm512_set1_ps(x.d[k])), f[i]);
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
    use crate::model::qmatvec::tests::random;
    use candle_core::quantized::GgmlDType;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Y equals the f64 product of candle's dequantized W with X as quantized to Q8_0 (its
    /// dequantized values q * d), up to f32 rounding of the block sums: the integer route's only
    /// error beyond that is the activations' 8-bit rounding, which the reference shares. And
    /// against X itself, within llama.cpp's Q8_0 activation error (2^-8 of the block max per
    /// value, bounded by 1% of the sum of |products| here).
    #[test]
    fn equals_dequantized_product() {
        let mut rng = StdRng::seed_from_u64(21);
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
            for (m, out, inp) in [(1, 7, 32), (5, 37, 256), (9, 161, 768)] {
                let (raw, w) = random(dtype, out, inp, &mut rng);
                let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
                let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
                let xq = Q8Rows::quantize(&x, m, inp);
                let xd: Vec<f32> = (0..m * inp).map(|k| xq.q[k] as f32 * xq.d[k / 32]).collect();
                let mut y = vec![f32::NAN; m * out];
                matmul(&q, &xq, &mut y);
                for i in 0..m {
                    for o in 0..out {
                        let wr = &w[o * inp..(o + 1) * inp];
                        let dot = |xs: &[f32]| -> (f64, f64) {
                            let p = xs[i * inp..(i + 1) * inp].iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64);
                            (p.clone().sum(), p.map(f64::abs).sum())
                        };
                        let ((want, mag), (exact, _)) = (dot(&xd), dot(&x));
                        let got = y[i * out + o] as f64;
                        assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} {m}x{inp}x{out} ({i},{o}): {got} vs {want}");
                        assert!((got - exact).abs() <= 1e-2 * mag + 1e-30, "{dtype:?} ({i},{o}): {got} vs unquantized {exact}");
                    }
                }
            }
        }
    }

    /// The portable kernel and the VNNI one (where this CPU has it) give the same sums: the
    /// integers exactly, then the same f32 operations per block.
    #[test]
    fn portable_equals_vnni() {
        let mut rng = StdRng::seed_from_u64(22);
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
            let (m, out, inp) = (3, 16, 512);
            let (raw, _) = random(dtype, out, inp, &mut rng);
            let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
            let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
            let xq = Q8Rows::quantize(&x, m, inp);
            let mut p = Panel { w: vec![0u8; inp * R], d: vec![0f32; inp / 32 * R], off: 0 };
            p.fill(&q, 0, out);
            let (mut a, mut b) = ([[0f32; R]; 4], [[0f32; R]; 4]);
            p.times(&xq, 0, m, &mut a);
            p.times_portable(&xq, 0, m, &mut b);
            assert_eq!(a, b, "{dtype:?}");
        }
    }
}
