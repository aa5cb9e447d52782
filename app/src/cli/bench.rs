//! `bench`: the benchmarks, each measured side by side in one run: `bench forward` (prefill of
//! the whole model, dense vs hard top-k, modes alternating within each repeat so drift hits both
//! alike), `bench matmul` (one layer's projections, quantized vs f32), `bench attention`
//! (one attention call, our dense kernel vs exact top-k Focus vs candle's matmul + softmax),
//! `bench decode` (one generation step over a cached context, dense vs top-k, alternated) and
//! `bench routing` (whole-sequence vs causal Sinkhorn on the same text).

use super::common::{load_adapter, print_json, ModelArgs};
use anyhow::{Context, Result};
use candle_core::{quantized::QMatMul, Module, Tensor};
use focus_core::bench::{forward_bench, median, BenchOptions};
use focus_core::model::{gguf::GgufFile, qmatvec::QMatrix};
use focus_core::{Adapter, AdapterSpec};
use std::path::PathBuf;
use std::time::Instant;


#[derive(clap::Args)]
pub struct ForwardArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Adapter for the top-k pass (default: a random K=8 adapter, seed 0, window 128).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// k of the top-k pass (default: the adapter's top_k), 1..=K.
    #[arg(long, value_parser = super::common::count::<1, 64>)]
    pub k: Option<usize>,
    /// Sequence lengths in tokens (at most the model's context; the text is repeated to length).
    #[arg(long, value_delimiter = ',', default_values_t = vec![2048, 4096, 8192], value_parser = super::common::count::<1, 1048576>)]
    pub lengths: Vec<usize>,
    /// Timed repeats per length and mode (the median is reported), after one warm-up; 1..=1000.
    #[arg(long, default_value_t = 3, value_parser = super::common::count::<1, 1000>)]
    pub repeats: usize,
    /// Text to run (default: the embedded sample, repeated to length).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Also split one more pass of each mode by stage (embedding, Q/K/V, routing, plan,
    /// attention, MLP), waiting for the device at each stage's end: where the time goes.
    #[arg(long)]
    pub stages: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn forward(a: ForwardArgs) -> Result<()> {
    let model = a.model.load()?;
    let adapter = match load_adapter(a.adapter.as_deref(), &model)? {
        Some(ad) => ad,
        None => Adapter::random(&model.identity(), model.device(), &AdapterSpec::default(), 0)?,
    };
    let k = a.k.unwrap_or(adapter.config.top_k);
    let text = match &a.text {
        Some(p) => focus_core::io::text::read_text(p)?,
        None => crate::defaults::SAMPLE_TEXT.to_string(),
    };
    let base = model.tokenizer()?.encode(&text, false)?.ids;
    anyhow::ensure!(!base.is_empty(), "the text has no tokens");
    if let Some(&bad) = a.lengths.iter().find(|&&n| n == 0 || n > model.config().context) {
        anyhow::bail!("--lengths {bad} must be in 1..={} (the model's context)", model.config().context);
    }
    let threads = rayon::current_num_threads();
    let opts = BenchOptions { lengths: a.lengths.clone(), repeats: a.repeats, k, cancel: None, stages: a.stages };
    let quiet = a.json;
    let rows = forward_bench(&model, &adapter, &base, &opts, |_, _| {}, |r| {
        if !quiet {
            let n = r.tokens;
            let [d, t, s] = r.spread();
            eprintln!(
                "{n:>6} tokens: dense {:>8.1} tok/s ({:.3} s, {:.3}-{:.3})  topk(k={k}) {:>8.1} tok/s ({:.3} s, {:.3}-{:.3})  ratio {:.2}x ({:.2}-{:.2}); median (min-max) of {} repeat(s)",
                r.dense_tokens_per_s, r.dense_s, d.0, d.2, r.topk_tokens_per_s, r.topk_s, t.0, t.2, r.topk_over_dense_speed, s.0, s.2, r.repeats.unwrap_or(1)
            );
            for (mode, st) in [("dense", r.dense_stages), ("topk", r.topk_stages)] {
                if let Some(st) = st {
                    eprintln!(
                        "        {mode:>5} by stage: embed {:.3} s, qkv {:.3}, route {:.3}, plan {:.3}, attend {:.3}, mlp {:.3}; {:.3} s in all (synchronised)",
                        st.embed_s, st.qkv_s, st.route_s, st.plan_s, st.attend_s, st.finish_s, st.total_s()
                    );
                }
            }
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
    #[arg(long, default_value_t = 512, value_parser = super::common::count::<1, 65536>)]
    pub tokens: usize,
    #[arg(long, default_value_t = 5, value_parser = super::common::count::<1, 1000>)]
    pub repeats: usize,
    /// Random weights of these shapes (OUTxIN, comma-separated, e.g. 2048x8192,4096x14336)
    /// quantized by candle to each of `--types`, instead of the model's layer 0.
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// GGUF types for `--shapes` (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k .. q6_k, f16, bf16).
    #[arg(long, value_delimiter = ',', default_values_t = vec!["q4_0".to_string(), "q8_0".to_string(), "q4_k".to_string()])]
    pub types: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

/// One weight for `bench matmul`: its name, candle's quantized tensor, its blocks.
struct BenchWeight {
    name: String,
    qt: candle_core::quantized::QTensor,
    blocks: QMatrix,
}

/// `bench matmul`: one layer's projections and the LM head of a GGUF model (or random weights
/// of `--shapes` in each of `--types`), timed alternately in one run five ways, each over the
/// same X of `--tokens` rows: candle's QMatMul on the quantized tensor; candle's f32 matmul with
/// the dequantized weight; `qmatmul` (the blocks dequantized into cache-resident f32 panels: the
/// exact prefill product) with each f32 kernel, the gemm crate's and ours on AVX-512F (where the
/// CPU has it); the integer route (llama.cpp's: X
/// quantized to Q8_0, or Q8_K for K-quants, integer dot products; block types only; the time
/// includes quantizing X) on the VNNI panels (`qmatmul_int8`) and on the AMX tiles (`qmatmul_amx`, where the CPU has
/// them); and, with `--tokens 1`, the one-row kernels: `QMatrix::times` (exact f32) and
/// `qmatvec_int8` (the integer route's).
pub fn matmul(a: MatmulArgs) -> Result<()> {
    use focus_core::model::qmatmul::F32Kernel;
    use focus_core::model::{int8, qmatmul, qmatmul_amx, qmatmul_int8, qmatvec_int8};
    let dev = candle_core::Device::Cpu;
    let mut weights = Vec::new();
    if a.shapes.is_empty() {
        let path = a.model.model.clone().unwrap_or_else(crate::defaults::default_model_path);
        let g = GgufFile::open(&path)?;
        let head = if g.tensors.contains_key("output.weight") { "output.weight" } else { "token_embd.weight" };
        let names = ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", head];
        for name in names {
            let qt = g.qtensor(name, &dev)?;
            let (out, inp) = qt.shape().dims2()?;
            let info = g.info(name)?;
            let blocks = QMatrix::new(info.dtype, g.raw(info), out, inp).with_context(|| format!("{name}: type {:?} is not a weight type", info.dtype))?;
            weights.push(BenchWeight { name: name.to_string(), qt, blocks });
        }
    } else {
        for shape in &a.shapes {
            let (out, inp) = shape.split_once('x').and_then(|(o, i)| Some((o.parse::<usize>().ok()?, i.parse::<usize>().ok()?))).with_context(|| format!("--shapes {shape}: not OUTxIN"))?;
            let w = Tensor::randn(0f32, 0.02, (out, inp), &dev)?;
            for ty in &a.types {
                let dtype = gguf_type(ty)?;
                let qt = candle_core::quantized::QTensor::quantize(&w, dtype)?;
                let raw = qt.data()?;
                let blocks = QMatrix::new(dtype, &raw, out, inp).with_context(|| format!("{ty} {shape}"))?;
                weights.push(BenchWeight { name: format!("random {shape}"), qt, blocks });
            }
        }
    }
    let x = |inp: usize| Tensor::randn(0f32, 1.0, (a.tokens, inp), &dev);
    let mut rows = Vec::new();
    const WAYS: [&str; 8] = ["candle_quantized", "candle_f32", "panels_gemm", "panels_avx512", "int8", "amx", "one_row", "one_row_int8"];
    let mut total = [0.0f64; 8];
    let amx = qmatmul_amx::available();
    let avx512 = focus_core::model::qmatmul_avx512::supported();
    for bw in weights {
        let dtype = format!("{:?}", bw.qt.dtype());
        let (out, inp) = (bw.blocks.rows, bw.blocks.cols);
        let w = bw.qt.dequantize(&dev)?;
        let wt = w.t()?;
        let qm = QMatMul::from_qtensor(bw.qt)?;
        let x = x(inp)?;
        let xv = x.flatten_all()?.to_vec1::<f32>()?;
        let int8 = qmatmul_int8::supports(bw.blocks.ty);
        let one_row = a.tokens == 1;
        let mut y = vec![0f32; a.tokens * out];
        let mut times: [Vec<f64>; 8] = Default::default();
        for rep in 0..=a.repeats {
            let mut t = [f64::NAN; 8];
            let t0 = Instant::now();
            qm.forward(&x)?;
            t[0] = t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            let yf = x.matmul(&wt)?;
            t[1] = t0.elapsed().as_secs_f64();
            let kernels = if avx512 { &[F32Kernel::Gemm, F32Kernel::Avx512][..] } else { &[F32Kernel::Gemm] };
            for (j, &kernel) in kernels.iter().enumerate() {
                let t0 = Instant::now();
                qmatmul::matmul_by(&bw.blocks, &xv, a.tokens, &mut y, kernel);
                t[2 + j] = t0.elapsed().as_secs_f64();
                if rep == 0 {
                    // The panels' product is the f32 one up to the order of summation.
                    let y_ref = yf.flatten_all()?.to_vec1::<f32>()?;
                    let err = y.iter().zip(&y_ref).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    let mag = y_ref.iter().map(|v| v.abs()).fold(0f32, f32::max);
                    anyhow::ensure!(err <= 1e-4 * mag.max(1e-6), "{}: panels ({kernel:?}) differ from candle's f32 product by {err} (max |y| {mag})", bw.name);
                }
            }
            if int8 {
                let t0 = Instant::now();
                let xq = qmatmul_int8::Q8Rows::quantize_for(bw.blocks.ty, &xv, a.tokens, inp);
                int8::matmul(&bw.blocks, &xq, &mut y);
                t[4] = t0.elapsed().as_secs_f64();
                if amx {
                    let t0 = Instant::now();
                    let xq = qmatmul_int8::Q8Rows::quantize_for(bw.blocks.ty, &xv, a.tokens, inp);
                    qmatmul_amx::matmul(&bw.blocks, &xq, &mut y);
                    t[5] = t0.elapsed().as_secs_f64();
                }
            }
            if one_row {
                let t0 = Instant::now();
                bw.blocks.times(&xv, &mut y);
                t[6] = t0.elapsed().as_secs_f64();
                if int8 {
                    let t0 = Instant::now();
                    let xq = qmatmul_int8::Q8Rows::quantize_for(bw.blocks.ty, &xv, 1, inp);
                    qmatvec_int8::times(&bw.blocks, &xq, &mut y);
                    t[7] = t0.elapsed().as_secs_f64();
                }
            }
            if rep > 0 {
                times.iter_mut().zip(t).for_each(|(v, t)| v.push(t));
            }
        }
        let med: Vec<f64> = times.iter().map(|t| if t.iter().any(|v| v.is_nan()) { f64::NAN } else { median(t).unwrap_or_default() }).collect();
        for (s, m) in total.iter_mut().zip(&med) {
            *s += m;
        }
        let mut row = serde_json::json!({"tensor": bw.name, "dtype": dtype, "out": out, "in": inp});
        for (way, m) in WAYS.iter().zip(&med) {
            row[format!("{way}_ms")] = if m.is_nan() { serde_json::Value::Null } else { (m * 1e3).into() };
        }
        rows.push(row);
        if !a.json {
            let ms = |m: f64| if m.is_nan() { "       -".to_string() } else { format!("{:>8.3}", m * 1e3) };
            eprintln!(
                "{:<26} {dtype:>5} {out:>6}x{inp:<6} ms: candle quantized {}  candle f32 {}  panels gemm {}  panels avx512 {}  int8 vnni {}  int8 amx {}  one-row f32 {}  one-row int8 {}",
                bw.name, ms(med[0]), ms(med[1]), ms(med[2]), ms(med[3]), ms(med[4]), ms(med[5]), ms(med[6]), ms(med[7])
            );
        }
    }
    if !a.json {
        let ms = |m: f64| if m.is_nan() { "-".to_string() } else { format!("{:.2} ms", m * 1e3) };
        eprintln!(
            "all, {} token(s), {} thread(s): candle quantized {}, candle f32 {}, panels gemm {}, panels avx512 {}, int8 vnni {}, int8 amx {}, one-row f32 {}, one-row int8 {}",
            a.tokens, rayon::current_num_threads(), ms(total[0]), ms(total[1]), ms(total[2]), ms(total[3]), ms(total[4]), ms(total[5]), ms(total[6]), ms(total[7])
        );
    } else {
        let mut report = serde_json::json!({"bench": "matmul", "tokens": a.tokens, "threads": rayon::current_num_threads(), "rows": rows});
        for (way, t) in WAYS.iter().zip(total) {
            report[format!("{way}_ms")] = if t.is_nan() { serde_json::Value::Null } else { (t * 1e3).into() };
        }
        print_json(&report)?;
    }
    Ok(())
}

/// A GGUF type by its llama.cpp name.
fn gguf_type(name: &str) -> Result<candle_core::quantized::GgmlDType> {
    use candle_core::quantized::GgmlDType as T;
    Ok(match name.to_ascii_lowercase().as_str() {
        "q4_0" => T::Q4_0,
        "q4_1" => T::Q4_1,
        "q5_0" => T::Q5_0,
        "q5_1" => T::Q5_1,
        "q8_0" => T::Q8_0,
        "q2_k" => T::Q2K,
        "q3_k" => T::Q3K,
        "q4_k" => T::Q4K,
        "q5_k" => T::Q5K,
        "q6_k" => T::Q6K,
        "f16" => T::F16,
        "bf16" => T::BF16,
        other => anyhow::bail!("--types {other}: not one of q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, f16, bf16"),
    })
}

#[derive(clap::Args)]
pub struct AttentionArgs {
    /// cpu, or cuda (needs a `--features cuda` build): our kernels and candle's attention.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Element type on CUDA: f32 (plain-FMA kernels) or bf16 (tensor-core kernels). The CPU
    /// kernels are f32.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Query rows per block of the CUDA bf16 kernels: 64 or 128.
    #[arg(long, default_value_t = 128, value_parser = super::common::count::<1, 1024>)]
    pub tile_rows: usize,
    /// Sequence lengths in tokens, 1..=1048576 (and at most 4 GiB of q, k, v and output).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1024, 2048, 4096, 8192, 16384, 32768, 65536], value_parser = super::common::count::<1, 1048576>)]
    pub lengths: Vec<usize>,
    /// K values (groups), 1..=64.
    #[arg(long, value_delimiter = ',', default_values_t = vec![4, 8], value_parser = super::common::count::<1, 64>)]
    pub groups: Vec<usize>,
    /// k values (top-k memberships per token), 1..=64; pairs with k > K are skipped.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2], value_parser = super::common::count::<1, 64>)]
    pub k: Vec<usize>,
    #[arg(long, default_value_t = 8, value_parser = super::common::count::<1, 256>)]
    pub heads: usize,
    /// KV heads (GQA); default: as many as --heads.
    #[arg(long, value_parser = super::common::count::<1, 256>)]
    pub kv_heads: Option<usize>,
    #[arg(long, default_value_t = 64, value_parser = super::common::count::<1, 512>)]
    pub head_dim: usize,
    /// Local window w: pairs with i - j <= w always attend.
    #[arg(long, default_value_t = 128, value_parser = super::common::count::<0, 16777216>)]
    pub window: usize,
    /// Timed repeats (median reported), after one warm-up; 1..=1000.
    #[arg(long, default_value_t = 3, value_parser = super::common::count::<1, 1000>)]
    pub repeats: usize,
    /// Skip the untimed warm-up call (for long inputs, where one call takes minutes).
    #[arg(long)]
    pub no_warmup: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Candle's attention is skipped where its T x T scores and probabilities exceed this (GiB).
    #[arg(long, default_value_t = 6.0, value_parser = super::common::positive)]
    pub candle_max_gib: f64,
    /// One JSON object per row (JSON lines) on stdout.
    #[arg(long)]
    pub json: bool,
}

fn ms(x: Option<f64>) -> String {
    // GPU times go well below a millisecond.
    x.map_or("-".into(), |v| if v < 10.0 { format!("{v:.3}") } else { format!("{v:.1}") })
}

/// `bench attention`: one attention call (all heads), our dense tiled kernel vs exact hard top-k
/// Focus attention vs candle's matmul + softmax, alternated in one run.
pub fn attention(a: AttentionArgs) -> Result<()> {
    let device = ModelArgs { model: None, device: a.device.clone(), products: "exact".into() }.device()?;
    anyhow::ensure!(a.candle_max_gib >= 0.0, "--candle-max-gib must not be negative");
    let cfg = focus_core::bench::AttentionBench {
        lengths: a.lengths,
        groups: a.groups,
        ks: a.k,
        heads: a.heads,
        kv_heads: a.kv_heads.unwrap_or(a.heads),
        head_dim: a.head_dim,
        window: a.window,
        repeats: a.repeats,
        warmup: !a.no_warmup,
        seed: a.seed,
        candle_max_bytes: (a.candle_max_gib * (1u64 << 30) as f64) as usize,
        dtype: match a.dtype.as_str() {
            "f32" => candle_core::DType::F32,
            "bf16" => candle_core::DType::BF16,
            other => anyhow::bail!("--dtype must be f32 or bf16, not {other:?}"),
        },
        tile_rows: a.tile_rows,
    };
    cfg.validate()?;
    // q, k, v and the output in f32 for the longest length: refused before any allocation.
    let longest = cfg.lengths.iter().copied().max().unwrap_or(0) as u64;
    let bytes = longest * (2 * cfg.heads + 2 * cfg.kv_heads) as u64 * cfg.head_dim as u64 * 4;
    anyhow::ensure!(bytes <= 4 << 30, "--lengths {longest} with {} heads x {} dims needs {} MiB of q, k, v and output; at most 4096 MiB", cfg.heads, cfg.head_dim, bytes >> 20);
    anyhow::ensure!(device.is_cuda() || a.dtype == "f32", "--dtype bf16 needs --device cuda (the CPU kernels are f32)");
    if !a.json {
        let how = if device.is_cpu() { format!("{} threads", rayon::current_num_threads()) } else { format!("{}, {} rows per block", a.dtype, cfg.tile_rows) };
        eprintln!(
            "attention on {}, {} heads ({} KV) x {} dims, window {}, {how}, median of {}",
            a.device, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.window, cfg.repeats
        );
        eprintln!("{:>7} {:>2} {:>2} {:>10} {:>10} {:>8} {:>7} {:>7} {:>6} {:>10} {:>8}", "n", "K", "k", "dense ms", "focus ms", "speedup", "pairs", "bound", "eff", "candle ms", if device.is_cpu() { "cpu spd" } else { "plan ms" });
    }
    // The row callback cannot return an error: the first failed write is kept and returned.
    let mut written: Result<()> = Ok(());
    focus_core::bench::run_attention_bench(&cfg, &device, |r| {
        if a.json {
            if written.is_ok() {
                written = crate::outln!("{}", serde_json::to_string(r).expect("rows serialise"));
            }
        } else {
            eprintln!(
                "{:>7} {:>2} {:>2} {:>10} {:>10} {:>8} {:>6.1}% {:>6.2}x {:>6} {:>10} {:>8}",
                r.n, r.groups, r.k, ms(r.dense_ms), ms(r.focus_ms),
                r.speedup.map_or("-".into(), |s| format!("{s:.2}x")),
                r.pairs_fraction * 100.0, r.bound,
                r.efficiency.map_or("-".into(), |e| format!("{:.0}%", e * 100.0)),
                ms(r.candle_ms),
                match r.plan_ms {
                    Some(p) => format!("{p:.1}"),
                    None => r.speedup_cpu.map_or("-".into(), |s| format!("{s:.2}x")),
                }
            );
        }
    })?;
    written?;
    if !a.json {
        // The per-length bound tends to this limit as the local band's share shrinks.
        for &g in &cfg.groups {
            for &k in cfg.ks.iter().filter(|&&k| k <= g) {
                let why = if k == 1 { "= K/k".to_string() } else { format!("balanced k-sets; not K/k = {:.1}, which holds for k = 1 only", g as f64 / k as f64) };
                eprintln!("K={g} k={k}: bound at long lengths {:.2}x ({why})", focus_core::bench::bound_limit(g, k));
            }
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct DecodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Adapter of the top-k steps; it must use causal Sinkhorn (default: a random K=8 adapter
    /// with causal Sinkhorn, seed 0, window 128).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// k of the top-k steps (default: the adapter's top_k), 1..=K.
    #[arg(long, value_parser = super::common::count::<1, 64>)]
    pub k: Option<usize>,
    /// Cached context lengths in tokens (plus the steps, at most the model's context).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1024, 4096, 8192], value_parser = super::common::count::<1, 1048576>)]
    pub contexts: Vec<usize>,
    /// Timed steps per context and mode (the median is reported), after one warm-up; 1..=10000.
    #[arg(long, default_value_t = 16, value_parser = super::common::count::<1, 10000>)]
    pub steps: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

/// `bench decode`: one generation step over a cached context, dense vs top-k, alternated.
pub fn decode(a: DecodeArgs) -> Result<()> {
    let model = a.model.load()?;
    let adapter = match load_adapter(a.adapter.as_deref(), &model)? {
        Some(ad) => ad,
        None => Adapter::random(&model.identity(), model.device(), &AdapterSpec { causal_sinkhorn: true, ..AdapterSpec::default() }, 0)?,
    };
    let k = a.k.unwrap_or(adapter.config.top_k);
    let base = model.tokenizer()?.encode(crate::defaults::SAMPLE_TEXT, false)?.ids;
    let opts = focus_core::bench::DecodeBenchOptions { contexts: a.contexts.clone(), steps: a.steps, k, seed: a.seed };
    let threads = rayon::current_num_threads();
    if !a.json {
        eprintln!(
            "decode on {} ({threads} threads), {}: synthetic cached context (random K/V, routing balanced by causal Sinkhorn), median of {} steps",
            a.model.device, model.config().name, a.steps
        );
        eprintln!("{:>7} {:>12} {:>12} {:>8} {:>14} {:>14} {:>8}", "context", "dense tok/s", "topk tok/s", "speedup", "dense MB/tok", "topk MB/tok", "read");
    }
    let quiet = a.json;
    let rows = focus_core::bench::decode_bench(&model, &adapter, &base, &opts, |r| {
        if !quiet {
            eprintln!(
                "{:>7} {:>12.2} {:>12.2} {:>7.2}x {:>14.2} {:>14.2} {:>7.1}%",
                r.context, r.dense_tokens_per_s, r.topk_tokens_per_s, r.topk_over_dense_speed,
                r.dense_bytes as f64 / 1e6, r.topk_bytes as f64 / 1e6, 100.0 * r.topk_read_fraction
            );
            // On a GPU: the same steps without the CUDA graph, and what the graph did.
            if let (Some(de), Some(te)) = (r.dense_eager_tokens_per_s, r.topk_eager_tokens_per_s) {
                eprintln!(
                    "{:>7}   without the CUDA graph: dense {de:.2} tok/s, top-k {te:.2} tok/s (graph gain: dense {:.2}x, top-k {:.2}x; top-k/dense {:.2}x)",
                    "", r.dense_tokens_per_s / de, r.topk_tokens_per_s / te, te / de
                );
            }
            if let Some(g) = &r.topk_graph {
                eprintln!("{:>7}   top-k graph: {} captures, {} replays{}", "", g.captures, g.replays, g.fallback.as_ref().map(|f| format!(", turned off: {f}")).unwrap_or_default());
            }
            // On a GPU: where an (instrumented, synchronised) step's time goes.
            for (mode, split) in [("dense", r.dense_split), ("top-k", r.topk_split)] {
                if let Some(s) = split {
                    eprintln!(
                        "{:>7}   {mode} step split: routing {:.3} ms, attention {:.3} ms, rest {:.3} ms, host after the step {:.3} ms (instrumented total {:.3} ms)",
                        "", s.routing_s * 1e3, s.attention_s * 1e3, s.rest_s * 1e3, s.host_s * 1e3, s.total_s * 1e3
                    );
                }
            }
        }
    })
    .context("decode benchmark")?;
    if !a.json {
        let c = &adapter.config;
        eprintln!("top-k: K={} k={k} window {}; cache reads only (weights are read alike by both modes)", c.groups, c.window);
    } else {
        print_json(&serde_json::json!({
            "bench": "decode", "model": model.config().name, "device": a.model.device, "threads": threads, "steps": a.steps,
            "adapter": a.adapter.as_ref().map(|p| p.display().to_string()).unwrap_or("random K=8 causal seed 0".into()), "rows": rows,
        }))?;
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct RoutingArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The adapter whose routers score the text (default: the sample adapter, on the default
    /// model).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Top-k set size compared (default: the adapter's top_k), 1..=K.
    #[arg(long, value_parser = super::common::count::<1, 64>)]
    pub k: Option<usize>,
    /// The text is routed in consecutive segments of this many tokens, each from position 0.
    #[arg(long, default_value_t = focus_core::analysis::DEFAULT_SEGMENT, value_parser = super::common::count::<1, 1048576>)]
    pub segment: usize,
    #[arg(long)]
    pub json: bool,
    /// The text (e.g. tests/fixtures/ppl_persuasion_60k.txt).
    pub text: PathBuf,
}

/// `bench routing`: whole-sequence vs causal Sinkhorn on the same scores, per layer.
pub fn routing(a: RoutingArgs) -> Result<()> {
    let model = a.model.load()?;
    let adapter = match load_adapter(a.adapter.as_deref(), &model)? {
        Some(ad) => ad,
        None => crate::defaults::sample_adapter(&model).context("the sample adapter fits only the default model: pass --adapter")?,
    };
    let k = a.k.unwrap_or(adapter.config.top_k);
    let ids = model.tokenizer()?.encode(&focus_core::io::text::read_text(&a.text)?, false)?.ids;
    anyhow::ensure!(!ids.is_empty(), "the text has no tokens");
    let rows = focus_core::bench::routing_difference(&model, &adapter, &ids, a.segment, k)?;
    let mean = |f: fn(&focus_core::bench::RoutingDiffRow) -> f64| rows.iter().map(f).sum::<f64>() / rows.len().max(1) as f64;
    if a.json {
        return print_json(&serde_json::json!({
            "bench": "routing", "model": model.config().name, "tokens": ids.len(), "segment": a.segment, "k": k,
            "groups": adapter.config.groups, "window": adapter.config.window, "rows": rows,
            "mean_changed_topk": mean(|r| r.changed_topk), "mean_changed_top1": mean(|r| r.changed_top1),
        }));
    }
    crate::outln!("whole-sequence vs causal Sinkhorn, same scores (dense pass), {} tokens in segments of {}, K={} k={k}", ids.len(), a.segment, adapter.config.groups)?;
    crate::outln!("{:>5} {:>12} {:>12} {:>12} {:>14} {:>14}", "layer", "top-k set", "top group", "mean |dg|", "kept (whole)", "kept (causal)")?;
    for r in &rows {
        crate::outln!(
            "{:>5} {:>11.1}% {:>11.1}% {:>12.4} {:>13.1}% {:>13.1}%",
            r.layer, 100.0 * r.changed_topk, 100.0 * r.changed_top1, r.mean_abs_diff, 100.0 * r.retained_whole, 100.0 * r.retained_causal
        )?;
    }
    crate::outln!("mean over layers: top-k set changed for {:.1}% of tokens, top group for {:.1}%", 100.0 * mean(|r| r.changed_topk), 100.0 * mean(|r| r.changed_top1))?;
    Ok(())
}
