//! Prefill benchmark of the whole model, dense vs hard top-k, shared by `focus-lens bench
//! forward` and the GUI's speed panel. Modes alternate within each repeat so that drift (thermal,
//! other load) hits both alike; the median of the timed repeats is reported, with the fastest
//! and slowest repeat of each mode (and of the per-repeat speedup) beside it.

use super::median;
use crate::focus::adapter::Adapter;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::model::decoder::StageTimes;
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
    /// Timed repeats behind the figures (absent in reports written before the spread was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<usize>,
    /// Fastest and slowest timed repeat of each mode, seconds (absent in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_min_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_max_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_min_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_max_s: Option<f64>,
    /// Smallest and largest speedup of one repeat (dense / top-k of the same repeat: the modes
    /// alternate within a repeat, so each pair saw the same conditions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_max: Option<f64>,
    /// With `BenchOptions::stages`: one more pass of each mode, its time split by stage
    /// (waiting for the device at each stage's end, so its total exceeds the timed passes').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_stages: Option<StageTimes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_stages: Option<StageTimes>,
}

impl BenchRow {
    /// (min, median, max) of the dense and top-k times and of the speedup; the median alone
    /// (three times) for rows read from reports without the spread.
    pub fn spread(&self) -> [(f64, f64, f64); 3] {
        let or = |x: Option<f64>, m: f64| x.unwrap_or(m);
        [
            (or(self.dense_min_s, self.dense_s), self.dense_s, or(self.dense_max_s, self.dense_s)),
            (or(self.topk_min_s, self.topk_s), self.topk_s, or(self.topk_max_s, self.topk_s)),
            (or(self.speedup_min, self.topk_over_dense_speed), self.topk_over_dense_speed, or(self.speedup_max, self.topk_over_dense_speed)),
        ]
    }
}

fn min_max(v: &[f64]) -> (Option<f64>, Option<f64>) {
    let min = v.iter().cloned().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let max = v.iter().cloned().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    (min, max)
}

pub struct BenchOptions<'a> {
    pub lengths: Vec<usize>,
    /// Timed repeats per length and mode, after one warm-up.
    pub repeats: usize,
    pub k: usize,
    pub cancel: Option<&'a AtomicBool>,
    /// After the timed repeats, one pass of each mode split by stage (`StageTimes`).
    pub stages: bool,
}

/// One benchmarked pass of `n` tokens, only the last row's logits. Dense runs without the
/// adapter, as the base model does: with it every layer would still route, and dense would pay
/// for the router. No routing is read, so a top-k pass on CUDA routes on the device.
fn pass<'a>(mode: Mode, adapter: &'a Adapter, n: usize, cancel: Option<&'a AtomicBool>, stage_times: Option<&'a std::sync::Mutex<StageTimes>>) -> ForwardOptions<'a> {
    ForwardOptions { logits_from: n - 1, cancel, stage_times, routing_unused: true, ..ForwardOptions::new(mode, Some(adapter).filter(|_| mode != Mode::Dense)) }
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
    let k = adapter.config.topk(opts.k)?;
    let reps = opts.repeats.max(1);
    let total = opts.lengths.len() * (reps + 1 + opts.stages as usize) * 2;
    let mut done = 0;
    let mut rows = Vec::new();
    for &n in &opts.lengths {
        let ids: Vec<u32> = base.iter().cycle().take(n).cloned().collect();
        let modes = [Mode::Dense, Mode::TopK(k)];
        let mut times = vec![Vec::new(); modes.len()];
        for rep in 0..=reps {
            for (m, &mode) in modes.iter().enumerate() {
                let t0 = Instant::now();
                model.decoder.forward(&ids, &pass(mode, adapter, n, opts.cancel, None))?;
                if rep > 0 {
                    times[m].push(t0.elapsed().as_secs_f64());
                }
                done += 1;
                progress(done, total);
            }
        }
        let mut stages = [None, None];
        if opts.stages {
            for (m, &mode) in modes.iter().enumerate() {
                let times = std::sync::Mutex::new(StageTimes::default());
                model.decoder.forward(&ids, &pass(mode, adapter, n, opts.cancel, Some(&times)))?;
                stages[m] = Some(times.into_inner().expect("stage times"));
                done += 1;
                progress(done, total);
            }
        }
        // repeats >= 1 (validated), so both lists hold timings.
        let (dense, topk) = (median(&times[0]).unwrap_or_default(), median(&times[1]).unwrap_or_default());
        let ((dmin, dmax), (tmin, tmax)) = (min_max(&times[0]), min_max(&times[1]));
        let ratios: Vec<f64> = times[0].iter().zip(&times[1]).map(|(d, t)| d / t).collect();
        let (smin, smax) = min_max(&ratios);
        let r = BenchRow {
            tokens: n,
            dense_s: dense,
            topk_s: topk,
            k: k.k(),
            groups: adapter.config.groups,
            window: adapter.config.window,
            dense_tokens_per_s: n as f64 / dense,
            topk_tokens_per_s: n as f64 / topk,
            topk_over_dense_speed: dense / topk,
            repeats: Some(reps),
            dense_min_s: dmin,
            dense_max_s: dmax,
            topk_min_s: tmin,
            topk_max_s: tmax,
            speedup_min: smin,
            speedup_max: smax,
            dense_stages: stages[0],
            topk_stages: stages[1],
        };
        row(&r);
        rows.push(r);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports written before the spread existed still read, and give the median as their spread.
    #[test]
    fn old_reports_still_read() {
        let old = r#"{"tokens":64,"dense_s":0.2,"topk_s":0.1,"k":2,"groups":8,"window":128,"dense_tokens_per_s":320.0,"topk_tokens_per_s":640.0,"topk_over_dense_speed":2.0}"#;
        let r: BenchRow = serde_json::from_str(old).unwrap();
        assert_eq!(r.spread(), [(0.2, 0.2, 0.2), (0.1, 0.1, 0.1), (2.0, 2.0, 2.0)]);
        assert!(r.repeats.is_none());
        // And a new row keeps every old field under its old name.
        let new = BenchRow { dense_min_s: Some(0.15), dense_max_s: Some(0.3), repeats: Some(3), ..r.clone() };
        let v = serde_json::to_value(&new).unwrap();
        for f in ["tokens", "dense_s", "topk_s", "k", "groups", "window", "dense_tokens_per_s", "topk_tokens_per_s", "topk_over_dense_speed"] {
            assert_eq!(v[f], serde_json::to_value(&r).unwrap()[f], "{f}");
        }
        assert_eq!((v["dense_min_s"].as_f64(), v["repeats"].as_u64()), (Some(0.15), Some(3)));
        assert!(v.get("topk_min_s").is_none());
        assert_eq!(new.spread()[0], (0.15, 0.2, 0.3));
    }

    #[test]
    fn min_and_max() {
        assert_eq!(min_max(&[0.3, 0.1, 0.2]), (Some(0.1), Some(0.3)));
        assert_eq!(min_max(&[]), (None, None));
    }
}
