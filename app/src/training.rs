//! A training run as `focus-lens train` and the GUI's Train view start it, in one place: a
//! `Plan` (files, adapter shape, options), `prepare` (the text files read and tokenised, the
//! trainer made and initialised, the probe passage set), `Prepared::train` (the log, the run,
//! the finished adapter with its provenance), and the `Figures` both show while it runs (loss,
//! held-out perplexity, worst-layer dominance against the 1.3/K bar, and the median category NMI
//! against the untrained twin, which is the run's own step-0 evaluation).

use anyhow::{bail, Context, Result};
use focus_core::analysis::structure::{LayerStructure, Structure};
use focus_core::train::{LogRow, TrainData, TrainOptions, Trainer};
use focus_core::{AdapterSpec, Model};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// How the routers start.
#[derive(Debug, Clone)]
pub enum Start {
    /// A random adapter of this shape, then `Init`.
    New(AdapterSpec, Init),
    /// This adapter's configuration and weights (fine-tuning).
    From(PathBuf),
    /// This checkpoint directory (its options replace the plan's).
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

/// Everything a run needs besides the model.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Training text: files, or folders searched for *.txt.
    pub data: Vec<PathBuf>,
    /// Held-out text (whole works that never appear in `data`).
    pub heldout: Vec<PathBuf>,
    pub start: Start,
    pub opts: TrainOptions,
    /// Where the log, the checkpoints and the finished adapter go.
    pub out: PathBuf,
    /// [ours] A new adapter's routers read their input scaled per channel to unit RMS
    /// (`Trainer::init_input_scale`), before `Init`. Ignored by `Start::From` / `Resume`.
    pub input_scale: bool,
    /// [ours] A new adapter's W_g times this after `Init` (`Trainer::scale_projection`); 1 = none.
    pub init_gain: f64,
    /// Keep every checkpoint's adapter (`focus_core::train::checkpoint_dir`).
    pub keep_checkpoints: bool,
    /// The device as the provenance records it.
    pub device: String,
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

/// A run ready to go: its trainer and tokens.
pub struct Prepared<'m> {
    pub trainer: Trainer<'m>,
    pub data: TrainData,
    pub train_files: Vec<PathBuf>,
    pub heldout_files: Vec<PathBuf>,
    /// The held-out file whose start is the probe passage (category structure per evaluation).
    pub probe_file: PathBuf,
}

/// Reads and tokenises the plan's files and makes its trainer (initialised as planned).
/// `cancel` is polled between files; `status` hears what is being done.
pub fn prepare<'m>(model: &'m Model, plan: &Plan, cancel: &dyn Fn() -> bool, status: &mut dyn FnMut(String)) -> Result<Prepared<'m>> {
    let (train_files, heldout_files) = (text_files(&plan.data)?, text_files(&plan.heldout)?);
    let data = TrainData { train: tokens(model, &train_files, cancel, status)?, heldout: tokens(model, &heldout_files, cancel, status)? };
    let mut trainer = match &plan.start {
        Start::Resume(dir) => Trainer::resume(model, dir).with_context(|| format!("resuming from {}", dir.display()))?,
        Start::From(dir) => {
            let mut adapter = focus_core::Adapter::load(dir, &model.identity(), model.device()).with_context(|| format!("loading the initial adapter {}", dir.display()))?;
            // Its measured results describe the initial weights, not the trained ones.
            adapter.config.results = None;
            Trainer::from_adapter(model, adapter, plan.opts.clone())?
        }
        Start::New(spec, _) => Trainer::new(model, spec, plan.opts.clone())?,
    };
    trainer.keep_checkpoints = plan.keep_checkpoints;
    if plan.input_scale && matches!(plan.start, Start::New(..)) {
        status("scaling each router input channel to unit RMS".into());
        trainer.init_input_scale(&data, 8)?;
    }
    match plan.start {
        Start::New(_, Init::KMeans) => {
            status("k-means initialisation of the centroids".into());
            trainer.init_kmeans(&data, 8, 50)?
        }
        Start::New(_, init @ (Init::Pca | Init::PcaWhite)) => {
            let whiten = init == Init::PcaWhite;
            status(format!("{}PCA initialisation of W_g, then k-means", if whiten { "whitened " } else { "" }));
            trainer.init_pca(&data, 8, whiten, 50)?
        }
        _ => {}
    }
    if plan.init_gain != 1.0 && matches!(plan.start, Start::New(..)) {
        trainer.scale_projection(plan.init_gain)?;
    }
    let probe_file = heldout_files[0].clone();
    trainer.probe = Some(focus_core::train::probe_passage(&focus_core::io::text::read_text(&probe_file)?).to_string());
    Ok(Prepared { trainer, data, train_files, heldout_files, probe_file })
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// False: stopped early (the checkpoint of the last step is saved).
    pub finished: bool,
    pub step: usize,
    pub figures: Figures,
}

impl Prepared<'_> {
    /// What the run trains, in a line.
    pub fn describe(&self) -> String {
        let (m, c) = (self.trainer.model.config(), &self.trainer.adapter.config);
        format!(
            "training {} layers x (W_g {}x{} + {} centroids) on {} tokens ({} files), held out {} tokens ({} files)",
            m.n_layers, m.d_model, c.d_g, c.groups, self.data.train.len(), self.train_files.len(), self.data.heldout.len(), self.heldout_files.len()
        )
    }

    /// Runs to the plan's last step, or until `stop` is set (a checkpoint is then saved):
    /// every log row goes to OUT/train_log.jsonl and to `on_row` with the figures so far, and
    /// each step's figures to `on_step`. A finished run's adapter, with its provenance, is
    /// written to OUT.
    pub fn train(&mut self, plan: &Plan, stop: &AtomicBool, mut on_row: impl FnMut(&LogRow, &Figures), mut on_step: impl FnMut(&Figures)) -> Result<Outcome> {
        let out = &plan.out;
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let log_path = out.join("train_log.jsonl");
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
        let t0 = std::time::Instant::now();
        let mut figures = Figures::new(&self.trainer);
        let fig = std::cell::RefCell::new(&mut figures);
        let trainer = &mut self.trainer;
        let finished = trainer.run(
            &self.data,
            out,
            Some(stop),
            |row| {
                fig.borrow_mut().update(row);
                writeln!(log, "{}", serde_json::to_string(row)?).map_err(|e| focus_core::Error::io(&log_path, e))?;
                on_row(row, &fig.borrow());
                Ok(())
            },
            |step, loss| {
                let mut f = fig.borrow_mut();
                f.step = step;
                f.loss = loss;
                on_step(&f);
            },
        )?;
        let step = self.trainer.step;
        if finished {
            let names = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
            let t = &mut self.trainer;
            let init = match &plan.start {
                Start::From(p) => Some(p.display().to_string()),
                _ => None,
            };
            t.adapter.config.training = Some(serde_json::json!({
                "data": names(&self.train_files), "heldout": names(&self.heldout_files),
                "steps": t.step, "seq_len": t.opts.seq_len, "batch": t.opts.batch,
                "lr": t.opts.lr, "weight_decay": t.opts.weight_decay, "grad_clip": t.opts.grad_clip, "seed": t.opts.seed,
                "tokens_seen": t.tokens_seen, "seconds_this_run": t0.elapsed().as_secs_f64(),
                "device": plan.device, "time_limit_min": t.opts.max_seconds / 60.0, "heldout_ppl": figures.heldout_ppl, "optimizer": "AdamW(0.9, 0.999, 1e-8)",
                "sinkhorn_grad": t.opts.sinkhorn_grad, "cosine_decay": t.opts.cosine_decay,
                "straight_through": t.opts.straight_through, "heldout_mode": t.eval_mode().to_string(),
                "sharpen": t.opts.sharpen, "balance": t.opts.balance, "freeze_centroids": t.opts.freeze_centroids, "freeze_projection": t.opts.freeze_projection,
                "init": init, "kmeans_init": matches!(plan.start, Start::New(_, Init::KMeans)),
                "pca_init": matches!(plan.start, Start::New(_, Init::Pca | Init::PcaWhite)), "pca_whiten": matches!(plan.start, Start::New(_, Init::PcaWhite)), "init_gain": plan.init_gain,
                "probe": self.probe_file.display().to_string(),
            }));
            t.adapter.save(out)?;
        }
        Ok(Outcome { finished, step, figures })
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
    /// The step the run (re)started at and when the last row came.
    first_step: usize,
}

impl Figures {
    pub fn new(t: &Trainer) -> Figures {
        Figures {
            step: t.step,
            steps: t.opts.steps,
            loss: f64::NAN,
            heldout_ppl: None,
            worst_dominance: None,
            groups: t.adapter.config.groups,
            median_nmi: None,
            twin_median_nmi: None,
            twin: None,
            nmi_ratio: None,
            seconds: 0.0,
            first_step: t.step,
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
        (done > 0 && self.seconds > 0.0).then(|| self.seconds / done as f64 * self.steps.saturating_sub(self.step) as f64)
    }

    /// The figures in a line: "loss 3.412 · held-out PPL 25.31 · worst dominance 0.310 (bar
    /// 0.163) · NMI 1.84x twin".
    pub fn line(&self) -> String {
        let mut s = format!("loss {:.3}", self.loss);
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
