//! The attention benchmark's entry point: our CPU kernels (`attention.rs`, which also holds
//! the configuration and rows every device shares) or our CUDA kernels (`attention_cuda.rs`),
//! above both so that neither imports the other's dispatcher.

use super::attention::{AttentionBench, AttentionRow};
use crate::error::Result;
use candle_core::Device;

/// Runs the benchmark on `device`: our CPU kernels on the CPU, our CUDA kernels on a CUDA device
/// (with the `cuda` feature), candle's attention on either. `on_row` sees each row as soon as
/// it is measured.
pub fn run_attention_bench(cfg: &AttentionBench, device: &Device, on_row: impl FnMut(&AttentionRow)) -> Result<Vec<AttentionRow>> {
    cfg.validate()?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        return super::attention_cuda::run(cfg, dev, on_row);
    }
    super::attention::run_cpu(cfg, device, on_row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bench_runs_and_reports_every_variant() {
        let cfg = AttentionBench { lengths: vec![200, 300], groups: vec![2, 4], ks: vec![1, 3], heads: 2, kv_heads: 1, head_dim: 16, repeats: 1, ..Default::default() };
        let rows = run_attention_bench(&cfg, &Device::Cpu, |_| {}).unwrap();
        // (K, k) pairs with k <= K: (2,1), (4,1), (4,3).
        assert_eq!(rows.len(), 6);
        for r in &rows {
            assert!(r.dense_ms.unwrap() > 0.0 && r.focus_ms.unwrap() > 0.0 && r.candle_ms.unwrap() > 0.0);
            assert!(r.pairs_fraction > 0.0 && r.pairs_fraction <= 1.0);
        }
        let bad = AttentionBench { heads: 3, kv_heads: 2, ..cfg.clone() };
        assert!(run_attention_bench(&bad, &Device::Cpu, |_| {}).is_err());
        let bad = AttentionBench { ks: vec![5], ..cfg };
        assert!(run_attention_bench(&bad, &Device::Cpu, |_| {}).is_err());
    }
}
