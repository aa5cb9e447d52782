//! `train`: fit a centroid adapter to a frozen model (routers only), with a JSONL log,
//! checkpoints, `--resume`, and Ctrl-C saving a checkpoint.

use super::common::{progress, ModelArgs, SpecArgs};
use crate::training::{self, Init, Plan, Start};
use anyhow::{Context, Result};
use focus_core::focus::sinkhorn::SinkhornGrad;
use focus_core::train::TrainOptions;
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
    /// [ours] With --pca-init: scale each principal direction to a random W_g's variance
    /// (whitened) instead of all of them together, so no direction dominates the scores.
    #[arg(long, requires = "pca_init")]
    pub whiten: bool,
    /// [ours] Scale each channel of every router's input to unit RMS over the first 8 training
    /// windows (a fixed per-channel scale saved with the adapter), before any other
    /// initialisation: for models whose normalised hidden state has huge channels (Gemma 3).
    #[arg(long, conflicts_with_all = ["resume", "init"])]
    pub input_scale: bool,
    /// [ours] Multiply every W_g by this after the initialisation (1 = as initialised): scores
    /// S / tau shrink by it and memberships soften. PCA-initialised Gemma 3 routers start with
    /// one-hot memberships that no gradient reaches; 0.033 trained them (docs/RESULTS.md).
    #[arg(long, default_value_t = 1.0, value_parser = super::common::gain, conflicts_with_all = ["resume", "init"])]
    pub init_gain: f64,
    /// [ours] Keep the centroids at their initial value (e.g. --kmeans-init): only W_g trains.
    #[arg(long)]
    pub freeze_centroids: bool,
    /// [ours] Keep every W_g at its initial value (e.g. --pca-init): only the centroids train.
    #[arg(long, conflicts_with = "freeze_centroids")]
    pub freeze_projection: bool,
    /// [ours] Add this weight times the mean row entropy of the balanced memberships to the
    /// loss, so that each token's top group carries its group's mass (0 = the paper's loss).
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor)]
    pub sharpen: f64,
    /// [ours] Add this weight times a top-group balance term to the loss: per layer K * sum_g
    /// m_g^2 - 1, m_g the share of tokens whose (soft) top group is g (0 = the paper's loss).
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor)]
    pub balance: f64,
    /// Keep every checkpoint's adapter in OUT/checkpoints/step-NNNNNN (each opens as an
    /// adapter), besides OUT/checkpoint (overwritten, for --resume).
    #[arg(long)]
    pub keep_checkpoints: bool,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model.load()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed)).context("installing the Ctrl-C handler")?;
    }
    let opts = TrainOptions { steps: a.steps, seq_len: a.seq_len, batch: a.batch, lr: a.lr, weight_decay: a.weight_decay, seed: a.seed, eval_every: a.eval_every, eval_seqs: a.eval_seqs, checkpoint_every: a.checkpoint_every, max_seconds: a.time_limit_min * 60.0, sinkhorn_grad: if a.sinkhorn_grad == "detached" { SinkhornGrad::Detached } else { SinkhornGrad::Full }, cosine_decay: a.cosine_decay, straight_through: a.straight_through, grad_clip: a.grad_clip, freeze_centroids: a.freeze_centroids, freeze_projection: a.freeze_projection, sharpen: a.sharpen, balance: a.balance };
    let init = if a.pca_init && a.whiten { Init::PcaWhite } else if a.pca_init { Init::Pca } else if a.kmeans_init { Init::KMeans } else { Init::Random };
    let start = match (&a.resume, &a.init) {
        (Some(dir), _) => Start::Resume(dir.clone()),
        (None, Some(dir)) => Start::From(dir.clone()),
        (None, None) => Start::New(a.spec.spec(), init),
    };
    let plan = Plan { data: a.data.clone(), heldout: a.heldout.clone(), start, opts, out: a.out.clone(), input_scale: a.input_scale, init_gain: a.init_gain, keep_checkpoints: a.keep_checkpoints, device: device_name(&a.model.device) };
    let mut prepared = training::prepare(&model, &plan, &|| stop.load(Ordering::Relaxed), &mut |_| {})?;
    eprintln!("{}", prepared.describe());
    let pb = progress(prepared.trainer.opts.steps as u64, "train", false);
    pb.set_position(prepared.trainer.step as u64);
    // The bar carries the run's figures: the last loss, and from the last evaluation held-out
    // perplexity, worst-layer dominance and the category NMI against the untrained twin.
    let outcome = prepared.train(
        &plan,
        &stop,
        |_, f| pb.set_message(f.line()),
        |f| {
            pb.set_position(f.step as u64);
            pb.set_message(f.line());
        },
    )?;
    pb.finish_and_clear();
    if !outcome.finished {
        eprintln!("interrupted at step {}: checkpoint in {}", outcome.step, a.out.join("checkpoint").display());
        return Ok(());
    }
    let ppl = outcome.figures.heldout_ppl.map_or_else(|| "not measured".to_string(), |p| format!("{p:.2}"));
    eprintln!("wrote {} (held-out {} PPL {ppl}); {}", a.out.display(), prepared.trainer.eval_mode(), outcome.figures.line());
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
