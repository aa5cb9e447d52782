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
