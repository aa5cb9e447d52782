//! A training run as `focus-lens train` and the GUI's Train view start it, in one place: a
//! `Recipe` (the adapter's shape, its initialisation and the stages it trains in; `shipped`, the
//! default, or `paper`), a `Plan` (files, recipe, where to write), `prepare` (the text files read
//! and tokenised, the trainer made and initialised, every stage checked, the probe passage set),
//! `Prepared::train` (the log, the stages one after the other, the finished adapter with its
//! provenance), and the `Figures` both show while it runs (loss, held-out perplexity,
//! worst-layer dominance against the 1.3/K bar, and the median category NMI against the
//! untrained twin, which is the run's own step-0 evaluation).

use anyhow::{bail, Context, Result};
use focus_core::analysis::structure::{LayerStructure, Structure};
use focus_core::focus::sinkhorn::SinkhornGrad;
use focus_core::train::{Before, LogRow, TrainData, TrainOptions, Trainer};
use focus_core::{AdapterSpec, Gate, Model, RouterLayers, Score};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// How the routers start.
#[derive(Debug, Clone)]
pub enum Start {
    /// A random adapter of the recipe's shape, then the recipe's initialisation.
    New,
    /// This adapter's configuration and weights (fine-tuning): the recipe's stages only.
    From(PathBuf),
    /// This checkpoint directory: the stages its run recorded, from where it stopped (the
    /// plan's recipe is not used).
    Resume(PathBuf),
}

/// The initialisation of a new adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Init {
    #[default]
    Random,
    /// Centroids by k-means of h W_g over the first 8 training windows.
    KMeans,
    /// [ours] W_g from the principal directions of the router input, then k-means.
    Pca,
    /// [ours] The same directions, each scaled to a random W_g's variance (whitened): no
    /// direction dominates the scores (Gemma 3's shipped global adapter starts here).
    PcaWhite,
}

impl Init {
    pub const ALL: [Init; 4] = [Init::Random, Init::KMeans, Init::Pca, Init::PcaWhite];
    pub fn label(self) -> &'static str {
        match self {
            Init::Random => "random",
            Init::KMeans => "k-means",
            Init::Pca => "PCA + k-means",
            Init::PcaWhite => "whitened PCA + k-means",
        }
    }
}

/// One stage of a recipe: a fresh trainer (new AdamW state, its own learning-rate schedule and
/// batches from step 0) on the adapter the stage before left, with these options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    #[serde(flatten)]
    pub opts: TrainOptions,
    /// The adapter's local window from this stage on (as `focus-lens adapter derive --window`
    /// changes it; the routers' weights are untouched); `None` keeps the one it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
}

impl Stage {
    /// The stage in a line: "3907 steps x 4 x 1024 tokens, lr 0.0003 (cosine to lr/10), sharpen
    /// 0.05, balance 0".
    pub fn line(&self) -> String {
        let o = &self.opts;
        let mut s = format!(
            "{} steps x {} x {} tokens, lr {}{}, sharpen {}, balance {}",
            o.steps,
            o.batch,
            o.seq_len,
            o.lr,
            if o.cosine_decay { " (cosine to lr/10)" } else { "" },
            o.sharpen,
            o.balance
        );
        if o.weight_decay > 0.0 {
            s += &format!(", weight decay {}", o.weight_decay);
        }
        if o.grad_clip > 0.0 {
            s += &format!(", gradient clipped at {}", o.grad_clip);
        }
        if o.sinkhorn_grad == SinkhornGrad::Detached {
            s += ", detached Sinkhorn gradient";
        }
        if let Some(k) = o.straight_through {
            s += &format!(", straight-through top-{k}");
        }
        if o.freeze_projection {
            s += ", W_g frozen";
        }
        if o.freeze_centroids {
            s += ", centroids frozen";
        }
        if let Some(w) = self.window {
            s += &format!(", window {w} from here on");
        }
        s
    }

    /// `adapter` with this stage's window (`window`), ready for its trainer.
    pub fn adapt(&self, mut adapter: focus_core::Adapter) -> focus_core::Adapter {
        if let Some(w) = self.window {
            adapter.config.window = w;
        }
        adapter
    }
}

/// The recipes by name; the first is the default.
pub const RECIPES: [&str; 2] = ["shipped", "paper"];

/// A training recipe: the adapter's shape, how its routers start, and the stages they train in.
/// `focus-lens train --recipe NAME` and the Train view start from one (`Recipe::named`); each
/// flag or field given replaces its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recipe {
    pub name: String,
    pub spec: AdapterSpec,
    pub init: Init,
    /// [ours] A new adapter's routers read their input scaled per channel to unit RMS
    /// (`Trainer::init_input_scale`), before `init`.
    pub input_scale: bool,
    /// [ours] A new adapter's W_g times this after `init` (`Trainer::scale_projection`); 1 = none.
    pub init_gain: f64,
    pub stages: Vec<Stage>,
}

impl Default for Recipe {
    fn default() -> Recipe {
        Recipe::shipped()
    }
}

/// The options both recipes share (the CLI's former defaults for the evaluation cadence).
fn base_options(steps: usize, lr: f64) -> TrainOptions {
    TrainOptions {
        steps,
        seq_len: 1024,
        batch: 4,
        lr,
        weight_decay: 0.0,
        seed: 0,
        eval_every: 100,
        eval_seqs: 8,
        checkpoint_every: 200,
        max_seconds: 0.0,
        sinkhorn_grad: SinkhornGrad::Full,
        cosine_decay: true,
        straight_through: None,
        grad_clip: 0.0,
        freeze_centroids: false,
        freeze_projection: false,
        sharpen: 0.0,
        balance: 0.0,
    }
}

impl Recipe {
    /// The recipe of this name (`RECIPES`).
    pub fn named(name: &str) -> Result<Recipe> {
        match name {
            "shipped" => Ok(Recipe::shipped()),
            "paper" => Ok(Recipe::paper()),
            other => bail!("no training recipe {other:?}: the recipes are {}", RECIPES.join(", ")),
        }
    }

    /// How `sample_adapters/smollm2-135m-k8` was trained (its `training.stages`; docs/cli.md has
    /// the evidence): the paper's sigmoid gate at lambda 30, dot scores, tau 0.1, 10 Sinkhorn
    /// iterations, w 128, one attention sink [ours], W_g from the principal directions and
    /// k-means centroids [ours], AdamW lr 3e-4 with a cosine schedule per stage, seed 0, and
    /// the sharpening term 0.05 [ours] throughout. Stage `train`: 3,907 steps of 4 x 1,024
    /// tokens (16.0M; experiments/results/long_sharpen_scale_h200/s16_sh05); `balance`: 1,000
    /// more with the top-group balance term 0.5 [ours] (4.1M; balance_h200/k8_b05); `long`: the
    /// local window widened to 512, then 300 steps of 2 x 4,096 tokens (2.5M) at lr 1e-3, the
    /// length curriculum of issue 52 (capped at the model's context;
    /// experiments/results/length52_h100/round4/k8w512_soft, the adapter as shipped).
    pub fn shipped() -> Recipe {
        let stage = |name: &str, steps: usize, seq_len: usize, batch: usize, balance: f64, lr: f64| Stage {
            name: name.into(),
            opts: TrainOptions { seq_len, batch, sharpen: 0.05, balance, ..base_options(steps, lr) },
            window: None,
        };
        Recipe {
            name: "shipped".into(),
            spec: AdapterSpec { sink: 1, gate: Gate::Paper, lambda: 30.0, ..paper_spec() },
            init: Init::Pca,
            input_scale: false,
            init_gain: 1.0,
            // "long": the length stage of issue 52 (experiments/results/length52_h100: lr 1e-3 gave
            // soft -0.91% at 4,096 tokens where 3e-4 gave -0.21%; a window of 512 took K=8's top-2
            // from +5.9% to +1.4% at 4,096 tokens, round 4).
            stages: vec![
                stage("train", 3907, 1024, 4, 0.0, 3e-4),
                stage("balance", 1000, 1024, 4, 0.5, 3e-4),
                Stage { window: Some(512), ..stage("long", 300, 4096, 2, 0.5, 1e-3) },
            ],
        }
    }

    /// The paper's setting as `core/examples/train_paper.rs`'s defaults give it: dot scores,
    /// tau 0.1, 10 Sinkhorn iterations with the full gradient, the log gate (lambda 10), random
    /// init, d_g 16, w 128, no sinks, 4,000 steps of 4 x 1,024 tokens, AdamW lr 1e-2 with cosine
    /// decay to lr/10, seed 0; no terms of ours. One stage.
    pub fn paper() -> Recipe {
        Recipe {
            name: "paper".into(),
            spec: paper_spec(),
            init: Init::Random,
            input_scale: false,
            init_gain: 1.0,
            stages: vec![Stage { name: "train".into(), opts: base_options(4000, 1e-2), window: None }],
        }
    }

    /// Steps over every stage.
    pub fn total_steps(&self) -> usize {
        self.stages.iter().map(|s| s.opts.steps).sum()
    }

    /// Keeps only the stages named, in the recipe's order (`--stages`).
    pub fn select(&mut self, names: &[String]) -> Result<()> {
        for n in names {
            if !self.stages.iter().any(|s| &s.name == n) {
                bail!("recipe {} has no stage {n:?}: its stages are {}", self.name, self.stage_names().join(", "));
            }
        }
        self.stages.retain(|s| names.contains(&s.name));
        Ok(())
    }

    pub fn stage_names(&self) -> Vec<String> {
        self.stages.iter().map(|s| s.name.clone()).collect()
    }

    /// Sets `f` of every stage's options (a value the whole run shares).
    pub fn set_all(&mut self, mut f: impl FnMut(&mut TrainOptions)) {
        self.stages.iter_mut().for_each(|s| f(&mut s.opts));
    }

    /// The recipe's values, one per line (`train --help`, docs/cli.md).
    pub fn describe(&self) -> String {
        let s = &self.spec;
        let gate = match s.gate {
            Gate::Paper => format!("paper gate (lambda {})", s.lambda),
            Gate::Log => "log gate".to_string(),
        };
        let score = match s.score {
            Score::Dot => "dot",
            Score::Cosine => "cosine",
        };
        let layers = match s.router_layers {
            RouterLayers::All => "all layers",
            RouterLayers::Global => "global layers",
        };
        let mut out = format!(
            "{}: K {}, d_g {}, tau {}, {} Sinkhorn iterations, window {}, sink {}, {gate}, {score} scores, top-k {}, {layers}; init {}{}{}; seed {}\n",
            self.name,
            s.groups,
            s.d_g,
            s.tau,
            s.sinkhorn_iters,
            s.window,
            s.sink,
            s.top_k,
            self.init.label(),
            if self.input_scale { ", input scale" } else { "" },
            if self.init_gain != 1.0 { format!(", W_g gain {}", self.init_gain) } else { String::new() },
            self.stages.first().map_or(0, |st| st.opts.seed),
        );
        for (i, st) in self.stages.iter().enumerate() {
            out += &format!("  stage {} {}: {}\n", i + 1, st.name, st.line());
        }
        out
    }
}

/// The paper's adapter shape (the CLI's `adapter init` defaults).
fn paper_spec() -> AdapterSpec {
    AdapterSpec::default()
}

/// Every recipe's values (`train --help`'s epilogue).
pub fn recipes_help() -> String {
    let mut s = String::from("Recipes (each option given replaces the recipe's value; a per-stage option takes one value for every stage or one per stage, comma-separated):\n");
    for name in RECIPES {
        s += &Recipe::named(name).expect("a listed recipe").describe();
    }
    s
}

/// Everything a run needs besides the model.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Training text: files, or folders searched for *.txt.
    pub data: Vec<PathBuf>,
    /// Held-out text (whole works that never appear in `data`).
    pub heldout: Vec<PathBuf>,
    pub start: Start,
    pub recipe: Recipe,
    /// A wall-clock budget for the whole run in seconds (0 = none): a stage it cuts short is the
    /// last, evaluated and saved as if it had ended.
    pub max_seconds: f64,
    /// Where the log, the checkpoints and the finished adapter go.
    pub out: PathBuf,
    /// Keep every checkpoint's adapter (`focus_core::train::checkpoint_dir`).
    pub keep_checkpoints: bool,
    /// The device as the provenance records it.
    pub device: String,
    /// Which layers the fused step recomputes in the backward (the same gradients either way;
    /// `Auto` keeps the graphs that fit).
    pub recompute: focus_core::train::Recompute,
}

/// What a checkpoint's adapter records of its run while it goes (`training.in_progress`), so
/// that `Start::Resume` continues with the right stage and the later ones.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunState {
    recipe: Option<String>,
    stage: usize,
    stages: Vec<Stage>,
    before: Before,
    /// How the routers started (the provenance's init fields).
    start: serde_json::Value,
    /// The finished stages' records.
    done: Vec<serde_json::Value>,
}

/// The text files of `paths`: files as given, folders' *.txt sorted by name.
pub fn text_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
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
        } else if p.is_file() {
            out.push(p.clone());
        } else if std::fs::metadata(p).is_ok() {
            bail!("{} is not a regular file (a FIFO, socket or device?): training text must be a regular file or a folder of *.txt files", p.display());
        } else {
            bail!("{} does not exist", p.display());
        }
    }
    if paths.is_empty() {
        bail!("no training text given: pass --data and --heldout (a resumed run needs the same files as the run it continues)");
    }
    if out.is_empty() {
        bail!("no text files (*.txt) in {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(out)
}

/// Tokenizes every file and joins the documents with the end-of-text token; stops (with
/// `focus_core::Error::Cancelled`) when `cancel` is set between files.
fn tokens(model: &Model, files: &[PathBuf], cancel: &dyn Fn() -> bool, status: &mut dyn FnMut(String)) -> Result<Vec<u32>> {
    let tok = model.tokenizer()?;
    let mut ids = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if cancel() {
            return Err(focus_core::Error::Cancelled.into());
        }
        status(format!("tokenising {} ({} of {} files)", f.display(), i + 1, files.len()));
        let text = focus_core::io::text::read_text(f)?;
        ids.extend(tok.encode(&text, false)?.ids);
        if let Some(eos) = tok.eos_id() {
            ids.push(eos);
        }
    }
    Ok(ids)
}

/// A run ready to go: its trainer (that of the stage it is at) and tokens.
pub struct Prepared<'m> {
    pub trainer: Trainer<'m>,
    pub data: TrainData,
    pub train_files: Vec<PathBuf>,
    pub heldout_files: Vec<PathBuf>,
    /// The held-out file whose start is the probe passage (category structure per evaluation).
    pub probe_file: PathBuf,
    /// The run's recipe (None: a checkpoint written before recipes), its stages as run (each
    /// seq_len fitted to the model) and the index of the one `trainer` runs.
    pub recipe: Option<String>,
    pub stages: Vec<Stage>,
    pub stage: usize,
    /// How the routers started (the provenance's init fields).
    start: serde_json::Value,
    /// The finished stages' records.
    done: Vec<serde_json::Value>,
}

/// The recipe's stages fitted to `model`: each seq_len capped at its context (`note` hears of
/// every cap).
pub fn fit_stages(model: &Model, recipe: &Recipe, note: &mut dyn FnMut(String)) -> Result<Vec<Stage>> {
    if recipe.stages.is_empty() {
        bail!("recipe {} has no stage to run", recipe.name);
    }
    let context = model.config().context;
    let mut stages = recipe.stages.clone();
    for s in stages.iter_mut().filter(|s| s.opts.seq_len > context) {
        note(format!("stage {}: seq_len {} capped at the model's context, {context}", s.name, s.opts.seq_len));
        s.opts.seq_len = context;
    }
    Ok(stages)
}

/// Checks every stage against the adapter it will train, as the trainer does (sequence length
/// against the window, sinks and context; memory; straight-through's k against K), so that a
/// setting a late stage cannot run is refused before the first step.
pub fn check_stages(model: &Model, adapter: &focus_core::Adapter, stages: &[Stage]) -> Result<()> {
    for s in stages {
        // A throwaway trainer: its variables share the adapter's tensors and nothing runs.
        Trainer::from_adapter(model, s.adapt(adapter.clone()), s.opts.clone()).with_context(|| format!("stage {}", s.name))?;
    }
    Ok(())
}

/// Checks that the text holds a sequence of every stage's length, training and held out (the
/// trainer would fail on it only when the stage starts).
fn check_text(data: &TrainData, stages: &[Stage]) -> Result<()> {
    for s in stages {
        let t = s.opts.seq_len;
        for (what, n) in [("training", data.train.len()), ("held-out", data.heldout.len())] {
            if n <= t {
                bail!("stage {}: sequences of {t} tokens need more {what} text than its {n} tokens (more text, or a shorter --seq-len)", s.name);
            }
        }
    }
    Ok(())
}

/// Reads and tokenises the plan's files, makes the trainer of the first stage to run
/// (initialised as planned) and checks every stage; a resumed run takes its stages from the
/// checkpoint. `cancel` is polled between files; `status` hears what is being done.
pub fn prepare<'m>(model: &'m Model, plan: &Plan, cancel: &dyn Fn() -> bool, status: &mut dyn FnMut(String)) -> Result<Prepared<'m>> {
    let (train_files, heldout_files) = (text_files(&plan.data)?, text_files(&plan.heldout)?);
    let data = TrainData { train: tokens(model, &train_files, cancel, status)?, heldout: tokens(model, &heldout_files, cancel, status)? };
    let r = &plan.recipe;
    let (mut trainer, recipe, stages, stage, start, done) = match &plan.start {
        Start::Resume(dir) => {
            let mut t = Trainer::resume(model, dir).with_context(|| format!("resuming from {}", dir.display()))?;
            let state = t.adapter.config.training.as_ref().and_then(|v| v.get("in_progress")).and_then(|v| serde_json::from_value::<RunState>(v.clone()).ok());
            match state {
                Some(s) if s.stage < s.stages.len() => {
                    t.before = s.before;
                    (t, s.recipe, s.stages, s.stage, s.start, s.done)
                }
                // A checkpoint from before recipes: one stage, its own options.
                _ => {
                    let stages = vec![Stage { name: "resumed".into(), opts: t.opts.clone(), window: None }];
                    (t, None, stages, 0, serde_json::Value::Null, Vec::new())
                }
            }
        }
        Start::From(dir) => {
            let stages = fit_stages(model, r, status)?;
            let adapter = focus_core::Adapter::load(dir, &model.identity(), model.device()).with_context(|| format!("loading the initial adapter {}", dir.display()))?;
            // (Trainer::from_adapter drops the results it measured: they describe its start.)
            let t = Trainer::from_adapter(model, stages[0].adapt(adapter), stages[0].opts.clone()).with_context(|| format!("stage {}", stages[0].name))?;
            (t, Some(r.name.clone()), stages, 0, serde_json::json!({ "init": dir.display().to_string() }), Vec::new())
        }
        Start::New => {
            let stages = fit_stages(model, r, status)?;
            let spec = AdapterSpec { window: stages[0].window.unwrap_or(r.spec.window), ..r.spec.clone() };
            let t = Trainer::new(model, &spec, stages[0].opts.clone()).with_context(|| format!("stage {}", stages[0].name))?;
            let start = serde_json::json!({
                "init": r.init.label(), "kmeans_init": r.init == Init::KMeans, "pca_init": matches!(r.init, Init::Pca | Init::PcaWhite),
                "pca_whiten": r.init == Init::PcaWhite, "init_gain": r.init_gain, "input_scale": r.input_scale,
            });
            (t, Some(r.name.clone()), stages, 0, start, Vec::new())
        }
    };
    check_stages(model, &trainer.adapter, &stages[stage + 1..])?;
    check_text(&data, &stages[stage..])?;
    trainer.keep_checkpoints = plan.keep_checkpoints;
    trainer.kernels.recompute = plan.recompute;
    if matches!(plan.start, Start::New) {
        if r.input_scale {
            status("scaling each router input channel to unit RMS".into());
            trainer.init_input_scale(&data, 8)?;
        }
        match r.init {
            Init::KMeans => {
                status("k-means initialisation of the centroids".into());
                trainer.init_kmeans(&data, 8, 50)?
            }
            Init::Pca | Init::PcaWhite => {
                let whiten = r.init == Init::PcaWhite;
                status(format!("{}PCA initialisation of W_g, then k-means", if whiten { "whitened " } else { "" }));
                trainer.init_pca(&data, 8, whiten, 50)?
            }
            Init::Random => {}
        }
        if r.init_gain != 1.0 {
            trainer.scale_projection(r.init_gain)?;
        }
    }
    let probe_file = heldout_files[0].clone();
    trainer.probe = Some(focus_core::train::probe_passage(&focus_core::io::text::read_text(&probe_file)?).to_string());
    Ok(Prepared { trainer, data, train_files, heldout_files, probe_file, recipe, stages, stage, start, done })
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// False: stopped early (the checkpoint of the last step is saved).
    pub finished: bool,
    /// The run's step (over every stage).
    pub step: usize,
    pub figures: Figures,
}

impl Prepared<'_> {
    /// What the run trains: a line, then a line per stage.
    pub fn describe(&self) -> String {
        let (m, c) = (self.trainer.model.config(), &self.trainer.adapter.config);
        let mut s = format!(
            "training {} layers x (W_g {}x{} + {} centroids) on {} tokens ({} files), held out {} tokens ({} files); recipe {}, {} stage{}",
            m.n_layers,
            m.d_model,
            c.d_g,
            c.groups,
            self.data.train.len(),
            self.train_files.len(),
            self.data.heldout.len(),
            self.heldout_files.len(),
            self.recipe.as_deref().unwrap_or("(none: a checkpoint from before recipes)"),
            self.stages.len(),
            if self.stages.len() == 1 { "" } else { "s" }
        );
        for i in 0..self.stages.len() {
            s += &format!("\n  {}{}", self.stage_line(i), if i < self.stage { " (done)" } else { "" });
        }
        s
    }

    /// "stage 2/3 balance: 1000 steps x 4 x 1024 tokens, ..."
    pub fn stage_line(&self, i: usize) -> String {
        format!("stage {}/{} {}: {}", i + 1, self.stages.len(), self.stages[i].name, self.stages[i].line())
    }

    /// Steps over every stage (as planned).
    pub fn total_steps(&self) -> usize {
        self.stages.iter().map(|s| s.opts.steps).sum()
    }

    /// Runs the stages to the last one's last step, or until `stop` is set (a checkpoint, which
    /// records the stage, is then saved): each stage a fresh trainer on the adapter the one
    /// before left (`Stage`). Every log row goes to OUT/train_log.jsonl with its stage's name and
    /// to `on_row` with the figures so far, and each step's figures to `on_step`. A finished
    /// run's adapter, with its provenance (`training.recipe`, `training.stages`), is written to
    /// OUT. A whole-run time limit (`Plan::max_seconds`) that cuts a stage short makes it the
    /// last.
    pub fn train(&mut self, plan: &Plan, stop: &AtomicBool, mut on_row: impl FnMut(&LogRow, &Figures), mut on_step: impl FnMut(&Figures)) -> Result<Outcome> {
        let out = &plan.out;
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let log_path = out.join("train_log.jsonl");
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
        let t0 = std::time::Instant::now();
        let mut figures = Figures::new(&self.trainer, self.total_steps());
        loop {
            let i = self.stage;
            figures.stage = self.stage_line(i);
            if plan.max_seconds > 0.0 {
                // What is left of this invocation's budget (at least a step's worth of nothing).
                self.trainer.opts.max_seconds = (plan.max_seconds - t0.elapsed().as_secs_f64()).max(1e-9);
            }
            // Checkpoints carry where the run is, for Start::Resume.
            let state = RunState { recipe: self.recipe.clone(), stage: i, stages: self.stages.clone(), before: self.trainer.before, start: self.start.clone(), done: self.done.clone() };
            self.trainer.adapter.config.training = Some(serde_json::json!({ "in_progress": state }));
            let name = self.stages[i].name.clone();
            // The stage's pace: tokens a step, and where and when its first step starts.
            let per_step = self.trainer.opts.batch * self.trainer.opts.seq_len;
            let (step0, started) = (self.trainer.before.steps + self.trainer.step, std::time::Instant::now());
            let device = self.trainer.model.device().clone();
            let fig = std::cell::RefCell::new(&mut figures);
            let finished = self.trainer.run(
                &self.data,
                out,
                Some(stop),
                |row| {
                    fig.borrow_mut().update(row);
                    let mut v = serde_json::to_value(row)?;
                    v["stage"] = name.clone().into();
                    writeln!(log, "{v}").map_err(|e| focus_core::Error::io(&log_path, e))?;
                    on_row(row, &fig.borrow());
                    Ok(())
                },
                |step, loss| {
                    let mut f = fig.borrow_mut();
                    f.step = step;
                    f.loss = loss;
                    let secs = started.elapsed().as_secs_f64();
                    f.tokens_per_s = (step > step0 && secs > 0.0).then(|| ((step - step0) * per_step) as f64 / secs);
                    f.memory = focus_core::device::memory_use(&device);
                    on_step(&f);
                },
            )?;
            let t = &self.trainer;
            let step = t.before.steps + t.step;
            if !finished {
                return Ok(Outcome { finished, step, figures });
            }
            let mut record = serde_json::to_value(&self.stages[i])?;
            record["done"] = serde_json::json!({
                "steps": t.step, "tokens_seen": t.tokens_seen, "seconds": figures.seconds - t.before.seconds,
                "heldout_ppl": figures.heldout_ppl, "heldout_mode": t.eval_mode().to_string(),
            });
            self.done.push(record);
            let cut = t.step < self.stages[i].opts.steps;
            if cut || i + 1 == self.stages.len() {
                break;
            }
            // The next stage: a fresh trainer on this one's adapter (the old one goes).
            let before = Before { steps: step, tokens: t.before.tokens + t.tokens_seen, seconds: figures.seconds };
            let s = &self.stages[i + 1];
            let mut next = Trainer::from_adapter(t.model, s.adapt(t.adapter.clone()), s.opts.clone()).with_context(|| format!("stage {}", s.name))?;
            next.before = before;
            next.probe = t.probe.clone();
            next.keep_checkpoints = t.keep_checkpoints;
            next.kernels = t.kernels;
            self.trainer = next;
            self.stage = i + 1;
        }
        let names = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        let t = &mut self.trainer;
        let step = t.before.steps + t.step;
        let mut record = serde_json::json!({
            "recipe": self.recipe, "stages": self.done,
            "data": names(&self.train_files), "heldout": names(&self.heldout_files),
            "steps": step, "tokens_seen": t.before.tokens + t.tokens_seen, "seconds_this_run": t0.elapsed().as_secs_f64(),
            "device": plan.device, "time_limit_min": plan.max_seconds / 60.0, "heldout_ppl": figures.heldout_ppl,
            "heldout_mode": t.eval_mode().to_string(), "optimizer": "AdamW(0.9, 0.999, 1e-8)",
            "probe": self.probe_file.display().to_string(),
        });
        if let (Some(r), Some(s)) = (record.as_object_mut(), self.start.as_object()) {
            r.extend(s.clone());
        }
        t.adapter.config.training = Some(record);
        t.adapter.save(out)?;
        Ok(Outcome { finished: true, step, figures })
    }
}

/// The figures a run shows as it goes (the CLI's progress bar, the Train view's headline), from
/// its log rows.
#[derive(Debug, Clone)]
pub struct Figures {
    pub step: usize,
    pub steps: usize,
    /// The last step's mean training loss (nats/token); NaN before the first.
    pub loss: f64,
    /// At the last evaluation.
    pub heldout_ppl: Option<f64>,
    /// The largest layer's dominance at the last evaluation (balance: 1/K ideal, 1.3/K the bar).
    pub worst_dominance: Option<f64>,
    pub groups: usize,
    /// Median over layers >= 1 of NMI(top group, category) on the probe at the last evaluation,
    /// and the untrained twin's (the step-0 evaluation of this run; None when resumed).
    pub median_nmi: Option<f64>,
    pub twin_median_nmi: Option<f64>,
    /// The run's twin structure, kept for the ratio.
    twin: Option<Structure>,
    /// The last evaluation's median NMI over the twin's (`Structure::against`).
    pub nmi_ratio: Option<f64>,
    /// Seconds since the run started, at the last row.
    pub seconds: f64,
    /// The stage running, in a line (`Prepared::stage_line`).
    pub stage: String,
    /// Training tokens a second in the stage running, over its steps so far (None before its
    /// first step).
    pub tokens_per_s: Option<f64>,
    /// Memory in use where the model runs, read at each step (`device::memory_use`: the GPU's
    /// on CUDA, this process's resident memory on the CPU).
    pub memory: Option<focus_core::device::MemoryUse>,
    /// The step and the seconds the run (re)started at.
    first_step: usize,
    first_seconds: f64,
}

impl Figures {
    /// The figures of a run at `t`'s step, of `steps` in all (every stage).
    pub fn new(t: &Trainer, steps: usize) -> Figures {
        Figures {
            step: t.before.steps + t.step,
            steps,
            loss: f64::NAN,
            heldout_ppl: None,
            worst_dominance: None,
            groups: t.adapter.config.groups,
            median_nmi: None,
            twin_median_nmi: None,
            twin: None,
            nmi_ratio: None,
            seconds: t.before.seconds,
            stage: String::new(),
            tokens_per_s: None,
            memory: None,
            first_step: t.before.steps + t.step,
            first_seconds: t.before.seconds,
        }
    }

    /// Takes in one log row.
    pub fn update(&mut self, row: &LogRow) {
        self.step = row.step;
        self.loss = row.loss;
        self.seconds = row.seconds;
        if let Some(p) = row.heldout_ppl {
            self.heldout_ppl = Some(p);
        }
        if let Some(d) = &row.dominance {
            self.worst_dominance = d.iter().flatten().copied().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        }
        if let Some(s) = &row.structure {
            let s = structure(s, self.groups);
            if row.step == 0 && self.twin.is_none() {
                self.twin_median_nmi = Some(s.median_from_layer_1(|l| l.category.value));
                self.twin = Some(s.clone());
            }
            self.median_nmi = Some(s.median_from_layer_1(|l| l.category.value));
            self.nmi_ratio = self.twin.as_ref().map(|t| s.against(t).median);
        }
    }

    /// The 1.3/K bar of dominance.
    pub fn dominance_bar(&self) -> f64 {
        1.3 / self.groups.max(1) as f64
    }

    /// Seconds left at the pace so far (None before the first step).
    pub fn seconds_left(&self) -> Option<f64> {
        let done = self.step.saturating_sub(self.first_step);
        let secs = self.seconds - self.first_seconds;
        (done > 0 && secs > 0.0).then(|| secs / done as f64 * self.steps.saturating_sub(self.step) as f64)
    }

    /// The figures in a line: "loss 3.412 · 5321 tok/s · memory 1.20 GiB (peak 1.43) of 23.4 GiB
    /// · held-out PPL 25.31 · worst dominance 0.310 (bar 0.163) · NMI 1.84x twin".
    pub fn line(&self) -> String {
        let mut s = format!("loss {:.3}", self.loss);
        if let Some(r) = self.tokens_per_s {
            s += &format!(" · {r:.0} tok/s");
        }
        if let Some(m) = &self.memory {
            s += &format!(" · memory {}", m.line());
        }
        if let Some(p) = self.heldout_ppl {
            s += &format!(" · held-out PPL {p:.2}");
        }
        if let Some(d) = self.worst_dominance {
            s += &format!(" · worst dominance {d:.3} (bar {:.3})", self.dominance_bar());
        }
        match (self.nmi_ratio, self.median_nmi) {
            (Some(r), _) => s += &format!(" · NMI {r:.2}x twin"),
            (None, Some(m)) => s += &format!(" · median NMI {m:.3}"),
            _ => {}
        }
        s
    }
}

/// A log row's per-layer structure as a `Structure` (for its medians and `against`).
pub fn structure(layers: &[LayerStructure], groups: usize) -> Structure {
    Structure { tokens: 0, groups, layers: layers.to_vec() }
}

/// The default output folder of a run started at `stamp` (Unix milliseconds) on `model_name`.
pub fn default_out(cache: &Path, model_name: &str, stamp: u128) -> PathBuf {
    let safe: String = model_name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    cache.join("runs").join(format!("{safe}-{stamp}"))
}
