//! Many f32 rows times a weight kept in its GGUF blocks, on the CPU: Y (m, out) = X (m, in) W^T
//! with W (out, in) in any storage type of `QType` (Q4_0 .. Q6_K, F16, BF16, F32). This is the
//! prefill's product; one row goes to `qmatvec`'s kernels instead.
//!
//! The route: a panel of a few dozen rows of W is dequantized into an f32 buffer that stays in
//! the core's L2 cache, and multiplied into Y's columns of that panel by an f32 micro-kernel:
//! ours on AVX-512F (`qmatmul_avx512`), else the `gemm` crate's (the one candle's f32 matmul
//! calls); panels run in parallel (rayon). Each
//! weight is dequantized once per call, which is cheap against the m multiply-adds it feeds, so
//! the product runs at f32 matmul speed while W stays in its blocks. The other route the issue
//! names, llama.cpp's 8-bit activations with integer dot products, is `qmatmul_int8`, which
//! Q4_0 weights take (`product` chooses); `focus-lens bench matmul` measures both
//! (docs/RESULTS.md).
//!
//! Dequantization is `qmatvec::dequantize_rows`, candle's (llama.cpp's formulas) value for value. So Y differs from candle's dequantize-then-matmul only in the
//! order of summation.

use super::qmatmul_int8::SendPtr;
use super::qmatvec::{dequantize_rows, QMatrix};
use crate::error::Result;
use candle_core::{DType, Device, Tensor};
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
    let mut y = vec![0f32; m * q.rows];
    // X read in place when contiguous (a copy of the rows would be one more activation).
    let x = x.contiguous()?;
    let (storage, layout) = x.storage_and_layout();
    let candle_core::Storage::Cpu(cpu) = &*storage else { return Ok(None) };
    let xv = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + m * q.cols];
    product(q, xv, m, &mut y);
    drop(storage);
    *dims.last_mut().expect("rank >= 2") = q.rows;
    let y = Tensor::from_vec(y, dims, &Device::Cpu)?;
    Ok(Some(match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    }))
}

pub use super::qmatvec::Products;

/// Y = X W^T by the route this weight takes (every caller, one row or many, inference or
/// training's graph, goes through here): `Products::Int8` for a block type where the CPU has
/// AVX-512 VNNI by the integer route, whose kernels give a row the same value bit for bit alone
/// (a decode step) or among others (a prefill); else the exact f32 products (one row by
/// `QMatrix::times`, many by the f32 panels, `matmul`).
pub fn product(q: &QMatrix, x: &[f32], m: usize, y: &mut [f32]) {
    if int8_route(q) {
        let xq = super::qmatmul_int8::Q8Rows::quantize_for(q.ty, x, m, q.cols);
        if m == 1 {
            super::qmatvec_int8::times(q, &xq, y);
        } else if super::qmatmul_amx::available() {
            super::qmatmul_amx::matmul(q, &xq, y);
        } else {
            super::int8::matmul(q, &xq, y);
        }
    } else if m == 1 {
        q.times(x, y);
    } else {
        matmul(q, x, m, y);
    }
}

/// Whether `product` takes the integer route for this weight.
pub fn int8_route(q: &QMatrix) -> bool {
    q.products == Products::Int8 && super::qmatmul_int8::supports(q.ty) && super::qmatmul_int8::available()
}

/// The f32 micro-kernel of `matmul`'s panels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F32Kernel {
    /// Ours on AVX-512F (`qmatmul_avx512`).
    Avx512,
    /// The `gemm` crate's (its AVX2 or portable kernel on stable Rust).
    Gemm,
}

impl F32Kernel {
    /// The kernel `matmul` takes here: `Avx512` where `qmatmul_avx512::available()`.
    pub fn chosen() -> F32Kernel {
        if super::qmatmul_avx512::available() {
            F32Kernel::Avx512
        } else {
            F32Kernel::Gemm
        }
    }
}

/// Y = X W^T by the f32 panels: `x` is (m, q.cols) row-major, `y` (m, q.rows) row-major,
/// overwritten.
pub fn matmul(q: &QMatrix, x: &[f32], m: usize, y: &mut [f32]) {
    matmul_by(q, x, m, y, F32Kernel::chosen())
}

/// `matmul` by the given kernel (`Avx512` only where the CPU has AVX-512F): for the tests and
/// `focus-lens bench matmul`, which compare the two.
pub fn matmul_by(q: &QMatrix, x: &[f32], m: usize, y: &mut [f32], kernel: F32Kernel) {
    let (out, inp) = (q.rows, q.cols);
    assert!(x.len() == m * inp && y.len() == m * out, "{q:?}: X has {} values for {m} rows, Y {}", x.len(), y.len());
    if m == 0 || out == 0 {
        return;
    }
    if kernel == F32Kernel::Avx512 {
        return super::qmatmul_avx512::matmul(q, x, m, y);
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

/// dX = dY W, the product's gradient for its input: `dy` is (m, q.rows) row-major, `dx`
/// (m, q.cols) row-major, overwritten. Panel by panel (each dequantized once, as in `matmul`),
/// each adding its rows' share into all of dX, so the panels run one after another and gemm
/// spreads each over the threads.
pub fn matmul_t(q: &QMatrix, dy: &[f32], m: usize, dx: &mut [f32]) {
    let (out, inp) = (q.rows, q.cols);
    assert!(dy.len() == m * out && dx.len() == m * inp, "{q:?}: dY has {} values for {m} rows, dX {}", dy.len(), dx.len());
    dx.fill(0.0);
    if m == 0 || out == 0 {
        return;
    }
    let p = panel_rows(inp).min(out);
    let mut panel = Vec::new();
    for c in 0..out.div_ceil(p) {
        let (r0, n) = (c * p, p.min(out - c * p));
        panel.resize(n * inp, 0.0);
        dequantize_rows(q, r0, &mut panel);
        // SAFETY: dY is (m, out) and the panel (n, inp), both row-major, dX (m, inp); the
        // lhs is dY's columns r0..r0 + n.
        unsafe {
            gemm::gemm(
                m,
                inp,
                n,
                dx.as_mut_ptr(),
                1,
                inp as isize,
                true,
                dy.as_ptr().add(r0),
                1,
                out as isize,
                panel.as_ptr(),
                1,
                inp as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            );
        }
    }
}


#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::qmatvec::tests::{random, ALL};
    use crate::model::qmatvec::dequantize;
    use rand::{rngs::StdRng, Rng, SeedableRng};

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

    /// A type on the integer route gives a row the same value bit for bit whether the row is
    /// multiplied alone (a decode step: `qmatvec_int8`) or among others (a prefill: the AMX
    /// tiles or the VNNI panels).
    #[test]
    fn a_row_alone_equals_the_row_among_others() {
        let mut rng = StdRng::seed_from_u64(13);
        for dtype in ALL {
            let (m, out, inp) = (6, 37, 512);
            let (raw, _) = random(dtype, out, inp, &mut rng);
            let mut q = QMatrix::new(dtype, &raw, out, inp).unwrap();
            assert!(!int8_route(&q), "exact products are the default");
            q.products = Products::Int8;
            if !int8_route(&q) {
                // A float type, or a CPU without the integer kernels.
                continue;
            }
            let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
            let mut all = vec![0f32; m * out];
            product(&q, &x, m, &mut all);
            for i in 0..m {
                let mut one = vec![0f32; out];
                product(&q, &x[i * inp..(i + 1) * inp], 1, &mut one);
                assert!(one == all[i * out..(i + 1) * out], "{dtype:?} row {i}");
            }
        }
    }

    /// Y equals candle's dequantized W times X, computed in f64, up to f32 summation error
    /// (1e-5 of the sum of |products|): every type, odd row counts and output widths that are
    /// not multiples of the panel, by each f32 kernel this CPU has (the gemm crate's always,
    /// ours where it has AVX-512F).
    #[test]
    fn equals_dequantize_then_matmul() {
        let mut kernels = vec![F32Kernel::Gemm];
        if super::super::qmatmul_avx512::supported() {
            kernels.push(F32Kernel::Avx512);
        } else {
            eprintln!("no AVX-512F here: only the gemm crate's kernel is tested");
        }
        let mut rng = StdRng::seed_from_u64(12);
        for (dtype, &kernel) in ALL.iter().flat_map(|d| kernels.iter().map(move |k| (*d, k))) {
            // Panels of at most 160 rows at 768 columns and 80 at 1536 (fewer where that gives a
            // thread fewer than two): 161 and 300 rows end in a partial one.
            assert_eq!((panel_rows(768), panel_rows(1536)), (160, 80));
            for (m, out, inp) in [(1, 7, 256), (3, 37, 512), (17, 161, 768), (33, 300, 1536)] {
                let (raw, w) = random(dtype, out, inp, &mut rng);
                let q = QMatrix::new(dtype, &raw, out, inp).unwrap();
                let x: Vec<f32> = (0..m * inp).map(|_| rng.gen_range(-1f32..1.0)).collect();
                let mut y = vec![f32::NAN; m * out];
                matmul_by(&q, &x, m, &mut y, kernel);
                // Row 0 through QMatrix::times too (the one-row kernels, or dequantized chunks).
                let mut y1 = vec![0f32; out];
                q.times(&x[..inp], &mut y1);
                // The gradient's product, dX = dY W, with Y's values as dY (gemm's only: once).
                let mut dx = vec![f32::NAN; m * inp];
                matmul_t(&q, &y, m, &mut dx);
                for i in (0..m).filter(|_| kernel == F32Kernel::Gemm) {
                    for c in 0..inp {
                        let want: f64 = (0..out).map(|o| y[i * out + o] as f64 * w[o * inp + c] as f64).sum();
                        let mag: f64 = (0..out).map(|o| (y[i * out + o] as f64 * w[o * inp + c] as f64).abs()).sum();
                        let got = dx[i * inp + c] as f64;
                        assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} dX {m}x{out}x{inp} ({i}, {c}): {got} vs {want}");
                    }
                }
                for i in 0..m {
                    for o in 0..out {
                        let (xr, wr) = (&x[i * inp..(i + 1) * inp], &w[o * inp..(o + 1) * inp]);
                        let want: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let mag: f64 = xr.iter().zip(wr).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                        let got = y[i * out + o] as f64;
                        assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} {kernel:?} {m}x{inp}x{out} ({i}, {o}): {got} vs {want} (|.| {mag})");
                        if i == 0 {
                            let got = y1[o] as f64;
                            assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} times, {inp}x{out} ({o}): {got} vs {want} (|.| {mag})");
                        }
                    }
                }
            }
        }
    }
}
