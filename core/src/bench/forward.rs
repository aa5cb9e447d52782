//! Prefill benchmark of the whole model, dense vs hard top-k, shared by `focus-lens bench
//! forward` and the GUI's speed panel. Modes alternate within each repeat so that drift (thermal,
//! other load) hits both alike; the median of the timed repeats is reported.

use super::median;
use crate::focus::adapter::Adapter;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::model::{ForwardOptions, Model};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRow {
    pub tokens: usize,
    pub dense_s: f64,
    pub topk_s: f64,
    pub k: usize,
    pub groups: usize,
    pub window: usize,
    pub dense_tokens_per_s: f64,
    pub topk_tokens_per_s: f64,
    pub topk_over_dense_speed: f64,
}

pub struct BenchOptions<'a> {
    pub lengths: Vec<usize>,
    /// Timed repeats per length and mode, after one warm-up.
    pub repeats: usize,
    pub k: usize,
    pub cancel: Option<&'a AtomicBool>,
}

/// Runs `base` (token ids, cycled to each length) through the model. `progress(done, total)`
/// counts forward passes; `row(r)` is called as each length finishes.
pub fn forward_bench(
    model: &Model,
    adapter: &Adapter,
    base: &[u32],
    opts: &BenchOptions,
    mut progress: impl FnMut(usize, usize),
    mut row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>> {
    if base.is_empty() {
        return Err(Error::Invalid("the benchmark text has no tokens".into()));
    }
    let ctx = model.config().context;
    if let Some(&bad) = opts.lengths.iter().find(|&&n| n == 0 || n > ctx) {
        return Err(Error::Invalid(format!("length {bad} must be in 1..={ctx} (the model's context)")));
    }
    let k = opts.k;
    if k == 0 || k > adapter.config.groups {
        return Err(Error::Invalid(format!("k = {k} must be in 1..={}", adapter.config.groups)));
    }
    let reps = opts.repeats.max(1);
    let total = opts.lengths.len() * (reps + 1) * 2;
    let mut done = 0;
    let mut rows = Vec::new();
    for &n in &opts.lengths {
        let ids: Vec<u32> = base.iter().cycle().take(n).cloned().collect();
        let modes = [Mode::Dense, Mode::TopK(k)];
        let mut times = vec![Vec::new(); modes.len()];
        for rep in 0..=reps {
            for (m, &mode) in modes.iter().enumerate() {
                let fo = ForwardOptions { logits_from: n - 1, cancel: opts.cancel, ..ForwardOptions::new(mode, Some(adapter)) };
                let t0 = Instant::now();
                model.decoder.forward(&ids, &fo)?;
                if rep > 0 {
                    times[m].push(t0.elapsed().as_secs_f64());
                }
                done += 1;
                progress(done, total);
            }
        }
        // repeats >= 1 (validated), so both lists hold timings.
        let (dense, topk) = (median(&times[0]).unwrap_or_default(), median(&times[1]).unwrap_or_default());
        let r = BenchRow {
            tokens: n,
            dense_s: dense,
            topk_s: topk,
            k,
            groups: adapter.config.groups,
            window: adapter.config.window,
            dense_tokens_per_s: n as f64 / dense,
            topk_tokens_per_s: n as f64 / topk,
            topk_over_dense_speed: dense / topk,
        };
        row(&r);
        rows.push(r);
    }
    Ok(rows)
}
