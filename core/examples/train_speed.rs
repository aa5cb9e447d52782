//! The training step's speed and its CPU/CUDA agreement on a SmolLM2-135M-shaped model with
//! random frozen weights (speed does not depend on their values; `train_anchor.py`, the
//! PyTorch anchor it is compared with, uses random weights too), or on a model loaded from a
//! file (`--model`: e.g. the paper-scale stand-ins of scripts/make-standin.py): K=8, d_g 16,
//! Sinkhorn 10 iterations, log gate, w 128, AdamW on the routers, `Trainer::train_step` on
//! random tokens.
//!
//!   train_speed step  [--device cuda] [--batch 4] [--seq 1024] [--steps 10] [--warmup 3]
//!                     [--model PATH | --layers 30] [--variants LIST] [--mem]
//!       ms/step, tokens/s and the peak memory of each variant (LIST, comma-separated; default:
//!       all). `--model PATH`: a .gguf file or Hugging Face directory (on CUDA its weight
//!       matrices in bf16, as `Model::load` keeps them), else a random SmolLM2-135M-shaped
//!       model of `--layers` layers. The peak is, on CUDA, the memory pool's peak of live
//!       allocations during the variant (the model's weights included, as PyTorch's
//!       `max_memory_allocated`), on the CPU this process's peak resident memory (reset per
//!       variant where /proc/self/clear_refs allows). Variants:
//!         composed          the composed ops, f32 (the step before issue 15)
//!         composed-detached the same with the detached Sinkhorn gradient
//!         composed-fwd      its forward pass alone (no backward)
//!         composed-dense    dense attention, no router (no gate, no Sinkhorn)
//!         sinkhorn          composed attention + the fused Sinkhorn op
//!         fused-f32         the fused step, frozen weights and activations f32
//!         fused             the fused step, bf16 weights (f32 accumulation): the default
//!                           (recomputation `Recompute::Auto`: where the whole graph would
//!                           not fit the device)
//!         fused-recompute   the same, each layer recomputed in the backward (`Recompute::On`)
//!         fused-full        the same, the whole graph kept (`Recompute::Off`)
//!         fused-detached    the same as fused with the detached Sinkhorn gradient
//!         fused-fwd         its forward pass alone
//!         fused-dense       dense attention, no router
//!       --mem: the device memory in use afterwards (every process's, as nvidia-smi counts it)
//!   train_speed agree [--batch 2] [--seq 256] [--steps 3]
//!       the same short training on the CPU (f32) and on CUDA (bf16): per-step losses, the
//!       first step's router gradient (cosine, relative error) and the final routers.
//!
//! Build: `cargo build --release --features cuda -p focus-core --example train_speed`.

use candle_core::{DType, Device, Tensor};
use focus_core::attention::Mode;
use focus_core::focus::adapter::{Adapter, AdapterSpec, Gate, Score};
use focus_core::focus::sinkhorn::SinkhornGrad;
use focus_core::model::block::{Block, Mlp, Norm};
use focus_core::model::linear::{Linear, Weight};
use focus_core::model::config::{Arch, MlpKind, ModelConfig, NormKind, Positions};
use focus_core::model::decoder::{Decoder, ForwardOptions};
use focus_core::train::ops::cross_entropy_rows;
use focus_core::model::Model;
use focus_core::train::{Recompute, TrainData, TrainKernels, TrainOptions, TrainPath, TrainWeights, Trainer};
use std::time::Instant;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn smollm2_config(layers: usize) -> ModelConfig {
    ModelConfig {
        arch: Arch::Llama,
        name: "SmolLM2-135M-shaped (random weights)".into(),
        n_layers: layers,
        d_model: 576,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        ffn_dim: 1536,
        vocab: 49152,
        context: 8192,
        norm: NormKind::Rms,
        norm_eps: 1e-5,
        mlp: MlpKind::SwiGlu,
        positions: Positions::Rope { theta: 100000.0, interleaved: true },
        qkv_bias: false,
        tied_embeddings: true,
        embed_scale: None, qk_norm: None, post_norms: false, attn_scale: None, attn_softcap: None, final_softcap: None, sliding: None, rope_scaling: None,
    }
}

/// A decoder of `cfg`'s shape with N(0, 0.02) weights and unit norms (seeded, device-independent).
fn random_model(cfg: ModelConfig, dev: &Device, seed: u64) -> candle_core::Result<Model> {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rand = |shape: (usize, usize)| -> candle_core::Result<Tensor> {
        let v: Vec<f32> = (0..shape.0 * shape.1).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * 0.0346).collect();
        Tensor::from_vec(v, shape, dev)
    };
    let (d, hd) = (cfg.d_model, cfg.head_dim);
    let norm = |dev: &Device| -> candle_core::Result<Norm> { Ok(Norm { kind: NormKind::Rms, weight: Tensor::ones(d, DType::F32, dev)?, bias: None, eps: cfg.norm_eps }) };
    let mut blocks = Vec::new();
    for _ in 0..cfg.n_layers {
        let lin = |w: Tensor| Linear { w: Weight::Dense(w), b: None };
        blocks.push(Block {
            attn_norm: Some(norm(dev)?),
            q: lin(rand((cfg.n_heads * hd, d))?),
            k: lin(rand((cfg.n_kv_heads * hd, d))?),
            v: lin(rand((cfg.n_kv_heads * hd, d))?),
            q_norm: None,
            k_norm: None,
            o: lin(rand((d, cfg.n_heads * hd))?),
            post_attn_norm: None,
            mlp_norm: Some(norm(dev)?),
            mlp: Mlp { kind: MlpKind::SwiGlu, gate: Some(lin(rand((cfg.ffn_dim, d))?)), up_or_fc: lin(rand((cfg.ffn_dim, d))?), down: lin(rand((d, cfg.ffn_dim))?) },
            post_mlp_norm: None,
            attn: cfg.layer_attention(0),
        });
    }
    let embed = rand((cfg.vocab, d))?;
    let embed = Weight::Dense(embed);
    let decoder = Decoder { final_norm: norm(dev)?, lm_head: embed.clone(), embed, pos_embed: None, blocks, device: dev.clone(), config: cfg, passes: Default::default() };
    Ok(Model { path: "random".into(), decoder, tokenizer: None, fingerprint: format!("random-{seed}"), format: "random" })
}

fn spec() -> AdapterSpec {
    AdapterSpec { groups: 8, d_g: 16, tau: 0.1, sinkhorn_iters: 10, window: 128, gate: Gate::Log, score: Score::Dot, ..Default::default() }
}

fn opts(batch: usize, seq: usize, steps: usize, grad: SinkhornGrad) -> TrainOptions {
    TrainOptions { steps, seq_len: seq, batch, lr: 1e-2, weight_decay: 0.0, seed: 0, eval_every: 0, eval_seqs: 1, checkpoint_every: 0, max_seconds: 0.0, sinkhorn_grad: grad, cosine_decay: false, straight_through: None, grad_clip: 0.0, freeze_centroids: false, freeze_projection: false, sharpen: 0.0, balance: 0.0 }
}

fn data(vocab: usize, n: usize) -> TrainData {
    // A repetitive stream, so that routing has something to find; any ids time the same.
    let train: Vec<u32> = (0..n as u64).map(|i| ((i * 7919 + (i / 97) * 104729) % vocab as u64) as u32).collect();
    TrainData { heldout: train[..4096.min(n)].to_vec(), train }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn device(args: &[String]) -> Device {
    match arg(args, "--device", "cuda".to_string()).as_str() {
        "cpu" => Device::Cpu,
        _ => focus_core::device::cuda(0).expect("a CUDA device"),
    }
}

/// One timed variant: (ms/step median, min, max).
fn time_variant(model: &Model, name: &str, batch: usize, seq: usize, warm: usize, steps: usize) -> focus_core::Result<(f64, f64, f64)> {
    let (fused, fused_sk, bf16, grad) = match name {
        "composed" | "composed-fwd" | "composed-dense" => (false, false, false, SinkhornGrad::Full),
        "composed-detached" => (false, false, false, SinkhornGrad::Detached),
        "sinkhorn" => (false, true, false, SinkhornGrad::Full),
        "fused-f32" => (true, true, false, SinkhornGrad::Full),
        "fused" | "fused-fwd" | "fused-dense" | "fused-recompute" | "fused-full" => (true, true, true, SinkhornGrad::Full),
        "fused-detached" => (true, true, true, SinkhornGrad::Detached),
        other => return Err(focus_core::Error::Invalid(format!("unknown variant {other}"))),
    };
    let recompute = match name {
        "fused-recompute" => Recompute::On,
        "fused-full" => Recompute::Off,
        _ => Recompute::Auto,
    };
    let kernels = TrainKernels { fused, fused_sinkhorn: fused_sk, bf16, recompute };
    let dev = model.device().clone();
    let d = data(model.config().vocab, (batch * seq * 4).max(200_000));
    let mut times = Vec::new();
    if name.ends_with("-fwd") || name.ends_with("-dense") {
        // The trainer's step without the optimizer: forward (and backward), by hand.
        let adapter = Adapter::random(&model.identity(), &dev, &spec(), 0)?;
        let dtype = if dev.is_cuda() && bf16 { DType::BF16 } else { DType::F32 };
        let tw = if fused { Some(TrainWeights::new(&model.decoder, dtype)?) } else { None };
        let dense = name.ends_with("-dense");
        let backward = !name.ends_with("-fwd");
        let seqs: Vec<&[u32]> = (0..batch).map(|i| &d.train[i * seq..(i + 1) * seq]).collect();
        let targets: Vec<u32> = (0..batch).flat_map(|i| d.train[i * seq + 1..(i + 1) * seq + 1].iter().copied()).collect();
        let tg = Tensor::from_vec(targets, batch * seq, &dev)?;
        let mut o = ForwardOptions::new(if dense { Mode::Dense } else { Mode::Soft }, if dense { None } else { Some(&adapter) });
        o.differentiable = true;
        o.sinkhorn_grad = grad;
        let path = TrainPath { fused, fused_sinkhorn: fused_sk, weights: tw.as_ref() };
        for s in 0..warm + steps {
            let t0 = Instant::now();
            let logits = focus_core::train::forward(&model.decoder, &seqs, &o, path)?;
            let loss = if fused { cross_entropy_rows(&logits, &tg)?.mean_all()? } else { candle_nn::loss::cross_entropy(&logits, &tg)? };
            if backward {
                let g = loss.backward()?;
                drop(g);
            }
            let _ = loss.to_dtype(DType::F32)?.to_scalar::<f32>()?;
            dev.synchronize()?;
            if s >= warm {
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    } else {
        let mut tr = Trainer::new(model, &spec(), opts(batch, seq, warm + steps, grad))?;
        tr.kernels = kernels;
        for s in 0..warm + steps {
            let t0 = Instant::now();
            let loss = tr.train_step(&d)?;
            dev.synchronize()?;
            if !loss.is_finite() {
                return Err(focus_core::Error::Invalid(format!("{name}: loss {loss} at step {s}")));
            }
            if s >= warm {
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let (lo, hi) = (times.iter().cloned().fold(f64::MAX, f64::min), times.iter().cloned().fold(0.0, f64::max));
    Ok((median(&mut times), lo, hi))
}

fn step_cmd(args: &[String]) -> focus_core::Result<()> {
    let dev = device(args);
    let (batch, seq, steps) = (arg(args, "--batch", 4usize), arg(args, "--seq", 1024usize), arg(args, "--steps", 10usize));
    let warm = arg(args, "--warmup", 3usize);
    let all = "composed,composed-detached,composed-fwd,composed-dense,sinkhorn,fused-f32,fused,fused-recompute,fused-full,fused-detached,fused-fwd,fused-dense";
    let list = arg(args, "--variants", all.to_string());
    let model = match args.iter().position(|a| a == "--model").and_then(|i| args.get(i + 1)) {
        Some(path) => {
            let t0 = Instant::now();
            let m = Model::load(std::path::Path::new(path), &dev)?;
            println!("loaded {path} in {:.1} s ({} weights)", t0.elapsed().as_secs_f64(), m.format);
            m
        }
        None => random_model(smollm2_config(arg(args, "--layers", 30usize)), &dev, 1)?,
    };
    println!("{}", shape_line(model.config()));
    println!("device {:?}, batch {batch} x {seq} tokens, {} layers, {warm} warm-up + {steps} timed steps", dev.location(), model.config().n_layers);
    if let Some(g) = peak_gib(&dev) {
        println!("MEM after loading: peak {g:.1} GiB (the model, and on the CPU the process)");
    }
    for v in list.split(',') {
        reset_peak(&dev);
        let r = time_variant(&model, v, batch, seq, warm, steps);
        let peak = peak_gib(&dev).map_or("n/a".to_string(), |g| format!("{g:.1} GiB"));
        match r {
            Ok((med, lo, hi)) => println!("RESULT {v:18} {med:9.1} ms/step (min {lo:.1}, max {hi:.1}), {:9.0} tokens/s, peak device memory {peak}", (batch * seq) as f64 / med * 1e3),
            Err(e) => println!("RESULT {v:18} failed: {e} (peak device memory {peak})"),
        }
    }
    if args.iter().any(|a| a == "--mem") {
        // Freed blocks stay in the pool (focus_core::device), so this is the peak the pool reached.
        match focus_core::device::memory_use(model.device()) {
            Some(m) => println!("MEM batch {batch} x {seq}: {:.1} GiB of {:.1} GiB in use on the device", m.used as f64 / (1u64 << 30) as f64, m.total as f64 / (1u64 << 30) as f64),
            None => println!("MEM unavailable"),
        }
    }
    Ok(())
}

/// "MODEL name (arch): 32 layers, d_model 4096, 32 heads, 8 kv heads, head dim 128, ffn 14336,
/// vocab 128256, ...": the shape of the model the step trains, and its frozen parameters.
fn shape_line(c: &ModelConfig) -> String {
    let (d, hd, l) = (c.d_model, c.head_dim, c.n_layers);
    let (nq, nkv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let mats = if matches!(c.mlp, MlpKind::GeluTanh) { 2 } else { 3 };
    let norms = if c.post_norms { 4 } else { 2 };
    let per_layer = d * (nq + 2 * nkv) + nq * d + mats * d * c.ffn_dim + norms * d + if c.qkv_bias { nq + 2 * nkv } else { 0 };
    let params = l * per_layer + c.vocab * d * if c.tied_embeddings { 1 } else { 2 } + d;
    let mut extra = Vec::new();
    if c.qkv_bias {
        extra.push("QKV bias".to_string());
    }
    if let Some(s) = &c.sliding {
        extra.push(format!("window {} on {} layers", s.window, s.layers.iter().filter(|&&x| x).count()));
    }
    if let Some(x) = c.attn_softcap {
        extra.push(format!("attention soft-cap {x}"));
    }
    if let Some(x) = c.final_softcap {
        extra.push(format!("logit soft-cap {x}"));
    }
    extra.push(format!("head {}", if c.tied_embeddings { "tied" } else { "untied" }));
    format!(
        "MODEL {} ({:?}, {:?}): {l} layers, d_model {d}, {} heads, {} kv heads, head dim {hd}, ffn {}, vocab {}, {}; {:.2}B frozen parameters",
        c.name, c.arch, c.mlp, c.n_heads, c.n_kv_heads, c.ffn_dim, c.vocab, extra.join(", "), params as f64 / 1e9
    )
}

/// Resets the peak `peak_gib` reads: on CUDA the pool's high watermark of live allocations, on
/// the CPU this process's peak resident memory (VmHWM, where the kernel allows it).
fn reset_peak(dev: &Device) {
    match dev {
        Device::Cpu => {
            let _ = std::fs::write("/proc/self/clear_refs", "5");
        }
        _ => {
            let _ = focus_core::device::pool_memory(dev);
        }
    }
}

/// The peak since `reset_peak` (GiB): on CUDA the pool's peak of live allocations (None where
/// the driver allocates without a pool), on the CPU the process's peak resident memory.
fn peak_gib(dev: &Device) -> Option<f64> {
    match dev {
        Device::Cpu => focus_core::device::memory_use(dev).map(|m| m.peak as f64 / (1u64 << 30) as f64),
        _ => focus_core::device::pool_memory(dev).map(|m| m.peak as f64 / (1u64 << 30) as f64),
    }
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn agree_cmd(args: &[String]) -> focus_core::Result<()> {
    let (batch, seq, steps) = (arg(args, "--batch", 2usize), arg(args, "--seq", 256usize), arg(args, "--steps", 3usize));
    let layers = arg(args, "--layers", 30usize);
    let gpu = focus_core::device::cuda(0)?;
    let d = data(49152, 100_000);
    let mut report = Vec::new();
    for gate in [Gate::Log, Gate::Paper] {
        let sp = AdapterSpec { gate, window: 64, ..spec() };
        let mut losses = Vec::new();
        let mut first_grads = Vec::new();
        let mut routers = Vec::new();
        for dev in [Device::Cpu, gpu.clone()] {
            let model = random_model(smollm2_config(layers), &dev, 1)?;
            let mut tr = Trainer::new(&model, &sp, opts(batch, seq, steps, SinkhornGrad::Full))?;
            // The first step's router gradient, from the same forward and backward the step runs.
            first_grads.push(tr.router_gradients(&d)?.iter().map(flat).collect::<Vec<_>>().concat());
            let mut l = Vec::new();
            for _ in 0..steps {
                l.push(tr.train_step(&d)?);
            }
            losses.push(l);
            routers.push(tr.adapter.layers.iter().flat_map(|r| [flat(&r.proj), flat(&r.centroids)]).collect::<Vec<_>>().concat());
        }
        let (a, b) = (&first_grads[0], &first_grads[1]);
        let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let rel: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>().sqrt() / na.max(1e-30);
        let loss_rel = losses[0].iter().zip(&losses[1]).map(|(x, y)| (x - y).abs() / x.abs()).fold(0.0, f64::max);
        let wmax = routers[0].iter().zip(&routers[1]).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        let ok = loss_rel < 5e-3 && dot / (na * nb) > 0.99 && rel < 0.15;
        println!(
            "AGREE {gate:?}: losses cpu {:?} cuda {:?} (max rel diff {loss_rel:.2e}); first-step router gradient cosine {:.5}, rel err {rel:.3e} (|g| {na:.3e}); routers max abs diff {wmax:.2e} (bound 2 lr steps = {:.2e}); {}",
            losses[0],
            losses[1],
            dot / (na * nb),
            2.0 * 1e-2 * steps as f64,
            if ok { "agree" } else { "DISAGREE" }
        );
        report.push(ok);
    }
    if report.iter().all(|&x| x) {
        Ok(())
    } else {
        Err(focus_core::Error::Invalid("CPU and CUDA training disagree".into()))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r = match args.get(1).map(String::as_str) {
        Some("step") => step_cmd(&args),
        Some("agree") => agree_cmd(&args),
        _ => {
            eprintln!("usage: train_speed step|agree [options] (see the source)");
            std::process::exit(2)
        }
    };
    if let Err(e) = r {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
