//! Row ops that a pass on CUDA runs as one kernel each (`core/kernels/focus_rows.cu`): RMS norm,
//! the residual add with the RMS norm after it, and SwiGLU's silu(gate) * up. A generation step
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
    use candle_core::cuda_backend::cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{bail, CpuStorage, CudaStorage, CustomOp2, CustomOp3, Layout, Result, Shape};

    const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_rows.ptx"));
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
}
