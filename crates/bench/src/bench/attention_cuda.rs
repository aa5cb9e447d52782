//! The attention benchmark on CUDA: our dense kernel vs exact top-k Focus (both from
//! `attention::cuda::host`), and candle's matmul + softmax where it fits, alternated in one run.
//! Times are wall clock around a device synchronisation.

use super::attention::{candle_attention, variants, AttentionBench, AttentionRow};
use super::median;
use crate::attention::cuda::host::{dense_attention, focus_attention, FocusPlan, Rows};
use crate::error::Result;
use candle_core::cuda_backend::CudaDevice;
use candle_core::{Device, Tensor};
use std::time::Instant;

fn time(device: &Device, f: impl FnOnce() -> Result<Tensor>) -> Result<f64> {
    device.synchronize()?;
    let t0 = Instant::now();
    let out = f()?;
    device.synchronize()?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    drop(out);
    Ok(ms)
}

pub(super) fn run(cfg: &AttentionBench, dev: &CudaDevice, mut on_row: impl FnMut(&AttentionRow)) -> Result<Vec<AttentionRow>> {
    let device = Device::Cuda(dev.clone());
    let rows = if cfg.tile_rows == 64 { Rows::R64 } else { Rows::R128 };
    let mut out_rows = Vec::new();
    for &n in &cfg.lengths {
        device.set_seed(cfg.seed ^ n as u64)?;
        let r = |h: usize| -> Result<Tensor> { Ok(Tensor::rand(-1f32, 1f32, (h, n, cfg.head_dim), &device)?.to_dtype(cfg.dtype)?) };
        let (q, k, v) = (r(cfg.heads)?, r(cfg.kv_heads)?, r(cfg.kv_heads)?);
        let vars = variants(cfg, n)?;
        let mut plans = Vec::with_capacity(vars.len());
        for (_, _, masks) in &vars {
            device.synchronize()?;
            let t0 = Instant::now();
            let plan = FocusPlan::new(dev, masks, cfg.window, 0)?;
            device.synchronize()?;
            plans.push((plan, t0.elapsed().as_secs_f64() * 1e3));
        }
        let candle_bytes = 2 * cfg.heads * n * n * cfg.dtype.size_in_bytes();
        let causal = if candle_bytes <= cfg.candle_max_bytes {
            Some(crate::focus::mask::causal_bias(n, &device)?.to_dtype(cfg.dtype)?)
        } else {
            None
        };
        let (mut dense_t, mut candle_t) = (Vec::new(), Vec::new());
        let mut focus_t = vec![Vec::new(); vars.len()];
        let first = usize::from(!cfg.warmup);
        for rep in first..=cfg.repeats {
            let keep = rep > 0;
            let ms = time(&device, || dense_attention(&q, &k, &v, rows))?;
            if keep {
                dense_t.push(ms);
            }
            for (vi, (plan, _)) in plans.iter().enumerate() {
                let ms = time(&device, || focus_attention(&q, &k, &v, plan, rows))?;
                if keep {
                    focus_t[vi].push(ms);
                }
            }
            if let Some(c) = &causal {
                let ms = time(&device, || candle_attention(&q, &k, &v, c))?;
                if keep {
                    candle_t.push(ms);
                }
            }
        }
        let (dense_ms, candle_ms) = (median(&dense_t), median(&candle_t));
        let dtype = format!("{:?}", cfg.dtype).to_lowercase();
        for (vi, (g, kk, masks)) in vars.iter().enumerate() {
            let mut row = AttentionRow::new(cfg, n, *g, *kk, masks, "cuda", &dtype, 1, dense_ms, median(&focus_t[vi]), candle_ms);
            row.plan_ms = Some(plans[vi].1);
            on_row(&row);
            out_rows.push(row);
        }
    }
    Ok(out_rows)
}
