//! The speed view's benchmarks on the worker: whole-model prefill and the attention kernels
//! alone, one length (and repeat) at a time so that they report progress and can stop; and
//! quality against length (`quality`: perplexity and prefill speed of each mode at each length,
//! `focus-lens ppl --ctx ... --modes ...`'s table).

use super::error::JobError;
use super::msg::Msg;
use crate::gui::state::*;
use crate::gui::worker::Handle;
use focus_core::bench::{forward_bench, AttentionBench, AttentionRow, BenchOptions, BenchRow};
use focus_core::eval::ppl::{length_table, mode_label, LengthOptions, LengthRow, LengthTable};
use focus_core::model::memory::{self, ModelHeader, Workload};
use focus_core::{Adapter, Mode, Model};
use std::sync::{Arc, Mutex};

/// CPU model name for the speed view.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    format!("{cpu}, {} threads", rayon::current_num_threads())
}

/// The speed view's data source: prefill time, dense vs Focus top-k, over lengths. One
/// function so that the view can later point at other kernels' benchmarks.
/// Each finished length is also pushed to `live`, so the view can plot rows as they come.
pub fn bench(
    res: &AnalysisResult,
    lengths: Vec<usize>,
    repeats: usize,
    device: DeviceChoice,
    live: &Mutex<Vec<BenchRow>>,
    h: &Handle,
) -> Result<(Vec<BenchRow>, String), JobError> {
    let base: Vec<u32> = res.analysis.tokens.iter().map(|t| t.id).collect();
    let k = res.key.params.k;
    let opts = BenchOptions { lengths, repeats, k, cancel: Some(&h.cancel), stages: false };
    let settings = format!(
        "{}; device {}; model {}; K={} k={k} w={}; {repeats} timed repeat(s) after a warm-up: median, with min and max; text: the analysed text cycled to length",
        machine(),
        device.label(),
        res.analysis.model,
        res.groups(),
        res.window()
    );
    let rows = forward_bench(&res.model, &res.adapter, &base, &opts, |d, t| h.set_progress(d, t, "forward passes"), |r| {
        if let Ok(mut v) = live.lock() {
            v.push(r.clone());
        }
    })?;
    Ok((rows, settings))
}

/// The attention-kernel benchmark as the speed view runs it: the adapter's K, the selected k,
/// the window, and the loaded model's heads and head size; memberships balanced as Sinkhorn
/// leaves them (`balanced_masks`, as `focus-lens bench attention` does). Candle's attention is
/// timed on CUDA only (on the CPU it would only add time and T x T memory).
pub fn attention_config(res: &AnalysisResult, lengths: Vec<usize>, repeats: usize, device: DeviceChoice) -> AttentionBench {
    let c = res.model.config();
    AttentionBench {
        lengths,
        groups: vec![res.groups()],
        ks: vec![res.key.params.k.clamp(1, res.groups().max(1))],
        heads: c.n_heads,
        kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        window: res.window(),
        repeats: repeats.max(1),
        warmup: true,
        seed: 0,
        candle_max_bytes: if device == DeviceChoice::Cuda { 6 << 30 } else { 0 },
        ..Default::default()
    }
}

/// What an attention benchmark ran, in words, and the equivalent CLI command.
pub fn attention_settings(res: &AnalysisResult, cfg: &AttentionBench, device: DeviceChoice) -> (String, String) {
    let lengths = cfg.lengths.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",");
    let words = format!(
        "{}; device {}; f32; shapes of {}: {} query heads, {} KV heads x {} dims (one attention call, all heads); K={} k={} w={}; memberships balanced as Sinkhorn leaves them; {} timed repeat(s) after a warm-up: median, with min and max",
        machine(),
        device.label(),
        res.analysis.model,
        cfg.heads,
        cfg.kv_heads,
        cfg.head_dim,
        cfg.groups[0],
        cfg.ks[0],
        cfg.window,
        cfg.repeats
    );
    let cli = format!(
        "focus-lens bench attention --device {} --lengths {lengths} --groups {} --k {} --heads {} --kv-heads {} --head-dim {} --window {} --repeats {} --candle-max-gib {}",
        if device == DeviceChoice::Cuda { "cuda" } else { "cpu" },
        cfg.groups[0],
        cfg.ks[0],
        cfg.heads,
        cfg.kv_heads,
        cfg.head_dim,
        cfg.window,
        cfg.repeats,
        cfg.candle_max_bytes >> 30
    );
    (words, cli)
}

/// The spread of one length's timed repeats: (min, median, max) of each figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub repeats: usize,
    pub dense_ms: (f64, f64, f64),
    pub focus_ms: (f64, f64, f64),
    pub speedup: (f64, f64, f64),
}

/// (min, median, max) of `v` (NaN when empty).
pub fn min_med_max(v: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = v.iter().cloned().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let med = if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) };
    (v[0], med, v[n - 1])
}

/// One length's row from its repeats: the medians of the timings (and the speedup of the
/// medians), with their spread.
pub fn combine_repeats(reps: &[AttentionRow]) -> Option<(AttentionRow, Spread)> {
    let first = reps.first()?;
    let get = |f: fn(&AttentionRow) -> Option<f64>| reps.iter().filter_map(f).collect::<Vec<f64>>();
    let dense = min_med_max(&get(|r| r.dense_ms));
    let focus = min_med_max(&get(|r| r.focus_ms));
    let speed = min_med_max(&get(|r| r.speedup));
    let mut row = first.clone();
    row.dense_ms = first.dense_ms.map(|_| dense.1);
    row.focus_ms = first.focus_ms.map(|_| focus.1);
    row.speedup = match (row.dense_ms, row.focus_ms) {
        (Some(d), Some(f)) if f > 0.0 => Some(d / f),
        _ => None,
    };
    row.efficiency = row.speedup.map(|s| s / row.bound);
    let cpu = min_med_max(&get(|r| r.speedup_cpu));
    row.speedup_cpu = first.speedup_cpu.map(|_| cpu.1);
    row.candle_ms = first.candle_ms.map(|_| min_med_max(&get(|r| r.candle_ms)).1);
    Some((row, Spread { n: first.n, repeats: reps.len(), dense_ms: dense, focus_ms: focus, speedup: speed }))
}

/// Runs the attention benchmark one length at a time (the same numbers as one call: each
/// length seeds its own inputs), so that it reports progress and can stop between lengths.
/// Each length runs `cfg.repeats` single timed repeats (after one warm-up), so that the panel
/// can show their spread (min / median / max) besides the median.
pub fn attention_bench(
    cfg: AttentionBench,
    device: DeviceChoice,
    live: &Mutex<Vec<AttentionRow>>,
    spreads: &Mutex<Vec<Spread>>,
    h: &Handle,
) -> Result<Vec<AttentionRow>, JobError> {
    cfg.validate()?;
    let dev = device.device()?;
    let total = cfg.lengths.len() * cfg.repeats.max(1);
    let mut rows = Vec::new();
    for (i, &n) in cfg.lengths.iter().enumerate() {
        let mut reps = Vec::new();
        for rep in 0..cfg.repeats.max(1) {
            if h.cancelled() {
                return Err(JobError::Cancelled);
            }
            h.set_progress(i * cfg.repeats.max(1) + rep, total, format!("attention at {n} tokens, repeat {} of {}", rep + 1, cfg.repeats.max(1)));
            let one = AttentionBench { lengths: vec![n], repeats: 1, warmup: cfg.warmup && rep == 0, ..cfg.clone() };
            reps.extend(focus_core::bench::run_attention_bench(&one, &dev, |_| {})?);
        }
        if let Some((row, spread)) = combine_repeats(&reps) {
            if let Ok(mut v) = live.lock() {
                v.push(row.clone());
            }
            if let Ok(mut v) = spreads.lock() {
                v.push(spread);
            }
            rows.push(row);
        }
    }
    h.set_progress(total, total, "attention");
    Ok(rows)
}

/// Quality against length as the speed view asks for it: the loaded model, adapter and text
/// (the whole text, not only the analysed tokens: long lengths need long texts).
pub struct QualityJob {
    pub model: Arc<Model>,
    pub adapter: Arc<Adapter>,
    /// The adapter's path (`None`: the embedded default), for the table and the command line.
    pub adapter_path: Option<String>,
    pub text: Arc<String>,
    pub text_label: String,
    pub ctxs: Vec<usize>,
    /// Dense is added first by `length_table` when missing.
    pub modes: Vec<Mode>,
    pub max_chunks: usize,
    pub device: DeviceChoice,
}

impl QualityJob {
    /// The same run from the command line.
    pub fn cli(&self) -> String {
        let modes: Vec<String> = focus_core::eval::ppl::table_modes(&self.modes).iter().map(|m| mode_label(*m).replace('-', "")).collect();
        let ctxs: Vec<String> = self.ctxs.iter().map(|c| c.to_string()).collect();
        format!(
            "focus-lens ppl --model {} --adapter {} --device {} --ctx {} --modes {} --chunks {} {}",
            self.model.path.display(),
            self.adapter_path.as_deref().unwrap_or("sample_adapters/smollm2-135m-k8"),
            if self.device == DeviceChoice::Cuda { "cuda" } else { "cpu" },
            ctxs.join(","),
            modes.join(","),
            self.max_chunks,
            self.text_label
        )
    }
}

/// Perplexity and prefill speed of each mode at each length (`length_table`, as `focus-lens ppl
/// --ctx A,B --modes ...` runs it): the text prepared as `ppl` prepares it (one trailing
/// newline stripped), each run's memory checked before it is spent (CPU: a run that does not
/// fit is skipped and said), each finished length pushed to `live`.
pub fn quality(job: QualityJob, live: &Mutex<Vec<LengthRow>>, h: &Handle) -> Result<LengthTable, JobError> {
    h.set_progress(0, 0, "tokenising the text");
    let text = job.text.strip_suffix('\n').unwrap_or(&job.text);
    let ids = job.model.tokenizer()?.encode(text, false)?.ids;
    let header = if job.model.device().is_cpu() { ModelHeader::open(&job.model.path).ok() } else { None };
    let avail = memory::available();
    let fits = |ctx: usize, mode: Mode| -> Option<String> {
        let e = header.as_ref()?.estimate(&Workload::perplexity(ctx, mode == Mode::Soft));
        memory::check_fits(&format!("{} at ctx {ctx}", mode_label(mode)), &e, avail.as_ref()).err().map(|e| e.to_string())
    };
    let opts = LengthOptions { ctxs: job.ctxs.clone(), modes: job.modes.clone(), max_chunks: Some(job.max_chunks.max(1)), cancel: Some(&h.cancel) };
    let rows = length_table(&job.model, &ids, Some(&job.adapter), &opts, fits, |d, t, what| h.set_progress(d, t, what), |r| {
        if let Ok(mut v) = live.lock() {
            v.push(r.clone());
        }
    })?;
    Ok(LengthTable {
        table: "ppl_lengths".into(),
        model: job.model.path.display().to_string(),
        adapter: Some(job.adapter_path.clone().unwrap_or_else(|| "the embedded sample adapter".into())),
        text: job.text_label.clone(),
        tokens: ids.len(),
        device: job.device.label().to_string(),
        threads: rayon::current_num_threads(),
        context: job.model.config().context,
        max_chunks: Some(job.max_chunks.max(1)),
        rows,
    })
}

/// A benchmark as the speed view prepares it, run by `run` on the worker.
pub enum BenchJob {
    /// The attention kernels alone (`attention_bench`).
    Attention { cfg: AttentionBench, device: DeviceChoice, live: Arc<Mutex<Vec<AttentionRow>>>, spreads: Arc<Mutex<Vec<Spread>>> },
    /// Prefill of the whole model (`bench`).
    WholeModel { res: Arc<AnalysisResult>, lengths: Vec<usize>, repeats: usize, device: DeviceChoice, live: Arc<Mutex<Vec<BenchRow>>> },
    /// Quality and speed against length (`quality`).
    Quality { job: QualityJob, live: Arc<Mutex<Vec<LengthRow>>> },
}

impl BenchJob {
    pub fn run(self, h: &Handle) -> Msg {
        match self {
            BenchJob::Attention { cfg, device, live, spreads } => Msg::AttnBench(attention_bench(cfg, device, &live, &spreads, h)),
            BenchJob::WholeModel { res, lengths, repeats, device, live } => Msg::Bench(bench(&res, lengths, repeats, device, &live, h)),
            BenchJob::Quality { job, live } => Msg::Quality(quality(job, &live, h)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spread() {
        assert_eq!(min_med_max(&[3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(min_med_max(&[4.0, 1.0]), (1.0, 2.5, 4.0));
        assert!(min_med_max(&[]).1.is_nan());
    }
}
