//! The f32 panels' product (`qmatmul::matmul`, the exact route of every prefill) on AVX-512F.
//!
//! Why it exists: the `gemm` crate runs its AVX-512 kernels only with its `nightly` feature, so
//! on stable Rust it multiplies with its AVX2 2x6 kernel, which was nearly half of a long
//! analysis' time (docs/gui.md, issue 50). Rust's stable AVX-512 intrinsics give the full
//! register width here; CPUs without AVX-512F (or `FOCUS_LENS_NO_AVX512_F32=1`, for benchmarks of
//! one against the other) keep the gemm crate.
//!
//! The layout: X's rows packed once per call in blocks of `MR` rows, k-major ([k][MR]: the kernel
//! broadcasts them in order); each panel of W dequantized a strip of 32 rows at a time and laid
//! out k-major ([k][32]: two registers a k), both by gathers. The micro-kernel keeps an MR x 32
//! tile of Y in 28 registers over all of k (up to `KC`: measured fastest), reading an X block
//! once per strip; the panel stays in L2. Rows beyond m are padding whose sums are never stored;
//! columns beyond the panel are masked; a strip of at most 16 rows takes the one-register
//! kernel. Each Y element is one sum of products in k order (k-blocks added in order), so its
//! value does not depend on the threads.

use super::qmatmul_int8::SendPtr;
use super::qmatvec::{dequantize_rows, QMatrix};
use rayon::prelude::*;
use std::cell::RefCell;

/// Rows of X (and of Y) per tile.
pub const MR: usize = 14;
/// Weight rows (columns of Y) per strip: two registers.
const NR: usize = 32;
/// The most k per block (`k_block` splits a longer k evenly). Measured (`speed`, 2048 rows, 2
/// threads): one block of all of k beats blocks of 384-1024 by 3-30% at k = 576, 1536, 896 and
/// 4864 (each block's end loads and adds the Y tile, which has left the caches by then), and the
/// L2 serves an X block of MR x k (272 KiB at 4864) at the kernel's rate.
pub const KC: usize = 8192;
/// The most f32 weights of one panel (bytes): half of a 2 MiB L2, which also holds the strips'
/// share of Y and X's next block.
const PANEL_BYTES: usize = 1 << 20;

/// k per block for rows of `inp`: k split into equal blocks of at most `kc_max`.
fn k_block(inp: usize, kc_max: usize) -> usize {
    inp.div_ceil(inp.div_ceil(kc_max).max(1)).max(1)
}

/// Rows per panel for W (out, inp) on `threads` threads: whole strips, at most `bytes` of f32,
/// as many panels as keep each thread's share of strips smallest (panels a multiple of the
/// threads; the biggest panels of those).
fn panel_rows(out: usize, inp: usize, threads: usize, bytes: usize) -> usize {
    let strips = out.div_ceil(NR);
    let per = (bytes / 4 / inp.max(1) / NR).max(1);
    let t = threads.max(1);
    let first = strips.div_ceil(per).next_multiple_of(t);
    let busiest = |p: usize| p.div_ceil(t) * strips.div_ceil(p);
    let panels = (first..=strips.max(first)).step_by(t).min_by_key(|&p| (busiest(p), p)).unwrap_or(first);
    strips.div_ceil(panels) * NR
}

/// Whether `qmatmul::matmul` takes this kernel: the CPU has AVX-512F (asked once) and
/// `FOCUS_LENS_NO_AVX512_F32` is unset or 0.
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| supported() && std::env::var_os("FOCUS_LENS_NO_AVX512_F32").is_none_or(|v| v == "0"))
}

/// Whether the CPU can run this kernel (whatever the environment says).
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx512f");
    #[allow(unreachable_code)]
    false
}

/// 16 floats on a cache line: buffers of these start 64-byte aligned, so no load of a strip
/// splits a line.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `lines` long enough for `n` floats (grown, never shrunk: the buffers are reused), as floats.
fn floats(lines: &mut Vec<Line>, n: usize) -> &mut [f32] {
    let want = n.div_ceil(16);
    if lines.len() < want {
        lines.resize(want, Line::default());
    }
    // SAFETY: a Line is 16 f32s with no padding (repr(C), 64 bytes); `want` lines hold n floats.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<f32>(), n) }
}

thread_local! {
    /// The packed X of the last call on this thread, kept so that a call does not fault in
    /// fresh pages (X of a 2048-token segment is up to 12 MiB).
    static XBUF: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

/// Y = X W^T: `x` (m, q.cols) row-major, `y` (m, q.rows) row-major, overwritten; panels in
/// parallel. Call only where `supported()`.
pub fn matmul(q: &QMatrix, x: &[f32], m: usize, y: &mut [f32]) {
    let p = panel_rows(q.rows, q.cols, rayon::current_num_threads(), PANEL_BYTES);
    matmul_with(q, x, m, y, p, k_block(q.cols, KC));
}

/// `matmul` in panels of `p` weight rows and k-blocks of `kc`.
fn matmul_with(q: &QMatrix, x: &[f32], m: usize, y: &mut [f32], p: usize, kc: usize) {
    assert!(supported(), "the AVX-512 f32 kernel needs AVX-512F");
    let (out, inp) = (q.rows, q.cols);
    assert!(x.len() == m * inp && y.len() == m * out && p > 0, "{q:?}: X {} values for {m} rows, Y {}", x.len(), y.len());
    if m == 0 || out == 0 {
        return;
    }
    let mut xbuf = XBUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let blocks = m.div_ceil(MR);
    let xp = floats(&mut xbuf, blocks * MR * inp);
    // X's blocks, [k][MR] each; padding rows zero.
    xp.par_chunks_mut(MR * inp).enumerate().for_each(|(b, dst)| {
        let rows = MR.min(m - b * MR);
        // SAFETY: AVX-512F (asserted above); rows b * MR.. of X, dst one block.
        unsafe { transpose(&x[b * MR * inp..][..rows * inp], rows, MR, inp, dst) };
    });
    let xp: &[f32] = xp;
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(p)).into_par_iter().for_each_init(
        || (Vec::new(), Vec::new()),
        |(wbuf, rows): &mut (Vec<Line>, Vec<f32>), c| {
            let (r0, n) = (c * p, p.min(out - c * p));
            let wp = floats(wbuf, n.div_ceil(16) * 16 * inp);
            rows.resize(NR * inp, 0.0);
            pack_panel(q, r0, n, rows, wp);
            let yp = &yp;
            // SAFETY: AVX-512F (asserted above); Y is (m, out) row-major and this task alone
            // writes its columns r0..r0 + n; xp holds `blocks` packed blocks of inp values, wp
            // this panel's strips.
            unsafe { panel(xp, m, inp, wp, n, yp.0.add(r0), out, kc) };
        },
    );
    XBUF.with(|b| *b.borrow_mut() = xbuf);
}

/// Rows r0..r0 + n of W, dequantized a strip at a time into `rows` (NR rows of k) and laid out
/// in strips of NR rows (the last of at most 16 rows 16 wide), each [k][width], missing rows zero.
fn pack_panel(q: &QMatrix, r0: usize, n: usize, rows: &mut [f32], wp: &mut [f32]) {
    let inp = q.cols;
    for s in 0..n.div_ceil(NR) {
        let live = NR.min(n - s * NR);
        let width = strip_width(live);
        dequantize_rows(q, r0 + s * NR, &mut rows[..live * inp]);
        // SAFETY: AVX-512F (`matmul_with` asserts it).
        unsafe { transpose(&rows[..live * inp], live, width, inp, &mut wp[s * NR * inp..][..width * inp]) };
    }
}

/// `src`'s `live` rows of `inp` as columns: dst[k * width + r] = src[r * inp + k] for r < live,
/// 0 for live <= r < width (width 14, 16 or 32), by gathers.
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose(src: &[f32], live: usize, width: usize, inp: usize, dst: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(live <= width && width <= NR && src.len() == live * inp && dst.len() == width * inp && inp < (i32::MAX as usize) / NR);
    let lanes = |from: usize| -> __mmask16 {
        let n = live.saturating_sub(from).min(16);
        ((1u32 << n) - 1) as u16
    };
    let store = |from: usize| -> __mmask16 { ((1u32 << width.saturating_sub(from).min(16)) - 1) as u16 };
    let idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(inp as i32));
    for v in 0..width.div_ceil(16) {
        let (lm, sm) = (lanes(16 * v), store(16 * v));
        for k in 0..inp {
            // SAFETY: lanes under lm read rows 16v + i < live at column k < inp of src; the
            // store writes lanes under sm, columns 16v.. < width of row k of dst.
            unsafe {
                let g = if lm == 0 { _mm512_setzero_ps() } else { _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), lm, idx, src.as_ptr().add(16 * v * inp + k).cast()) };
                _mm512_mask_storeu_ps(dst.as_mut_ptr().add(k * width + 16 * v), sm, g);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn transpose(_: &[f32], _: usize, _: usize, _: usize, _: &mut [f32]) {
    unreachable!("`supported` is false off x86_64")
}

/// A strip of `rows` weight rows is 16 or 32 wide.
fn strip_width(rows: usize) -> usize {
    if rows <= 16 {
        16
    } else {
        NR
    }
}

/// Y's columns of one panel: `y` points at row 0's first column of the panel, rows `ldy` apart.
///
/// # Safety
/// AVX-512F; `xp` holds m.div_ceil(MR) packed blocks of `inp` values, `wp` n rows packed by
/// `pack_panel`; y[i * ldy + j] for i < m, j < n is writable and not touched by another thread.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(xp: &[f32], m: usize, inp: usize, wp: &[f32], n: usize, y: *mut f32, ldy: usize, kc: usize) {
    for k0 in (0..inp).step_by(kc) {
        let kc = kc.min(inp - k0);
        for b in 0..m.div_ceil(MR) {
            let rows = MR.min(m - b * MR);
            let a = &xp[(b * MR * inp + k0 * MR)..][..kc * MR];
            for s in 0..n.div_ceil(NR) {
                let cols = NR.min(n - s * NR);
                let width = strip_width(cols);
                let w = &wp[(s * NR * inp + k0 * width)..][..kc * width];
                // SAFETY: rows b * MR.. (< m) and columns s * NR.. (< n) of this panel's Y.
                let c = unsafe { y.add(b * MR * ldy + s * NR) };
                let add = k0 > 0;
                // SAFETY: AVX-512F; a holds kc x MR values, w kc x width, C as above.
                unsafe {
                    if width == 16 {
                        tile::<1>(kc, a, w, c, ldy, rows, cols, add)
                    } else {
                        tile::<2>(kc, a, w, c, ldy, rows, cols, add)
                    }
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(_: &[f32], _: usize, _: usize, _: &[f32], _: usize, _: *mut f32, _: usize, _: usize) {
    unreachable!("`supported` is false off x86_64")
}

/// The micro-kernel: C (rows x cols, rows `ldc` apart) = (or +=, `add`) A B^T over kc, A packed
/// [k][MR], B [k][16 * NV]: MR x NV registers of sums, each k one load per register of B and
/// one broadcast of A per row.
///
/// # Safety
/// AVX-512F; `a` has kc * MR values, `b` kc * 16 * NV; rows <= MR and cols <= 16 * NV elements
/// of C's rows are writable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const NV: usize>(kc: usize, a: &[f32], b: &[f32], c: *mut f32, ldc: usize, rows: usize, cols: usize, add: bool) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() >= kc * MR && b.len() >= kc * 16 * NV && rows <= MR && cols <= 16 * NV);
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let (mut pa, mut pb) = (a.as_ptr(), b.as_ptr());
    for _ in 0..kc {
        // SAFETY: pa and pb stay within a and b: kc steps of MR and 16 * NV values.
        unsafe {
            let mut bv = [_mm512_setzero_ps(); NV];
            for (v, r) in bv.iter_mut().enumerate() {
                *r = _mm512_load_ps(pb.add(16 * v));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*pa.add(i));
                for v in 0..NV {
                    acc[v] = _mm512_fmadd_ps(av, bv[v], acc[v]);
                }
            }
            pa = pa.add(MR);
            pb = pb.add(16 * NV);
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        if i < rows {
            for (v, &s) in acc.iter().enumerate() {
                let left = cols.saturating_sub(16 * v).min(16);
                let mask: __mmask16 = ((1u32 << left) - 1) as u16;
                // SAFETY: row i < rows, columns 16v.. under the mask (< cols) of C.
                unsafe {
                    let p = c.add(i * ldc + 16 * v);
                    let s = if add { _mm512_add_ps(_mm512_maskz_loadu_ps(mask, p), s) } else { s };
                    _mm512_mask_storeu_ps(p, mask, s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatvec::tests::{random, ALL};
    use crate::model::qmatvec::QType;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Panels are whole strips, as few as keep the threads' shares even (SmolLM2's shapes on
    /// two threads), within the byte bound; k in even blocks.
    #[test]
    fn panel_and_block_sizes() {
        assert_eq!([(576, 576), (192, 576), (1536, 576), (576, 1536)].map(|(o, i)| panel_rows(o, i, 2, PANEL_BYTES)), [288, 96, 384, 96]);
        assert_eq!((panel_rows(7, 256, 2, PANEL_BYTES), panel_rows(50000, 64, 1, 4096)), (32, 32));
        assert_eq!([576, 1536, 4864, 14336, 100].map(|k| k_block(k, KC)), [576, 1536, 4864, 7168, 100]);
    }

    /// Y = X W^T by this kernel within 1e-5 of the sum of |products| of the f64 product:
    /// every row count 1..=40 (full and partial blocks of MR), panels with full strips, a
    /// 16-wide and a masked 32-wide last strip, k-blocks even, ragged and whole, every type.
    #[test]
    fn equals_the_f64_product() {
        if !supported() {
            eprintln!("no AVX-512F here: the gemm crate's route is the one taken");
            return;
        }
        let mut rng = StdRng::seed_from_u64(21);
        for m in 1..=40 {
            let dtype = ALL[m % ALL.len()];
            // k: 301, 545, 777 rounded up to the type's block (320, 576, 800 for 32-value
            // blocks; K-quants' 256-value blocks give whole k-blocks).
            let inp = [301usize, 545, 777][m % 4 % 3].next_multiple_of(QType::of(dtype).unwrap().block().0);
            // Panels of 48, 32 and 80 rows over widths 37, 64, 91, 16 and 130 (all 15 pairs):
            // full strips, 16-wide last ones (48 = 32 + 16; 37 = 32 + 5), masked 32-wide ones
            // (130 by 80: a last panel of 50 = 32 + 18), partial panels.
            let (out, p) = ([37, 64, 91, 16, 130][m % 5], [48, 32, 80][m % 3]);
            let (raw, w) = random(dtype, out, inp, &mut rng);
            let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
            let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
            // k-blocks: 256 (even or a short last one), 100 (a short last one), all of k in one.
            let kc = [k_block(inp, 256), 100, k_block(inp, KC)][m % 3];
            let mut y = vec![f32::NAN; m * out];
            matmul_with(&q, &x, m, &mut y, p, kc);
            for i in 0..m {
                for o in 0..out {
                    let (xr, wr) = (&x[i * inp..(i + 1) * inp], &w[o * inp..(o + 1) * inp]);
                    let want: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let mag: f64 = xr.iter().zip(wr).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                    let got = y[i * out + o] as f64;
                    assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} {m}x{inp}x{out}, panels of {p}, k-blocks of {kc} ({i}, {o}): {got} vs {want} (|.| {mag})");
                }
            }
        }
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use crate::model::qmatvec::tests::random;
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::time::Instant;

    /// SmolLM2-135M's prefill products at 2048 rows (a segment): this kernel as `matmul` sizes
    /// it and with other panel and k-block sizes, alternated, each the fastest of 7 (against the
    /// gemm crate's kernel: `focus-lens bench matmul`, which times both).
    /// `cargo test --release -p focus-model --lib qmatmul_avx512::speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        if !supported() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(1);
        let m = 2048;
        let t = rayon::current_num_threads();
        // SmolLM2-135M's; Qwen2.5-0.5B's MLP.
        for (out, inp) in [(576, 576), (192, 576), (1536, 576), (576, 1536), (4864, 896), (896, 4864)] {
            let dtype = candle_core::quantized::GgmlDType::Q4_1;
            let (raw, _) = random(dtype, out, inp, &mut rng);
            let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
            let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
            let mut y = vec![0f32; m * out];
            let variants = [(PANEL_BYTES, 384), (PANEL_BYTES, inp), (PANEL_BYTES, 1024), (PANEL_BYTES / 2, k_block(inp, KC))];
            let mut best = [f64::INFINITY; 5];
            for _ in 0..7 {
                let t0 = Instant::now();
                matmul(&q, &x, m, &mut y);
                best[0] = best[0].min(t0.elapsed().as_secs_f64());
                for (j, &(bytes, kc)) in variants.iter().enumerate() {
                    let t0 = Instant::now();
                    matmul_with(&q, &x, m, &mut y, panel_rows(out, inp, t, bytes), kc);
                    best[1 + j] = best[1 + j].min(t0.elapsed().as_secs_f64());
                }
            }
            let gf = |t: f64| (m * out * inp) as f64 / t / 1e9;
            let mut line = format!("{out}x{inp}, {m} rows: as matmul sizes it {:.2} ms ({:.0} G FMA/s)", best[0] * 1e3, gf(best[0]));
            for (&(bytes, kc), b) in variants.iter().zip(&best[1..]) {
                line += &format!("; panels {} rows, kc {kc}: {:.2} ms ({:.0})", panel_rows(out, inp, t, bytes), b * 1e3, gf(*b));
            }
            eprintln!("{line}");
        }
    }
}
