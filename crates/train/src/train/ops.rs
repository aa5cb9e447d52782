//! The small fused ops of the training step, each with a backward pass and a CPU and a CUDA
//! implementation: a frozen linear layer (no weight gradient is ever computed, and the matmul
//! runs in the weights' dtype), RMSNorm, SwiGLU on the concatenated gate/up projection, and the
//! per-token cross-entropy. The CUDA kernels are in crates/kernels/cuda/focus_train.cu.

use super::device::{cpu_f32, cpu_out};
use crate::error::Result;
use crate::model::linear::{Linear, Weight};
use crate::model::qmatvec::QMatrix;
use std::sync::Arc;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Storage, Tensor};

/// A frozen projection as the training step uses it: W (out, in) and its bias in the compute
/// dtype. On the CPU, weights kept in their stored form (`Weight::Stored`) stay so: the
/// projection reads the blocks of its parts (f32 compute), forward and backward.
#[derive(Debug, Clone)]
pub struct FrozenLinear {
    pub w: FrozenWeight,
    pub b: Option<Tensor>,
}

#[derive(Debug, Clone)]
pub enum FrozenWeight {
    /// The concatenated weight as one tensor in the compute dtype.
    Dense(Tensor),
    /// The parts' stored blocks, one after another along the outputs.
    Stored(Vec<Arc<QMatrix>>),
}

impl FrozenWeight {
    /// The compute dtype: the tensor's, f32 over stored blocks.
    pub fn dtype(&self) -> DType {
        match self {
            FrozenWeight::Dense(t) => t.dtype(),
            FrozenWeight::Stored(_) => DType::F32,
        }
    }
}

impl FrozenLinear {
    /// Concatenates projections along their outputs (e.g. Q, K, V) in `dtype`: their blocks
    /// where every part is stored and the compute is f32, else one tensor (a copy).
    pub fn cat(parts: &[&Linear], dtype: DType) -> Result<FrozenLinear> {
        let stored: Option<Vec<Arc<QMatrix>>> = parts.iter().map(|l| match &l.w {
            Weight::Stored(q) => Some(q.clone()),
            Weight::Dense(_) => None,
        }).collect();
        let device = parts.iter().find_map(|l| l.w.tensor().map(|t| t.device().clone())).unwrap_or(candle_core::Device::Cpu);
        let w = match stored {
            Some(qs) if dtype == DType::F32 => FrozenWeight::Stored(qs),
            _ => FrozenWeight::Dense(Tensor::cat(&parts.iter().map(|l| l.w.to_dense(dtype, &device)).collect::<Result<Vec<_>>>()?, 0)?.contiguous()?),
        };
        // Biases (f32, as loaded; zeros for a part without one) concatenated in the compute dtype.
        let b = if parts.iter().any(|l| l.b.is_some()) {
            let bs = parts
                .iter()
                .map(|l| match &l.b {
                    Some(b) => Ok(b.clone()),
                    None => Ok(Tensor::zeros(l.w.dims2()?.0, DType::F32, &device)?),
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&bs, 0)?.to_dtype(w.dtype())?)
        } else {
            None
        };
        Ok(FrozenLinear { w, b })
    }

    /// The dtype the projection computes in.
    pub fn dtype(&self) -> DType {
        self.w.dtype()
    }

    /// y = x W^T + b (x (rows, in), any float dtype), computed in the weights' dtype with f32
    /// accumulation, returned in `out`. The backward gives x its gradient and W none.
    pub fn forward(&self, x: &Tensor, out: DType) -> Result<Tensor> {
        match &self.w {
            FrozenWeight::Dense(w) => Ok(x.contiguous()?.apply_op1(LinearOp { w: w.clone(), b: self.b.clone(), out })?),
            FrozenWeight::Stored(parts) => {
                let x = x.to_dtype(DType::F32)?.contiguous()?;
                let ys = parts.iter().map(|q| Weight::Stored(q.clone()).forward(&x, None)).collect::<Result<Vec<_>>>()?;
                let y = if ys.len() == 1 { ys.into_iter().next().expect("one part") } else { Tensor::cat(&ys, 1)? };
                let y = match &self.b {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                };
                Ok(y.to_dtype(out)?)
            }
        }
    }
}

struct LinearOp {
    w: Tensor,
    b: Option<Tensor>,
    out: DType,
}

fn linear<S: BackendStorage>(x: &S, xl: &Layout, w: &S, wl: &Layout, b: Option<(&S, &Layout)>, out: DType) -> candle_core::Result<(S, Shape)> {
    let (m, kin) = xl.shape().dims2()?;
    let (n, kw) = wl.shape().dims2()?;
    if kin != kw {
        candle_core::bail!("frozen linear: input width {kin}, weight width {kw}");
    }
    let cast;
    let (x, xl) = if x.dtype() != w.dtype() {
        cast = x.to_dtype(xl, w.dtype())?;
        (&cast, Layout::contiguous((m, kin)))
    } else {
        (x, xl.clone())
    };
    let y = x.matmul(w, (1, m, n, kin), &xl, &wl.transpose(0, 1)?)?;
    let yl = Layout::contiguous((m, n));
    let y = match b {
        Some((bs, bl)) => y.binary_impl::<candle_core::op::Add>(bs, &yl, &bl.broadcast_as((m, n))?)?,
        None => y,
    };
    let y = if y.dtype() != out { y.to_dtype(&yl, out)? } else { y };
    Ok((y, Shape::from((m, n))))
}

impl CustomOp1 for LinearOp {
    fn name(&self) -> &'static str {
        "focus-frozen-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (ws, wl) = self.w.storage_and_layout();
        let Storage::Cpu(w) = &*ws else { candle_core::bail!("frozen linear: weight not on the CPU") };
        let bg = self.b.as_ref().map(|b| b.storage_and_layout());
        let b = match &bg {
            Some((bs, bl)) => match &**bs {
                Storage::Cpu(b) => Some((b, *bl)),
                _ => candle_core::bail!("frozen linear: bias not on the CPU"),
            },
            None => None,
        };
        linear(s, l, w, wl, b, self.out)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (ws, wl) = self.w.storage_and_layout();
        let Storage::Cuda(w) = &*ws else { candle_core::bail!("frozen linear: weight not on the device") };
        let bg = self.b.as_ref().map(|b| b.storage_and_layout());
        let b = match &bg {
            Some((bs, bl)) => match &**bs {
                Storage::Cuda(b) => Some((b, *bl)),
                _ => candle_core::bail!("frozen linear: bias not on the device"),
            },
            None => None,
        };
        // bf16 products wanted in f32: our cast (`cast_bf16_f32`), not candle's.
        if self.out == DType::F32 && w.dtype() == DType::BF16 {
            let (y, shape) = linear(s, l, w, wl, b, DType::BF16)?;
            return Ok((cast_bf16_f32(&y, &shape)?, shape));
        }
        linear(s, l, w, wl, b, self.out)
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dx = grad.to_dtype(self.w.dtype())?.matmul(&self.w)?;
        Ok(Some(if dx.dtype() == DType::BF16 && x.dtype() == DType::F32 { dx.apply_op1_no_bwd(&ToF32)? } else { dx.to_dtype(x.dtype())? }))
    }
}

/// A contiguous bf16 tensor in f32: candle's cast on the CPU; on CUDA the training module's
/// `cast_bf16_f32_x8` (see `cast_bf16_f32`).
struct ToF32;

impl CustomOp1 for ToF32 {
    fn name(&self) -> &'static str {
        "focus-bf16-to-f32"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((cpu_out(cpu_f32(s, l)?, DType::F32)?, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        match l.contiguous_offsets() {
            Some((0, _)) => Ok((cast_bf16_f32(s, l.shape())?, l.shape().clone())),
            _ => Ok((s.to_dtype(l, DType::F32)?, l.shape().clone())),
        }
    }
}

/// A whole contiguous bf16 storage of `shape` in f32, 8 values a thread with 16-byte loads and
/// stores (candle's cast of this pair ran at a quarter of the bandwidth); candle's cast where
/// the count is not a multiple of 8.
#[cfg(feature = "cuda")]
fn cast_bf16_f32(s: &candle_core::CudaStorage, shape: &Shape) -> candle_core::Result<candle_core::CudaStorage> {
    use crate::train::device::cuda::{grid1, launch};
    let n = shape.elem_count();
    if n % 8 != 0 {
        return s.to_dtype(&Layout::contiguous(shape), DType::F32);
    }
    let dev = s.device().clone();
    let x = s.as_cuda_slice::<half::bf16>()?.slice(0..n);
    let y = unsafe { dev.alloc::<f32>(n)? };
    let n8 = (n / 8) as i64;
    launch!(&dev, "cast_bf16_f32_x8", grid1(n / 8), &x, &y, &n8);
    Ok(candle_core::CudaStorage::wrap_cuda_slice(y, dev.clone()))
}

/// RMSNorm of f32 rows, y = x / sqrt(mean(x^2) + eps) * w, returned in `out` (what
/// `rms_norm_slow` computes, in one op each way).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64, out: DType) -> Result<Tensor> {
    let x = if x.dtype() == DType::F32 { x.contiguous()? } else { x.to_dtype(DType::F32)? };
    Ok(x.apply_op1(RmsOp { w: w.to_dtype(DType::F32)?, eps: eps as f32, out })?)
}

struct RmsOp {
    w: Tensor,
    eps: f32,
    out: DType,
}

struct RmsBwd {
    w: Tensor,
    eps: f32,
}

fn rows_of(l: &Layout) -> (usize, usize) {
    let n = *l.dims().last().unwrap_or(&1);
    (l.shape().elem_count() / n.max(1), n)
}

impl CustomOp1 for RmsOp {
    fn name(&self) -> &'static str {
        "focus-rms-norm"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, n) = rows_of(l);
        let x = cpu_f32(s, l)?;
        let w = self.w.to_vec1::<f32>()?;
        let mut y = vec![0f32; rows * n];
        for (xr, yr) in x.chunks(n).zip(y.chunks_mut(n)) {
            let ss: f32 = xr.iter().map(|v| v * v).sum();
            let r = 1.0 / (ss / n as f32 + self.eps).sqrt();
            for j in 0..n {
                yr[j] = xr[j] * r * w[j];
            }
        }
        Ok((cpu_out(y, self.out)?, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::train::device::cuda::{grid_rows, launch, view};
        let dev = s.device().clone();
        let (rows, n) = rows_of(l);
        let x = view::<f32>(s, l)?;
        let (wg, wl) = self.w.storage_and_layout();
        let Storage::Cuda(ws) = &*wg else { candle_core::bail!("norm weight not on the device") };
        let w = view::<f32>(ws, wl)?;
        let (r64, ni) = (rows as i64, n as i32);
        let y = match self.out {
            DType::BF16 => {
                let y = unsafe { dev.alloc::<half::bf16>(rows * n)? };
                launch!(&dev, "rms_fwd_bf16", grid_rows(rows), &x, &w, &y, &r64, &ni, &self.eps);
                candle_core::CudaStorage::wrap_cuda_slice(y, dev.clone())
            }
            DType::F32 => {
                let y = unsafe { dev.alloc::<f32>(rows * n)? };
                launch!(&dev, "rms_fwd_f32", grid_rows(rows), &x, &w, &y, &r64, &ni, &self.eps);
                candle_core::CudaStorage::wrap_cuda_slice(y, dev.clone())
            }
            d => candle_core::bail!("RMSNorm output dtype {d:?}"),
        };
        Ok((y, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(&grad.contiguous()?, &RmsBwd { w: self.w.clone(), eps: self.eps })?))
    }
}

impl CustomOp2 for RmsBwd {
    fn name(&self) -> &'static str {
        "focus-rms-norm-bwd"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, n) = rows_of(l1);
        let (x, dy) = (cpu_f32(s1, l1)?, cpu_f32(s2, l2)?);
        let w = self.w.to_vec1::<f32>()?;
        let mut dx = vec![0f32; rows * n];
        for ((xr, dr), out) in x.chunks(n).zip(dy.chunks(n)).zip(dx.chunks_mut(n)) {
            let ss: f32 = xr.iter().map(|v| v * v).sum();
            let r = 1.0 / (ss / n as f32 + self.eps).sqrt();
            let dot: f32 = (0..n).map(|j| dr[j] * w[j] * xr[j]).sum();
            let c = r * r * r * dot / n as f32;
            for j in 0..n {
                out[j] = r * dr[j] * w[j] - xr[j] * c;
            }
        }
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::train::device::cuda::{grid_rows, launch, view};
        let dev = s1.device().clone();
        let (rows, n) = rows_of(l1);
        let x = view::<f32>(s1, l1)?;
        let (wg, wl) = self.w.storage_and_layout();
        let Storage::Cuda(ws) = &*wg else { candle_core::bail!("norm weight not on the device") };
        let w = view::<f32>(ws, wl)?;
        let dx = unsafe { dev.alloc::<f32>(rows * n)? };
        let (r64, ni) = (rows as i64, n as i32);
        match s2.dtype() {
            DType::BF16 => {
                let dy = view::<half::bf16>(s2, l2)?;
                launch!(&dev, "rms_bwd_bf16", grid_rows(rows), &x, &w, &dy, &dx, &r64, &ni, &self.eps);
            }
            DType::F32 => {
                let dy = view::<f32>(s2, l2)?;
                launch!(&dev, "rms_bwd_f32", grid_rows(rows), &x, &w, &dy, &dx, &r64, &ni, &self.eps);
            }
            d => candle_core::bail!("RMSNorm gradient dtype {d:?}"),
        }
        Ok((candle_core::CudaStorage::wrap_cuda_slice(dx, dev.clone()), l1.shape().clone()))
    }
}

/// silu(gate) * up on the concatenated projection gu (rows, 2F) = [gate | up] -> (rows, F).
pub fn swiglu(gu: &Tensor) -> Result<Tensor> {
    Ok(gu.contiguous()?.apply_op1(SwiGluOp { gelu: false })?)
}

/// gelu_tanh(gate) * up (Gemma's GeGLU) on gu (rows, 2F) = [gate | up] -> (rows, F), in gu's
/// dtype, one op each way as `swiglu`.
pub fn geglu(gu: &Tensor) -> Result<Tensor> {
    Ok(gu.contiguous()?.apply_op1(SwiGluOp { gelu: true })?)
}

/// The gated MLP's activation: silu (SwiGLU) or GELU's tanh form (GeGLU).
struct SwiGluOp {
    gelu: bool,
}
struct SwiGluBwd {
    gelu: bool,
}

/// The CUDA kernel of the gated MLP's `pass` ("fwd" or "bwd") for `dtype`.
#[cfg(feature = "cuda")]
fn glu_kernel(gelu: bool, pass: &str, dtype: DType) -> candle_core::Result<String> {
    let t = match dtype {
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        d => candle_core::bail!("gated MLP dtype {d:?}"),
    };
    Ok(format!("{}_{pass}_{t}", if gelu { "geglu" } else { "swiglu" }))
}

/// act(g) and its derivative (what the kernels' `act_and_grad` computes).
fn act_parts(g: f32, gelu: bool) -> (f32, f32) {
    if gelu {
        let k = 0.797_884_6_f32;
        let th = (k * (g + 0.044715 * g * g * g)).tanh();
        (0.5 * g * (1.0 + th), 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * k * (1.0 + 0.134145 * g * g))
    } else {
        let sg = 1.0 / (1.0 + (-g).exp());
        (g * sg, sg * (1.0 + g * (1.0 - sg)))
    }
}

impl CustomOp1 for SwiGluOp {
    fn name(&self) -> &'static str {
        "focus-swiglu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, f2) = rows_of(l);
        let f = f2 / 2;
        let x = cpu_f32(s, l)?;
        let gelu = self.gelu;
        let y: Vec<f32> = x.chunks(f2).flat_map(|r| (0..f).map(move |c| act_parts(r[c], gelu).0 * r[f + c])).collect();
        Ok((cpu_out(y, s.dtype())?, Shape::from((rows, f))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::train::device::cuda::{grid1, launch, view};
        let dev = s.device().clone();
        let (rows, f2) = rows_of(l);
        let f = f2 / 2;
        let (r64, fi) = (rows as i64, f as i32);
        macro_rules! go {
            ($t:ty, $name:expr) => {{
                let x = view::<$t>(s, l)?;
                let y = unsafe { dev.alloc::<$t>(rows * f)? };
                launch!(&dev, $name, grid1(rows * f), &x, &y, &r64, &fi);
                candle_core::CudaStorage::wrap_cuda_slice(y, dev.clone())
            }};
        }
        let name = glu_kernel(self.gelu, "fwd", s.dtype())?;
        let y = match s.dtype() {
            DType::BF16 => go!(half::bf16, &name),
            _ => go!(f32, &name),
        };
        Ok((y, Shape::from((rows, f))))
    }

    fn bwd(&self, gu: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(gu.apply_op2_no_bwd(&grad.to_dtype(gu.dtype())?.contiguous()?, &SwiGluBwd { gelu: self.gelu })?))
    }
}

impl CustomOp2 for SwiGluBwd {
    fn name(&self) -> &'static str {
        "focus-swiglu-bwd"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, f2) = rows_of(l1);
        let f = f2 / 2;
        let (x, da) = (cpu_f32(s1, l1)?, cpu_f32(s2, l2)?);
        let mut dx = vec![0f32; x.len()];
        for ((r, d), out) in x.chunks(f2).zip(da.chunks(f)).zip(dx.chunks_mut(f2)) {
            for c in 0..f {
                let (a, da) = act_parts(r[c], self.gelu);
                out[c] = d[c] * r[f + c] * da;
                out[f + c] = d[c] * a;
            }
        }
        Ok((cpu_out(dx, s1.dtype())?, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::train::device::cuda::{grid1, launch, view};
        let dev = s1.device().clone();
        let (rows, f2) = rows_of(l1);
        let f = f2 / 2;
        let (r64, fi) = (rows as i64, f as i32);
        macro_rules! go {
            ($t:ty, $name:expr) => {{
                let (x, da) = (view::<$t>(s1, l1)?, view::<$t>(s2, l2)?);
                let dx = unsafe { dev.alloc::<$t>(rows * f2)? };
                launch!(&dev, $name, grid1(rows * f), &x, &da, &dx, &r64, &fi);
                candle_core::CudaStorage::wrap_cuda_slice(dx, dev.clone())
            }};
        }
        let name = glu_kernel(self.gelu, "bwd", s1.dtype())?;
        let dx = match s1.dtype() {
            DType::BF16 => go!(half::bf16, &name),
            _ => go!(f32, &name),
        };
        Ok((dx, l1.shape().clone()))
    }
}

/// Per-row cross-entropy (N) of logits (N, V) against `targets` (N, u32, on the logits'
/// device): logsumexp(x) - x[target], in f32 whatever the logits' dtype.
pub fn cross_entropy_rows(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    cross_entropy_capped(logits, targets, None)
}

/// `cross_entropy_rows` of the soft-capped logits z = cap tanh(x / cap) (Gemma 2's final
/// soft-cap) where `cap` is given, the cap computed inside the op each way.
pub fn cross_entropy_capped(logits: &Tensor, targets: &Tensor, cap: Option<f64>) -> Result<Tensor> {
    let cap = cap.map_or(0.0, |c| c as f32);
    Ok(logits.contiguous()?.apply_op1(CeOp { targets: targets.to_dtype(DType::U32)?.contiguous()?, cap })?)
}

/// `cap` > 0: the logits soft-capped first; 0: none.
struct CeOp {
    targets: Tensor,
    cap: f32,
}
struct CeBwd {
    targets: Tensor,
    cap: f32,
}

/// A row's capped logits (as the kernels' `capped`), and their logsumexp.
fn capped_row(row: &[f32], cap: f32) -> (Vec<f32>, f32) {
    let z: Vec<f32> = if cap > 0.0 { row.iter().map(|&a| cap * (a / cap).tanh()).collect() } else { row.to_vec() };
    let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = m + z.iter().map(|&a| ((a - m) as f64).exp()).sum::<f64>().ln() as f32;
    (z, lse)
}

impl CustomOp1 for CeOp {
    fn name(&self) -> &'static str {
        "focus-cross-entropy"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, v) = l.shape().dims2()?;
        let x = cpu_f32(s, l)?;
        let tg = self.targets.to_vec1::<u32>()?;
        let loss: Vec<f32> = (0..n)
            .map(|r| {
                let (z, lse) = capped_row(&x[r * v..(r + 1) * v], self.cap);
                lse - z[tg[r] as usize]
            })
            .collect();
        Ok((CpuStorage::F32(loss), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::train::device::cuda::{launch, view};
        use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
        let dev = s.device().clone();
        let (n, v) = l.shape().dims2()?;
        let (tg, tl) = self.targets.storage_and_layout();
        let Storage::Cuda(ts) = &*tg else { candle_core::bail!("targets not on the device") };
        let t = view::<u32>(ts, tl)?;
        let loss = unsafe { dev.alloc::<f32>(n)? };
        let vi = v as i32;
        let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        match s.dtype() {
            DType::BF16 => {
                let x = view::<half::bf16>(s, l)?;
                launch!(&dev, "ce_fwd_bf16", cfg, &x, &t, &loss, &vi, &self.cap);
            }
            DType::F32 => {
                let x = view::<f32>(s, l)?;
                launch!(&dev, "ce_fwd_f32", cfg, &x, &t, &loss, &vi, &self.cap);
            }
            d => candle_core::bail!("cross-entropy dtype {d:?}"),
        }
        Ok((candle_core::CudaStorage::wrap_cuda_slice(loss, dev.clone()), Shape::from(n)))
    }

    fn bwd(&self, logits: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(logits.apply_op2_no_bwd(&grad.to_dtype(DType::F32)?.contiguous()?, &CeBwd { targets: self.targets.clone(), cap: self.cap })?))
    }
}

impl CustomOp2 for CeBwd {
    fn name(&self) -> &'static str {
        "focus-cross-entropy-bwd"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, v) = l1.shape().dims2()?;
        let (x, dl) = (cpu_f32(s1, l1)?, cpu_f32(s2, l2)?);
        let tg = self.targets.to_vec1::<u32>()?;
        let mut dx = vec![0f32; n * v];
        for r in 0..n {
            let (z, lse) = capped_row(&x[r * v..(r + 1) * v], self.cap);
            for c in 0..v {
                // dz/dx = 1 - tanh^2 = 1 - (z / cap)^2 under the cap.
                let dz = if self.cap > 0.0 { 1.0 - (z[c] / self.cap) * (z[c] / self.cap) } else { 1.0 };
                dx[r * v + c] = ((z[c] - lse).exp() - if c == tg[r] as usize { 1.0 } else { 0.0 }) * dl[r] * dz;
            }
        }
        Ok((cpu_out(dx, s1.dtype())?, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::train::device::cuda::{launch, view};
        use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
        let dev = s1.device().clone();
        let (n, v) = l1.shape().dims2()?;
        let (tg, tl) = self.targets.storage_and_layout();
        let Storage::Cuda(ts) = &*tg else { candle_core::bail!("targets not on the device") };
        let t = view::<u32>(ts, tl)?;
        let dl = view::<f32>(s2, l2)?;
        let vi = v as i32;
        let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        macro_rules! go {
            ($t:ty, $name:expr) => {{
                let x = view::<$t>(s1, l1)?;
                let dx = unsafe { dev.alloc::<$t>(n * v)? };
                launch!(&dev, $name, cfg, &x, &t, &dl, &dx, &vi, &self.cap);
                candle_core::CudaStorage::wrap_cuda_slice(dx, dev.clone())
            }};
        }
        let dx = match s1.dtype() {
            DType::BF16 => go!(half::bf16, "ce_bwd_bf16"),
            DType::F32 => go!(f32, "ce_bwd_f32"),
            d => candle_core::bail!("cross-entropy dtype {d:?}"),
        };
        Ok((dx, l1.shape().clone()))
    }
}

/// A scalar whose gradient with respect to `y` is `dy`: what `(y * dy).sum_all()` gives a
/// backward pass, without computing it (the value is 0). The recomputing step seeds a layer's
/// backward with it: candle's `sum_all` of a (B*T, d_model) tensor ran on one block (~3 ms at
/// Llama 3 8B's shape, a layer), and the product's backward made two more full-size tensors.
pub fn seeded(y: &Tensor, dy: &Tensor) -> Result<Tensor> {
    if y.shape() != dy.shape() {
        return Err(crate::error::Error::Invalid(format!("seeded: y is {:?}, its gradient {:?}", y.shape(), dy.shape())));
    }
    Ok(y.apply_op1(SeedOp { dy: dy.clone() })?)
}

struct SeedOp {
    dy: Tensor,
}

impl CustomOp1 for SeedOp {
    fn name(&self) -> &'static str {
        "seeded"
    }
    fn cpu_fwd(&self, _s: &CpuStorage, _l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((CpuStorage::F32(vec![0.0]), Shape::from(())))
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, _l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendDevice;
        Ok((s.device().zeros_impl(&Shape::from(()), DType::F32)?, Shape::from(())))
    }
    fn bwd(&self, y: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        // grad is d(objective)/d(this scalar): 1 where the objective is a plain sum of terms.
        let g = self.dy.to_dtype(y.dtype())?;
        Ok(Some(if grad.to_dtype(DType::F32)?.to_scalar::<f32>()? == 1.0 { g } else { g.broadcast_mul(&grad.to_dtype(y.dtype())?)? }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Each op against the composed candle ops it replaces: values and gradients.
    use super::*;
    use candle_core::{Device, Var, D};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn rand_t(rng: &mut StdRng, shape: &[usize], s: f32, dev: &Device) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * s).collect::<Vec<f32>>(), shape, dev).unwrap()
    }

    fn v(t: &Tensor) -> Vec<f32> {
        t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    use crate::train::attention::tests::rel_err;

    /// (value, d input) of `f` for the loss sum(f(x) * w).
    fn grad_of(x: &Var, w: &Tensor, y: Tensor) -> (Vec<f32>, Vec<f32>) {
        let g = (y.to_dtype(DType::F32).unwrap() * w).unwrap().sum_all().unwrap().backward().unwrap();
        (v(&y), v(g.get(x.as_tensor()).unwrap()))
    }

    /// Each op and the composed reference it replaces on `dev`; returns (name, rel err of the
    /// value, rel err of the gradient), both against the reference in f32 on the same device.
    pub(crate) fn compare_ops(dev: &Device, dtype: DType, seed: u64) -> Vec<(&'static str, f32, f32)> {
        let mut rng = StdRng::seed_from_u64(seed);
        let (m, kin, nout) = (70, 48, 40);
        let mut out = Vec::new();
        // Frozen linear with a bias, against x W^T + b.
        let x = Var::from_tensor(&rand_t(&mut rng, &[m, kin], 1.0, dev)).unwrap();
        let lin = Linear { w: Weight::Dense(rand_t(&mut rng, &[nout, kin], 0.3, dev)), b: Some(rand_t(&mut rng, &[nout], 0.3, dev)) };
        let w = rand_t(&mut rng, &[m, nout], 1.0, dev);
        let fl = FrozenLinear::cat(&[&lin], dtype).unwrap();
        let (a, da) = grad_of(&x, &w, fl.forward(x.as_tensor(), DType::F32).unwrap());
        let (b, db) = grad_of(&x, &w, lin.forward(x.as_tensor()).unwrap());
        out.push(("frozen linear", rel_err(&a, &b), rel_err(&da, &db)));
        // RMSNorm against rms_norm_slow.
        let nw = rand_t(&mut rng, &[kin], 1.0, dev);
        let w2 = rand_t(&mut rng, &[m, kin], 1.0, dev);
        let (a, da) = grad_of(&x, &w2, rms_norm(x.as_tensor(), &nw, 1e-5, dtype).unwrap());
        let (b, db) = grad_of(&x, &w2, candle_nn::ops::rms_norm_slow(x.as_tensor(), &nw, 1e-5).unwrap());
        out.push(("rms norm", rel_err(&a, &b), rel_err(&da, &db)));
        // SwiGLU against silu(gate) * up.
        let gu = Var::from_tensor(&rand_t(&mut rng, &[m, 2 * nout], 3.0, dev)).unwrap();
        let w3 = rand_t(&mut rng, &[m, nout], 1.0, dev);
        let gd = Var::from_tensor(&gu.as_tensor().to_dtype(dtype).unwrap()).unwrap();
        let (a, da) = grad_of(&gd, &w3, swiglu(gd.as_tensor()).unwrap());
        let composed = (candle_nn::ops::silu(&gu.as_tensor().narrow(1, 0, nout).unwrap()).unwrap() * gu.as_tensor().narrow(1, nout, nout).unwrap()).unwrap();
        let (b, db) = grad_of(&gu, &w3, composed);
        out.push(("swiglu", rel_err(&a, &b), rel_err(&da, &db)));
        // GeGLU against gelu_tanh(gate) * up (candle's gelu is the tanh form).
        let (a, da) = grad_of(&gd, &w3, geglu(gd.as_tensor()).unwrap());
        let composed = (gu.as_tensor().narrow(1, 0, nout).unwrap().gelu().unwrap() * gu.as_tensor().narrow(1, nout, nout).unwrap()).unwrap();
        let (b, db) = grad_of(&gu, &w3, composed);
        out.push(("geglu", rel_err(&a, &b), rel_err(&da, &db)));
        // Cross-entropy rows against log_softmax + gather.
        let (n, vv) = (33, 300);
        let lg = Var::from_tensor(&rand_t(&mut rng, &[n, vv], 4.0, dev)).unwrap();
        let tg: Vec<u32> = (0..n).map(|_| rng.gen_range(0..vv as u32)).collect();
        let tgt = Tensor::from_vec(tg.clone(), n, dev).unwrap();
        let w4 = rand_t(&mut rng, &[n], 1.0, dev);
        let ld = Var::from_tensor(&lg.as_tensor().to_dtype(dtype).unwrap()).unwrap();
        let (a, da) = grad_of(&ld, &w4, cross_entropy_rows(ld.as_tensor(), &tgt).unwrap());
        let lsm = candle_nn::ops::log_softmax(lg.as_tensor(), D::Minus1).unwrap();
        let composed = lsm.gather(&Tensor::from_vec(tg.clone(), (n, 1), dev).unwrap(), 1).unwrap().squeeze(1).unwrap().neg().unwrap();
        let (b, db) = grad_of(&lg, &w4, composed);
        out.push(("cross-entropy", rel_err(&a, &b), rel_err(&da, &db)));
        // Soft-capped (a cap near the logits' scale, so that tanh bends them) against the cap
        // composed as the decoder composes it, then log_softmax + gather.
        let cap = 3.0;
        let (a, da) = grad_of(&ld, &w4, cross_entropy_capped(ld.as_tensor(), &tgt, Some(cap)).unwrap());
        let z = ((lg.as_tensor() / cap).unwrap().tanh().unwrap() * cap).unwrap();
        let lsm = candle_nn::ops::log_softmax(&z, D::Minus1).unwrap();
        let composed = lsm.gather(&Tensor::from_vec(tg, (n, 1), dev).unwrap(), 1).unwrap().squeeze(1).unwrap().neg().unwrap();
        let (b, db) = grad_of(&lg, &w4, composed);
        out.push(("cross-entropy, soft-capped", rel_err(&a, &b), rel_err(&da, &db)));
        out
    }

    #[test]
    fn fused_small_ops_match_the_composed_ops_with_gradients() {
        for (name, ev, eg) in compare_ops(&Device::Cpu, DType::F32, 3) {
            assert!(ev < 1e-5 && eg < 1e-5, "{name}: value {ev:e}, gradient {eg:e}");
        }
    }

    /// The CUDA kernels (and the bf16 compute of the training step) against the composed ops in
    /// f32 on the device.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fused_small_ops_match_the_composed_ops_with_gradients() {
        let dev = crate::device::cuda(0).expect("these tests need a CUDA GPU");
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::BF16, 2e-2)] {
            for (name, ev, eg) in compare_ops(&dev, dtype, 5) {
                println!("{name} {dtype:?}: value {ev:.2e}, gradient {eg:.2e}");
                assert!(ev < tol && eg < tol, "{name} {dtype:?}: value {ev:e}, gradient {eg:e}");
            }
        }
    }

    #[test]
    fn frozen_linear_gives_no_weight_gradient() {
        let dev = Device::Cpu;
        let mut rng = StdRng::seed_from_u64(1);
        let x = Var::from_tensor(&rand_t(&mut rng, &[5, 4], 1.0, &dev)).unwrap();
        let w = Var::from_tensor(&rand_t(&mut rng, &[3, 4], 1.0, &dev)).unwrap();
        let fl = FrozenLinear { w: FrozenWeight::Dense(w.as_tensor().clone()), b: None };
        let g = fl.forward(x.as_tensor(), DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
        assert!(g.get(x.as_tensor()).is_some() && g.get(w.as_tensor()).is_none());
    }

    /// Stored parts (Q8_0 and Q4_K, as a Q4_K_M file mixes them) concatenated by
    /// `FrozenLinear::cat` stay blocks and give the values and input gradient of the same
    /// projection over their dequantized tensors.
    #[test]
    fn frozen_linear_over_stored_blocks_equals_dense() {
        use candle_core::quantized::{GgmlDType, QTensor};
        let dev = Device::Cpu;
        let mut rng = StdRng::seed_from_u64(2);
        let (kin, m) = (256, 9);
        let part = |rng: &mut StdRng, ty: GgmlDType, out: usize| {
            let raw = QTensor::quantize(&rand_t(rng, &[out, kin], 1.0, &dev), ty).unwrap().data().unwrap().to_vec();
            Linear { w: Weight::Stored(Arc::new(QMatrix::new(ty, &raw, out, kin).unwrap())), b: Some(rand_t(rng, &[out], 0.3, &dev)) }
        };
        let (a, b) = (part(&mut rng, GgmlDType::Q8_0, 24), part(&mut rng, GgmlDType::Q4K, 40));
        let dense = |l: &Linear| Linear { w: Weight::Dense(l.w.to_dense(DType::F32, &dev).unwrap()), b: l.b.clone() };
        let stored = FrozenLinear::cat(&[&a, &b], DType::F32).unwrap();
        assert!(matches!(stored.w, FrozenWeight::Stored(ref p) if p.len() == 2), "kept as blocks");
        let plain = FrozenLinear::cat(&[&dense(&a), &dense(&b)], DType::F32).unwrap();
        let x = Var::from_tensor(&rand_t(&mut rng, &[m, kin], 1.0, &dev)).unwrap();
        let r = rand_t(&mut rng, &[m, 64], 1.0, &dev);
        let (ys, gs) = grad_of(&x, &r, stored.forward(x.as_tensor(), DType::F32).unwrap());
        let (yd, gd) = grad_of(&x, &r, plain.forward(x.as_tensor(), DType::F32).unwrap());
        assert!(rel_err(&ys, &yd) < 1e-5 && rel_err(&gs, &gd) < 1e-5, "value {}, gradient {}", rel_err(&ys, &yd), rel_err(&gs, &gd));
    }
}
