//! Sinkhorn balancing (`sinkhorn.rs`) for training as one op with a backward pass: the forward
//! is one kernel per layer and the full gradient through every iteration another (instead of
//! ~150 small graph ops). Same function as `sinkhorn_tensor` (tested, values and gradients),
//! for both gradient modes and the causal variant.
//!
//! The backward of the log-domain iterations (FOCUS-METHOD section 1), with l0 = s / tau,
//! M the values after an iteration's column step and L after its row step:
//!   row step:    dl_mid = dl - exp(L) * rowsum(dl)
//!   column step: dl_in = dl_mid - exp(M) * colsum(dl_mid)                    (whole sequence)
//!                dl_in[t] = dl_mid[t] - exp(M[t]) U[t],                      (causal)
//!                U[t] = dl_mid[t] + exp(P[t] - P[t+1]) U[t+1], P = L_in - M
//! from dl = dg * g at the end back to ds = dl0 / tau. The detached gradient (and 0
//! iterations) is the row softmax's: ds = g (dg - rowsum(g dg)) / tau.
//! CPU: f64 loops (as the host `sinkhorn`); CUDA: `sinkhorn_fwd` / `sinkhorn_bwd` of
//! crates/kernels/cuda/focus_train.cu, f32, one block per sequence.

use crate::focus::sinkhorn::{sinkhorn, SinkhornGrad};
use crate::train::device::{cpu_f32, cpu_out};
use crate::error::{Error, Result};
use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Memberships (T x K, or B x T x K balanced per sequence) from raw scores, differentiable.
pub fn sinkhorn_fused(scores: &Tensor, tau: f64, iters: usize, causal: bool, grad: SinkhornGrad) -> Result<Tensor> {
    if scores.rank() != 2 && scores.rank() != 3 {
        return Err(Error::Invalid(format!("Sinkhorn takes (T, K) or (B, T, K) scores, got {:?}", scores.dims())));
    }
    if scores.dtype() != DType::F32 {
        return Err(Error::Invalid(format!("Sinkhorn takes f32 scores, got {:?}", scores.dtype())));
    }
    Ok(scores.contiguous()?.apply_op1(SinkhornOp { tau, iters, causal, grad })?)
}

#[derive(Clone, Copy)]
struct SinkhornOp {
    tau: f64,
    iters: usize,
    causal: bool,
    grad: SinkhornGrad,
}

impl SinkhornOp {
    fn dims(l: &Layout) -> (usize, usize, usize) {
        let d = l.dims();
        let (t, k) = (d[d.len() - 2], d[d.len() - 1]);
        (l.shape().elem_count() / (t * k).max(1), t, k)
    }
}

impl CustomOp1 for SinkhornOp {
    fn name(&self) -> &'static str {
        "focus-sinkhorn"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, t, k) = Self::dims(l);
        let x = cpu_f32(s, l)?;
        let out: Vec<f32> = (0..b)
            .into_par_iter()
            .flat_map_iter(|i| sinkhorn(&x[i * t * k..(i + 1) * t * k], t, k, self.tau, self.iters, self.causal))
            .collect();
        Ok((cpu_out(out, DType::F32)?, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::forward(self, s, l)
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.apply_op3_no_bwd(res, &grad.contiguous()?, &SinkhornBwd(*self))?))
    }
}

/// The backward as an op: (scores, memberships, d memberships) -> d scores.
struct SinkhornBwd(SinkhornOp);

impl CustomOp3 for SinkhornBwd {
    fn name(&self) -> &'static str {
        "focus-sinkhorn-bwd"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let o = self.0;
        let (b, t, k) = SinkhornOp::dims(l1);
        let (s, g, dg) = (cpu_f32(s1, l1)?, cpu_f32(s2, l2)?, cpu_f32(s3, l3)?);
        let n = t * k;
        let out: Vec<f32> = (0..b)
            .into_par_iter()
            .flat_map_iter(|i| backward(&s[i * n..(i + 1) * n], &g[i * n..(i + 1) * n], &dg[i * n..(i + 1) * n], t, k, o))
            .collect();
        Ok((cpu_out(out, DType::F32)?, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout, s3: &candle_core::CudaStorage, l3: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::backward(&self.0, s1, l1, s2, l2, s3, l3)
    }
}

fn log_sum_exp(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let m = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + xs.map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// d scores of one sequence (T x K), in f64.
fn backward(s: &[f32], g: &[f32], dg: &[f32], t: usize, k: usize, o: SinkhornOp) -> Vec<f32> {
    let inv_tau = 1.0 / o.tau;
    if o.grad == SinkhornGrad::Detached || o.iters == 0 {
        return (0..t)
            .flat_map(|i| {
                let r = i * k..(i + 1) * k;
                let m: f64 = g[r.clone()].iter().zip(&dg[r.clone()]).map(|(&a, &b)| a as f64 * b as f64).sum();
                r.map(move |j| (g[j] as f64 * (dg[j] as f64 - m) * inv_tau) as f32)
            })
            .collect();
    }
    // The forward again, keeping each iteration's input (ls) and column-step result (ms).
    let mut l: Vec<f64> = s.iter().map(|&x| x as f64 * inv_tau).collect();
    let (mut ls, mut ms) = (Vec::with_capacity(o.iters + 1), Vec::with_capacity(o.iters));
    for _ in 0..o.iters {
        ls.push(l.clone());
        if o.causal {
            let mut run = vec![f64::NEG_INFINITY; k];
            for i in 0..t {
                for c in 0..k {
                    let x = l[i * k + c];
                    let (a, b) = (run[c].max(x), run[c].min(x));
                    run[c] = if b == f64::NEG_INFINITY { a } else { a + (b - a).exp().ln_1p() };
                    l[i * k + c] = x - run[c];
                }
            }
        } else {
            for c in 0..k {
                let z = log_sum_exp((0..t).map(|i| l[i * k + c]));
                (0..t).for_each(|i| l[i * k + c] -= z);
            }
        }
        ms.push(l.clone());
        for row in l.chunks_mut(k) {
            let z = log_sum_exp(row.iter().cloned());
            row.iter_mut().for_each(|x| *x -= z);
        }
    }
    let mut dl: Vec<f64> = dg.iter().zip(&l).map(|(&d, &x)| d as f64 * x.exp()).collect();
    let mut lo = l;
    for it in (0..o.iters).rev() {
        let (li, mi) = (&ls[it], &ms[it]);
        // Row step.
        for i in 0..t {
            let sum: f64 = dl[i * k..(i + 1) * k].iter().sum();
            for c in 0..k {
                dl[i * k + c] -= lo[i * k + c].exp() * sum;
            }
        }
        // Column step.
        for c in 0..k {
            if o.causal {
                let p = |i: usize| li[i * k + c] - mi[i * k + c];
                let mut u = 0f64;
                for i in (0..t).rev() {
                    u = dl[i * k + c] + if i + 1 < t { (p(i) - p(i + 1)).exp() * u } else { 0.0 };
                    dl[i * k + c] -= mi[i * k + c].exp() * u;
                }
            } else {
                let sum: f64 = (0..t).map(|i| dl[i * k + c]).sum();
                (0..t).for_each(|i| dl[i * k + c] -= mi[i * k + c].exp() * sum);
            }
        }
        lo = li.clone();
    }
    dl.iter().map(|&x| (x * inv_tau) as f32).collect()
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::train::device::cuda::{launch, view};
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
    use candle_core::CudaStorage;

    fn cfg(b: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (b as u32, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 }
    }

    pub(super) fn forward(o: &SinkhornOp, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = s.device().clone();
        let (b, t, k) = SinkhornOp::dims(l);
        let x = view::<f32>(s, l)?;
        let out = unsafe { dev.alloc::<f32>(b * t * k)? };
        let (ti, ki, it, causal) = (t as i32, k as i32, o.iters as i32, o.causal as i32);
        let inv_tau = (1.0 / o.tau) as f32;
        launch!(&dev, "sinkhorn_fwd", cfg(b), &x, &out, &ti, &ki, &inv_tau, &it, &causal);
        Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), l.shape().clone()))
    }

    pub(super) fn backward(o: &SinkhornOp, s1: &CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout, s3: &CudaStorage, l3: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = s1.device().clone();
        let (b, t, k) = SinkhornOp::dims(l1);
        let (x, g, dg) = (view::<f32>(s1, l1)?, view::<f32>(s2, l2)?, view::<f32>(s3, l3)?);
        let out = unsafe { dev.alloc::<f32>(b * t * k)? };
        let detached = (o.grad == SinkhornGrad::Detached) as i32;
        let work_len = if detached == 1 || o.iters == 0 { 1 } else { b * (2 * o.iters + 1) * t * k };
        let work = unsafe { dev.alloc::<f32>(work_len)? };
        let (ti, ki, it, causal) = (t as i32, k as i32, o.iters as i32, o.causal as i32);
        let inv_tau = (1.0 / o.tau) as f32;
        launch!(&dev, "sinkhorn_bwd", cfg(b), &x, &g, &dg, &out, &work, &ti, &ki, &inv_tau, &it, &causal, &detached);
        Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), l1.shape().clone()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::focus::sinkhorn::sinkhorn_tensor;
    use candle_core::{Device, Var};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// (memberships, d scores) of the fused op and of `sinkhorn_tensor` for the loss sum(g * w).
    pub(crate) fn both(dev: &Device, b: usize, t: usize, k: usize, tau: f64, iters: usize, causal: bool, grad: SinkhornGrad, seed: u64) -> [(Vec<f32>, Vec<f32>); 2] {
        let mut rng = StdRng::seed_from_u64(seed);
        let s: Vec<f32> = (0..b * t * k).map(|_| rng.gen::<f32>() * 4.0 - 2.0).collect();
        let w: Vec<f32> = (0..b * t * k).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect();
        let sv = Var::from_tensor(&Tensor::from_vec(s, (b, t, k), dev).unwrap()).unwrap();
        let w = Tensor::from_vec(w, (b, t, k), dev).unwrap();
        let run = |g: Tensor| {
            let gs = (&g * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let v = |x: &Tensor| x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            (v(&g), v(gs.get(sv.as_tensor()).unwrap()))
        };
        [
            run(sinkhorn_fused(sv.as_tensor(), tau, iters, causal, grad).unwrap()),
            run(sinkhorn_tensor(sv.as_tensor(), tau, iters, causal, grad).unwrap()),
        ]
    }

    pub(crate) fn rel_err(a: &[f32], b: &[f32]) -> f32 {
        crate::train::attention::tests::rel_err(a, b)
    }

    #[test]
    fn fused_sinkhorn_matches_the_composed_one_with_gradients() {
        for (b, t, k) in [(2, 70, 4), (1, 130, 8), (3, 1, 3), (2, 64, 2)] {
            for causal in [false, true] {
                for iters in [0, 1, 10] {
                    for grad in [SinkhornGrad::Full, SinkhornGrad::Detached] {
                        let [(fg, fd), (cg, cd)] = both(&Device::Cpu, b, t, k, 0.1, iters, causal, grad, (t * 7 + k) as u64);
                        let what = format!("B {b} T {t} K {k} causal {causal} iters {iters} {grad:?}");
                        assert!(rel_err(&fg, &cg) < 1e-5, "{what}: memberships {}", rel_err(&fg, &cg));
                        // At T = 1 every gradient is 0 (one token takes all of every group).
                        if t > 1 {
                            assert!(crate::train::attention::tests::norm(&cd) > 1e-3, "{what}: the reference gradient vanishes");
                        }
                        assert!(rel_err(&fd, &cd) < 2e-4 || crate::train::attention::tests::norm(&cd) < 1e-6, "{what}: d scores {}", rel_err(&fd, &cd));
                    }
                }
            }
        }
    }

    /// The CUDA kernels against `sinkhorn_tensor` on the device (f32 both).
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fused_sinkhorn_matches_the_composed_one_with_gradients() {
        let dev = crate::device::cuda(0).expect("these tests need a CUDA GPU");
        for (b, t, k) in [(4, 1024, 8), (1, 2048, 4), (3, 77, 5), (2, 1, 8), (1, 300, 16)] {
            for causal in [false, true] {
                for iters in [0, 10] {
                    for grad in [SinkhornGrad::Full, SinkhornGrad::Detached] {
                        let [(fg, fd), (cg, cd)] = both(&dev, b, t, k, 0.1, iters, causal, grad, (t + k) as u64);
                        let what = format!("B {b} T {t} K {k} causal {causal} iters {iters} {grad:?}");
                        let (ev, eg) = (rel_err(&fg, &cg), rel_err(&fd, &cd));
                        println!("{what}: memberships {ev:.2e}, d scores {eg:.2e}");
                        assert!(ev < 1e-4, "{what}: memberships {ev:e}");
                        assert!(eg < 1e-3 || crate::train::attention::tests::norm(&cd) < 1e-6, "{what}: d scores {eg:e}");
                    }
                }
            }
        }
    }

    /// The check can fail: the full and the detached gradient differ far beyond its tolerance,
    /// and so do the causal and whole-sequence variants.
    #[test]
    fn fused_sinkhorn_check_detects_the_other_gradient() {
        let [(_, full), _] = both(&Device::Cpu, 2, 70, 4, 0.1, 10, false, SinkhornGrad::Full, 3);
        let [(_, det), _] = both(&Device::Cpu, 2, 70, 4, 0.1, 10, false, SinkhornGrad::Detached, 3);
        let [(_, causal), _] = both(&Device::Cpu, 2, 70, 4, 0.1, 10, true, SinkhornGrad::Full, 3);
        assert!(rel_err(&det, &full) > 1e-2, "{}", rel_err(&det, &full));
        assert!(rel_err(&causal, &full) > 1e-2, "{}", rel_err(&causal, &full));
    }
}
