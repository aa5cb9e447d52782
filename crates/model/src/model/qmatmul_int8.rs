//! llama.cpp's route to a quantized product: Y (m, out) = X (m, in) W^T with X quantized to
//! 8-bit blocks and each block an integer dot product with the weight's quants, scaled after.
//! Every block type takes it where the CPU has AVX-512 VNNI (`qmatmul::int8_route`); F16,
//! BF16 and F32 weights stay on `qmatmul`'s f32 panels. Two forms, as llama.cpp's:
//! the 32-value block types here (X in Q8_0), the K-quants' 256-value super-blocks in
//! `kquants` (X in Q8_K, the sub-block scales applied as integers).
//!
//! **One form for the 32-value types.** A block of any weight row is unpacked (`unpack`) to
//! 32 unsigned quants u, a scale D and an offset C, with w = D * u + C: Q4_0 u = nibble,
//! C = -8 D; Q4_1 C = the block's min; Q8_0 u = q + 128, C = -128 D; ... (`unpack` also gives
//! the K-quants' quants, per 16-value half, which `kquants` reads.) Then X row . W row = sum
//! over blocks b of
//!     S(b) * (D(b) * dx(b))  +  C(b) * xs(b)
//! with S the integer sum of u * x's quants and xs = dx * (sum of x's quants). **Every kernel
//! adds these terms in this order, one fused multiply-add each** (`dot_reference` is the
//! definition), so a row's value is the same bit for bit whichever kernel computes it: the AMX
//! tiles (`qmatmul_amx`, many rows), the VNNI panels here (many rows, no AMX), the one-row
//! kernels (`qmatvec_int8`, decode).
//!
//! The VNNI panels: `vpdpbusd` (u8 x i8, 4 products summed into each of 16 i32 lanes), the
//! weight's quants as its unsigned operand; a panel of 16 weight rows is unpacked and
//! interleaved per call (4 bytes of row 0, 4 of row 1, ...) so that one 64-byte load feeds 16
//! output lanes; X's rows go 4 at a time over the panel.

use super::qmatvec::{f16_at, QMatrix, QType};
use rayon::prelude::*;

/// Weight rows per panel: the 16 i32 lanes of one register.
const R: usize = 16;

/// X's rows quantized for the integer route, in one of llama.cpp's two forms (`XKind`):
/// Q8_0, 32-value blocks of i8 with one f32 scale `d` and `xs` per block, d times the sum of
/// the quants (the offset terms' factor); or Q8_K (`kquants`), 256-value super-blocks with one
/// scale `d` each and `bsum`, the sum of the quants per 16 values.
pub struct Q8Rows {
    pub m: usize,
    pub cols: usize,
    pub kind: XKind,
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub xs: Vec<f32>,
    pub bsum: Vec<i16>,
}

/// How X is quantized for a weight: Q8_0 for the 32-value block types, Q8_K for the K-quants
/// (as llama.cpp's `vec_dot_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XKind {
    Q8_0,
    Q8K,
}

impl XKind {
    pub fn of(ty: QType) -> XKind {
        if matches!(ty, QType::Q2K | QType::Q3K | QType::Q4K | QType::Q5K | QType::Q6K) {
            XKind::Q8K
        } else {
            XKind::Q8_0
        }
    }
}

impl Q8Rows {
    /// llama.cpp's `quantize_row_q8_0`: d = max|x| / 127, q = x / d rounded to nearest, ties
    /// to even (as its AVX code rounds; by adding and taking away 1.5 * 2^23, which vectorises
    /// where `f32::round` is a libm call).
    /// X quantized for a weight of type `ty` (`XKind::of`).
    pub fn quantize_for(ty: QType, x: &[f32], m: usize, cols: usize) -> Q8Rows {
        match XKind::of(ty) {
            XKind::Q8_0 => Q8Rows::quantize(x, m, cols),
            XKind::Q8K => quantize_k(x, m, cols),
        }
    }

    pub fn quantize(x: &[f32], m: usize, cols: usize) -> Q8Rows {
        assert!(cols % 32 == 0 && x.len() == m * cols, "{m} rows of {cols} from {} values", x.len());
        let nb = m * cols / 32;
        let mut r = Q8Rows { m, cols, kind: XKind::Q8_0, q: vec![0i8; m * cols], d: vec![0f32; nb], xs: vec![0f32; nb], bsum: Vec::new() };
        // Blocks in parallel where there are many (a prefill's X: a few MB).
        const PER_TASK: usize = 512;
        r.q.par_chunks_mut(32 * PER_TASK)
            .zip(x.par_chunks(32 * PER_TASK))
            .zip(r.d.par_chunks_mut(PER_TASK).zip(r.xs.par_chunks_mut(PER_TASK)))
            .for_each(|((q, x), (d, xs))| {
                #[cfg(target_arch = "x86_64")]
                if vnni::available() {
                    // SAFETY: the CPU has AVX-512 F/BW/VL (`available`).
                    return unsafe { vnni::quantize_blocks(x, q, d, xs) };
                }
                quantize_blocks(x, q, d, xs)
            });
        r
    }

    /// Row i's quants.
    pub fn row(&self, i: usize) -> &[i8] {
        &self.q[i * self.cols..(i + 1) * self.cols]
    }
}

/// `Q8Rows::quantize` of whole blocks: `x` and `q` 32 values a block, the rest one a block. The reference of the AVX-512 version (`vnni::quantize_blocks`), which
/// computes the same values.
fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], xs: &mut [f32]) {
    for (b, (xb, qb)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let db = amax / 127.0;
        let id = if db != 0.0 { 1.0 / db } else { 0.0 };
        for (o, v) in qb.iter_mut().zip(xb) {
            // |v * id| <= 127: the i32 conversion is exact and in range.
            *o = ((v * id + 12_582_912.0) - 12_582_912.0) as i32 as i8;
        }
        let s: i32 = qb.iter().map(|&v| v as i32).sum();
        d[b] = db;
        xs[b] = db * s as f32;
    }
}

/// X's rows in Q8_K: llama.cpp's `quantize_row_q8_K_ref`, value for value (its scale's sign
/// included: iscale = -127 / the value of largest magnitude, d = 1 / iscale).
pub fn quantize_k(x: &[f32], m: usize, cols: usize) -> Q8Rows {
    assert!(cols % 256 == 0 && x.len() == m * cols, "{m} rows of {cols} from {} values (Q8_K needs multiples of 256)", x.len());
    let ns = m * cols / 256;
    let mut r = Q8Rows { m, cols, kind: XKind::Q8K, q: vec![0i8; m * cols], d: vec![0f32; ns], xs: Vec::new(), bsum: vec![0i16; 16 * ns] };
    const PER_TASK: usize = 64;
    r.q.par_chunks_mut(256 * PER_TASK)
        .zip(x.par_chunks(256 * PER_TASK))
        .zip(r.d.par_chunks_mut(PER_TASK).zip(r.bsum.par_chunks_mut(16 * PER_TASK)))
        .for_each(|((q, x), (d, bsum))| {
            #[cfg(target_arch = "x86_64")]
            if vnni::available() {
                // SAFETY: the CPU has AVX-512 F/BW/VL (`available`).
                return unsafe { vnni::quantize_k_blocks(x, q, d, bsum) };
            }
            quantize_k_blocks(x, q, d, bsum)
        });
    r
}

/// `quantize_k` of whole super-blocks in plain Rust (the AVX-512 version computes the same).
fn quantize_k_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], bsum: &mut [i16]) {
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

/// Whether a type is in blocks the integer route reads (every GGUF block type; not the float
/// types).
pub fn supports(ty: QType) -> bool {
    !matches!(ty, QType::F16 | QType::BF16 | QType::F32)
}

/// Whether this CPU runs the integer route's kernels (AVX-512 with VNNI). Without them the
/// portable integer code would be slower than the f32 panels, so `qmatmul::product` keeps the
/// f32 route there.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return vnni::available();
    #[allow(unreachable_code)]
    false
}

/// One 32-value block of a weight row in the integer route's form: w[k] = d[h] * u[k] + c[h],
/// h = k / 16 (d[1] = d[0], c[1] = c[0] for one-scale types).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Block32 {
    pub u: [u8; 32],
    pub d: [f32; 2],
    pub c: [f32; 2],
}

/// Block `b` (the b-th 32 values) of a weight row of type `ty` (`row` its bytes), unpacked.
/// llama.cpp's layouts (ggml-quants.c, dequantize_row_*); the scales and offsets are computed
/// by these expressions in every kernel, so they are the same f32 values everywhere.
pub fn unpack(ty: QType, row: &[u8], b: usize, out: &mut Block32) {
    (out.d, out.c) = unpack_into(ty, row, b, &mut out.u);
}

/// `unpack` with the quants written to `u` (the destination a kernel's panel holds) and the
/// (scales, offsets) of the two halves returned.
#[inline]
pub fn unpack_into(ty: QType, row: &[u8], b: usize, u: &mut [u8; 32]) -> ([f32; 2], [f32; 2]) {
    unpack_with::<false>(ty, row, b, u)
}

/// `unpack_into` with the f16 scales converted by the F16C instruction (`F16C`, in code
/// compiled for it: the panels' fills) or in software; the conversion is exact either way.
#[inline(always)]
pub(crate) fn unpack_with<const F16C: bool>(ty: QType, row: &[u8], b: usize, u: &mut [u8; 32]) -> ([f32; 2], [f32; 2]) {
    let one = |d: f32, c: f32| ([d; 2], [c; 2]);
    match ty {
        QType::Q4_0 | QType::Q4_1 => {
            let (bb, qs) = if ty == QType::Q4_0 { (18, 2) } else { (20, 4) };
            let blk = &row[bb * b..bb * (b + 1)];
            for l in 0..16 {
                u[l] = blk[qs + l] & 15;
                u[l + 16] = blk[qs + l] >> 4;
            }
            let d = f16_at::<F16C>(blk, 0);
            let c = if ty == QType::Q4_0 { -8.0 * d } else { f16_at::<F16C>(blk, 2) };
            one(d, c)
        }
        QType::Q5_0 | QType::Q5_1 => {
            let (bb, qh, qs) = if ty == QType::Q5_0 { (22, 2, 6) } else { (24, 4, 8) };
            let blk = &row[bb * b..bb * (b + 1)];
            let h = u32::from_le_bytes(blk[qh..qh + 4].try_into().unwrap());
            for l in 0..16 {
                u[l] = (blk[qs + l] & 15) | ((((h >> l) & 1) as u8) << 4);
                u[l + 16] = (blk[qs + l] >> 4) | ((((h >> (l + 16)) & 1) as u8) << 4);
            }
            let d = f16_at::<F16C>(blk, 0);
            let c = if ty == QType::Q5_0 { -16.0 * d } else { f16_at::<F16C>(blk, 2) };
            one(d, c)
        }
        QType::Q8_0 => {
            let blk = &row[34 * b..34 * (b + 1)];
            for l in 0..32 {
                u[l] = blk[2 + l] ^ 0x80;
            }
            let d = f16_at::<F16C>(blk, 0);
            one(d, -128.0 * d)
        }
        QType::Q4K | QType::Q5K => {
            let (bb, qs) = if ty == QType::Q4K { (144, 16) } else { (176, 48) };
            let (blk, j) = (&row[bb * (b / 8)..bb * (b / 8 + 1)], b % 8);
            let q = &blk[qs + 32 * (j / 2)..qs + 32 * (j / 2) + 32];
            for l in 0..32 {
                u[l] = if j % 2 == 0 { q[l] & 15 } else { q[l] >> 4 };
                if ty == QType::Q5K {
                    u[l] |= ((blk[16 + l] >> j) & 1) << 4;
                }
            }
            let (sc, mn) = scale_min_k4(j, &blk[4..16]);
            let (d, dmin) = (f16_at::<F16C>(blk, 0), f16_at::<F16C>(blk, 2));
            one(d * sc as f32, -(dmin * mn as f32))
        }
        QType::Q6K => {
            let (blk, j) = (&row[210 * (b / 8)..210 * (b / 8 + 1)], b % 8);
            let (n, t) = (j / 4, j % 4);
            let ql = &blk[64 * n + 32 * (t & 1)..][..32];
            let qh = &blk[128 + 32 * n..][..32];
            for l in 0..32 {
                let lo = if t < 2 { ql[l] & 15 } else { ql[l] >> 4 };
                u[l] = lo | (((qh[l] >> (2 * t)) & 3) << 4);
            }
            let d = f16_at::<F16C>(blk, 208);
            let dh = [0, 1].map(|h| d * (blk[192 + 8 * n + 2 * t + h] as i8) as f32);
            (dh, dh.map(|v| -32.0 * v))
        }
        QType::Q2K => {
            let (blk, j) = (&row[84 * (b / 8)..84 * (b / 8 + 1)], b % 8);
            let (n, t) = (j / 4, j % 4);
            let q = &blk[16 + 32 * n..][..32];
            for l in 0..32 {
                u[l] = (q[l] >> (2 * t)) & 3;
            }
            let (d, dmin) = (f16_at::<F16C>(blk, 80), f16_at::<F16C>(blk, 82));
            let sc = [blk[8 * n + 2 * t], blk[8 * n + 2 * t + 1]];
            (sc.map(|s| d * (s & 15) as f32), sc.map(|s| -(dmin * (s >> 4) as f32)))
        }
        QType::Q3K => {
            let (blk, j) = (&row[110 * (b / 8)..110 * (b / 8 + 1)], b % 8);
            let (n, t) = (j / 4, j % 4);
            let (hm, q) = (&blk[..32], &blk[32 + 32 * n..][..32]);
            for l in 0..32 {
                u[l] = ((q[l] >> (2 * t)) & 3) | (((hm[l] >> j) & 1) << 2);
            }
            let sc = q3k_scales(&blk[96..108]);
            let d = f16_at::<F16C>(blk, 108);
            let dh = [0, 1].map(|h| d * (sc[8 * n + 2 * t + h] as i32 - 32) as f32);
            (dh, dh.map(|v| -4.0 * v))
        }
        QType::F16 | QType::BF16 | QType::F32 => unreachable!("{ty:?} is not a block type"),
    }
}

/// candle's get_scale_min_k4: the j-th 6-bit (scale, min) of a Q4_K / Q5_K block.
#[inline(always)]
pub fn scale_min_k4(j: usize, sc: &[u8]) -> (u8, u8) {
    if j < 4 {
        (sc[j] & 63, sc[j + 4] & 63)
    } else {
        ((sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4))
    }
}

/// Q3_K's sixteen 6-bit scales (before subtracting 32), unpacked from its 12 bytes as
/// llama.cpp's dequantize_row_q3_K does.
pub fn q3k_scales(s: &[u8]) -> [u8; 16] {
    let aux = |i: usize| u32::from_le_bytes(s[4 * i..4 * i + 4].try_into().unwrap());
    let (a0, a1, tmp) = (aux(0), aux(1), aux(2));
    let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    let w = [
        (a0 & k2) | ((tmp & k1) << 4),
        (a1 & k2) | (((tmp >> 2) & k1) << 4),
        ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4),
        ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4),
    ];
    let mut out = [0u8; 16];
    for (i, v) in w.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Weight row `row` (a 32-value block type `ty`) . X row i (in Q8_0), in plain Rust: the
/// definition every kernel reproduces bit for bit (the order of the module's comment, one fused
/// multiply-add a term). `int8::dot_reference` takes any block type.
pub fn dot_reference(ty: QType, row: &[u8], x: &Q8Rows, i: usize) -> f32 {
    assert!(XKind::of(ty) == XKind::Q8_0 && x.kind == XKind::Q8_0, "{ty:?} by the 32-value form, X in {:?}", x.kind);
    let nb = x.cols / 32;
    let mut blk = Block32::default();
    let mut acc = 0f32;
    for b in 0..nb {
        unpack(ty, row, b, &mut blk);
        let xq = &x.q[(i * nb + b) * 32..][..32];
        let dx = x.d[i * nb + b];
        let s: i32 = (0..32).map(|k| blk.u[k] as i32 * xq[k] as i32).sum();
        acc = (s as f32).mul_add(blk.d[0] * dx, acc);
        acc = blk.c[0].mul_add(x.xs[i * nb + b], acc);
    }
    acc
}

/// Y = X W^T by the VNNI panels for a 32-value block type (`x` in Q8_0); `y` (m, q.rows)
/// overwritten. `int8::matmul` takes any block type.
pub fn matmul(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    assert!(supports(q.ty) && x.cols == q.cols && y.len() == x.m * q.rows && XKind::of(q.ty) == XKind::Q8_0 && x.kind == XKind::Q8_0, "{q:?} by the 32-value panels");
    let (out, m) = (q.rows, x.m);
    let nb = q.cols / 32;
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(R)).into_par_iter().for_each_init(
        || Panel { w: vec![0u8; nb * 32 * R], d: vec![0f32; nb * R], c: vec![0f32; nb * R] },
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
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: the tasks write disjoint elements (see `matmul`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

/// 16 weight rows unpacked and interleaved for `vpdpbusd`: for block b and 4-byte group g, the
/// 64 bytes at (b * 8 + g) * 64 are rows 0..16's quants 4g..4g + 4 of that block; `d` and `c`
/// the rows' scales and offsets at (b * 16 + row).
struct Panel {
    w: Vec<u8>,
    d: Vec<f32>,
    c: Vec<f32>,
}

impl Panel {
    /// Rows r0 .. r0 + n of `q` (rows past n are zero).
    fn fill(&mut self, q: &QMatrix, r0: usize, n: usize) {
        let (rb, nb) = (q.row_bytes(), q.cols / 32);
        if n < R {
            self.w.fill(0);
            self.d.fill(0.0);
            self.c.fill(0.0);
        }
        fill_panel(q.ty, &q.data()[r0 * rb..(r0 + n) * rb], rb, nb, &mut self.w, &mut self.d, &mut self.c);
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

    /// `times` in plain Rust: the same integer sums and the same f32 operations.
    fn times_portable(&self, x: &Q8Rows, i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        let nb = x.cols / 32;
        for i in 0..rows {
            let xi = i0 + i;
            for b in 0..nb {
                let xq = &x.q[(xi * nb + b) * 32..][..32];
                let dx = x.d[xi * nb + b];
                for r in 0..R {
                    let mut s = 0i32;
                    for g in 0..8 {
                        let wg = &self.w[(b * 8 + g) * 64 + 4 * r..][..4];
                        for k in 0..4 {
                            s += wg[k] as i32 * xq[4 * g + k] as i32;
                        }
                    }
                    let a = &mut acc[i][r];
                    *a = (s as f32).mul_add(self.d[b * R + r] * dx, *a);
                    *a = self.c[b * R + r].mul_add(x.xs[xi * nb + b], *a);
                }
            }
        }
    }
}

/// `Panel::fill` of the rows in `rows` (`rb` bytes each, `nb` blocks), compiled for the CPUs the
/// route runs on (F16C converts the scales).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+f16c+fma"))]
fn fill_panel(ty: QType, rows: &[u8], rb: usize, nb: usize, w: &mut [u8], d: &mut [f32], c: &mut [f32]) {
    let mut u = [0u8; 32];
    for (r, row) in rows.chunks_exact(rb).enumerate() {
        for b in 0..nb {
            let (dh, ch) = if multiversion::target::target_cfg_f!(target_feature = "f16c") {
                unpack_with::<true>(ty, row, b, &mut u)
            } else {
                unpack_with::<false>(ty, row, b, &mut u)
            };
            d[b * R + r] = dh[0];
            c[b * R + r] = ch[0];
            for g in 0..8 {
                let at = (b * 8 + g) * 64 + 4 * r;
                w[at..at + 4].copy_from_slice(&u[4 * g..4 * g + 4]);
            }
        }
    }
}

/// The portable panel on the first 16 rows of `q` for `rows` (<= 4) rows of X: for the tests.
#[cfg(test)]
pub(crate) fn panel_portable(q: &QMatrix, x: &Q8Rows, rows: usize, acc: &mut [[f32; R]; 4]) {
    let mut p = Panel { w: vec![0u8; q.cols * R], d: vec![0f32; q.cols / 32 * R], c: vec![0f32; q.cols / 32 * R] };
    p.fill(q, 0, R.min(q.rows));
    p.times_portable(x, 0, rows, acc);
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{Panel, Q8Rows, R};
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl")
    }

    /// `super::quantize_blocks` in AVX-512: per block, two registers of x; the same amax, d, id,
    /// the same rounding (the add-and-subtract of 1.5 * 2^23), the sums of the quants per half.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL (`available`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], xs: &mut [f32]) {
        let nb = x.len() / 32;
        assert!(q.len() == 32 * nb && d.len() == nb && xs.len() == nb);
        let magic = _mm512_set1_ps(12_582_912.0);
        for b in 0..nb {
            let lo = _mm512_loadu_ps(x.as_ptr().add(32 * b));
            let hi = _mm512_loadu_ps(x.as_ptr().add(32 * b + 16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
            let db = amax / 127.0;
            let id = _mm512_set1_ps(if db != 0.0 { 1.0 / db } else { 0.0 });
            let round = |v: __m512| _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v, id), magic), magic));
            let (ql, qh) = (round(lo), round(hi));
            _mm_storeu_si128(q.as_mut_ptr().add(32 * b).cast(), _mm512_cvtepi32_epi8(ql));
            _mm_storeu_si128(q.as_mut_ptr().add(32 * b + 16).cast(), _mm512_cvtepi32_epi8(qh));
            d[b] = db;
            xs[b] = db * _mm512_reduce_add_epi32(_mm512_add_epi32(ql, qh)) as f32;
        }
    }

    /// `super::quantize_k_blocks` in AVX-512: the same amax and first value of that magnitude,
    /// the same iscale, products and rounding, the same clamp.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_k_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], bsum: &mut [i16]) {
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
                super::quantize_k_blocks(&x[256 * s..256 * s + 256], &mut q[256 * s..256 * s + 256], &mut d[s..s + 1], &mut bsum[16 * s..16 * s + 16]);
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

    /// `Panel::times` with `vpdpbusd`: per block, 8 of them per X row (32 bytes: 8 groups of 4,
    /// each broadcast to the 16 rows' lanes), the block's integer sum scaled into f32, then the
    /// offset term.
    ///
    /// # Safety
    /// AVX-512F and AVX-512 VNNI (`available`).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn times(p: &Panel, x: &Q8Rows, i0: usize, rows: usize, acc: &mut [[f32; R]; 4]) {
        let nb = x.cols / 32;
        let mut f = [_mm512_setzero_ps(); 4];
        for b in 0..nb {
            let mut s = [_mm512_setzero_si512(); 4];
            let w = p.w.as_ptr().add(b * 8 * 64);
            for g in 0..8 {
                let wg = _mm512_loadu_si512(w.add(64 * g).cast());
                for (i, si) in s.iter_mut().enumerate().take(rows) {
                    let xg = x.q.as_ptr().add(((i0 + i) * nb + b) * 32 + 4 * g).cast::<i32>().read_unaligned();
                    *si = _mm512_dpbusd_epi32(*si, wg, _mm512_set1_epi32(xg));
                }
            }
            let dw = _mm512_loadu_ps(p.d.as_ptr().add(b * R));
            let cw = _mm512_loadu_ps(p.c.as_ptr().add(b * R));
            for (i, fi) in f.iter_mut().enumerate().take(rows) {
                let k = (i0 + i) * nb + b;
                *fi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[k])), *fi);
                *fi = _mm512_fmadd_ps(cw, _mm512_set1_ps(x.xs[k]), *fi);
            }
        }
        for i in 0..rows {
            _mm512_storeu_ps(acc[i].as_mut_ptr(), f[i]);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::qmatvec::tests::{random, ALL};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The block types (ALL less the float ones).
    pub(crate) fn block_types() -> Vec<candle_core::quantized::GgmlDType> {
        ALL.into_iter().filter(|&t| supports(QType::of(t).unwrap())).collect()
    }

    /// A random weight of `dtype` (candle's dequantization beside it) and X with its quantized
    /// rows.
    pub(crate) fn case(dtype: candle_core::quantized::GgmlDType, m: usize, out: usize, inp: usize, rng: &mut StdRng) -> (QMatrix, Vec<f32>, Vec<f32>, Q8Rows) {
        let (raw, w) = random(dtype, out, inp, rng);
        let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
        let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
        let xq = Q8Rows::quantize_for(q.ty, &x, m, inp);
        (q, w, x, xq)
    }

    /// The AVX-512 quantization gives the reference's quants, scales and sums exactly (a ramp,
    /// a block of zeros, magnitudes spread over 2^0..2^6).
    #[test]
    fn quantize_simd_equals_reference() {
        #[cfg(target_arch = "x86_64")]
        if vnni::available() {
            let mut rng = StdRng::seed_from_u64(5);
            let mut x: Vec<f32> = (0..32 * 40).map(|i| rng.gen_range(-1f32..1.0) * (1 << (i % 7)) as f32).collect();
            x[..32].iter_mut().enumerate().for_each(|(i, v)| *v = (i as f32 - 16.0) * 0.5);
            x[32..64].fill(0.0);
            let nb = x.len() / 32;
            let (mut q1, mut d1, mut a1) = (vec![0i8; 32 * nb], vec![0f32; nb], vec![0f32; nb]);
            let (mut q2, mut d2, mut a2) = (q1.clone(), d1.clone(), a1.clone());
            quantize_blocks(&x, &mut q1, &mut d1, &mut a1);
            // SAFETY: `available`.
            unsafe { vnni::quantize_blocks(&x, &mut q2, &mut d2, &mut a2) };
            assert_eq!(q1, q2);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!((bits(&d1), bits(&a1)), (bits(&d2), bits(&a2)));
            assert_eq!(&q1[..32], &[-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48, -40, -32, -24, -16, -8, 0, 8, 16, 24, 32, 40, 48, 56, 64, 71, 79, 87, 95, 103, 111, 119][..], "{:?}", &q1[..32]);
        }
    }

    /// The AVX-512 Q8_K quantization equals the reference (quants, scales, sums): random blocks at
    /// magnitudes 2^0..2^6, a block of zeros, a block whose largest magnitude is negative and
    /// one where +a and -a tie (the first wins, as in llama.cpp).
    #[test]
    fn quantize_k_simd_equals_reference() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut x: Vec<f32> = (0..256 * 12).map(|i| rng.gen_range(-1f32..1.0) * (1 << (i % 7)) as f32).collect();
        x[256..512].fill(0.0);
        x[512 + 7] = -100.0;
        x[768 + 3] = 1000.0;
        x[768 + 200] = -1000.0;
        let ns = x.len() / 256;
        let (mut q1, mut d1, mut b1) = (vec![0i8; 256 * ns], vec![0f32; ns], vec![0i16; 16 * ns]);
        quantize_k_blocks(&x, &mut q1, &mut d1, &mut b1);
        assert!(d1[2] > 0.0 && q1[512 + 7] == -127 && d1[3] < 0.0 && q1[768 + 3] == -127 && q1[768 + 200] == 127, "llama.cpp's signs");
        #[cfg(target_arch = "x86_64")]
        if vnni::available() {
            let (mut q2, mut d2, mut b2) = (q1.clone(), d1.clone(), b1.clone());
            q2.fill(9);
            // SAFETY: `available`.
            unsafe { vnni::quantize_k_blocks(&x, &mut q2, &mut d2, &mut b2) };
            assert_eq!(q1, q2);
            assert_eq!(b1, b2);
            assert_eq!(d1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), d2.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
    }

    /// `unpack` gives back candle's dequantized values, D * u + C, to f32 rounding, for every
    /// block type and every block of a row (each K-quant sub-block, each Q6_K half).
    #[test]
    fn unpack_gives_candles_values() {
        let mut rng = StdRng::seed_from_u64(31);
        for dtype in block_types() {
            let (rows, cols) = (3, 512);
            let (raw, want) = random(dtype, rows, cols, &mut rng);
            let q = QMatrix::new(dtype, &raw, rows, cols).unwrap();
            let mut blk = Block32::default();
            for r in 0..rows {
                let row = &q.data()[r * q.row_bytes()..(r + 1) * q.row_bytes()];
                for b in 0..cols / 32 {
                    unpack(q.ty, row, b, &mut blk);
                    assert!(XKind::of(q.ty) == XKind::Q8K || (blk.d[0] == blk.d[1] && blk.c[0] == blk.c[1]), "{dtype:?}");
                    for k in 0..32 {
                        let (d, c) = (blk.d[k / 16], blk.c[k / 16]);
                        let got = d * blk.u[k] as f32 + c;
                        let w = want[r * cols + 32 * b + k];
                        let tol = 1e-6 * ((d * blk.u[k] as f32).abs() + c.abs());
                        assert!((got - w).abs() <= tol, "{dtype:?} row {r} block {b} value {k}: {got} vs candle {w}");
                    }
                }
            }
        }
    }
}
