//! Paper-scale router training on the GPU machine without the app (focus-lens pulls in the GUI
//! and candle's quantized kernels, too long a build for one session): what `focus-lens train`
//! does (the same `Trainer::run`, train_log.jsonl, the adapter with its provenance), then the
//! held-out perplexities of the result (`eval::ppl`), dense, soft and top-k.
//!
//!   train_paper --model GGUF --data DIR --heldout DIR --out DIR [--groups 8] [--gate log]
//!       [--tau 0.1] [--steps 4000] [--minutes 0] [--eval-every 500] [--ppl FILE] [--ctx 512,1024]
//!       [--seq 1024] [--batch 4] [--score dot|cosine] [--iters 10] [--init random|kmeans|pca|pca-white]
//!       [--lr 1e-2] [--schedule cosine|constant] [--seed 0] [--router-layers all|global] [--cpu]
//!       [--wd 0] [--clip 0] [--lambda 10] [--probe FILE,FILE] [--composed] [--mem-trace]
//!       [--sink 0] [--freeze-centroids] [--freeze-projection] [--sharpen 0] [--balance 0] [--input-scale] [--from ADAPTER] [--straight-through 0]
//!       [--init-gain 1] [--recompute auto|on|off] [--alternate-soft] [--window 128]
//!
//! Defaults are the paper's setting: dot scores, tau 0.1, Sinkhorn 10 iterations with the full
//! gradient, log gate, random init; and ours: d_g 16, w 128, 4 x 1024 tokens per step, AdamW lr
//! 1e-2 with cosine decay to lr/10, seed 0, no attention sinks (`--sink N` [ours]: the first N
//! tokens stay attendable by every query, ungated, as local pairs are). `--from ADAPTER` fine-tunes
//! a saved adapter instead (its routing settings win over the flags). Category structure is
//! logged at each evaluation on the start of the first held-out file, or on `--probe`'s books
//! (train_log.jsonl, `categories`, `structure`).
//!
//! It says which form of the step runs (fused or composed) and prints the time per training
//! step and per token (`TIMING`, also in the adapter's `training` record): the wall time of the
//! steps without an evaluation, after the first two (weight conversion, kernel loading), so
//! that models can be compared (`--steps 40 --eval-every 1000` is enough).
//! Build: `cargo build --release --features cuda -p focus-core --example train_paper`.

use focus_core::eval::ppl::perplexity;
use focus_core::focus::sinkhorn::SinkhornGrad;
use focus_core::train::{LogRow, TrainData, TrainOptions, Trainer};
use focus_core::{AdapterSpec, Gate, Mode, Model, Score};
use std::io::Write;
use std::path::{Path, PathBuf};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.to_string())
}

/// The .txt files of a folder in name order, tokenized and joined by the end-of-text token.
fn tokens(model: &Model, dir: &Path) -> focus_core::Result<(Vec<u32>, Vec<String>, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).map_err(|e| focus_core::Error::io(dir, e))?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "txt")).collect();
    files.sort();
    let tok = model.tokenizer()?;
    let mut ids = Vec::new();
    let mut first = String::new();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| focus_core::Error::io(f, e))?;
        if first.is_empty() {
            first = focus_core::train::probe_passage(&text).to_string();
        }
        ids.extend(tok.encode(&text, false)?.ids);
        if let Some(eos) = tok.eos_id() {
            ids.push(eos);
        }
    }
    Ok((ids, files.iter().map(|p| p.display().to_string()).collect(), first))
}

fn main() -> focus_core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dev = if args.iter().any(|a| a == "--cpu") { candle_core::Device::Cpu } else { focus_core::device::cuda(0)? };
    let (seq, batch): (usize, usize) = (arg(&args, "--seq", "1024").parse().unwrap(), arg(&args, "--batch", "4").parse().unwrap());
    let model = Model::load(Path::new(&arg(&args, "--model", "")), &dev)?;
    let out = PathBuf::from(arg(&args, "--out", "run"));
    let (train, train_files, _) = tokens(&model, Path::new(&arg(&args, "--data", "")))?;
    let (heldout, heldout_files, probe) = tokens(&model, Path::new(&arg(&args, "--heldout", "")))?;
    let data = TrainData { train, heldout };
    let groups: usize = arg(&args, "--groups", "8").parse().unwrap();
    let gate = if arg(&args, "--gate", "log") == "paper" { Gate::Paper } else { Gate::Log };
    let tau: f64 = arg(&args, "--tau", "0.1").parse().unwrap();
    let score = if arg(&args, "--score", "dot") == "cosine" { Score::Cosine } else { Score::Dot };
    let iters: usize = arg(&args, "--iters", "10").parse().unwrap();
    let (lr, seed): (f64, u64) = (arg(&args, "--lr", "1e-2").parse().unwrap(), arg(&args, "--seed", "0").parse().unwrap());
    let cosine_decay = arg(&args, "--schedule", "cosine") == "cosine";
    let init = arg(&args, "--init", "random");
    let kmeans = init == "kmeans";
    let router_layers = arg(&args, "--router-layers", "all").parse().map_err(focus_core::Error::Invalid)?;
    let lambda: f64 = arg(&args, "--lambda", "10").parse().unwrap();
    let sink: usize = arg(&args, "--sink", "0").parse().unwrap();
    // --window W [ours beyond the paper's 128]: the local window of a new adapter (512 for
    // 4K-32K-token inputs: docs/RESULTS.md, "Focus at length").
    let window: usize = arg(&args, "--window", "128").parse().map_err(|_| focus_core::Error::Invalid("--window takes a whole number".into()))?;
    let spec = AdapterSpec { groups, d_g: 16, tau, sinkhorn_iters: iters, window, sink, gate, lambda, score, router_layers, ..Default::default() };
    let minutes: f64 = arg(&args, "--minutes", "0").parse().unwrap();
    let opts = TrainOptions {
        steps: arg(&args, "--steps", "4000").parse().unwrap(),
        seq_len: seq,
        batch,
        lr,
        weight_decay: arg(&args, "--wd", "0").parse().unwrap(),
        seed,
        eval_every: arg(&args, "--eval-every", "500").parse().unwrap(),
        eval_seqs: 8,
        checkpoint_every: 0,
        max_seconds: minutes * 60.0,
        sinkhorn_grad: SinkhornGrad::Full,
        cosine_decay,
        // --straight-through k: train through the hard top-k mask (0: the soft objective).
        straight_through: Some(arg(&args, "--straight-through", "0").parse::<usize>().unwrap()).filter(|&k| k > 0),
        grad_clip: arg(&args, "--clip", "0").parse().unwrap(),
        freeze_centroids: args.iter().any(|a| a == "--freeze-centroids"),
        freeze_projection: args.iter().any(|a| a == "--freeze-projection"),
        // [ours] the sharpening term's weight (TrainOptions::sharpen).
        sharpen: arg(&args, "--sharpen", "0").parse().unwrap(),
        // [ours] the top-group balance term's weight (TrainOptions::balance).
        balance: arg(&args, "--balance", "0").parse().unwrap(),
    };
    // --from DIR: fine-tune a saved adapter (its configuration, weights and input scale; the
    // routing flags above are then ignored) instead of a new one.
    let from = arg(&args, "--from", "");
    let mut trainer = if from.is_empty() {
        Trainer::new(&model, &spec, opts)?
    } else {
        let adapter = focus_core::Adapter::load(Path::new(&from), &model.identity(), model.device())?;
        eprintln!("starting from {from}: K={} {:?} {:?}", adapter.config.groups, adapter.config.gate, adapter.config.score);
        Trainer::from_adapter(&model, adapter, opts)?
    };
    // --input-scale [ours]: each router input channel scaled to unit RMS, before the init.
    if args.iter().any(|a| a == "--input-scale") {
        let spread = trainer.init_input_scale(&data, 8)?;
        let ratio: Vec<String> = spread.iter().map(|(med, max)| format!("{:.0}", max / med.max(1e-30))).collect();
        eprintln!("router input channel RMS: median {:?} ... ; largest / median per layer: {}", spread.iter().map(|s| format!("{:.2}", s.0)).collect::<Vec<_>>(), ratio.join(" "));
    }
    match init.as_str() {
        "kmeans" => trainer.init_kmeans(&data, 8, 50)?,
        // [ours] W_g from the principal directions of the router inputs, then k-means centroids.
        "pca" | "pca-white" => trainer.init_pca(&data, 8, init == "pca-white", 50)?,
        "random" => {}
        other => return Err(focus_core::Error::Invalid(format!("--init {other}: random, kmeans, pca or pca-white"))),
    }
    // --init-gain G [ours]: W_g times G after the init (or the --from adapter's): softer
    // memberships at the same top groups.
    let gain: f64 = arg(&args, "--init-gain", "1").parse().map_err(|_| focus_core::Error::Invalid("--init-gain takes a number".into()))?;
    if gain != 1.0 {
        trainer.scale_projection(gain)?;
    }
    // --composed: the composed ops instead of the fused step (A/B); --mem-trace: the device
    // memory pool after each step (live, reserved, and the step's peak).
    if args.iter().any(|a| a == "--composed") {
        trainer.kernels.fused = false;
    }
    // --recompute auto|on|off: which layers the fused step recomputes in the backward (auto:
    // as many graphs kept as fit the memory free at the first step; `on` for runs that share a
    // GPU, whose free memory at the start says nothing of the others' peaks).
    trainer.kernels.recompute = match arg(&args, "--recompute", "auto").as_str() {
        "auto" => focus_core::train::Recompute::Auto,
        "on" => focus_core::train::Recompute::On,
        "off" => focus_core::train::Recompute::Off,
        other => return Err(focus_core::Error::Invalid(format!("--recompute {other}: auto, on or off"))),
    };
    // --alternate-soft [ours, experimental]: with --straight-through, odd steps train the soft
    // objective (the soft mode kept while the top-k mask trains).
    trainer.alternate_soft = args.iter().any(|a| a == "--alternate-soft");
    if trainer.alternate_soft && trainer.opts.straight_through.is_none() {
        return Err(focus_core::Error::Invalid("--alternate-soft needs --straight-through K".into()));
    }
    let mem_trace = args.iter().any(|a| a == "--mem-trace");
    let step_form = if trainer.runs_fused() { "fused" } else { "composed" };
    // --probe FILE,...: 15K bytes of each held-out book (issue 28's probe); else the start of
    // the first held-out file.
    let probe_files = arg(&args, "--probe", "");
    trainer.probe = Some(if probe_files.is_empty() {
        probe
    } else {
        let texts = probe_files.split(',').map(|f| std::fs::read_to_string(f).map_err(|e| focus_core::Error::io(Path::new(f), e))).collect::<focus_core::Result<Vec<_>>>()?;
        focus_core::train::probe_from_books(&texts.iter().map(|s| s.as_str()).collect::<Vec<_>>(), 15_000)
    });
    std::fs::create_dir_all(&out).map_err(|e| focus_core::Error::io(&out, e))?;
    let log_path = out.join("train_log.jsonl");
    let mut log = std::fs::File::create(&log_path).map_err(|e| focus_core::Error::io(&log_path, e))?;
    let c = &trainer.adapter.config;
    eprintln!(
        "training K={} {:?} {:?} tau {} iters {} lr {lr} init {} sharpen {} balance {} on {} tokens, held out {}",
        c.groups, c.gate, c.score, c.tau, c.sinkhorn_iters, if from.is_empty() { &init } else { &from }, trainer.opts.sharpen, trainer.opts.balance, data.train.len(), data.heldout.len()
    );
    let cfg = model.config();
    eprintln!("{step_form} step: {} (head dim {}, {} x {} tokens a step)", cfg.arch, cfg.head_dim, batch, seq);
    let t0 = std::time::Instant::now();
    let mut last = None;
    // Step timing: each row's wall time since the previous row, for rows without an evaluation,
    // after the first two steps.
    let (mut row_at, mut prev_tokens) = (std::time::Instant::now(), 0usize);
    let (mut timed_steps, mut timed_tokens, mut timed_secs) = (0usize, 0usize, 0f64);
    trainer.run(
        &data,
        &out,
        None,
        |row: &LogRow| {
            let dt = row_at.elapsed().as_secs_f64();
            row_at = std::time::Instant::now();
            let tokens = row.tokens_seen - prev_tokens;
            prev_tokens = row.tokens_seen;
            if row.heldout_ppl.is_none() && row.step > 2 {
                timed_steps += 1;
                timed_tokens += tokens;
                timed_secs += dt;
                if timed_steps.is_multiple_of(50) {
                    eprintln!("step {} {:.1} ms/step, {:.3} us/token ({timed_steps} steps timed)", row.step, 1e3 * timed_secs / timed_steps as f64, 1e6 * timed_secs / timed_tokens as f64);
                }
            }
            if row.heldout_ppl.is_some() {
                last = row.heldout_ppl;
                let cats = row.categories.as_deref().unwrap_or(&[]);
                let purity = cats.iter().map(|c| c.purity).sum::<f64>() / cats.len().max(1) as f64;
                let best = cats.iter().map(|c| c.purity).fold(0.0, f64::max);
                eprintln!(
                    "step {} loss {:.4} held-out {:?} dominance max {:.3} purity mean {purity:.3} best {best:.3} pure60 {} ({:.0} s)",
                    row.step, row.loss, row.heldout_ppl, row.dominance.as_ref().map_or(0.0, |d| d.iter().flatten().cloned().fold(0.0, f64::max)),
                    cats.iter().map(|c| c.pure60).sum::<usize>(), row.seconds
                );
            }
            if mem_trace {
                if let Some(m) = focus_core::device::pool_memory(&dev) {
                    eprintln!("mem step {} {}", row.step, m.line());
                }
            }
            writeln!(log, "{}", serde_json::to_string(row).unwrap()).map_err(|e| focus_core::Error::io(&log_path, e))
        },
        |_, _| {},
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let (ms_step, us_token) = (1e3 * timed_secs / timed_steps.max(1) as f64, 1e6 * timed_secs / timed_tokens.max(1) as f64);
    if timed_steps > 0 {
        eprintln!("TIMING {} {step_form} step: {ms_step:.1} ms/step, {us_token:.3} us/token ({timed_steps} steps of {batch} x {seq} tokens; the first two and those with an evaluation excluded)", cfg.arch);
    } else {
        eprintln!("TIMING: no step timed (only the first two steps, or every step had an evaluation)");
    }
    trainer.adapter.config.training = Some(serde_json::json!({
        "data": train_files, "heldout": heldout_files, "steps": trainer.step, "seq_len": seq, "batch": batch,
        "lr": lr, "weight_decay": trainer.opts.weight_decay, "grad_clip": trainer.opts.grad_clip, "seed": seed, "tokens_seen": trainer.tokens_seen, "seconds_this_run": secs,
        "device": focus_core::device::named(if dev.is_cuda() { "cuda" } else { "cpu" }), "time_limit_min": minutes, "heldout_ppl": last, "optimizer": "AdamW(0.9, 0.999, 1e-8)",
        "sinkhorn_grad": trainer.opts.sinkhorn_grad, "cosine_decay": cosine_decay, "straight_through": trainer.opts.straight_through, "alternate_soft": trainer.alternate_soft,
        "heldout_mode": trainer.eval_mode().to_string(), "init": if from.is_empty() { init.clone() } else { format!("from {from}") }, "sharpen": trainer.opts.sharpen, "balance": trainer.opts.balance, "kmeans_init": kmeans,
        "freeze_centroids": trainer.opts.freeze_centroids, "freeze_projection": trainer.opts.freeze_projection, "init_gain": gain, "trainer": format!("core/examples/train_paper.rs ({step_form} step)"),
        "ms_per_step": if timed_steps > 0 { Some(ms_step) } else { None }, "us_per_token": if timed_steps > 0 { Some(us_token) } else { None },
    }));
    trainer.adapter.save(&out)?;
    eprintln!("TRAINED K={} {:?}: {} steps, {} tokens, {secs:.0} s, held-out {last:?}", trainer.adapter.config.groups, trainer.adapter.config.gate, trainer.step, trainer.tokens_seen);
    // Held-out perplexities of the trained adapter.
    let ppl_file = arg(&args, "--ppl", "");
    if !ppl_file.is_empty() {
        let text = std::fs::read_to_string(&ppl_file).map_err(|e| focus_core::Error::io(Path::new(&ppl_file), e))?;
        let ids = model.tokenizer()?.encode(&text, false)?.ids;
        let mut results = Vec::new();
        let groups = trainer.adapter.config.groups;
        for ctx in arg(&args, "--ctx", "512,1024").split(',').map(|c| c.parse::<usize>().unwrap()) {
            let mut modes = vec![Mode::Dense, Mode::Soft];
            modes.extend((1..=3).filter(|&k| k < groups).map(|k| trainer.adapter.config.topk(k).map(Mode::TopK)).collect::<focus_core::Result<Vec<_>>>()?);
            for mode in modes {
                let a = if mode == Mode::Dense { None } else { Some(&trainer.adapter) };
                let r = perplexity(&model, &ids, ctx, mode, a, None, |_, _| {})?;
                eprintln!("PPL K={groups} ctx {ctx} {mode}: {:.4}", r.ppl);
                results.push(serde_json::json!({"ctx": ctx, "mode": mode.to_string(), "ppl": r.ppl, "chunks": r.chunks, "scored_tokens": r.scored_tokens, "per_chunk_nll": r.per_chunk_nll}));
            }
        }
        let p = out.join("ppl.json");
        std::fs::write(&p, serde_json::to_string_pretty(&results).unwrap()).map_err(|e| focus_core::Error::io(&p, e))?;
    }
    Ok(())
}
