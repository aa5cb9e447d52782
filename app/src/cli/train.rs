//! `train`: fit a centroid adapter to a frozen model (routers only), with a JSONL log,
//! checkpoints, `--resume`, and Ctrl-C saving a checkpoint.

use super::common::{progress, ModelArgs, SpecArgs};
use anyhow::{bail, Context, Result};
use focus_core::focus::sinkhorn::SinkhornGrad;
use focus_core::train::{TrainData, TrainOptions, Trainer};
use focus_core::Model;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training text: files, or directories searched for *.txt.
    #[arg(long, num_args = 1.., required_unless_present = "resume")]
    pub data: Vec<PathBuf>,
    /// Held-out text (whole works that never appear in --data).
    #[arg(long, num_args = 1.., required_unless_present = "resume")]
    pub heldout: Vec<PathBuf>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Optimiser steps, 1..=10000000.
    #[arg(long, default_value_t = 1000, value_parser = super::common::count::<1, 10000000>)]
    pub steps: usize,
    /// Tokens per training sequence, 2..=1048576 (and at most the model's context).
    #[arg(long, default_value_t = 512, value_parser = super::common::count::<2, 1048576>)]
    pub seq_len: usize,
    /// Sequences per step, 1..=4096.
    #[arg(long, default_value_t = 4, value_parser = super::common::count::<1, 4096>)]
    pub batch: usize,
    /// AdamW learning rate, (0, 10].
    #[arg(long, default_value_t = 1e-2, value_parser = super::common::learning_rate)]
    pub lr: f64,
    /// AdamW weight decay, [0, 10].
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor)]
    pub weight_decay: f64,
    /// Clip the router gradients' global L2 norm to this before each update; 0 = no clipping,
    /// [0, 10].
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor)]
    pub grad_clip: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 100, value_parser = super::common::count::<1, 10000000>)]
    pub eval_every: usize,
    #[arg(long, default_value_t = 8, value_parser = super::common::count::<1, 65536>)]
    pub eval_seqs: usize,
    #[arg(long, default_value_t = 200, value_parser = super::common::count::<0, 10000000>)]
    pub checkpoint_every: usize,
    /// Gradient through Sinkhorn: `full` (exact) or `detached` (column normalisers held
    /// constant: same forward, a much smaller graph, 1.34x faster steps on the H200). Measured:
    /// fine with --score cosine, harmful with dot scores; with cosine scores the full gradient
    /// still trains routers that do better under hard top-k (docs/cli.md).
    #[arg(long, value_parser = ["full", "detached"], default_value = "full")]
    pub sinkhorn_grad: String,
    /// Decay the learning rate along a cosine from --lr to --lr/10 at --steps.
    #[arg(long)]
    pub cosine_decay: bool,
    /// Train through the hard top-k mask of this k (straight-through estimator: the forward is
    /// top-k inference, the gradient the log gate's, for either gate) instead of the soft gate.
    /// Held-out perplexity is then top-k perplexity.
    #[arg(long, value_parser = super::common::count::<1, 64>)]
    pub straight_through: Option<usize>,
    /// Stop after this many minutes (evaluating and saving as if the last step were reached);
    /// 0 means no limit, at most 1e6.
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor_minutes)]
    pub time_limit_min: f64,
    /// Continue from OUT/checkpoint (or this checkpoint directory).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Start from this adapter (its configuration and weights) instead of a random one, e.g. to
    /// fine-tune a shipped adapter with --straight-through. The adapter options (--groups ...)
    /// come from it and cannot be given.
    #[arg(long, conflicts_with_all = ["resume", "SpecArgs"])]
    pub init: Option<PathBuf>,
    /// Initialise each layer's centroids by k-means of its routing vectors h W_g over the first
    /// 8 training windows (spherical k-means for --score cosine) instead of at random.
    #[arg(long, conflicts_with_all = ["resume", "init"])]
    pub kmeans_init: bool,
    /// [ours] Initialise each layer's W_g to the leading principal directions of its router
    /// input over the first 8 training windows (scaled to a random W_g's size), then the
    /// centroids by k-means.
    #[arg(long, conflicts_with_all = ["resume", "init", "kmeans_init"])]
    pub pca_init: bool,
    /// [ours] Keep the centroids at their initial value (e.g. --kmeans-init): only W_g trains.
    #[arg(long)]
    pub freeze_centroids: bool,
    /// [ours] Add this weight times the mean row entropy of the balanced memberships to the
    /// loss, so that each token's top group carries its group's mass (0 = the paper's loss).
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor)]
    pub sharpen: f64,
    #[arg(long)]
    pub out: PathBuf,
}

fn text_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "txt"))
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    if paths.is_empty() {
        bail!("no training text given: pass --data and --heldout (a resumed run needs the same files as the run it continues)");
    }
    if out.is_empty() {
        bail!("no text files in {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(out)
}

/// Tokenizes every file and joins the documents with the end-of-text token.
fn tokens(model: &Model, files: &[PathBuf]) -> Result<Vec<u32>> {
    let tok = model.tokenizer()?;
    let mut ids = Vec::new();
    for f in files {
        let text = focus_core::io::text::read_text(f)?;
        ids.extend(tok.encode(&text, false)?.ids);
        if let Some(eos) = tok.eos_id() {
            ids.push(eos);
        }
    }
    Ok(ids)
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model.load()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed)).context("installing the Ctrl-C handler")?;
    }
    let (train_files, heldout_files) = (text_files(&a.data)?, text_files(&a.heldout)?);
    let data = TrainData { train: tokens(&model, &train_files)?, heldout: tokens(&model, &heldout_files)? };
    let mut trainer = match &a.resume {
        Some(dir) => Trainer::resume(&model, dir).with_context(|| format!("resuming from {}", dir.display()))?,
        None => {
            let opts = TrainOptions { steps: a.steps, seq_len: a.seq_len, batch: a.batch, lr: a.lr, weight_decay: a.weight_decay, seed: a.seed, eval_every: a.eval_every, eval_seqs: a.eval_seqs, checkpoint_every: a.checkpoint_every, max_seconds: a.time_limit_min * 60.0, sinkhorn_grad: if a.sinkhorn_grad == "detached" { SinkhornGrad::Detached } else { SinkhornGrad::Full }, cosine_decay: a.cosine_decay, straight_through: a.straight_through, grad_clip: a.grad_clip, freeze_centroids: a.freeze_centroids, sharpen: a.sharpen };
            match &a.init {
                Some(dir) => {
                    let mut adapter = focus_core::Adapter::load(dir, &model.identity(), model.device()).with_context(|| format!("loading the initial adapter {}", dir.display()))?;
                    // Its measured results describe the initial weights, not the trained ones.
                    adapter.config.results = None;
                    Trainer::from_adapter(&model, adapter, opts)?
                }
                None => Trainer::new(&model, &a.spec.spec(), opts)?,
            }
        }
    };
    if a.kmeans_init {
        trainer.init_kmeans(&data, 8, 50)?;
    }
    if a.pca_init {
        trainer.init_pca(&data, 8, false, 50)?;
    }
    // Category structure is logged on the start of the first held-out file.
    let probe_file = &heldout_files[0];
    trainer.probe = Some(focus_core::train::probe_passage(&focus_core::io::text::read_text(probe_file)?).to_string());
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let log_path = a.out.join("train_log.jsonl");
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    eprintln!(
        "training {} layers x (W_g {}x{} + {} centroids) on {} tokens ({} files), held out {} tokens ({} files)",
        model.config().n_layers, model.config().d_model, trainer.adapter.config.d_g, trainer.adapter.config.groups,
        data.train.len(), train_files.len(), data.heldout.len(), heldout_files.len()
    );
    let pb = progress(trainer.opts.steps as u64, "train", false);
    pb.set_position(trainer.step as u64);
    let t0 = std::time::Instant::now();
    let mut last_heldout = None;
    let finished = trainer.run(
        &data,
        &a.out,
        Some(&stop),
        |row| {
            if row.heldout_ppl.is_some() {
                last_heldout = row.heldout_ppl;
            }
            writeln!(log, "{}", serde_json::to_string(row)?).map_err(|e| focus_core::Error::io(&log_path, e))?;
            Ok(())
        },
        |step, loss| {
            pb.set_position(step as u64);
            pb.set_message(format!("train loss {loss:.3}"));
        },
    )?;
    pb.finish_and_clear();
    if !finished {
        eprintln!("interrupted at step {}: checkpoint in {}", trainer.step, a.out.join("checkpoint").display());
        return Ok(());
    }
    let names = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
    trainer.adapter.config.training = Some(serde_json::json!({
        "data": names(&train_files), "heldout": names(&heldout_files),
        "steps": trainer.step, "seq_len": trainer.opts.seq_len, "batch": trainer.opts.batch,
        "lr": trainer.opts.lr, "weight_decay": trainer.opts.weight_decay, "grad_clip": trainer.opts.grad_clip, "seed": trainer.opts.seed,
        "tokens_seen": trainer.tokens_seen, "seconds_this_run": t0.elapsed().as_secs_f64(),
        "device": device_name(&a.model.device), "time_limit_min": a.time_limit_min, "heldout_ppl": last_heldout, "optimizer": "AdamW(0.9, 0.999, 1e-8)",
        "sinkhorn_grad": trainer.opts.sinkhorn_grad, "cosine_decay": trainer.opts.cosine_decay,
        "straight_through": trainer.opts.straight_through, "heldout_mode": trainer.eval_mode().to_string(),
        "init": a.init.as_ref().map(|p| p.display().to_string()), "kmeans_init": a.kmeans_init,
        "probe": probe_file.display().to_string(),
    }));
    trainer.adapter.save(&a.out)?;
    eprintln!("wrote {} (held-out {} PPL {:?})", a.out.display(), trainer.eval_mode(), last_heldout);
    Ok(())
}

/// The device as recorded in provenance: the CLI name plus the GPU model when on CUDA.
fn device_name(dev: &str) -> String {
    if dev.starts_with("cuda") {
        let gpu = std::process::Command::new("nvidia-smi").args(["--query-gpu=name", "--format=csv,noheader"]).output();
        if let Ok(o) = gpu {
            return format!("{dev} ({})", String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim());
        }
    }
    dev.to_string()
}
