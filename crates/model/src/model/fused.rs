//! Row ops that a pass on CUDA runs as one kernel each (`crates/kernels/cuda/focus_rows.cu`): RMS norm,
//! the residual add with the RMS norm after it, and SwiGLU's silu(gate) * up; and a generation
//! step's one-row products (`row_times`, `rows_times`: Q, K and V in one launch, a residual add
//! in the product; `swiglu_row`: gate, up and silu * up in one; either with the RMS norm of its
//! input inside it, `RowNorm`). A generation step
//! on the GPU is bound by its launches (one token's rows: ~2-3 us a kernel on an H200 whatever
//! it does), so fewer launches is a faster step. Anywhere else (the CPU, other dtypes) candle's
//! ops give the same values; none of these has a backward pass (training's differentiable ops
//! are `Norm::forward`'s and `Mlp::forward`'s composed ones).

use crate::error::Result;
use candle_core::{DType, Tensor};

/// rms_norm(x) * w over the last dimension (candle's `rms_norm`).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if on_cuda_f32(&[x, w]) {
        return Ok(x.contiguous()?.apply_op2_no_bwd(&w.contiguous()?, &cuda::RmsNorm { eps })?);
    }
    Ok(candle_nn::ops::rms_norm(x, w, eps)?)
}

/// (a + b, rms_norm(a + b) * w): a residual add and the norm of its result.
pub fn add_rms_norm(a: &Tensor, b: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    #[cfg(feature = "cuda")]
    if on_cuda_f32(&[a, b, w]) && a.dims() == b.dims() {
        let both = a.contiguous()?.apply_op3_no_bwd(&b.contiguous()?, &w.contiguous()?, &cuda::AddRmsNorm { eps })?;
        return Ok((both.get(0)?, both.get(1)?));
    }
    let r = (a + b)?;
    let y = candle_nn::ops::rms_norm(&r, w, eps)?;
    Ok((r, y))
}

/// silu(g) * u, elementwise.
pub fn silu_mul(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if on_cuda_f32(&[g, u]) && g.dims() == u.dims() {
        return Ok(g.contiguous()?.apply_op2_no_bwd(&u.contiguous()?, &cuda::SiluMul)?);
    }
    Ok((candle_nn::ops::silu(g)? * u)?)
}

/// `Some(x W^T + b)` for one f32 row `x` (1, k) and `w` (n, k) on CUDA that no gradient tracks
/// (a generation step's products: one kernel, the bias added); `None` leaves the product to the
/// caller (candle's matmul, or `matvec::row_times` on the CPU).
pub fn row_times(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Option<Tensor>> {
    rows_times(x, &[(w, b)], None, None)
}

/// An RMS norm that a one-row product applies to its input first (weight, eps): the kernel
/// takes x * w and scales its sums by rsqrt(mean(x^2) + eps), with no norm kernel before it.
pub type RowNorm<'a> = Option<(&'a Tensor, f32)>;

/// `Some([x' W0^T + b0, x' W1^T + b1, ..] + residual)` (1, n0 + n1 + ..) with x' = x, or its
/// RMS norm (`norm`): one kernel for up to three weights that take the same row (Q, K and V)
/// and an optional residual added to the result, on the terms of `row_times`.
pub fn rows_times(x: &Tensor, parts: &[(&Tensor, Option<&Tensor>)], residual: Option<&Tensor>, norm: RowNorm<'_>) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if let Some(k) = one_row(x) {
        let n: usize = parts.iter().map(|(w, _)| w.dims2().map_or(0, |d| d.0)).sum();
        let fits = !parts.is_empty()
            && parts.len() <= 3
            && parts.iter().all(|(w, _)| w.dtype() == parts[0].0.dtype())
            && parts.iter().all(|(w, b)| weight_fits(w, k) && b.map_or(true, |b| on_cuda_f32(&[b]) && !b.track_op() && b.elem_count() == w.dims2().map_or(0, |d| d.0)))
            && residual.map_or(true, |r| on_cuda_f32(&[r]) && !r.track_op() && r.elem_count() == n)
            && norm_fits(norm, k);
        if fits {
            let op = cuda::RowsTimes {
                parts: parts.iter().map(|(w, b)| Ok::<_, crate::error::Error>(((*w).clone(), b.map(|b| b.contiguous()).transpose()?))).collect::<Result<_>>()?,
                residual: residual.map(|r| r.contiguous()).transpose()?,
                norm: norm.map(|(w, eps)| Ok::<_, crate::error::Error>((w.contiguous()?, eps))).transpose()?,
            };
            return Ok(Some(x.contiguous()?.apply_op1_no_bwd(&op)?));
        }
    }
    let _ = (x, parts, residual, norm);
    Ok(None)
}

/// `Some(silu(x' G^T) * (x' U^T))` (1, n): SwiGLU's hidden row from the gate and up weights
/// (n, k) as one kernel, x' = x or its RMS norm (`norm`), on the terms of `row_times`.
pub fn swiglu_row(x: &Tensor, gate: &Tensor, up: &Tensor, norm: RowNorm<'_>) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if let Some(k) = one_row(x) {
        if weight_fits(gate, k) && weight_fits(up, k) && gate.dims() == up.dims() && gate.dtype() == up.dtype() && norm_fits(norm, k) {
            let op = cuda::SwigluRow { gate: gate.clone(), up: up.clone(), norm: norm.map(|(w, eps)| Ok::<_, crate::error::Error>((w.contiguous()?, eps))).transpose()? };
            return Ok(Some(x.contiguous()?.apply_op1_no_bwd(&op)?));
        }
    }
    let _ = (x, gate, up, norm);
    Ok(None)
}

/// Whether `x` is one f32 row (1, k) on CUDA that no gradient tracks: the rows the one-row
/// kernels take.
pub fn is_cuda_row(x: &Tensor) -> bool {
    #[cfg(feature = "cuda")]
    return one_row(x).is_some();
    #[cfg(not(feature = "cuda"))]
    {
        let _ = x;
        false
    }
}

/// The length k of `x` when it is one f32 row (1, k) on CUDA that no gradient tracks.
#[cfg(feature = "cuda")]
fn one_row(x: &Tensor) -> Option<usize> {
    (on_cuda_f32(&[x]) && !x.track_op() && x.rank() == 2 && x.dims()[0] == 1).then(|| x.dims()[1])
}

/// No norm, or an f32 CUDA weight of k values.
#[cfg(feature = "cuda")]
fn norm_fits(norm: RowNorm<'_>, k: usize) -> bool {
    norm.map_or(true, |(w, _)| on_cuda_f32(&[w]) && !w.track_op() && w.elem_count() == k)
}

/// A contiguous f32 or bf16 CUDA weight (n, k) that no gradient tracks.
#[cfg(feature = "cuda")]
fn weight_fits(w: &Tensor, k: usize) -> bool {
    let dtype = matches!(w.dtype(), DType::F32 | DType::BF16);
    w.device().is_cuda() && dtype && !w.track_op() && w.is_contiguous() && w.rank() == 2 && w.dims()[1] == k
}

#[cfg(feature = "cuda")]
fn on_cuda_f32(ts: &[&Tensor]) -> bool {
    ts.iter().all(|t| t.device().is_cuda() && t.dtype() == DType::F32)
}
#[cfg(not(feature = "cuda"))]
#[allow(dead_code)]
fn on_cuda_f32(_: &[&Tensor]) -> bool {
    let _ = DType::F32;
    false
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{CudaView, DevicePtr, DeviceSlice, LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use crate::attention::cuda::{storage, view};
    use candle_core::{bail, CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape};

    const PTX: &str = focus_kernels::ROWS_PTX;
    const MODULE: &str = "focus_rows";
    /// The kernels' block for a row (`ROW_THREADS`).
    const ROW_THREADS: u32 = 256;

    /// The (rows, d) of a contiguous input whose last dimension is `d` (the weight's length).
    fn rows(l: &Layout, d: usize) -> Result<usize> {
        let n = l.shape().elem_count();
        if d == 0 || n % d != 0 || l.shape().dims().last() != Some(&d) || l.contiguous_offsets().is_none() {
            bail!("a fused row op needs contiguous rows of the weight's length {d}, got {:?}", l.shape());
        }
        Ok(n / d)
    }

    /// The f32 values a contiguous input holds (`op` names the op in the error).
    fn values<'a>(s: &'a CudaStorage, l: &Layout, op: &str) -> Result<CudaView<'a, f32>> {
        let (a, b) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg(format!("{op}: an input is not contiguous")))?;
        Ok(s.as_cuda_slice::<f32>()?.slice(a..b))
    }

    fn no_cpu(name: &str) -> Result<(CpuStorage, Shape)> {
        bail!("{name} is a CUDA kernel; model::fused runs candle's ops elsewhere")
    }

    pub struct RmsNorm {
        pub eps: f32,
    }

    impl CustomOp2 for RmsNorm {
        fn name(&self) -> &'static str {
            "focus-rms-norm"
        }
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            no_cpu(self.name())
        }
        fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout, w: &CudaStorage, lw: &Layout) -> Result<(CudaStorage, Shape)> {
            let d = lw.shape().elem_count();
            let n = rows(lx, d)?;
            let dev = x.device().clone();
            let (xv, wv) = (values(x, lx, "rms norm")?, values(w, lw, "rms norm")?);
            let y = unsafe { dev.alloc::<f32>(n * d)? };
            let f = dev.get_or_load_custom_func("rms_norm_rows", MODULE, PTX)?;
            let mut b = f.builder();
            let d32 = d as i32;
            b.arg(&xv).arg(&wv).arg(&y).arg(&d32).arg(&self.eps);
            let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
            unsafe { b.launch(cfg) }.w()?;
            Ok((CudaStorage::wrap_cuda_slice(y, dev), lx.shape().clone()))
        }
    }

    /// Output (2, ..a's shape): the sum, then its norm.
    pub struct AddRmsNorm {
        pub eps: f32,
    }

    impl CustomOp3 for AddRmsNorm {
        fn name(&self) -> &'static str {
            "focus-add-rms-norm"
        }
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            no_cpu(self.name())
        }
        fn cuda_fwd(&self, a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout, w: &CudaStorage, lw: &Layout) -> Result<(CudaStorage, Shape)> {
            let d = lw.shape().elem_count();
            let n = rows(la, d)?;
            if rows(lb, d)? != n {
                bail!("add + rms norm: {:?} and {:?}", la.shape(), lb.shape());
            }
            let dev = a.device().clone();
            let op = "add + rms norm";
            let (av, bv, wv) = (values(a, la, op)?, values(b, lb, op)?, values(w, lw, op)?);
            let out = unsafe { dev.alloc::<f32>(2 * n * d)? };
            let f = dev.get_or_load_custom_func("add_rms_norm_rows", MODULE, PTX)?;
            let mut bld = f.builder();
            let (n32, d32) = (n as i32, d as i32);
            bld.arg(&av).arg(&bv).arg(&wv).arg(&out).arg(&n32).arg(&d32).arg(&self.eps);
            let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
            unsafe { bld.launch(cfg) }.w()?;
            let mut dims = vec![2];
            dims.extend_from_slice(la.shape().dims());
            Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from(dims)))
        }
    }

    pub struct SiluMul;

    impl CustomOp2 for SiluMul {
        fn name(&self) -> &'static str {
            "focus-silu-mul"
        }
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            no_cpu(self.name())
        }
        fn cuda_fwd(&self, g: &CudaStorage, lg: &Layout, u: &CudaStorage, lu: &Layout) -> Result<(CudaStorage, Shape)> {
            let n = lg.shape().elem_count();
            if lu.shape().elem_count() != n {
                bail!("silu * up: {:?} and {:?}", lg.shape(), lu.shape());
            }
            let dev = g.device().clone();
            let (gv, uv) = (values(g, lg, "silu * up")?, values(u, lu, "silu * up")?);
            let y = unsafe { dev.alloc::<f32>(n)? };
            let f = dev.get_or_load_custom_func("silu_mul", MODULE, PTX)?;
            let mut b = f.builder();
            let n32 = n as i32;
            b.arg(&gv).arg(&uv).arg(&y).arg(&n32);
            let cfg = LaunchConfig { grid_dim: (n.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            unsafe { b.launch(cfg) }.w()?;
            Ok((CudaStorage::wrap_cuda_slice(y, dev), lg.shape().clone()))
        }
    }

    /// The weights and biases of `rows_times` (held here: a custom op takes at most three
    /// inputs), and the residual.
    pub struct RowsTimes {
        pub parts: Vec<(candle_core::Tensor, Option<candle_core::Tensor>)>,
        pub residual: Option<candle_core::Tensor>,
        /// The RMS norm applied to x first (weight, eps).
        pub norm: Option<(candle_core::Tensor, f32)>,
    }

    pub struct SwigluRow {
        pub gate: candle_core::Tensor,
        pub up: candle_core::Tensor,
        pub norm: Option<(candle_core::Tensor, f32)>,
    }

    /// The norm weight's address (0: none; `aligned` cleared when it is not 16-byte aligned)
    /// and eps. The storage guard is returned to live as long as the launch.
    fn norm_arg<'a>(norm: &'a Option<(candle_core::Tensor, f32)>, aligned: &mut bool) -> Result<(Option<(impl std::ops::Deref<Target = candle_core::Storage> + 'a, usize)>, u64, f32)> {
        let Some((w, eps)) = norm else { return Ok((None, 0, 0.0)) };
        let g = storage(w)?;
        let a = addr(&view::<f32>(&g, 0)?);
        *aligned &= a % 16 == 0;
        Ok((Some(g), a, *eps))
    }

    /// A view's device address (the kernels' arguments, and their float4 alignment).
    fn addr<T>(v: &CudaView<'_, T>) -> u64 {
        v.device_ptr(v.stream()).0
    }

    /// A weight's device address, and the alignment its four-value loads need (16 bytes for
    /// f32, 8 for bf16).
    fn weight_addr(g: &(impl std::ops::Deref<Target = candle_core::Storage>, usize), bf16: bool) -> Result<(u64, u64)> {
        Ok(if bf16 { (addr(&view::<half::bf16>(g, 0)?), 8) } else { (addr(&view::<f32>(g, 0)?), 16) })
    }

    /// MV_WARPS outputs a block of 256 threads.
    fn grid(n: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (n.div_ceil(8) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }

    impl CustomOp1 for RowsTimes {
        fn name(&self) -> &'static str {
            "focus-rows-times"
        }
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            no_cpu(self.name())
        }
        fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout) -> Result<(CudaStorage, Shape)> {
            let k = lx.shape().elem_count();
            let dev = x.device().clone();
            let xv = values(x, lx, "rows times W")?;
            let gw: Vec<_> = self.parts.iter().map(|(w, _)| storage(w)).collect::<Result<_>>()?;
            let gb: Vec<_> = self.parts.iter().map(|(_, b)| b.as_ref().map(storage).transpose()).collect::<Result<_>>()?;
            let gr = self.residual.as_ref().map(storage).transpose()?;
            let mut ws = [0u64; 3];
            let mut bs = [0u64; 3];
            let mut ns = [0i32; 3];
            let mut aligned = k % 4 == 0 && addr(&xv) % 16 == 0;
            // Every part's weights are f32, or every part's bf16 (the `_bf16` kernel).
            let bf16 = self.parts[0].0.dtype() == candle_core::DType::BF16;
            for (i, (w, _)) in self.parts.iter().enumerate() {
                let (n, kw) = w.dims2()?;
                if kw != k || (w.dtype() == candle_core::DType::BF16) != bf16 {
                    bail!("rows times W: x has {k} values, W {:?} {:?}", w.dims(), w.dtype());
                }
                let (a, align) = weight_addr(&gw[i], bf16)?;
                aligned &= a % align == 0;
                ws[i] = a;
                if let Some(g) = &gb[i] {
                    bs[i] = addr(&view::<f32>(g, 0)?);
                }
                ns[i] = n as i32;
            }
            let n: usize = ns.iter().map(|&n| n as usize).sum();
            let res = gr.as_ref().map(|g| view::<f32>(g, 0).map(|v| addr(&v))).transpose()?.unwrap_or(0);
            let (_gn, nw, eps) = norm_arg(&self.norm, &mut aligned)?;
            let y = unsafe { dev.alloc::<f32>(n)? };
            let f = dev.get_or_load_custom_func(if bf16 { "rows_times_bf16" } else { "rows_times" }, MODULE, PTX)?;
            let mut b = f.builder();
            let (k32, vec4) = (k as i32, aligned as i32);
            b.arg(&xv).arg(&k32);
            for i in 0..3 {
                b.arg(&ws[i]).arg(&bs[i]).arg(&ns[i]);
            }
            b.arg(&res).arg(&y).arg(&vec4).arg(&nw).arg(&eps);
            unsafe { b.launch(grid(n)) }.w()?;
            Ok((CudaStorage::wrap_cuda_slice(y, dev), Shape::from((1, n))))
        }
    }

    impl CustomOp1 for SwigluRow {
        fn name(&self) -> &'static str {
            "focus-swiglu-row"
        }
        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            no_cpu(self.name())
        }
        fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout) -> Result<(CudaStorage, Shape)> {
            let k = lx.shape().elem_count();
            let (n, kw) = self.gate.dims2()?;
            if kw != k || self.up.dims2()? != (n, k) {
                bail!("swiglu row: x has {k} values, gate {:?}, up {:?}", self.gate.dims(), self.up.dims());
            }
            let dev = x.device().clone();
            let xv = values(x, lx, "swiglu row")?;
            let (gg, gu) = (storage(&self.gate)?, storage(&self.up)?);
            let bf16 = self.gate.dtype() == candle_core::DType::BF16;
            if (self.up.dtype() == candle_core::DType::BF16) != bf16 {
                bail!("swiglu row: gate {:?}, up {:?}", self.gate.dtype(), self.up.dtype());
            }
            let ((wg, align), (wu, _)) = (weight_addr(&gg, bf16)?, weight_addr(&gu, bf16)?);
            let mut aligned = k % 4 == 0 && addr(&xv) % 16 == 0 && wg % align == 0 && wu % align == 0;
            let (_gn, nw, eps) = norm_arg(&self.norm, &mut aligned)?;
            let vec4 = aligned as i32;
            let y = unsafe { dev.alloc::<f32>(n)? };
            let f = dev.get_or_load_custom_func(if bf16 { "swiglu_row_bf16" } else { "swiglu_row" }, MODULE, PTX)?;
            let mut b = f.builder();
            let (k32, n32) = (k as i32, n as i32);
            b.arg(&xv).arg(&k32).arg(&wg).arg(&wu).arg(&y).arg(&n32).arg(&vec4).arg(&nw).arg(&eps);
            unsafe { b.launch(grid(n)) }.w()?;
            Ok((CudaStorage::wrap_cuda_slice(y, dev), Shape::from((1, n))))
        }
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    fn max_rel(a: &Tensor, b: &Tensor) -> f32 {
        let (a, b) = (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
        a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / scale
    }

    /// The fused kernels give candle's values (to f32 rounding) for one row (a decode step),
    /// many rows (a prefill), row lengths that are and are not multiples of the block, and an
    /// input that is a view (narrowed, so not at its storage's start).
    #[test]
    fn cuda_fused_rows_equal_candles_ops() {
        let dev = crate::device::cuda(0).expect("a CUDA device");
        for (rows, d) in [(1, 576), (1, 896), (7, 64), (33, 2048), (2, 13)] {
            let r = |n: usize| Tensor::randn(0f32, 1.0, (n, d), &dev).unwrap();
            let (x, y) = (r(rows + 1).narrow(0, 1, rows).unwrap(), r(rows));
            let w = Tensor::randn(1f32, 0.2, d, &dev).unwrap();
            let eps = 1e-5;
            let want = candle_nn::ops::rms_norm(&x, &w, eps).unwrap();
            let got = rms_norm(&x, &w, eps).unwrap();
            assert_eq!(got.dims(), want.dims());
            assert!(max_rel(&got, &want) < 1e-5, "rms norm ({rows}, {d}): {}", max_rel(&got, &want));
            let (sum, normed) = add_rms_norm(&x, &y, &w, eps).unwrap();
            let want_sum = (&x + &y).unwrap();
            assert_eq!(max_rel(&sum, &want_sum), 0.0, "add ({rows}, {d})");
            let want_norm = candle_nn::ops::rms_norm(&want_sum, &w, eps).unwrap();
            assert!(max_rel(&normed, &want_norm) < 1e-5, "add + rms norm ({rows}, {d}): {}", max_rel(&normed, &want_norm));
            let want = (candle_nn::ops::silu(&x).unwrap() * &y).unwrap();
            let got = silu_mul(&x, &y).unwrap();
            assert!(max_rel(&got, &want) < 1e-6, "silu * up ({rows}, {d}): {}", max_rel(&got, &want));
        }
    }

    /// One row times W^T (+ b) equals candle's matmul: float4 and scalar loads (k not a
    /// multiple of 4, or x at an odd offset), with and without a bias, W a row range of a larger
    /// matrix, outputs not a multiple of the block's, and an LM head's shape; so do the Q/K/V
    /// product with a residual and SwiGLU's row.
    #[test]
    fn cuda_row_times_equals_candles_matmul() {
        let dev = crate::device::cuda(0).expect("a CUDA device");
        for (n, k, offset, bias) in [(576, 576, 0, false), (1152, 896, 0, true), (13, 7, 0, true), (100, 576, 1, false), (49152, 576, 0, false), (576, 1536, 3, true)] {
            let x = Tensor::randn(0f32, 1.0, (1, k + offset), &dev).unwrap().narrow(1, offset, k).unwrap();
            let w = Tensor::randn(0f32, 0.1, (n + 5, k), &dev).unwrap().narrow(0, 5, n).unwrap();
            let b = bias.then(|| Tensor::randn(0f32, 1.0, n, &dev).unwrap());
            let got = row_times(&x, &w, b.as_ref()).unwrap().expect("one f32 row on CUDA");
            let mut want = x.matmul(&w.t().unwrap()).unwrap();
            if let Some(b) = &b {
                want = want.broadcast_add(b).unwrap();
            }
            assert_eq!(got.dims(), &[1, n]);
            assert!(max_rel(&got, &want) < 1e-5, "({n}, {k}) offset {offset}: {}", max_rel(&got, &want));
        }
        // Q, K and V with biases as one product, a residual added; SwiGLU's hidden row.
        for (k, offset) in [(576, 0), (896, 0), (13, 0), (576, 2)] {
            let x = Tensor::randn(0f32, 1.0, (1, k + offset), &dev).unwrap().narrow(1, offset, k).unwrap();
            let m = |n: usize| Tensor::randn(0f32, 0.1, (n, k), &dev).unwrap();
            let v = |n: usize| Tensor::randn(0f32, 1.0, n, &dev).unwrap();
            let (wq, wk, wv, bq, bk) = (m(k), m(64), m(64), v(k), v(64));
            let r = Tensor::randn(0f32, 1.0, (1, k + 128), &dev).unwrap();
            let got = rows_times(&x, &[(&wq, Some(&bq)), (&wk, Some(&bk)), (&wv, None)], Some(&r), None).unwrap().expect("one row on CUDA");
            let p = |x: &Tensor, w: &Tensor| x.matmul(&w.t().unwrap()).unwrap();
            let want = (Tensor::cat(&[p(&x, &wq).broadcast_add(&bq).unwrap(), p(&x, &wk).broadcast_add(&bk).unwrap(), p(&x, &wv)], 1).unwrap() + &r).unwrap();
            assert!(max_rel(&got, &want) < 1e-5, "q, k, v ({k}) offset {offset}: {}", max_rel(&got, &want));
            let (g, u) = (m(3 * k), m(3 * k));
            let got = swiglu_row(&x, &g, &u, None).unwrap().expect("one row on CUDA");
            let want = (candle_nn::ops::silu(&p(&x, &g)).unwrap() * p(&x, &u)).unwrap();
            assert!(max_rel(&got, &want) < 1e-5, "swiglu ({k}) offset {offset}: {}", max_rel(&got, &want));
            // The same products of the row's RMS norm, the norm in the kernels.
            let (nw, eps) = (Tensor::randn(1f32, 0.2, k, &dev).unwrap(), 1e-5f32);
            let xn = candle_nn::ops::rms_norm(&x, &nw, eps).unwrap();
            let got = rows_times(&x, &[(&wq, Some(&bq)), (&wk, None)], None, Some((&nw, eps))).unwrap().expect("one row on CUDA");
            let want = Tensor::cat(&[p(&xn, &wq).broadcast_add(&bq).unwrap(), p(&xn, &wk)], 1).unwrap();
            assert!(max_rel(&got, &want) < 1e-5, "normed q, k ({k}) offset {offset}: {}", max_rel(&got, &want));
            let got = swiglu_row(&x, &g, &u, Some((&nw, eps))).unwrap().expect("one row on CUDA");
            let want = (candle_nn::ops::silu(&p(&xn, &g)).unwrap() * p(&xn, &u)).unwrap();
            assert!(max_rel(&got, &want) < 1e-5, "normed swiglu ({k}) offset {offset}: {}", max_rel(&got, &want));
        }
        // bf16 weights (the GPU's default): the `_bf16` kernels give the f32 product of the same
        // (widened) weights to f32 rounding, over aligned and misaligned (odd k) rows.
        for (k, offset) in [(576, 0), (896, 1), (13, 0)] {
            let x = Tensor::randn(0f32, 1.0, (1, k + offset), &dev).unwrap().narrow(1, offset, k).unwrap();
            let m = |n: usize| Tensor::randn(0f32, 0.1, (n, k), &dev).unwrap().to_dtype(DType::BF16).unwrap();
            let (wq, wk, g, u) = (m(k), m(64), m(3 * k), m(3 * k));
            let bq = Tensor::randn(0f32, 1.0, k, &dev).unwrap();
            let p = |x: &Tensor, w: &Tensor| x.matmul(&w.to_dtype(DType::F32).unwrap().t().unwrap()).unwrap();
            let got = rows_times(&x, &[(&wq, Some(&bq)), (&wk, None)], None, None).unwrap().expect("bf16 weights take the kernel");
            let want = Tensor::cat(&[p(&x, &wq).broadcast_add(&bq).unwrap(), p(&x, &wk)], 1).unwrap();
            assert!(max_rel(&got, &want) < 1e-5, "bf16 q, k ({k}) offset {offset}: {}", max_rel(&got, &want));
            let got = swiglu_row(&x, &g, &u, None).unwrap().expect("bf16 weights take the kernel");
            let want = (candle_nn::ops::silu(&p(&x, &g)).unwrap() * p(&x, &u)).unwrap();
            assert!(max_rel(&got, &want) < 1e-5, "bf16 swiglu ({k}) offset {offset}: {}", max_rel(&got, &want));
            // Mixed dtypes are left to the caller.
            let wf = Tensor::randn(0f32, 0.1, (64, k), &dev).unwrap();
            assert!(rows_times(&x, &[(&wq, None), (&wf, None)], None, None).unwrap().is_none());
        }
        // Two rows are left to the caller.
        let x = Tensor::zeros((2, 8), DType::F32, &dev).unwrap();
        assert!(row_times(&x, &Tensor::zeros((4, 8), DType::F32, &dev).unwrap(), None).unwrap().is_none());
    }
}
