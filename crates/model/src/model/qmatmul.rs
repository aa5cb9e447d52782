//! Many f32 rows times a weight kept in its GGUF blocks, on the CPU: Y (m, out) = X (m, in) W^T
//! with W (out, in) in any storage type of `QType` (Q4_0 .. Q6_K, F16, BF16, F32). This is the
//! prefill's product; one row goes to `qmatvec`'s kernels instead.
//!
//! The route: a panel of a few dozen rows of W is dequantized into an f32 buffer that stays in
//! the core's L2 cache, and multiplied into Y's columns of that panel by the `gemm` crate's f32
//! micro-kernel (the one candle's f32 matmul calls); panels run in parallel (rayon). Each
//! weight is dequantized once per call, which is cheap against the m multiply-adds it feeds, so
//! the product runs at f32 matmul speed while W stays in its blocks. The other route the issue
//! names, llama.cpp's 8-bit activations with integer dot products, is `qmatmul_int8`;
//! `focus-lens bench matmul` measures both (docs/RESULTS.md).
//!
//! Dequantization is candle's (llama.cpp's formulas) value for value: the types `qmatvec`
//! has register kernels for use those (checked bit-exact against candle there), the others
//! candle's own `to_float`. So Y differs from candle's dequantize-then-matmul only in the
//! order of summation.

use super::qmatvec::{self, QMatrix, QType};
use crate::error::Result;
use candle_core::quantized::k_quants::{self, GgmlType};
use candle_core::{DType, Device, Tensor};
use multiversion::multiversion;
use rayon::prelude::*;

/// Bytes of f32 weights in one panel: a quarter of a 2 MB L2, so the panel, a strip of X and
/// gemm's packed blocks stay in cache together.
const PANEL_BYTES: usize = 512 << 10;

/// Rows of W per panel for rows of `cols` weights: a multiple of 16 (gemm's AVX-512 tile
/// width), from 16 to 256.
pub fn panel_rows(cols: usize) -> usize {
    (PANEL_BYTES / 4 / cols.max(1) / 16 * 16).clamp(16, 256)
}

/// `Some(x W^T + b)` when `x` is f32 rows on the CPU ((..., q.cols), any leading dims) that no
/// gradient tracks; `None` leaves the product to candle (training's graph, another device).
pub fn forward(x: &Tensor, q: &QMatrix, b: Option<&Tensor>) -> Result<Option<Tensor>> {
    let fits = |t: &Tensor| matches!(t.device(), Device::Cpu) && t.dtype() == DType::F32 && !t.track_op();
    if x.rank() < 2 || x.dim(x.rank() - 1)? != q.cols || !fits(x) || b.is_some_and(|b| !fits(b)) {
        return Ok(None);
    }
    let mut dims = x.dims().to_vec();
    let m = x.elem_count() / q.cols;
    let xv = x.flatten_all()?.to_vec1::<f32>()?;
    let mut y = vec![0f32; m * q.rows];
    if m == 1 {
        q.times(&xv, &mut y);
    } else {
        matmul(q, &xv, m, &mut y);
    }
    *dims.last_mut().expect("rank >= 2") = q.rows;
    let y = Tensor::from_vec(y, dims, x.device())?;
    Ok(Some(match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    }))
}

/// Y = X W^T: `x` is (m, q.cols) row-major, `y` (m, q.rows) row-major, overwritten.
pub fn matmul(q: &QMatrix, x: &[f32], m: usize, y: &mut [f32]) {
    let (out, inp) = (q.rows, q.cols);
    assert!(x.len() == m * inp && y.len() == m * out, "{q:?}: X has {} values for {m} rows, Y {}", x.len(), y.len());
    if m == 0 || out == 0 {
        return;
    }
    // At least two panels per thread where W is small (a K/V projection), so both cores work.
    let spread = out.div_ceil(2 * rayon::current_num_threads()).next_multiple_of(16);
    let p = panel_rows(inp).min(spread).min(out);
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(p)).into_par_iter().for_each_init(Vec::new, |panel: &mut Vec<f32>, c| {
        let (r0, n) = (c * p, p.min(out - c * p));
        panel.resize(n * inp, 0.0);
        dequantize_rows(q, r0, panel);
        let yp = &yp;
        // SAFETY: X is (m, inp) and the panel (n, inp), both row-major; the destination is
        // Y's columns r0..r0 + n of every row, which no other task writes.
        unsafe {
            gemm::gemm(
                m,
                n,
                inp,
                yp.0.add(r0),
                1,
                out as isize,
                false,
                x.as_ptr(),
                1,
                inp as isize,
                panel.as_ptr(),
                inp as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    });
}

/// Y's base pointer, shared by the panel tasks, each of which writes its own columns.
struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint elements (see `matmul`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

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
        QType::Q4_1 => blocks::<32, 20>(bytes, out, qmatvec::q4_1::<F16C>),
        QType::Q5_0 => blocks::<32, 22>(bytes, out, qmatvec::q5_0::<F16C>),
        QType::Q8_0 => blocks::<32, 34>(bytes, out, qmatvec::q8_0::<F16C>),
        QType::Q4K => blocks::<256, 144>(bytes, out, qmatvec::q4k::<F16C>),
        QType::Q6K => blocks::<256, 210>(bytes, out, qmatvec::q6k::<F16C>),
        QType::Q4_0 => candle_blocks::<k_quants::BlockQ4_0>(bytes, out),
        QType::Q5_1 => candle_blocks::<k_quants::BlockQ5_1>(bytes, out),
        QType::Q2K => candle_blocks::<k_quants::BlockQ2K>(bytes, out),
        QType::Q3K => candle_blocks::<k_quants::BlockQ3K>(bytes, out),
        QType::Q5K => candle_blocks::<k_quants::BlockQ5K>(bytes, out),
        QType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
                *o = qmatvec::f16_at::<F16C>(b, 0);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    use candle_core::quantized::GgmlDType;
    use candle_core::Device;
    use half::f16;
    use rand::{rngs::StdRng, Rng, SeedableRng};

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

    /// Every type's dequantization is candle's, bit for bit, from an aligned and a misaligned
    /// start (the copy in `candle_blocks`).
    #[test]
    fn dequantizes_as_candle() {
        let mut rng = StdRng::seed_from_u64(11);
        for dtype in ALL {
            let (rows, cols) = (5, 512);
            let (raw, want) = random(dtype, rows, cols, &mut rng);
            let q = QMatrix::new(dtype, &raw, rows, cols).unwrap();
            let mut got = vec![0f32; rows * cols];
            dequantize_rows(&q, 0, &mut got);
            let mut shifted = vec![0u8; raw.len() + 1];
            shifted[1..].copy_from_slice(&raw);
            let mut got2 = vec![0f32; (rows - 2) * cols];
            let rb = q.row_bytes();
            dequantize(q.ty, &shifted[1 + 2 * rb..], &mut got2);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(g == w, "{dtype:?} element {i}: {g} vs candle {w}");
            }
            assert!(got2 == want[2 * cols..], "{dtype:?} from a misaligned start");
        }
    }

    /// Y equals candle's dequantized W times X, computed in f64, up to f32 summation error
    /// (1e-5 of the sum of |products|): every type, odd row counts and output widths that are
    /// not multiples of the panel.
    #[test]
    fn equals_dequantize_then_matmul() {
        let mut rng = StdRng::seed_from_u64(12);
        for dtype in ALL {
            // Panels of at most 160 rows at 768 columns and 80 at 1536 (fewer where that gives a
            // thread fewer than two): 161 and 300 rows end in a partial one.
            assert_eq!((panel_rows(768), panel_rows(1536)), (160, 80));
            for (m, out, inp) in [(1, 7, 256), (3, 37, 512), (17, 161, 768), (33, 300, 1536)] {
                let (raw, w) = random(dtype, out, inp, &mut rng);
                let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
                let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
                let mut y = vec![f32::NAN; m * out];
                matmul(&q, &x, m, &mut y);
                for i in 0..m {
                    for o in 0..out {
                        let (xr, wr) = (&x[i * inp..(i + 1) * inp], &w[o * inp..(o + 1) * inp]);
                        let want: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let mag: f64 = xr.iter().zip(wr).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                        let got = y[i * out + o] as f64;
                        assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} {m}x{inp}x{out} ({i}, {o}): {got} vs {want} (|.| {mag})");
                    }
                }
                // One row through QMatrix::times (the one-row kernels, or this product).
                let mut y1 = vec![0f32; out];
                q.times(&x[..inp], &mut y1);
                for o in 0..out {
                    let d = (y1[o] - y[o]).abs();
                    assert!(d <= 1e-5 * y[o].abs().max(1.0) * (inp as f32).sqrt(), "{dtype:?} times vs matmul at {o}: {} vs {}", y1[o], y[o]);
                }
            }
        }
    }
}
