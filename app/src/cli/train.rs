//! `train`: fit a centroid adapter to a frozen model (routers only) by a recipe's stages
//! (`training::Recipe`; flags replace its values), with a JSONL log, checkpoints, `--resume`,
//! and Ctrl-C saving a checkpoint.

use super::common::{progress, ModelArgs, SpecArgs};
use crate::training::{self, Init, Plan, Recipe, Start};
use anyhow::{bail, Context, Result};
use focus_core::focus::sinkhorn::SinkhornGrad;
use focus_core::train::TrainOptions;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Every option that shapes the run starts from the recipe (`--recipe`, default `shipped`):
/// each one given replaces the recipe's value. Per-stage options (--steps, --seq-len, --batch,
/// --lr, --sharpen, --balance) take one value for every stage or a comma-separated value per
/// stage; the others apply to every stage.
#[derive(clap::Args)]
#[command(after_help = crate::training::recipes_help())]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training text: files, or directories searched for *.txt.
    #[arg(long, num_args = 1.., required_unless_present = "resume")]
    pub data: Vec<PathBuf>,
    /// Held-out text (whole works that never appear in --data).
    #[arg(long, num_args = 1.., required_unless_present = "resume")]
    pub heldout: Vec<PathBuf>,
    /// The recipe the options start from: `shipped` (how the shipped SmolLM2 adapters were
    /// trained, in stages, then a 4,096-token stage) or `paper` (the paper's setting, one
    /// stage); their values are listed below.
    #[arg(long, value_parser = crate::training::RECIPES, default_value = crate::training::RECIPES[0])]
    pub recipe: String,
    /// Run only these stages of the recipe, by name, comma-separated (e.g. `--init ADAPTER
    /// --stages long` fine-tunes an adapter at 4,096 tokens).
    #[arg(long, value_delimiter = ',')]
    pub stages: Vec<String>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Optimiser steps, 1..=10000000, per stage [default: the recipe's].
    #[arg(long, value_delimiter = ',', value_parser = super::common::count::<1, 10000000>)]
    pub steps: Vec<usize>,
    /// Tokens per training sequence, 2..=1048576, per stage (capped at the model's context)
    /// [default: the recipe's].
    #[arg(long, value_delimiter = ',', value_parser = super::common::count::<2, 1048576>)]
    pub seq_len: Vec<usize>,
    /// Sequences per step, 1..=4096, per stage [default: the recipe's].
    #[arg(long, value_delimiter = ',', value_parser = super::common::count::<1, 4096>)]
    pub batch: Vec<usize>,
    /// AdamW learning rate, (0, 10], per stage [default: the recipe's].
    #[arg(long, value_delimiter = ',', value_parser = super::common::learning_rate)]
    pub lr: Vec<f64>,
    /// AdamW weight decay, [0, 10] [default: the recipe's].
    #[arg(long, value_parser = super::common::factor)]
    pub weight_decay: Option<f64>,
    /// Clip the router gradients' global L2 norm to this before each update; 0 = no clipping,
    /// [0, 10] [default: the recipe's].
    #[arg(long, value_parser = super::common::factor)]
    pub grad_clip: Option<f64>,
    /// Seed of the random adapter and of the batches [default: the recipe's].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Held-out evaluation every this many steps of a stage (and at its start and end)
    /// [default: the recipe's].
    #[arg(long, value_parser = super::common::count::<1, 10000000>)]
    pub eval_every: Option<usize>,
    /// Held-out sequences per evaluation [default: the recipe's].
    #[arg(long, value_parser = super::common::count::<1, 65536>)]
    pub eval_seqs: Option<usize>,
    /// A checkpoint every this many steps of a stage; 0 = none [default: the recipe's].
    #[arg(long, value_parser = super::common::count::<0, 10000000>)]
    pub checkpoint_every: Option<usize>,
    /// Gradient through Sinkhorn: `full` (exact) or `detached` (column normalisers held
    /// constant: same forward, a much smaller graph, 1.34x faster steps on the H200). Measured:
    /// fine with --score cosine, harmful with dot scores; with cosine scores the full gradient
    /// still trains routers that do better under hard top-k (docs/cli.md) [default: the
    /// recipe's].
    #[arg(long, value_parser = ["full", "detached"])]
    pub sinkhorn_grad: Option<String>,
    /// Decay the learning rate along a cosine from --lr to --lr/10 at each stage's last step
    /// (`--cosine-decay false`: a constant rate) [default: the recipe's].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_parser = clap::value_parser!(bool))]
    pub cosine_decay: Option<bool>,
    /// Train through the hard top-k mask of this k (straight-through estimator: the forward is
    /// top-k inference, the gradient the log gate's, for either gate) instead of the soft gate.
    /// Held-out perplexity is then top-k perplexity.
    #[arg(long, value_parser = super::common::count::<1, 64>)]
    pub straight_through: Option<usize>,
    /// Stop after this many minutes of this invocation (evaluating and saving as if the last
    /// step of the stage running were the run's last); 0 means no limit, at most 1e6.
    #[arg(long, default_value_t = 0.0, value_parser = super::common::factor_minutes)]
    pub time_limit_min: f64,
    /// Continue from OUT/checkpoint (or this checkpoint directory), with the stages its run
    /// recorded; the recipe's options are not used.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Start from this adapter (its configuration and weights) instead of a random one, e.g. to
    /// fine-tune a shipped adapter with --straight-through, or at length with --stages long.
    /// The adapter options (--groups ...) come from it and cannot be given.
    #[arg(long, conflicts_with_all = ["resume", "SpecArgs"])]
    pub init: Option<PathBuf>,
    /// Random W_g and centroids (the `paper` recipe's initialisation).
    #[arg(long, conflicts_with_all = ["resume", "init"])]
    pub random_init: bool,
    /// Initialise each layer's centroids by k-means of its routing vectors h W_g over the first
    /// 8 training windows (spherical k-means for --score cosine) instead of at random.
    #[arg(long, conflicts_with_all = ["resume", "init", "random_init"])]
    pub kmeans_init: bool,
    /// [ours] Initialise each layer's W_g to the leading principal directions of its router
    /// input over the first 8 training windows (scaled to a random W_g's size), then the
    /// centroids by k-means (the `shipped` recipe's initialisation).
    #[arg(long, conflicts_with_all = ["resume", "init", "kmeans_init", "random_init"])]
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
    /// one-hot memberships that no gradient reaches; 0.033 trained them (docs/RESULTS.md)
    /// [default: the recipe's].
    #[arg(long, value_parser = super::common::gain, conflicts_with_all = ["resume", "init"])]
    pub init_gain: Option<f64>,
    /// [ours] Keep the centroids at their initial value (e.g. --kmeans-init): only W_g trains.
    #[arg(long)]
    pub freeze_centroids: bool,
    /// [ours] Keep every W_g at its initial value (e.g. --pca-init): only the centroids train.
    #[arg(long, conflicts_with = "freeze_centroids")]
    pub freeze_projection: bool,
    /// [ours] Add this weight times the mean row entropy of the balanced memberships to the
    /// loss, so that each token's top group carries its group's mass (0 = the paper's loss);
    /// per stage [default: the recipe's].
    #[arg(long, value_delimiter = ',', value_parser = super::common::factor)]
    pub sharpen: Vec<f64>,
    /// [ours] Add this weight times a top-group balance term to the loss: per layer K * sum_g
    /// m_g^2 - 1, m_g the share of tokens whose (soft) top group is g (0 = the paper's loss);
    /// per stage [default: the recipe's].
    #[arg(long, value_delimiter = ',', value_parser = super::common::factor)]
    pub balance: Vec<f64>,
    /// Keep every checkpoint's adapter in OUT/checkpoints/step-NNNNNN (each opens as an
    /// adapter; steps counted over the whole run), besides OUT/checkpoint (overwritten, for
    /// --resume).
    #[arg(long)]
    pub keep_checkpoints: bool,
    /// Activation memory of the fused step: `auto` keeps the graphs of as many of the last
    /// layers as fit the device's free memory and recomputes the others' forward in the
    /// backward; `on` recomputes every layer (least memory, one more forward's work); `off`
    /// keeps every layer's graph. The gradients are the same.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub recompute: String,
    #[arg(long)]
    pub out: PathBuf,
}

/// Sets `set(stage, value)` from a per-stage flag: nothing when it was not given, its value in
/// every stage when it has one, else one value per stage.
fn per_stage<T: Copy>(r: &mut Recipe, flag: &str, values: &[T], set: impl Fn(&mut TrainOptions, T)) -> Result<()> {
    let n = r.stages.len();
    match values.len() {
        0 => {}
        1 => r.set_all(|o| set(o, values[0])),
        k if k == n => r.stages.iter_mut().zip(values).for_each(|(s, &v)| set(&mut s.opts, v)),
        k => bail!("--{flag} takes one value or one per stage: {k} given for the {n} stages {}", r.stage_names().join(", ")),
    }
    Ok(())
}

impl Args {
    /// The recipe as the flags resolve it: `--recipe`'s, its `--stages`, then each option given
    /// in place of the recipe's value.
    pub fn recipe(&self) -> Result<Recipe> {
        let mut r = Recipe::named(&self.recipe)?;
        if !self.stages.is_empty() {
            r.select(&self.stages)?;
        }
        r.spec = self.spec.spec(r.spec.clone());
        if self.spec.window.is_some() {
            // A window given is the run's: no stage widens it.
            r.stages.iter_mut().for_each(|s| s.window = None);
        }
        if self.random_init {
            r.init = Init::Random;
        } else if self.kmeans_init {
            r.init = Init::KMeans;
        } else if self.pca_init {
            r.init = if self.whiten { Init::PcaWhite } else { Init::Pca };
        }
        r.input_scale |= self.input_scale;
        r.init_gain = self.init_gain.unwrap_or(r.init_gain);
        per_stage(&mut r, "steps", &self.steps, |o, v| o.steps = v)?;
        per_stage(&mut r, "seq-len", &self.seq_len, |o, v| o.seq_len = v)?;
        per_stage(&mut r, "batch", &self.batch, |o, v| o.batch = v)?;
        per_stage(&mut r, "lr", &self.lr, |o, v| o.lr = v)?;
        per_stage(&mut r, "sharpen", &self.sharpen, |o, v| o.sharpen = v)?;
        per_stage(&mut r, "balance", &self.balance, |o, v| o.balance = v)?;
        let sinkhorn_grad = self.sinkhorn_grad.as_deref().map(|g| if g == "detached" { SinkhornGrad::Detached } else { SinkhornGrad::Full });
        r.set_all(|o| {
            o.weight_decay = self.weight_decay.unwrap_or(o.weight_decay);
            o.grad_clip = self.grad_clip.unwrap_or(o.grad_clip);
            o.seed = self.seed.unwrap_or(o.seed);
            o.eval_every = self.eval_every.unwrap_or(o.eval_every);
            o.eval_seqs = self.eval_seqs.unwrap_or(o.eval_seqs);
            o.checkpoint_every = self.checkpoint_every.unwrap_or(o.checkpoint_every);
            o.sinkhorn_grad = sinkhorn_grad.unwrap_or(o.sinkhorn_grad);
            o.cosine_decay = self.cosine_decay.unwrap_or(o.cosine_decay);
            o.straight_through = self.straight_through.or(o.straight_through);
            o.freeze_centroids |= self.freeze_centroids;
            o.freeze_projection |= self.freeze_projection;
        });
        Ok(r)
    }

    /// The run these flags ask for (`device`: as the provenance records it).
    pub fn plan(&self, device: String) -> Result<Plan> {
        let start = match (&self.resume, &self.init) {
            (Some(dir), _) => Start::Resume(dir.clone()),
            (None, Some(dir)) => Start::From(dir.clone()),
            (None, None) => Start::New,
        };
        Ok(Plan { data: self.data.clone(), heldout: self.heldout.clone(), start, recipe: self.recipe()?, max_seconds: self.time_limit_min * 60.0, out: self.out.clone(), keep_checkpoints: self.keep_checkpoints, device, recompute: match self.recompute.as_str() {
            "on" => focus_core::train::Recompute::On,
            "off" => focus_core::train::Recompute::Off,
            _ => focus_core::train::Recompute::Auto,
        } })
    }
}

pub fn run(a: Args) -> Result<()> {
    let plan = a.plan(focus_core::device::named(&a.model.device))?;
    let model = a.model.load()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed)).context("installing the Ctrl-C handler")?;
    }
    // What prepare does, in lines (the initialisation, a stage's sequence capped at the
    // context), but not one line per file tokenised.
    let mut status = |s: String| {
        if !s.starts_with("tokenising") {
            eprintln!("{s}");
        }
    };
    let mut prepared = training::prepare(&model, &plan, &|| stop.load(Ordering::Relaxed), &mut status)?;
    eprintln!("{}", prepared.describe());
    let pb = progress(prepared.total_steps() as u64, "train", false);
    pb.set_position(prepared.trainer.before.steps as u64 + prepared.trainer.step as u64);
    // The bar carries the run's figures: the last loss, and from the last evaluation held-out
    // perplexity, worst-layer dominance and the category NMI against the untrained twin; a line
    // above it says which stage runs, as each starts.
    let mut shown = String::new();
    let outcome = prepared.train(
        &plan,
        &stop,
        |_, f| {
            if f.stage != shown {
                // Printed whether or not the bar is drawn (println is not, without a terminal).
                pb.suspend(|| eprintln!("{}", f.stage));
                shown = f.stage.clone();
            }
            pb.set_message(f.line())
        },
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
