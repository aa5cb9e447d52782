//! One row of X times a weight in its blocks by the integer route: a decode step's product,
//! y = W x with x quantized for the weight (`Q8Rows::quantize_for`, m = 1: Q8_0, or Q8_K for a
//! K-quant). The many-row kernels of the route are `qmatmul_int8` and `kquants` (VNNI panels)
//! and `qmatmul_amx`.
//!
//! **The exactness contract.** Every output is `qmatmul_int8::dot_reference` bit for bit: for
//! the 32-value block types, each block in order, the exact integer sum S of the unpacked
//! weight quants u times x's quants, then `acc = (S as f32).mul_add(D * dx, acc);
//! acc = C.mul_add(xs, acc)` with D and C computed by the expressions `qmatmul_int8::unpack`
//! uses; for the K-quants, per super-block, the integer sums S and M of `kquants` and its two
//! f32 terms. So a row's value does not depend on whether it was computed alone (here) or
//! among a prefill's rows (the panels, the tiles).
//!
//! **The kernels.** A decode product reads every weight byte once, so the weight's blocks are
//! read in place (no repacked copy) and unpacked in registers, as llama.cpp's
//! `ggml_vec_dot_*_q8_*` do. The contract forbids llama.cpp's f32 accumulation across a row's
//! lanes, so S must be whole before its scaling; the kernels take 16 weight rows at a time:
//! each row's quants of two consecutive blocks (64 values: one register) go through one
//! `vpdpbusd` with x's 64 quants, and a transpose-and-add tree (`sums`) turns the 16 rows'
//! registers into four registers whose lane r is row r's S of each 16-value quarter. The f32
//! terms are then vectorised over rows (lane r = row r), with the 16 rows' D and C gathered
//! from their blocks; a K-quant's quarters are scaled by their integer scales (`vpmulld`) and
//! summed over the super-block first. Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K are
//! unpacked with SIMD; Q2_K and Q3_K go through `kquants::unpack` per super-block (exact,
//! slower).

use super::int8::dot_reference;
use super::qmatmul_int8::{supports, Q8Rows};
use super::qmatvec::{QMatrix, QType};

/// Weight rows computed together: one per f32 lane of a 512-bit register.
const G: usize = 16;

/// y = W x for one quantized row x (`x.m == 1`), bit for bit `qmatmul_int8::dot_reference`.
/// Chunks of rows (about 64 KiB of weights each, a multiple of 16 rows) run in parallel
/// (`row_pool`).
pub fn times(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    times_many(&mut [(q, x, y)]);
}

/// `times` of several weights by one row each, as one parallel loop over all their chunks (a
/// decode step's Q, K and V, or gate and up, read the same row): one barrier instead of one
/// per weight. Each output is bit for bit `times`'s.
pub fn times_many(parts: &mut [(&QMatrix, &Q8Rows, &mut [f32])]) {
    let mut tasks: Vec<(QType, &[u8], usize, &Q8Rows, &mut [f32])> = Vec::new();
    for (q, x, y) in parts.iter_mut() {
        assert!(supports(q.ty) && x.m == 1 && x.cols == q.cols && y.len() == q.rows, "{q:?} times {} row(s) of {} into {}", x.m, x.cols, y.len());
        if q.cols == 0 {
            // No blocks: the definition's empty sum.
            y.fill(0.0);
            continue;
        }
        let rb = q.row_bytes();
        let per = (65536 / rb).next_multiple_of(G).clamp(G, q.rows.next_multiple_of(G));
        for (c, ys) in y.chunks_mut(per).enumerate() {
            tasks.push((q.ty, &q.data()[c * per * rb..(c * per + ys.len()) * rb], rb, *x, ys));
        }
    }
    super::row_pool::for_each(tasks, |(ty, data, rb, x, ys)| rows(ty, data, rb, x, ys));
}

/// ys[r] = row r of `data` (rows of `rb` bytes) . x: the AVX-512 kernels where the CPU has them.
fn rows(ty: QType, data: &[u8], rb: usize, x: &Q8Rows, ys: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has the features the kernels are compiled for.
        return unsafe { avx512::rows::<false>(ty, data, rb, x, ys) };
    }
    portable(ty, data, rb, x, ys)
}

/// `rows` in plain Rust: the definition itself, row by row (the route only runs where the CPU
/// has the AVX-512 kernels, so this is the fallback's correctness, not its speed).
fn portable(ty: QType, data: &[u8], rb: usize, x: &Q8Rows, ys: &mut [f32]) {
    for (row, y) in data.chunks_exact(rb).zip(ys.iter_mut()) {
        *y = dot_reference(ty, row, x, 0);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::G;
    use crate::model::kquants::{self, has_mins, is_k, KBlock};
    use crate::model::qmatmul_int8::{unpack, Block32, Q8Rows};
    use crate::model::qmatvec::QType;
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("f16c")
            && is_x86_feature_detected!("fma")
    }

    /// A group of up to 16 consecutive weight rows: each lane's row start (rows past the
    /// group's end repeat its first row, so every read stays in the weight; their lanes are
    /// not stored), and the same as byte offsets for the scale gathers.
    struct Rows {
        p: [*const u8; G],
        base: *const u8,
        idx: __m512i,
    }

    /// ys[r] = row r . x for consecutive rows of `rb` bytes at `data`, 16 at a time.
    /// `GENERIC` sends every type through `unpack` (the Q2_K / Q3_K path; tests check it on
    /// all types).
    ///
    /// # Safety
    /// The CPU must have the features of `available`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn rows<const GENERIC: bool>(ty: QType, data: &[u8], rb: usize, x: &Q8Rows, ys: &mut [f32]) {
        assert!(data.len() >= ys.len() * rb && x.q.len() == x.cols && rb * G < i32::MAX as usize);
        for (g, yg) in ys.chunks_mut(G).enumerate() {
            let n = yg.len();
            let base = data.as_ptr().add(g * G * rb);
            let mut off = [0i32; G];
            let mut p = [base; G];
            for r in 0..G {
                let r1 = if r < n { r } else { 0 };
                off[r] = (r1 * rb) as i32;
                p[r] = base.add(r1 * rb);
            }
            let rows = Rows { p, base, idx: _mm512_loadu_si512(off.as_ptr().cast()) };
            let acc = match ty {
                _ if GENERIC && is_k(ty) => generic_k(ty, &rows, rb, x),
                _ if GENERIC => generic(ty, &rows, rb, x),
                QType::Q4_0 => legacy::<Q4_0>(&rows, x),
                QType::Q4_1 => legacy::<Q4_1>(&rows, x),
                QType::Q5_0 => legacy::<Q5_0>(&rows, x),
                QType::Q5_1 => legacy::<Q5_1>(&rows, x),
                QType::Q8_0 => legacy::<Q8_0>(&rows, x),
                QType::Q4K => q4k::<false>(&rows, x),
                QType::Q5K => q4k::<true>(&rows, x),
                QType::Q6K => q6k(&rows, x),
                _ => generic_k(ty, &rows, rb, x),
            };
            _mm512_mask_storeu_ps(yg.as_mut_ptr(), ((1u32 << n) - 1) as u16, acc);
        }
    }

    /// The 16 rows' integer sums of one 64-value step: `p[r]` is row r's `vpdpbusd` with x
    /// (its 32-bit lane l the sum over values 4l..4l + 4); lane r of the k-th result is row r's
    /// sum over values 16k..16k + 16. Pairs of rows interleaved and added twice (`quad`), then
    /// a 4x4 transpose of 128-bit lanes (`transpose`): 44 instructions for 16 rows.
    #[inline(always)]
    unsafe fn sums(p: &[__m512i; G]) -> [__m512i; 4] {
        // Plain calls, no closures: a closure is compiled without the kernel's target features.
        transpose([quad([p[0], p[1], p[2], p[3]]), quad([p[4], p[5], p[6], p[7]]), quad([p[8], p[9], p[10], p[11]]), quad([p[12], p[13], p[14], p[15]])])
    }

    /// Four rows' `vpdpbusd` results to one register: its 128-bit lane k holds the rows' sums
    /// over values 16k..16k + 16, row after row.
    #[inline(always)]
    unsafe fn quad([a, b, c, d]: [__m512i; 4]) -> __m512i {
        let ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        let cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
        _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd))
    }

    /// Rows 4g..4g + 4's `quad`s (g = 0..4) to the four quarters' sums, lane r = row r.
    #[inline(always)]
    unsafe fn transpose(q: [__m512i; 4]) -> [__m512i; 4] {
        let t0 = _mm512_shuffle_i32x4::<0x44>(q[0], q[1]);
        let t1 = _mm512_shuffle_i32x4::<0xEE>(q[0], q[1]);
        let t2 = _mm512_shuffle_i32x4::<0x44>(q[2], q[3]);
        let t3 = _mm512_shuffle_i32x4::<0xEE>(q[2], q[3]);
        [
            _mm512_shuffle_i32x4::<0x88>(t0, t2),
            _mm512_shuffle_i32x4::<0xDD>(t0, t2),
            _mm512_shuffle_i32x4::<0x88>(t1, t3),
            _mm512_shuffle_i32x4::<0xDD>(t1, t3),
        ]
    }

    /// One term of the definition for 16 rows: acc + S (D dx), then + C xs, each one fused
    /// multiply-add per lane, D dx an f32 product: `dot_reference`'s operations, lane by lane.
    #[inline(always)]
    unsafe fn term(acc: __m512, s: __m512i, d: __m512, dx: f32, c: __m512, xs: f32) -> __m512 {
        let acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc);
        _mm512_fmadd_ps(c, _mm512_set1_ps(xs), acc)
    }

    /// A K-quant super-block's two terms for 16 rows: acc + S (d dx), then (with mins)
    /// + M (-dmin dx): `kquants::dot_reference`'s operations, lane by lane.
    #[inline(always)]
    unsafe fn term_k(acc: __m512, s: __m512i, d: __m512, m: Option<(__m512i, __m512)>, dx: f32) -> __m512 {
        let dx = _mm512_set1_ps(dx);
        let acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, dx), acc);
        match m {
            Some((m, dmin)) => _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(neg(dmin), dx), acc),
            None => acc,
        }
    }

    /// The 16 rows' 32-bit words at `at` + each row's offset.
    #[inline(always)]
    unsafe fn gather(rows: &Rows, at: usize) -> __m512i {
        _mm512_i32gather_epi32::<1>(rows.idx, rows.base.add(at).cast())
    }

    /// The f16s in the low (HIGH = false) or high halves of 32-bit lanes, as f32.
    #[inline(always)]
    unsafe fn f16s<const HIGH: bool>(v: __m512i) -> __m512 {
        let v = if HIGH { _mm512_srli_epi32::<16>(v) } else { v };
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v))
    }

    /// -v, by its sign bit (as Rust's `-` on f32: -(+0) = -0).
    #[inline(always)]
    unsafe fn neg(v: __m512) -> __m512 {
        _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN)))
    }

    /// Values 0..32 of two 32-value blocks of 4-bit quants as in Q4_0 (16 bytes each: element
    /// l the low nibble of byte l, l + 16 the high one) at `a` and `b`: 64 bytes, in order.
    #[inline(always)]
    unsafe fn nibbles(a: *const u8, b: *const u8) -> __m512i {
        let v = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128(a.cast())), 0xFF00, _mm_loadu_si128(b.cast()));
        _mm512_and_si512(_mm512_mask_srli_epi32::<4>(v, 0xF0F0, v), _mm512_set1_epi8(15))
    }

    /// A 32-value block type: its bytes, its two blocks' quants, its 16 rows' D and C.
    trait Legacy {
        const BYTES: usize;
        /// Blocks at `a` and `b`, unpacked to u (as `unpack`), 64 bytes in order.
        unsafe fn quants(a: *const u8, b: *const u8) -> __m512i;
        /// (D, C) of the 16 rows' blocks at byte `at` of each row.
        unsafe fn scales(rows: &Rows, at: usize) -> (__m512, __m512);
    }

    struct Q4_0;
    struct Q4_1;
    struct Q5_0;
    struct Q5_1;
    struct Q8_0;

    impl Legacy for Q4_0 {
        const BYTES: usize = 18;
        #[inline(always)]
        unsafe fn quants(a: *const u8, b: *const u8) -> __m512i {
            nibbles(a.add(2), b.add(2))
        }
        #[inline(always)]
        unsafe fn scales(rows: &Rows, at: usize) -> (__m512, __m512) {
            let d = f16s::<false>(gather(rows, at));
            (d, _mm512_mul_ps(_mm512_set1_ps(-8.0), d))
        }
    }

    impl Legacy for Q4_1 {
        const BYTES: usize = 20;
        #[inline(always)]
        unsafe fn quants(a: *const u8, b: *const u8) -> __m512i {
            nibbles(a.add(4), b.add(4))
        }
        #[inline(always)]
        unsafe fn scales(rows: &Rows, at: usize) -> (__m512, __m512) {
            let dm = gather(rows, at);
            (f16s::<false>(dm), f16s::<true>(dm))
        }
    }

    /// Q5_0 / Q5_1's fifth bits: bit l of the 32-bit word at `a` (`b`) is value l's (l + 32's).
    #[inline(always)]
    unsafe fn fifth(v: __m512i, a: *const u8, b: *const u8) -> __m512i {
        let k = a.cast::<u32>().read_unaligned() as u64 | (b.cast::<u32>().read_unaligned() as u64) << 32;
        _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(16))
    }

    impl Legacy for Q5_0 {
        const BYTES: usize = 22;
        #[inline(always)]
        unsafe fn quants(a: *const u8, b: *const u8) -> __m512i {
            fifth(nibbles(a.add(6), b.add(6)), a.add(2), b.add(2))
        }
        #[inline(always)]
        unsafe fn scales(rows: &Rows, at: usize) -> (__m512, __m512) {
            let d = f16s::<false>(gather(rows, at));
            (d, _mm512_mul_ps(_mm512_set1_ps(-16.0), d))
        }
    }

    impl Legacy for Q5_1 {
        const BYTES: usize = 24;
        #[inline(always)]
        unsafe fn quants(a: *const u8, b: *const u8) -> __m512i {
            fifth(nibbles(a.add(8), b.add(8)), a.add(4), b.add(4))
        }
        #[inline(always)]
        unsafe fn scales(rows: &Rows, at: usize) -> (__m512, __m512) {
            let dm = gather(rows, at);
            (f16s::<false>(dm), f16s::<true>(dm))
        }
    }

    impl Legacy for Q8_0 {
        const BYTES: usize = 34;
        /// q + 128 (the sign bit flipped) for `vpdpbusd`'s unsigned operand.
        #[inline(always)]
        unsafe fn quants(a: *const u8, b: *const u8) -> __m512i {
            let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_loadu_si256(a.add(2).cast())), _mm256_loadu_si256(b.add(2).cast()));
            _mm512_xor_si512(v, _mm512_set1_epi8(-128))
        }
        #[inline(always)]
        unsafe fn scales(rows: &Rows, at: usize) -> (__m512, __m512) {
            let d = f16s::<false>(gather(rows, at));
            (d, _mm512_mul_ps(_mm512_set1_ps(-128.0), d))
        }
    }

    /// 32-value block types, two blocks a step; an odd last block pairs with itself, x's second
    /// half zero (its sums unused).
    #[inline(always)]
    unsafe fn legacy<T: Legacy>(rows: &Rows, x: &Q8Rows) -> __m512 {
        let nb = x.cols / 32;
        let xq = x.q.as_ptr();
        let mut acc = _mm512_setzero_ps();
        let mut p = [_mm512_setzero_si512(); G];
        for b in (0..nb).step_by(2) {
            let two = b + 1 < nb;
            let (a0, a1) = (T::BYTES * b, T::BYTES * if two { b + 1 } else { b });
            let xv = if two { _mm512_loadu_si512(xq.add(32 * b).cast()) } else { _mm512_maskz_loadu_epi8(u32::MAX as u64, xq.add(32 * b).cast()) };
            for (r, pr) in p.iter_mut().enumerate() {
                *pr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), T::quants(rows.p[r].add(a0), rows.p[r].add(a1)), xv);
            }
            let h = sums(&p);
            let (d, c) = T::scales(rows, a0);
            acc = term(acc, _mm512_add_epi32(h[0], h[1]), d, x.d[b], c, x.xs[b]);
            if two {
                let (d, c) = T::scales(rows, a1);
                acc = term(acc, _mm512_add_epi32(h[2], h[3]), d, x.d[b + 1], c, x.xs[b + 1]);
            }
        }
        acc
    }

    /// Q4_K (Q5 = false) and Q5_K: per 256-value super-block, the 16 rows' d, dmin and eight
    /// 6-bit scales and mins (`scale_min_k4`, lane-wise); then four steps of two sub-blocks,
    /// which are one 32-byte run of nibbles (low: sub-block 2c, high: 2c + 1), each sub-block's
    /// sums times its scale into S and x's sums times its min into M.
    #[inline(always)]
    unsafe fn q4k<const Q5: bool>(rows: &Rows, x: &Q8Rows) -> __m512 {
        let (bb, qs) = if Q5 { (176, 48) } else { (144, 16) };
        let xq = x.q.as_ptr();
        let mut acc = _mm512_setzero_ps();
        let mut p = [_mm512_setzero_si512(); G];
        let (m6, m4) = (_mm512_set1_epi32(63), _mm512_set1_epi32(15));
        for i in 0..x.cols / 256 {
            let at = bb * i;
            let dm = gather(rows, at);
            let (d, dmin) = (f16s::<false>(dm), f16s::<true>(dm));
            let (s0, s1, s2) = (gather(rows, at + 4), gather(rows, at + 8), gather(rows, at + 12));
            let mut scm = [(_mm512_setzero_si512(), _mm512_setzero_si512()); 8];
            for (j, v) in scm.iter_mut().enumerate() {
                *v = if j < 4 {
                    (_mm512_and_si512(byte(s0, j), m6), _mm512_and_si512(byte(s1, j), m6))
                } else {
                    let (a, b, c) = (byte(s0, j - 4), byte(s1, j - 4), byte(s2, j - 4));
                    (_mm512_or_si512(_mm512_and_si512(c, m4), top2(a)), _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32::<4>(c), m4), top2(b)))
                };
            }
            let bs = &x.bsum[16 * i..16 * i + 16];
            let (mut si, mut mi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for c in 0..4 {
                let xv = _mm512_loadu_si512(xq.add(256 * i + 64 * c).cast());
                let bits = _mm512_inserti64x4::<1>(_mm512_set1_epi8((1u8 << (2 * c)) as i8), _mm256_set1_epi8((2u8 << (2 * c)) as i8));
                for (r, pr) in p.iter_mut().enumerate() {
                    let blk = rows.p[r].add(at);
                    let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(qs + 32 * c).cast()));
                    let mut v = _mm512_and_si512(_mm512_mask_srli_epi32::<4>(v, 0xFF00, v), _mm512_set1_epi8(15));
                    if Q5 {
                        let h = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(16).cast()));
                        v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(h, bits), v, _mm512_set1_epi8(16));
                    }
                    *pr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, xv);
                }
                let h = sums(&p);
                for k in 0..2 {
                    let j = 2 * c + k;
                    si = _mm512_add_epi32(si, _mm512_mullo_epi32(scm[j].0, _mm512_add_epi32(h[2 * k], h[2 * k + 1])));
                    mi = _mm512_add_epi32(mi, _mm512_mullo_epi32(scm[j].1, _mm512_set1_epi32(bs[2 * j] as i32 + bs[2 * j + 1] as i32)));
                }
            }
            acc = term_k(acc, si, d, Some((mi, dmin)), x.d[i]);
        }
        acc
    }

    /// Byte j of each 32-bit lane, in the lane's low bits (higher bytes above it).
    #[inline(always)]
    unsafe fn byte(v: __m512i, j: usize) -> __m512i {
        _mm512_srlv_epi32(v, _mm512_set1_epi32(8 * j as i32))
    }

    /// Bits 6-7 of each lane's low byte, moved to bits 4-5 (a K-quant 6-bit scale's top).
    #[inline(always)]
    unsafe fn top2(v: __m512i) -> __m512i {
        _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(v), _mm512_set1_epi32(3)))
    }

    /// Q6_K: per super-block, d; per half super-block n, four sub-blocks 4n .. 4n + 4 in two
    /// steps (s = 0, 1) from the same bytes: the 64 bytes of low bits at 64n (their low
    /// nibbles for s = 0, high for s = 1) and the 2-bit highs at 128 + 32n (bits 4s, 4s + 2
    /// for the step's two sub-blocks). Both steps are computed together, four rows at a time,
    /// so each row's bytes are loaded once.
    #[inline(always)]
    unsafe fn q6k(rows: &Rows, x: &Q8Rows) -> __m512 {
        let xq = x.q.as_ptr();
        let mut acc = _mm512_setzero_ps();
        let (m4, m30) = (_mm512_set1_epi8(15), _mm512_set1_epi8(0x30));
        // Shifts (16-bit lanes) that bring a step's 2-bit highs to bits 4-5: s = 0 left by 4
        // (low 32 bytes) and 2 (high); s = 1 right by 0 and 2.
        let (left, right) = (_mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(2)), _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(2)));
        for i in 0..x.cols / 256 {
            let at = 210 * i;
            let d = f16s::<true>(gather(rows, at + 206));
            let bs = &x.bsum[16 * i..16 * i + 16];
            let mut si = _mm512_setzero_si512();
            for n in 0..2 {
                let xn = xq.add(256 * i + 128 * n);
                let xv = [_mm512_loadu_si512(xn.cast()), _mm512_loadu_si512(xn.add(64).cast())];
                let (mut q0, mut q1) = ([_mm512_setzero_si512(); 4], [_mm512_setzero_si512(); 4]);
                for (g, (q0, q1)) in q0.iter_mut().zip(q1.iter_mut()).enumerate() {
                    let (mut p0, mut p1) = ([_mm512_setzero_si512(); 4], [_mm512_setzero_si512(); 4]);
                    for (k, (p0, p1)) in p0.iter_mut().zip(p1.iter_mut()).enumerate() {
                        let blk = rows.p[4 * g + k].add(at);
                        let l = _mm512_loadu_si512(blk.add(64 * n).cast());
                        let h = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(128 + 32 * n).cast()));
                        // (low bits & 15) | (high bits & 0x30).
                        let v0 = _mm512_ternarylogic_epi32::<0xEC>(l, _mm512_and_si512(_mm512_sllv_epi16(h, left), m30), m4);
                        let v1 = _mm512_ternarylogic_epi32::<0xEC>(_mm512_srli_epi16::<4>(l), _mm512_and_si512(_mm512_srlv_epi16(h, right), m30), m4);
                        *p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v0, xv[0]);
                        *p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v1, xv[1]);
                    }
                    *q0 = quad(p0);
                    *q1 = quad(p1);
                }
                for (s, qs) in [q0, q1].into_iter().enumerate() {
                    let j0 = 4 * n + 2 * s;
                    let hs = transpose(qs);
                    // The four signed scales of halves 2 j0 .. 2 j0 + 4, one byte each.
                    let sc = gather(rows, at + 192 + 2 * j0);
                    for (k, hk) in hs.into_iter().enumerate() {
                        let sk = match k {
                            0 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(sc)),
                            1 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(sc)),
                            2 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(sc)),
                            _ => _mm512_srai_epi32::<24>(sc),
                        };
                        // sc (sum of u x - 32 bsum) over the 16 values 2 j0 + k.
                        let o = _mm512_set1_epi32(32 * bs[2 * j0 + k] as i32);
                        si = _mm512_add_epi32(si, _mm512_mullo_epi32(sk, _mm512_sub_epi32(hk, o)));
                    }
                }
            }
            acc = term_k(acc, si, d, None, x.d[i]);
        }
        acc
    }

    /// A 32-value block type through `unpack` (each row's blocks into a buffer), then the same
    /// integer sums and terms (the tests' check of the SIMD unpacking).
    #[inline(always)]
    unsafe fn generic(ty: QType, rows: &Rows, rb: usize, x: &Q8Rows) -> __m512 {
        let nb = x.cols / 32;
        let xq = x.q.as_ptr();
        let mut acc = _mm512_setzero_ps();
        let mut p = [_mm512_setzero_si512(); G];
        let mut u = [[0u8; 64]; G];
        let (mut d, mut c) = ([[0f32; G]; 2], [[0f32; G]; 2]);
        let mut blk = Block32::default();
        for b in (0..nb).step_by(2) {
            let two = b + 1 < nb;
            for r in 0..G {
                let row = std::slice::from_raw_parts(rows.p[r], rb);
                for k in 0..1 + two as usize {
                    unpack(ty, row, b + k, &mut blk);
                    u[r][32 * k..32 * k + 32].copy_from_slice(&blk.u);
                    d[k][r] = blk.d[0];
                    c[k][r] = blk.c[0];
                }
            }
            let xv = if two { _mm512_loadu_si512(xq.add(32 * b).cast()) } else { _mm512_maskz_loadu_epi8(u32::MAX as u64, xq.add(32 * b).cast()) };
            for (r, pr) in p.iter_mut().enumerate() {
                *pr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(u[r].as_ptr().cast()), xv);
            }
            let hs = sums(&p);
            for k in 0..1 + two as usize {
                acc = term(acc, _mm512_add_epi32(hs[2 * k], hs[2 * k + 1]), _mm512_loadu_ps(d[k].as_ptr()), x.d[b + k], _mm512_loadu_ps(c[k].as_ptr()), x.xs[b + k]);
            }
        }
        acc
    }

    /// A K-quant through `kquants::unpack` (each row's super-blocks into a buffer), then the
    /// same integer sums and terms as the SIMD kernels: Q2_K and Q3_K, whose SIMD unpacking is
    /// not written (and every K-quant in the tests).
    #[inline(always)]
    unsafe fn generic_k(ty: QType, rows: &Rows, rb: usize, x: &Q8Rows) -> __m512 {
        let xq = x.q.as_ptr();
        let (o, mins) = (kquants::offset(ty), has_mins(ty));
        let mut acc = _mm512_setzero_ps();
        let mut p = [_mm512_setzero_si512(); G];
        let mut kb = KBlock::default();
        let mut u = [[0u8; 256]; G];
        let (mut sc, mut mn) = ([[0i32; G]; 16], [[0i32; G]; 16]);
        let (mut d, mut dmin) = ([0f32; G], [0f32; G]);
        for i in 0..x.cols / 256 {
            for r in 0..G {
                kquants::unpack(ty, std::slice::from_raw_parts(rows.p[r], rb), i, &mut kb);
                u[r] = kb.u;
                for h in 0..16 {
                    (sc[h][r], mn[h][r]) = (kb.sc[h], kb.m[h]);
                }
                (d[r], dmin[r]) = (kb.d, kb.dmin);
            }
            let bs = &x.bsum[16 * i..16 * i + 16];
            let (mut si, mut mi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for c in 0..4 {
                let xv = _mm512_loadu_si512(xq.add(256 * i + 64 * c).cast());
                for (r, pr) in p.iter_mut().enumerate() {
                    *pr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(u[r].as_ptr().add(64 * c).cast()), xv);
                }
                let hs = sums(&p);
                for (k, hk) in hs.into_iter().enumerate() {
                    let h = 4 * c + k;
                    let b = bs[h] as i32;
                    si = _mm512_add_epi32(si, _mm512_mullo_epi32(_mm512_loadu_si512(sc[h].as_ptr().cast()), _mm512_sub_epi32(hk, _mm512_set1_epi32(o * b))));
                    mi = _mm512_add_epi32(mi, _mm512_mullo_epi32(_mm512_loadu_si512(mn[h].as_ptr().cast()), _mm512_set1_epi32(b)));
                }
            }
            let m = if mins { Some((mi, _mm512_loadu_ps(dmin.as_ptr()))) } else { None };
            acc = term_k(acc, si, _mm512_loadu_ps(d.as_ptr()), m, x.d[i]);
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatmul_int8::tests::{block_types, case};
    use crate::model::qmatvec::tests::random;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    type Kernel = fn(QType, &[u8], usize, &Q8Rows, &mut [f32]);

    /// Every implementation of `rows` this CPU runs.
    fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut k: Vec<(&'static str, Kernel)> = vec![("portable", portable)];
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            // SAFETY: available.
            k.push(("avx512", |t, d, rb, x, ys| unsafe { avx512::rows::<false>(t, d, rb, x, ys) }));
            k.push(("avx512 via unpack", |t, d, rb, x, ys| unsafe { avx512::rows::<true>(t, d, rb, x, ys) }));
        }
        k
    }

    /// `times` and every kernel equal the definition bit for bit: every block type, row counts
    /// that leave a partial group of 16 and partial parallel chunks, 32-value block counts odd
    /// and even.
    #[test]
    fn equals_the_reference_bit_for_bit() {
        let mut rng = StdRng::seed_from_u64(41);
        for dtype in block_types() {
            let ty = QType::of(dtype).unwrap();
            let mut shapes: Vec<(usize, usize)> = [1, 7, 37, 300].into_iter().flat_map(|r| [256, 512, 768, 1536].map(|c| (r, c))).collect();
            if ty.block().0 == 32 {
                shapes.extend([(19, 32), (33, 96), (17, 800)]);
            }
            for (out, inp) in shapes {
                let (q, _, _, xq) = case(dtype, 1, out, inp, &mut rng);
                let rb = q.row_bytes();
                let want: Vec<f32> = (0..out).map(|o| dot_reference(ty, &q.data()[o * rb..(o + 1) * rb], &xq, 0)).collect();
                let mut y = vec![f32::NAN; out];
                times(&q, &xq, &mut y);
                let mut runs = vec![("times", y)];
                for (name, k) in kernels() {
                    let mut y = vec![f32::NAN; out];
                    k(ty, q.data(), rb, &xq, &mut y);
                    runs.push((name, y));
                }
                for (name, y) in runs {
                    for o in 0..out {
                        assert_eq!(y[o].to_bits(), want[o].to_bits(), "{name} {dtype:?} {out}x{inp} row {o}: {} vs {}", y[o], want[o]);
                    }
                }
            }
        }
    }

    /// Exactness where it is delicate: x with all-zero blocks (d = 0, so D dx = 0 and the
    /// terms add signed zeros) and weights whose f16 scales are zero.
    #[test]
    fn zeros_and_signed_zeros_match() {
        let mut rng = StdRng::seed_from_u64(42);
        for dtype in block_types() {
            let ty = QType::of(dtype).unwrap();
            let (out, inp) = (23, 512);
            let (mut raw, _) = random(dtype, out, inp, &mut rng);
            // Zero the first bytes of every other block: the scale(s) of most types.
            let bb = ty.block().1;
            for (b, blk) in raw.chunks_exact_mut(bb).enumerate() {
                if b % 2 == 1 {
                    blk[..4].fill(0);
                }
            }
            let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
            let mut x: Vec<f32> = (0..inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
            x[64..128].fill(0.0);
            x[200..232].fill(-0.0);
            let xq = Q8Rows::quantize_for(q.ty, &x, 1, inp);
            let mut y = vec![f32::NAN; out];
            times(&q, &xq, &mut y);
            for (o, (got, row)) in y.iter().zip(q.data().chunks_exact(q.row_bytes())).enumerate() {
                let want = dot_reference(ty, row, &xq, 0);
                assert_eq!(got.to_bits(), want.to_bits(), "{dtype:?} row {o}");
            }
        }
    }

    /// ms per call of `times` (x already quantized; and with x's quantization) beside
    /// `QMatrix::times` (the exact f32 kernels) on the same x, the fastest of 30 calls:
    /// `cargo test --release -p focus-model --lib qmatvec_int8 -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        use candle_core::quantized::GgmlDType;
        let mut rng = StdRng::seed_from_u64(43);
        let best = |f: &mut dyn FnMut()| {
            // One call first: the thread pool's start and the pages' first touch are not a call's cost.
            f();
            (0..30)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    f();
                    t0.elapsed().as_secs_f64() * 1e3
                })
                .fold(f64::INFINITY, f64::min)
        };
        eprintln!("{:<6} {:>11} {:>9} {:>13} {:>9} {:>7}", "type", "out x in", "int8 ms", "+quantize ms", "f32 ms", "f32/int8");
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K] {
            for (out, inp) in [(2048, 2048), (8192, 2048), (2048, 8192)] {
                let (q, _, x, xq) = case(dtype, 1, out, inp, &mut rng);
                let mut y = vec![0f32; out];
                let ti = best(&mut || times(&q, &xq, &mut y));
                let tq = best(&mut || times(&q, &Q8Rows::quantize_for(q.ty, &x, 1, inp), &mut y));
                let tf = best(&mut || q.times(&x, &mut y));
                eprintln!("{:<6} {:>11} {ti:>9.3} {tq:>13.3} {tf:>9.3} {:>7.2}", format!("{dtype:?}"), format!("{out}x{inp}"), tf / ti);
            }
        }
    }
}
