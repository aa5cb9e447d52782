//! One f32 row times a weight kept in its GGUF quantized blocks: y = W x with W (out, in), each
//! row of W `in / block` blocks. A generation step reads every weight once, so its cost is the
//! weight bytes: Q4_1 is a sixth of f32's. Each block is dequantized in registers to exactly the
//! f32 values candle's `to_float` gives (the full forward's weights), then multiplied with the
//! f32 activation, so only the order of summation differs from the f32 path.
//!
//! Every dequantization below is a product of small integers and f16 scales that is exact in
//! f32 (at most 24 significant bits), so `q.mul_add(d, m)` rounds once, as candle's `q * d + m`
//! does. The other storage types are dequantized a chunk of rows at a time (`dequantize_rows`,
//! every type: candle's `to_float` where no kernel here reads the type) and then multiplied.

use candle_core::quantized::k_quants::{self, GgmlType};
use candle_core::quantized::GgmlDType;
use half::f16;
use multiversion::multiversion;
use rayon::prelude::*;

/// The GGUF storage types a weight may keep (every one the products multiply; the one-row
/// kernels below read those of our GGUF models: SmolLM2 Q4_1 + Q8_0; Qwen2.5 / Gemma 3
/// Q4_K_M: Q4_K, Q6_K, Q5_0, Q8_0; and Q4_0; the rest are dequantized by rows first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    F16,
    BF16,
    F32,
}

impl QType {
    /// `None` for a type no weight is stored in (Q8_1, Q8_K are activation formats).
    pub fn of(dtype: GgmlDType) -> Option<QType> {
        Some(match dtype {
            GgmlDType::Q4_0 => QType::Q4_0,
            GgmlDType::Q4_1 => QType::Q4_1,
            GgmlDType::Q5_0 => QType::Q5_0,
            GgmlDType::Q5_1 => QType::Q5_1,
            GgmlDType::Q8_0 => QType::Q8_0,
            GgmlDType::Q2K => QType::Q2K,
            GgmlDType::Q3K => QType::Q3K,
            GgmlDType::Q4K => QType::Q4K,
            GgmlDType::Q5K => QType::Q5K,
            GgmlDType::Q6K => QType::Q6K,
            GgmlDType::F16 => QType::F16,
            GgmlDType::BF16 => QType::BF16,
            GgmlDType::F32 => QType::F32,
            GgmlDType::Q8_1 | GgmlDType::Q8K => return None,
        })
    }

    /// (elements, bytes) of one block.
    pub fn block(self) -> (usize, usize) {
        match self {
            QType::Q4_0 => (32, 18),
            QType::Q4_1 => (32, 20),
            QType::Q5_0 => (32, 22),
            QType::Q5_1 => (32, 24),
            QType::Q8_0 => (32, 34),
            QType::Q2K => (256, 84),
            QType::Q3K => (256, 110),
            QType::Q4K => (256, 144),
            QType::Q5K => (256, 176),
            QType::Q6K => (256, 210),
            QType::F16 | QType::BF16 => (1, 2),
            QType::F32 => (1, 4),
        }
    }

    /// Whether the one-row kernels below read this type (else `times` dequantizes rows first).
    fn has_row_kernel(self) -> bool {
        matches!(self, QType::Q4_0 | QType::Q4_1 | QType::Q5_0 | QType::Q8_0 | QType::Q4K | QType::Q6K)
    }
}

/// How the CPU multiplies by a weight kept in GGUF blocks (a model's setting:
/// `Decoder::set_products`, the CLI's `--products`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Products {
    /// The blocks dequantized exactly (candle's values, llama.cpp's formulas) and multiplied in
    /// f32: the f32 panels, the one-row kernels. A result moves by f32 rounding when its inputs
    /// do, so two computations of one function (dense and top-k with every group, a decode step
    /// and the forward) agree to ~1e-6, and the shipped adapters' figures reproduce. The default.
    #[default]
    Exact,
    /// llama.cpp's route: each product's input quantized to 8-bit blocks (Q8_0, or Q8_K for the
    /// K-quants, as llama.cpp does) and integer dot products (`qmatmul_int8`, `kquants`,
    /// `qmatmul_amx`, `qmatvec_int8`), where the CPU has AVX-512 VNNI;
    /// 2-4x faster. An 8-bit step amplifies rounding upstream: the perplexities of dense and of
    /// top-k with every group, the same function, differ by ~0.1% over 7k tokens of SmolLM2
    /// (docs/RESULTS.md), noise of the size of some effects Focus has.
    Int8,
}

/// A (rows, cols) weight in quantized blocks, row after row, as GGUF stores it.
#[derive(Clone)]
pub struct QMatrix {
    pub ty: QType,
    pub rows: usize,
    pub cols: usize,
    /// The route of products with this weight (`qmatmul::product`; `Decoder::set_products`).
    pub products: Products,
    data: Bytes,
}

/// A weight's bytes: its own, or a range of the checkpoint's memory map, which is then the one
/// copy of the weight in memory (the pages the products touch are the file's).
#[derive(Clone)]
enum Bytes {
    Owned(Vec<u8>),
    Mapped { map: std::sync::Arc<memmap2::Mmap>, start: usize, len: usize },
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QMatrix({:?}, {}x{})", self.ty, self.rows, self.cols)
    }
}

impl QMatrix {
    /// `None` when the type is not a storage type or the bytes do not make (rows, cols).
    pub fn new(dtype: GgmlDType, raw: &[u8], rows: usize, cols: usize) -> Option<QMatrix> {
        let ty = QType::of(dtype)?;
        let (be, bb) = ty.block();
        (cols % be == 0 && raw.len() == rows * cols / be * bb).then(|| QMatrix { ty, rows, cols, products: Products::Exact, data: Bytes::Owned(raw.to_vec()) })
    }

    /// `new` over `map[start..start + len]`, read in place (no copy).
    pub fn mapped(dtype: GgmlDType, map: &std::sync::Arc<memmap2::Mmap>, start: usize, len: usize, rows: usize, cols: usize) -> Option<QMatrix> {
        let ty = QType::of(dtype)?;
        let (be, bb) = ty.block();
        let fits = cols % be == 0 && len == rows * cols / be * bb && start.checked_add(len).is_some_and(|e| e <= map.len());
        fits.then(|| QMatrix { ty, rows, cols, products: Products::Exact, data: Bytes::Mapped { map: map.clone(), start, len } })
    }

    /// Rows r0 .. r0 + n as a matrix of their own (a fused projection's part), sharing the
    /// map where the bytes are mapped.
    pub fn rows_slice(&self, r0: usize, n: usize) -> QMatrix {
        assert!(r0 + n <= self.rows, "{self:?}: rows {r0}..{}", r0 + n);
        let rb = self.row_bytes();
        let data = match &self.data {
            Bytes::Owned(v) => Bytes::Owned(v[r0 * rb..(r0 + n) * rb].to_vec()),
            Bytes::Mapped { map, start, .. } => Bytes::Mapped { map: map.clone(), start: start + r0 * rb, len: n * rb },
        };
        QMatrix { ty: self.ty, rows: n, cols: self.cols, products: self.products, data }
    }

    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// The blocks, row after row.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block().0 * self.ty.block().1
    }

    /// y = W x (x: cols, y: rows), over row chunks in parallel.
    pub fn times(&self, x: &[f32], y: &mut [f32]) {
        assert!(x.len() == self.cols && y.len() == self.rows, "QMatrix {self:?} times {} into {}", x.len(), y.len());
        if !self.ty.has_row_kernel() {
            // Other types: a chunk of rows dequantized (`dequantize_rows`), then dot products.
            let per = (65536 / self.cols.max(1)).clamp(1, self.rows.max(1));
            return y.par_chunks_mut(per).enumerate().for_each_init(Vec::new, |w: &mut Vec<f32>, (c, ys)| {
                w.resize(ys.len() * self.cols, 0.0);
                dequantize_rows(self, c * per, w);
                crate::attention::cpu::simd::rows_dot(w, self.cols, x, ys);
            });
        }
        let rb = self.cols / self.ty.block().0 * self.ty.block().1;
        // About 64 KiB of weights per task: enough tasks to balance, few enough to cost little.
        let per = (65536 / rb).clamp(1, self.rows);
        let ty = self.ty;
        let chunks: Vec<_> = y.chunks_mut(per).enumerate().collect();
        super::row_pool::for_each(chunks, |(c, ys)| rows_dot(ty, &self.data()[c * per * rb..], rb, x, ys));
    }
}

/// Rows r0 .. r0 + out.len() / cols of W as f32, into `out`, candle's values exactly.
pub fn dequantize_rows(q: &QMatrix, r0: usize, out: &mut [f32]) {
    let n = out.len() / q.cols;
    assert!(out.len() == n * q.cols && r0 + n <= q.rows, "{q:?}: rows {r0}..{} into {}", r0 + n, out.len());
    let rb = q.row_bytes();
    dequantize(q.ty, &q.data()[r0 * rb..(r0 + n) * rb], out)
}

/// Blocks of type `ty` as f32: `out` holds exactly the elements of `bytes`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512bw+f16c+fma", "x86_64+avx2+fma+f16c"))]
pub fn dequantize(ty: QType, bytes: &[u8], out: &mut [f32]) {
    if multiversion::target::target_cfg_f!(all(target_arch = "x86_64", target_feature = "f16c")) {
        dequantize_with::<true>(ty, bytes, out)
    } else {
        dequantize_with::<false>(ty, bytes, out)
    }
}

#[inline(always)]
fn dequantize_with<const F16C: bool>(ty: QType, bytes: &[u8], out: &mut [f32]) {
    let (be, bb) = ty.block();
    assert!(bytes.len() / bb * be == out.len() && bytes.len() % bb == 0, "{ty:?}: {} bytes into {} values", bytes.len(), out.len());
    match ty {
        QType::Q4_1 => blocks::<32, 20>(bytes, out, q4_1::<F16C>),
        QType::Q5_0 => blocks::<32, 22>(bytes, out, q5_0::<F16C>),
        QType::Q8_0 => blocks::<32, 34>(bytes, out, q8_0::<F16C>),
        QType::Q4K => blocks::<256, 144>(bytes, out, q4k::<F16C>),
        QType::Q6K => blocks::<256, 210>(bytes, out, q6k::<F16C>),
        QType::Q4_0 => candle_blocks::<k_quants::BlockQ4_0>(bytes, out),
        QType::Q5_1 => candle_blocks::<k_quants::BlockQ5_1>(bytes, out),
        QType::Q2K => candle_blocks::<k_quants::BlockQ2K>(bytes, out),
        QType::Q3K => candle_blocks::<k_quants::BlockQ3K>(bytes, out),
        QType::Q5K => candle_blocks::<k_quants::BlockQ5K>(bytes, out),
        QType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
                *o = f16_at::<F16C>(b, 0);
            }
        }
        // bf16 is f32's high half.
        QType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
                *o = f32::from_bits((u16::from_le_bytes(*b) as u32) << 16);
            }
        }
        QType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.as_chunks::<4>().0) {
                *o = f32::from_le_bytes(*b);
            }
        }
    }
}

/// Each B-byte block through `deq` into its E values.
#[inline(always)]
fn blocks<const E: usize, const B: usize>(bytes: &[u8], out: &mut [f32], deq: fn(&[u8; B], &mut [f32; E])) {
    for (b, o) in bytes.as_chunks::<B>().0.iter().zip(out.as_chunks_mut::<E>().0) {
        deq(b, o);
    }
}

/// Blocks through candle's `to_float`, which reads them as `T` (a `repr(C)` struct of the
/// block's bytes, 2-byte aligned for its f16 fields); a misaligned slice is copied first.
#[inline(always)]
fn candle_blocks<T: GgmlType>(bytes: &[u8], out: &mut [f32]) {
    let size = std::mem::size_of::<T>();
    assert_eq!(size, T::DTYPE.type_size(), "candle's block layout");
    let n = bytes.len() / size;
    if bytes.as_ptr().align_offset(std::mem::align_of::<T>()) == 0 {
        // SAFETY: aligned, n whole blocks; the structs are plain bytes and f16s, valid for any
        // bit pattern.
        let blocks = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), n) };
        T::to_float(blocks, out);
    } else {
        let mut v: Vec<T> = Vec::with_capacity(n);
        // SAFETY: as above, into a fresh aligned buffer of n blocks.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * size);
            v.set_len(n);
        }
        T::to_float(&v, out);
    }
}

/// ys[r] = row r . x for consecutive rows of `rb` bytes: the AVX-512 kernels where the CPU has
/// them, else the portable ones.
fn rows_dot(ty: QType, data: &[u8], rb: usize, x: &[f32], ys: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has the features the kernels are compiled for.
        return unsafe { avx512::rows_dot(ty, data, rb, x, ys) };
    }
    portable_rows_dot(ty, data, rb, x, ys)
}

/// The kernels in plain Rust, compiled for AVX2 (and without): LLVM vectorises them, though less
/// well than the AVX-512 intrinsics (measured on AVX-512: 0.4-0.9x their speed).
#[multiversion(targets("x86_64+avx2+fma+f16c"))]
fn portable_rows_dot(ty: QType, data: &[u8], rb: usize, x: &[f32], ys: &mut [f32]) {
    if multiversion::target::target_cfg_f!(all(target_arch = "x86_64", target_feature = "f16c")) {
        rows_dot_with::<true>(ty, data, rb, x, ys)
    } else {
        rows_dot_with::<false>(ty, data, rb, x, ys)
    }
}

/// `rows_dot` with the scales converted by the F16C instruction (`F16C`) or in software.
/// Plain loops and fn items, no closures: a closure that is not inlined is compiled without
/// the caller's target features.
#[inline(always)]
fn rows_dot_with<const F16C: bool>(ty: QType, data: &[u8], rb: usize, x: &[f32], ys: &mut [f32]) {
    for (w, y) in data.chunks_exact(rb).zip(ys.iter_mut()) {
        *y = match ty {
            QType::Q4_0 => dot_blocks::<32, 18>(w, x, q4_0::<F16C>),
            QType::Q4_1 => dot_blocks::<32, 20>(w, x, q4_1::<F16C>),
            QType::Q5_0 => dot_blocks::<32, 22>(w, x, q5_0::<F16C>),
            QType::Q8_0 => dot_blocks::<32, 34>(w, x, q8_0::<F16C>),
            QType::Q4K => dot_blocks::<256, 144>(w, x, q4k::<F16C>),
            QType::Q6K => dot_blocks::<256, 210>(w, x, q6k::<F16C>),
            _ => unreachable!("{ty:?} has no one-row kernel (QMatrix::times dequantizes it first)"),
        };
    }
}

/// The dot product of one row of E-element, B-byte blocks with x: `deq` writes a block's f32
/// values, which are multiplied into 32 lanes. Blocks go in pairs, each into its own
/// accumulators, and a 256-element block alternates two, so that FMAs do not wait on one chain.
#[inline(always)]
fn dot_blocks<const E: usize, const B: usize>(row: &[u8], x: &[f32], deq: fn(&[u8; B], &mut [f32; E])) -> f32 {
    let mut acc = [[0f32; 32]; 4];
    let mut w = [0f32; E];
    let (blocks, _) = row.as_chunks::<B>();
    let (xs, _) = x.as_chunks::<E>();
    let mut pairs = blocks.chunks_exact(2).zip(xs.chunks_exact(2));
    for (b, xb) in &mut pairs {
        deq(&b[0], &mut w);
        fma_into(&mut acc, 0, &w, &xb[0]);
        deq(&b[1], &mut w);
        fma_into(&mut acc, 2, &w, &xb[1]);
    }
    if blocks.len() % 2 == 1 {
        deq(&blocks[blocks.len() - 1], &mut w);
        fma_into(&mut acc, 0, &w, &xs[blocks.len() - 1]);
    }
    // Plain loops: an iterator adapter that is not inlined would keep `acc` in memory.
    let mut s = [0f32; 32];
    for a in &acc {
        for l in 0..32 {
            s[l] += a[l];
        }
    }
    let mut t = 0f32;
    for v in s {
        t += v;
    }
    t
}

/// acc[first + c % 2] += w * x over the 32-element chunks c.
#[inline(always)]
fn fma_into<const E: usize>(acc: &mut [[f32; 32]; 4], first: usize, w: &[f32; E], x: &[f32; E]) {
    for (c, (wc, xc)) in w.as_chunks::<32>().0.iter().zip(x.as_chunks::<32>().0).enumerate() {
        let a = &mut acc[first + c % 2];
        for l in 0..32 {
            a[l] = wc[l].mul_add(xc[l], a[l]);
        }
    }
}

/// The f16 at byte `at`. half's own conversion checks the CPU on every call, which costs more
/// than the rest of a block's dequantization; with `F16C` it is one instruction.
#[inline(always)]
pub(super) fn f16_at<const F16C: bool>(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    #[cfg(target_arch = "x86_64")]
    if F16C {
        use std::arch::x86_64::{_mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32};
        // SAFETY: F16C is set only in the versions compiled for CPUs with F16C, which
        // multiversion runs only on such CPUs.
        return unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) };
    }
    f16::from_bits(bits).to_f32()
}

/// d, 16 bytes of nibbles: low nibbles are elements 0..16, high 16..32; w = (q - 8) * d.
#[inline(always)]
pub(super) fn q4_0<const F16C: bool>(b: &[u8; 18], w: &mut [f32; 32]) {
    let d = f16_at::<F16C>(b, 0);
    for j in 0..16 {
        w[j] = ((b[2 + j] & 15) as i32 - 8) as f32 * d;
        w[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// d, m, 16 bytes of nibbles: low nibbles are elements 0..16, high 16..32; w = q * d + m.
#[inline(always)]
pub(super) fn q4_1<const F16C: bool>(b: &[u8; 20], w: &mut [f32; 32]) {
    let (d, m) = (f16_at::<F16C>(b, 0), f16_at::<F16C>(b, 2));
    for j in 0..16 {
        w[j] = ((b[4 + j] & 15) as f32).mul_add(d, m);
        w[j + 16] = ((b[4 + j] >> 4) as f32).mul_add(d, m);
    }
}

/// d, 32 high bits, 16 bytes of nibbles; w = (q - 16) * d.
#[inline(always)]
pub(super) fn q5_0<const F16C: bool>(b: &[u8; 22], w: &mut [f32; 32]) {
    let d = f16_at::<F16C>(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..16 {
        let lo = (b[6 + j] & 15) as u32 | ((qh >> j) & 1) << 4;
        let hi = (b[6 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        w[j] = (lo as i32 - 16) as f32 * d;
        w[j + 16] = (hi as i32 - 16) as f32 * d;
    }
}

/// d, 32 signed bytes; w = q * d.
#[inline(always)]
pub(super) fn q8_0<const F16C: bool>(b: &[u8; 34], w: &mut [f32; 32]) {
    let d = f16_at::<F16C>(b, 0);
    for j in 0..32 {
        w[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// d, dmin, 12 bytes of eight 6-bit (scale, min) pairs, 128 bytes of nibbles: 64-element
/// chunks whose first 32 are the low nibbles; w = d * scale * q - dmin * min.
#[inline(always)]
pub(super) fn q4k<const F16C: bool>(b: &[u8; 144], w: &mut [f32; 256]) {
    let (d, dmin) = (f16_at::<F16C>(b, 0), f16_at::<F16C>(b, 2));
    for c in 0..4 {
        let q = &b[16 + 32 * c..16 + 32 * c + 32];
        let (s1, m1) = scale_min_k4(2 * c, &b[4..16]);
        let (s2, m2) = scale_min_k4(2 * c + 1, &b[4..16]);
        let (d1, m1, d2, m2) = (d * s1 as f32, dmin * m1 as f32, d * s2 as f32, dmin * m2 as f32);
        for l in 0..32 {
            w[64 * c + l] = ((q[l] & 15) as f32).mul_add(d1, -m1);
            w[64 * c + 32 + l] = ((q[l] >> 4) as f32).mul_add(d2, -m2);
        }
    }
}

/// candle's get_scale_min_k4: the j-th 6-bit (scale, min) of a Q4_K block.
#[inline(always)]
fn scale_min_k4(j: usize, sc: &[u8]) -> (u8, u8) {
    if j < 4 {
        (sc[j] & 63, sc[j + 4] & 63)
    } else {
        ((sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4))
    }
}

/// 128 bytes of low nibbles, 64 of 2-bit highs, 16 signed scales, d: two 128-element halves;
/// w = d * scale * (q - 32), as candle rounds it: (d * scale) * q.
#[inline(always)]
pub(super) fn q6k<const F16C: bool>(b: &[u8; 210], w: &mut [f32; 256]) {
    let d = f16_at::<F16C>(b, 208);
    for n in 0..2 {
        let (ql, qh) = (&b[64 * n..64 * n + 64], &b[128 + 32 * n..128 + 32 * n + 32]);
        let mut sc = [0f32; 8];
        for (i, s) in sc.iter_mut().enumerate() {
            *s = d * (b[192 + 8 * n + i] as i8) as f32;
        }
        let o = 128 * n;
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) << 4)) as i32 - 32;
            w[o + l] = sc[is] * q1 as f32;
            w[o + l + 32] = sc[is + 2] * q2 as f32;
            w[o + l + 64] = sc[is + 4] * q3 as f32;
            w[o + l + 96] = sc[is + 6] * q4 as f32;
        }
    }
}

/// The kernels in AVX-512 intrinsics: per block, the quants widened to 16 x i32, converted,
/// scaled (exactly as `q4_1` .. `q6k` above compute it) and multiplied into two accumulators.
/// LLVM's vectorisation of the plain kernels spills and mixes widths; these run 1.5-4x faster.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::QType;
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("f16c") && is_x86_feature_detected!("fma")
    }

    /// # Safety
    /// The CPU must have AVX-512F, F16C and FMA (`available`).
    #[target_feature(enable = "avx512f,f16c,fma")]
    pub unsafe fn rows_dot(ty: QType, data: &[u8], rb: usize, x: &[f32], ys: &mut [f32]) {
        let (be, bb) = ty.block();
        let nb = rb / bb;
        assert!(rb % bb == 0 && x.len() == nb * be && data.len() >= ys.len() * rb);
        for (r, y) in ys.iter_mut().enumerate() {
            // SAFETY (here and below): the row holds `nb` blocks and x `nb` blocks' elements.
            let (w, x) = (data.as_ptr().add(r * rb), x.as_ptr());
            *y = match ty {
                QType::Q4_0 => q4_0(w, nb, x),
                QType::Q4_1 => q4_1(w, nb, x),
                QType::Q5_0 => q5_0(w, nb, x),
                QType::Q8_0 => q8_0(w, nb, x),
                QType::Q4K => q4k(w, nb, x),
                QType::Q6K => q6k(w, nb, x),
                _ => unreachable!("{ty:?} has no one-row kernel (QMatrix::times dequantizes it first)"),
            };
        }
    }

    #[inline(always)]
    unsafe fn f16(p: *const u8) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<u16>().read_unaligned() as i32)))
    }

    /// 16 bytes at p widened to 16 x u32.
    #[inline(always)]
    unsafe fn bytes16(p: *const u8) -> __m512i {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast()))
    }

    #[inline(always)]
    unsafe fn fma(w: __m512, x: *const f32, acc: __m512) -> __m512 {
        _mm512_fmadd_ps(w, _mm512_loadu_ps(x), acc)
    }

    #[inline(always)]
    unsafe fn ps(q: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(q)
    }

    #[inline(always)]
    unsafe fn q4_0(w: *const u8, nb: usize, x: *const f32) -> f32 {
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let (low, eight) = (_mm512_set1_epi32(15), _mm512_set1_epi32(8));
        for i in 0..nb {
            let (b, x) = (w.add(18 * i), x.add(32 * i));
            let d = _mm512_set1_ps(f16(b));
            let q = bytes16(b.add(2));
            a0 = fma(_mm512_mul_ps(ps(_mm512_sub_epi32(_mm512_and_si512(q, low), eight)), d), x, a0);
            a1 = fma(_mm512_mul_ps(ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight)), d), x.add(16), a1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }

    #[inline(always)]
    unsafe fn q4_1(w: *const u8, nb: usize, x: *const f32) -> f32 {
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let low = _mm512_set1_epi32(15);
        for i in 0..nb {
            let (b, x) = (w.add(20 * i), x.add(32 * i));
            let (d, m) = (_mm512_set1_ps(f16(b)), _mm512_set1_ps(f16(b.add(2))));
            let q = bytes16(b.add(4));
            a0 = fma(_mm512_fmadd_ps(ps(_mm512_and_si512(q, low)), d, m), x, a0);
            a1 = fma(_mm512_fmadd_ps(ps(_mm512_srli_epi32(q, 4)), d, m), x.add(16), a1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }

    #[inline(always)]
    unsafe fn q5_0(w: *const u8, nb: usize, x: *const f32) -> f32 {
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let (low, sixteen) = (_mm512_set1_epi32(15), _mm512_set1_epi32(16));
        for i in 0..nb {
            let (b, x) = (w.add(22 * i), x.add(32 * i));
            let d = _mm512_set1_ps(f16(b));
            let qh = b.add(2).cast::<u32>().read_unaligned();
            let q = bytes16(b.add(6));
            // The fifth bit of element j is bit j of qh: as a lane mask, it adds 16.
            let lo = _mm512_mask_or_epi32(_mm512_and_si512(q, low), qh as u16, _mm512_and_si512(q, low), sixteen);
            let hi = _mm512_mask_or_epi32(_mm512_srli_epi32(q, 4), (qh >> 16) as u16, _mm512_srli_epi32(q, 4), sixteen);
            a0 = fma(_mm512_mul_ps(ps(_mm512_sub_epi32(lo, sixteen)), d), x, a0);
            a1 = fma(_mm512_mul_ps(ps(_mm512_sub_epi32(hi, sixteen)), d), x.add(16), a1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }

    #[inline(always)]
    unsafe fn q8_0(w: *const u8, nb: usize, x: *const f32) -> f32 {
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        for i in 0..nb {
            let (b, x) = (w.add(34 * i), x.add(32 * i));
            let d = _mm512_set1_ps(f16(b));
            let q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(2).cast()));
            let q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(18).cast()));
            a0 = fma(_mm512_mul_ps(ps(q0), d), x, a0);
            a1 = fma(_mm512_mul_ps(ps(q1), d), x.add(16), a1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }

    #[inline(always)]
    unsafe fn q4k(w: *const u8, nb: usize, x: *const f32) -> f32 {
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let low = _mm512_set1_epi32(15);
        for i in 0..nb {
            let (b, x) = (w.add(144 * i), x.add(256 * i));
            let (d, dmin) = (f16(b), f16(b.add(2)));
            let sc = std::slice::from_raw_parts(b.add(4), 12);
            for c in 0..4 {
                let (s1, m1) = super::scale_min_k4(2 * c, sc);
                let (s2, m2) = super::scale_min_k4(2 * c + 1, sc);
                let (d1, m1) = (_mm512_set1_ps(d * s1 as f32), _mm512_set1_ps(-(dmin * m1 as f32)));
                let (d2, m2) = (_mm512_set1_ps(d * s2 as f32), _mm512_set1_ps(-(dmin * m2 as f32)));
                let (q, x) = (b.add(16 + 32 * c), x.add(64 * c));
                for h in 0..2 {
                    let v = bytes16(q.add(16 * h));
                    a0 = fma(_mm512_fmadd_ps(ps(_mm512_and_si512(v, low)), d1, m1), x.add(16 * h), a0);
                    a1 = fma(_mm512_fmadd_ps(ps(_mm512_srli_epi32(v, 4)), d2, m2), x.add(32 + 16 * h), a1);
                }
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }

    #[inline(always)]
    unsafe fn q6k(w: *const u8, nb: usize, x: *const f32) -> f32 {
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let (low, high) = (_mm512_set1_epi32(15), _mm512_set1_epi32(48));
        for i in 0..nb {
            let (b, x) = (w.add(210 * i), x.add(256 * i));
            let d = f16(b.add(208));
            for n in 0..2 {
                let (ql, qh, sc, x) = (b.add(64 * n), b.add(128 + 32 * n), b.add(192 + 8 * n).cast::<i8>(), x.add(128 * n));
                for g in 0..2 {
                    let (a, c, h) = (bytes16(ql.add(16 * g)), bytes16(ql.add(32 + 16 * g)), bytes16(qh.add(16 * g)));
                    // The 2-bit highs of q1..q4 are bits 0-1, 2-3, 4-5, 6-7 of qh, moved to bits 4-5.
                    let q1 = _mm512_or_si512(_mm512_and_si512(a, low), _mm512_and_si512(_mm512_slli_epi32(h, 4), high));
                    let q2 = _mm512_or_si512(_mm512_and_si512(c, low), _mm512_and_si512(_mm512_slli_epi32(h, 2), high));
                    let q3 = _mm512_or_si512(_mm512_srli_epi32(a, 4), _mm512_and_si512(h, high));
                    let q4 = _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_and_si512(_mm512_srli_epi32(h, 2), high));
                    let x = x.add(16 * g);
                    a0 = fma(q6k_weights(q1, d, *sc.add(g)), x, a0);
                    a1 = fma(q6k_weights(q2, d, *sc.add(g + 2)), x.add(32), a1);
                    a0 = fma(q6k_weights(q3, d, *sc.add(g + 4)), x.add(64), a0);
                    a1 = fma(q6k_weights(q4, d, *sc.add(g + 6)), x.add(96), a1);
                }
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }

    /// (d * scale) * (q - 32), candle's rounding of a Q6_K weight.
    #[inline(always)]
    unsafe fn q6k_weights(q: __m512i, d: f32, scale: i8) -> __m512 {
        _mm512_mul_ps(_mm512_set1_ps(d * scale as f32), ps(_mm512_sub_epi32(q, _mm512_set1_epi32(32))))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    use candle_core::Device;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    const TYPES: [GgmlDType; 5] = [GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K];

    pub(crate) const ALL: [GgmlDType; 13] = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::F16,
        GgmlDType::BF16,
        GgmlDType::F32,
    ];

    /// Random blocks of `dtype`: random bytes, with each f16 scale (and every f16 / bf16 / f32
    /// element) a random finite value, since random bits could be NaN; and candle's
    /// dequantization of them (llama.cpp's formulas), the reference.
    pub(crate) fn random(dtype: GgmlDType, rows: usize, cols: usize, rng: &mut StdRng) -> (Vec<u8>, Vec<f32>) {
        let ty = QType::of(dtype).unwrap();
        let (be, bb) = ty.block();
        let mut raw: Vec<u8> = (0..rows * cols / be * bb).map(|_| rng.gen()).collect();
        let halves: &[usize] = match ty {
            QType::Q4_0 | QType::Q5_0 | QType::Q8_0 | QType::F16 => &[0],
            QType::Q4_1 | QType::Q5_1 | QType::Q4K | QType::Q5K => &[0, 2],
            QType::Q2K => &[80, 82],
            QType::Q3K => &[108],
            QType::Q6K => &[208],
            QType::BF16 => {
                for b in raw.chunks_exact_mut(2) {
                    b.copy_from_slice(&half::bf16::from_f32(rng.gen_range(-1f32..1.0)).to_bits().to_le_bytes());
                }
                &[]
            }
            QType::F32 => {
                for b in raw.chunks_exact_mut(4) {
                    b.copy_from_slice(&rng.gen_range(-1f32..1.0).to_le_bytes());
                }
                &[]
            }
        };
        for b in raw.chunks_exact_mut(bb) {
            for &at in halves {
                let v = f16::from_f32(rng.gen_range(-0.1f32..0.1)).to_bits().to_le_bytes();
                b[at..at + 2].copy_from_slice(&v);
            }
        }
        let deq = qtensor_from_ggml(dtype, &raw, vec![rows, cols], &Device::Cpu).unwrap().dequantize(&Device::Cpu).unwrap();
        (raw, deq.flatten_all().unwrap().to_vec1::<f32>().unwrap())
    }

    type Kernel = fn(QType, &[u8], usize, &[f32], &mut [f32]);

    /// Every implementation this CPU runs, so that each is checked.
    fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut k: Vec<(&'static str, Kernel)> = vec![("portable", portable_rows_dot), ("portable, software f16", |t, d, rb, x, ys| rows_dot_with::<false>(t, d, rb, x, ys))];
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            // SAFETY: available.
            k.push(("avx512", |t, d, rb, x, ys| unsafe { avx512::rows_dot(t, d, rb, x, ys) }));
        }
        k
    }

    /// Each kernel's dot product equals candle's dequantized row times x (in f64), up to f32
    /// summation error; and so does the parallel product.
    #[test]
    fn equals_dequantize_then_dot() {
        let mut rng = StdRng::seed_from_u64(7);
        for dtype in TYPES {
            // 768 columns: an odd number of 256-element blocks, an even number of 32-element ones.
            for cols in [768, 512 + 32] {
                let rows = 37;
                if cols % QType::of(dtype).unwrap().block().0 != 0 {
                    continue;
                }
                let (raw, deq) = random(dtype, rows, cols, &mut rng);
                let q = QMatrix::new(dtype, &raw, rows, cols).unwrap();
                let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1f32..1.0)).collect();
                let mut runs: Vec<(&str, Vec<f32>)> = kernels().into_iter().map(|(name, k)| {
                    let mut y = vec![0f32; rows];
                    k(q.ty, &q.data, raw.len() / rows, &x, &mut y);
                    (name, y)
                }).collect();
                let mut y = vec![0f32; rows];
                q.times(&x, &mut y);
                runs.push(("times", y));
                for (name, y) in runs {
                    for r in 0..rows {
                        let w = &deq[r * cols..(r + 1) * cols];
                        let want: f64 = w.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let mag: f64 = w.iter().zip(&x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                        assert!((y[r] as f64 - want).abs() <= 1e-6 * mag, "{name} {dtype:?} {cols} row {r}: {} vs {want} (|.| {mag})", y[r]);
                    }
                }
            }
        }
    }

    /// The kernels' in-register weights are candle's f32 values bit for bit: x = e_j picks
    /// weight j out of the row exactly (every other product is 0).
    #[test]
    fn dequantizes_exactly() {
        let mut rng = StdRng::seed_from_u64(8);
        for dtype in TYPES {
            let (rows, cols) = (3, 512);
            let (raw, deq) = random(dtype, rows, cols, &mut rng);
            for (name, k) in kernels() {
                let mut x = vec![0f32; cols];
                let mut y = vec![0f32; rows];
                for j in 0..cols {
                    x[j] = 1.0;
                    k(QType::of(dtype).unwrap(), &raw, raw.len() / rows, &x, &mut y);
                    x[j] = 0.0;
                    for r in 0..rows {
                        // == rather than bits: a -0 weight sums to +0.
                        assert!(y[r] == deq[r * cols + j], "{name} {dtype:?} ({r}, {j}): {} vs {}", y[r], deq[r * cols + j]);
                    }
                }
            }
        }
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(QMatrix::new(GgmlDType::Q8K, &[0; 8], 2, 2).is_none());
        assert!(QMatrix::new(GgmlDType::F16, &[0; 7], 2, 2).is_none());
        assert!(QMatrix::new(GgmlDType::Q8_0, &[0; 34], 2, 32).is_none());
        assert!(QMatrix::new(GgmlDType::Q4K, &[0; 144], 1, 128).is_none());
    }

    /// Single-thread throughput of each kernel and of the f32 one on a matrix of QMV_MB (default
    /// 8) MB of blocks, beyond L2, the fastest of 30 runs (a shared machine preempts some):
    /// `cargo test --release -p focus-core --lib qmatvec::tests::speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        let mut rng = StdRng::seed_from_u64(9);
        let best = |f: &mut dyn FnMut()| (0..30).map(|_| {
            let t0 = std::time::Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        }).fold(f64::INFINITY, f64::min);
        let cols = 1536;
        for dtype in TYPES {
            let (be, bb) = QType::of(dtype).unwrap().block();
            let mb: usize = std::env::var("QMV_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
            let rows = (mb << 20) / (cols / be * bb);
            let (raw, deq) = random(dtype, rows, cols, &mut rng);
            let q = QMatrix::new(dtype, &raw, rows, cols).unwrap();
            let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1f32..1.0)).collect();
            let mut y = vec![0f32; rows];
            let n = (rows * cols) as f64;
            let tf = best(&mut || crate::attention::cpu::simd::rows_dot(&deq, cols, &x, &mut y));
            let mut line = format!("{dtype:?}: f32 {:.2} Gweights/s ({:.1} GB/s)", n / tf / 1e9, 4.0 * n / tf / 1e9);
            for (name, k) in kernels() {
                let t = best(&mut || k(q.ty, &q.data, cols / be * bb, &x, &mut y));
                line += &format!(", {name} {:.2} ({:.1} GB/s)", n / t / 1e9, raw.len() as f64 / t / 1e9);
            }
            eprintln!("{line}");
        }
    }
}
