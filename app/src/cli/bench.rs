//! `bench forward`: prefill throughput of the whole model, dense vs hard top-k, measured side by
//! side in one run (modes alternate within each repeat so drift hits both alike).

use super::common::{load_adapter, print_json, ModelArgs};
use anyhow::{Context, Result};
use focus_core::{model::ForwardOptions, Adapter, AdapterSpec, Mode};
use std::path::PathBuf;
use std::time::Instant;

pub const SAMPLE_TEXT: &str = include_str!("../../../assets/sample.txt");

#[derive(clap::Args)]
pub struct ForwardArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Adapter for the top-k pass (default: a random K=8 adapter, seed 0, window 128).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// k of the top-k pass (default: the adapter's top_k).
    #[arg(long)]
    pub k: Option<usize>,
    /// Sequence lengths in tokens.
    #[arg(long, value_delimiter = ',', default_values_t = vec![512, 2048])]
    pub lengths: Vec<usize>,
    /// Timed repeats per length and mode (the median is reported), after one warm-up.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Text to run (default: the embedded sample, repeated to length).
    #[arg(long)]
    pub text: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn forward(a: ForwardArgs) -> Result<()> {
    let model = a.model.load()?;
    let adapter = match load_adapter(a.adapter.as_deref(), &model)? {
        Some(ad) => ad,
        None => Adapter::random(&model, &AdapterSpec::default(), 0)?,
    };
    let k = a.k.unwrap_or(adapter.config.top_k);
    let text = match &a.text {
        Some(p) => focus_core::text::read_text(p)?,
        None => SAMPLE_TEXT.to_string(),
    };
    let base = model.tokenizer()?.encode(&text, false)?.ids;
    anyhow::ensure!(!base.is_empty(), "the text has no tokens");
    if let Some(&bad) = a.lengths.iter().find(|&&n| n == 0 || n > model.config().context) {
        anyhow::bail!("--lengths {bad} must be in 1..={} (the model's context)", model.config().context);
    }
    let threads = rayon::current_num_threads();
    let mut rows = Vec::new();
    for &n in &a.lengths {
        let ids: Vec<u32> = base.iter().cycle().take(n).cloned().collect();
        let modes = [Mode::Dense, Mode::TopK(k)];
        let mut times = vec![Vec::new(); modes.len()];
        for rep in 0..=a.repeats.max(1) {
            for (m, &mode) in modes.iter().enumerate() {
                let opts = ForwardOptions { logits_from: n - 1, ..ForwardOptions::new(mode, Some(&adapter)) };
                let t0 = Instant::now();
                model.decoder.forward(&ids, &opts).with_context(|| format!("{mode} forward at {n} tokens"))?;
                if rep > 0 {
                    times[m].push(t0.elapsed().as_secs_f64());
                }
            }
        }
        let dense = median(times[0].clone());
        let topk = median(times[1].clone());
        rows.push(serde_json::json!({
            "tokens": n, "dense_s": dense, "topk_s": topk, "k": k, "groups": adapter.config.groups,
            "window": adapter.config.window,
            "dense_tokens_per_s": n as f64 / dense, "topk_tokens_per_s": n as f64 / topk,
            "topk_over_dense_speed": dense / topk,
        }));
        if !a.json {
            eprintln!(
                "{n:>6} tokens: dense {:>8.1} tok/s ({dense:.3} s)  topk(k={k}) {:>8.1} tok/s ({topk:.3} s)  ratio {:.2}x",
                n as f64 / dense, n as f64 / topk, dense / topk
            );
        }
    }
    let report = serde_json::json!({
        "bench": "forward", "model": model.config().name, "device": a.model.device, "threads": threads,
        "repeats": a.repeats, "adapter": a.adapter.as_ref().map(|p| p.display().to_string()).unwrap_or("random K=8 seed 0".into()),
        "rows": rows,
    });
    if a.json {
        print_json(&report)?;
    }
    Ok(())
}
