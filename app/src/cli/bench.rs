//! `bench forward`: prefill throughput of the whole model, dense vs hard top-k, measured side by
//! side in one run (modes alternate within each repeat so drift hits both alike).

use super::common::{load_adapter, print_json, ModelArgs};
use anyhow::{Context, Result};
use candle_core::{quantized::QMatMul, Module, Tensor};
use focus_core::bench::{forward_bench, BenchOptions};
use focus_core::{gguf::GgufFile, Adapter, AdapterSpec};
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
    let opts = BenchOptions { lengths: a.lengths.clone(), repeats: a.repeats, k, cancel: None };
    let quiet = a.json;
    let rows = forward_bench(&model, &adapter, &base, &opts, |_, _| {}, |r| {
        if !quiet {
            let n = r.tokens;
            eprintln!(
                "{n:>6} tokens: dense {:>8.1} tok/s ({:.3} s)  topk(k={k}) {:>8.1} tok/s ({:.3} s)  ratio {:.2}x",
                r.dense_tokens_per_s, r.dense_s, r.topk_tokens_per_s, r.topk_s, r.topk_over_dense_speed
            );
        }
    })
    .context("forward benchmark")?;
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

#[derive(clap::Args)]
pub struct MatmulArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Rows (tokens) of the activation matrix.
    #[arg(long, default_value_t = 512)]
    pub tokens: usize,
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    #[arg(long)]
    pub json: bool,
}

/// `bench matmul`: one layer's projections of a GGUF model, kept quantized (candle's QMatMul)
/// vs dequantized to f32 (what the engine runs), timed alternately in one run.
pub fn matmul(a: MatmulArgs) -> Result<()> {
    let path = a.model.model.clone().unwrap_or_else(super::common::default_model_path);
    let g = GgufFile::open(&path)?;
    let dev = candle_core::Device::Cpu;
    let names = ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"];
    let mut rows = Vec::new();
    let (mut tq_all, mut tf_all) = (0.0, 0.0);
    for name in names {
        let qt = g.qtensor(name, &dev)?;
        let dtype = format!("{:?}", qt.dtype());
        let (out, inp) = qt.shape().dims2()?;
        let w = qt.dequantize(&dev)?;
        let qm = QMatMul::from_qtensor(qt)?;
        let x = Tensor::randn(0f32, 1.0, (a.tokens, inp), &dev)?;
        let (mut tq, mut tf) = (Vec::new(), Vec::new());
        for rep in 0..=a.repeats {
            let t0 = Instant::now();
            qm.forward(&x)?;
            let q = t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            x.matmul(&w.t()?)?;
            let f = t0.elapsed().as_secs_f64();
            if rep > 0 {
                tq.push(q);
                tf.push(f);
            }
        }
        let (q, f) = (median(tq), median(tf));
        tq_all += q;
        tf_all += f;
        rows.push(serde_json::json!({"tensor": name, "dtype": dtype, "out": out, "in": inp, "quantized_ms": q * 1e3, "f32_ms": f * 1e3, "f32_speedup": q / f}));
        if !a.json {
            eprintln!("{name:<26} {dtype:>5} {out:>5}x{inp:<5} quantized {:>8.2} ms   f32 {:>8.2} ms   f32 is {:.2}x faster", q * 1e3, f * 1e3, q / f);
        }
    }
    if !a.json {
        eprintln!("one layer, {} tokens: quantized {:.1} ms, f32 {:.1} ms: f32 {:.2}x faster", a.tokens, tq_all * 1e3, tf_all * 1e3, tq_all / tf_all);
    } else {
        print_json(&serde_json::json!({"bench": "matmul", "tokens": a.tokens, "threads": rayon::current_num_threads(), "rows": rows, "quantized_ms": tq_all * 1e3, "f32_ms": tf_all * 1e3}))?;
    }
    Ok(())
}
