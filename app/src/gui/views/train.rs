//! Train: start a router training run on the loaded model (the CLI's `train`, through
//! `crate::training`), watch it as live plots (training loss, held-out perplexity, per-layer
//! dominance at the last evaluation against the 1.3/K bar, and the median category NMI against
//! the untrained twin over time), stop it (the checkpoint of its last step is kept), and open
//! any checkpoint as the app's adapter (the same path as File > Open adapter).
//!
//! The settings are the view's own (remembered between runs of the app); they start as the
//! CLI's default recipe (`training::Recipe`, stages and all), with the window fitted to the
//! loaded model's context. Start checks every stage as the run does (`training::check_stages`
//! on the loaded model), so that a bad setting is one error under the button rather than a
//! failed run.

use super::view::{Command, View, ViewCtx};
use crate::gui::jobs::train::{duration, Checkpoint, TrainEnd, TrainJob, TrainUpdate};
use crate::gui::state::{DeviceChoice, InputKind, Setting, Tab};
use crate::gui::worker::TaskKind;
use crate::training::{self, Figures, Init, Plan, Recipe, Start};
use egui::Color32;
use egui_plot::{Bar, BarChart, HLine, Legend, Line, Plot, PlotPoints, Points};
use focus_core::train::LogRow;
use focus_core::Gate;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const LINE: Color32 = Color32::from_rgb(30, 90, 160);
const TWIN: Color32 = Color32::from_rgb(150, 150, 150);
const BAR: Color32 = Color32::from_rgb(200, 60, 40);

/// The run's settings as the form edits them (remembered between runs of the app).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TrainForm {
    pub data: String,
    pub heldout: String,
    /// Empty: a new folder under the cache's `runs/`.
    pub out: String,
    /// The recipe as edited: it starts as `Recipe::default()`, the CLI's default, and a recipe
    /// picked replaces every value (the CLI's `--recipe`).
    pub recipe: Recipe,
    pub device: DeviceChoice,
}

impl Default for TrainForm {
    /// The CLI's defaults (its recipe), with the shipped corpus (when fetched) as training and
    /// held-out text.
    fn default() -> Self {
        let corpus = crate::defaults::cache_dir().join("corpus");
        let dir = |name: &str| {
            let p = corpus.join(name);
            if p.is_dir() { p.display().to_string() } else { String::new() }
        };
        TrainForm { data: dir("train"), heldout: dir("heldout"), out: String::new(), recipe: Recipe::default(), device: DeviceChoice::Cpu }
    }
}

/// The run on screen: its history as the plots draw it.
#[derive(Debug, Clone, Default)]
pub struct RunView {
    pub out: PathBuf,
    /// The model whose routers the run trains (its name and weights' fingerprint): its
    /// checkpoints open only on that model.
    pub model: String,
    pub model_fingerprint: String,
    /// (step, loss) of every row.
    pub loss: Vec<[f64; 2]>,
    /// (step, held-out perplexity) of every evaluation.
    pub ppl: Vec<[f64; 2]>,
    /// (step, median NMI over layers >= 1) of every evaluation with structure.
    pub nmi: Vec<[f64; 2]>,
    /// Per layer, the dominance of the last evaluation (None: a layer the adapter does not
    /// route, drawn without a bar), and its step.
    pub dominance: Vec<Option<f64>>,
    pub dominance_step: usize,
    pub figures: Option<Figures>,
    pub checkpoints: Vec<Checkpoint>,
    /// What the run is doing before its first row.
    pub status: String,
    /// How it ended (None while it runs).
    pub ended: Option<String>,
}

impl RunView {
    fn take(&mut self, row: &LogRow, f: &Figures) {
        let s = row.step as f64;
        self.loss.push([s, row.loss]);
        if let Some(p) = row.heldout_ppl {
            self.ppl.push([s, p]);
        }
        if let Some(d) = &row.dominance {
            self.dominance = d.clone();
            self.dominance_step = row.step;
        }
        if let Some(st) = &row.structure {
            self.nmi.push([s, training::structure(st, f.groups).median_from_layer_1(|l| l.category.value)]);
        }
        self.figures = Some(f.clone());
    }
}

#[derive(Default)]
pub struct TrainView {
    pub form: TrainForm,
    /// The form has been fitted to this model (by its generation).
    fitted_to: Option<u64>,
    pub run: Option<RunView>,
    /// The running job's stop flag.
    stop: Option<Arc<AtomicBool>>,
    /// Why Start did not start (shown under it until the next Start).
    pub error: Option<String>,
}

impl TrainView {
    pub fn receive(&mut self, u: TrainUpdate) {
        let Some(run) = self.run.as_mut() else { return };
        match u {
            TrainUpdate::Status(s) => run.status = s,
            TrainUpdate::Row(row, f, cps) => {
                run.take(&row, &f);
                run.checkpoints = cps;
            }
        }
    }

    pub fn finished(&mut self, end: TrainEnd) {
        self.stop = None;
        let Some(run) = self.run.as_mut() else { return };
        run.checkpoints = end.checkpoints;
        let f = &end.outcome.figures;
        run.ended = Some(if end.outcome.finished {
            format!("finished at step {}: adapter in {}; {}", end.outcome.step, end.out.display(), f.line())
        } else {
            format!("stopped at step {}: checkpoint in {}", end.outcome.step, end.out.join("checkpoint").display())
        });
        run.figures = Some(f.clone());
    }

    pub fn cancelled(&mut self) {
        self.stop = None;
        if let Some(run) = self.run.as_mut() {
            run.ended = Some("cancelled".into());
        }
    }

    pub fn failed(&mut self, e: &str) {
        self.stop = None;
        if let Some(run) = self.run.as_mut() {
            run.ended = Some(format!("failed: {e}"));
        }
    }

    /// Asks the running job to stop after its current step (it saves a checkpoint).
    pub fn request_stop(&mut self) {
        if let Some(s) = &self.stop {
            s.store(true, Ordering::Relaxed);
        }
    }

    /// Fits the form to a newly loaded model: the window within the shortest stage's sequence
    /// (as the run caps it at the context), the device it is on.
    fn fit(&mut self, cx: &ViewCtx) {
        let Some(m) = cx.session.model.as_ref() else { return };
        if self.fitted_to == Some(m.gen) {
            return;
        }
        self.fitted_to = Some(m.gen);
        let f = &mut self.form;
        let context = m.model.config().context;
        if let Some(seq) = f.recipe.stages.iter().map(|s| s.opts.seq_len.min(context)).min() {
            f.recipe.spec.window = f.recipe.spec.window.min(seq / 4);
        }
        // A stage that widens the window (the shipped recipe's `long`) likewise, at its length.
        for st in f.recipe.stages.iter_mut() {
            let seq = st.opts.seq_len.min(context);
            if let Some(w) = st.window.as_mut() {
                *w = (*w).min(seq / 4);
            }
        }
        f.device = m.device;
    }

    /// The job the form asks for, checked (`Err`: one line saying what is wrong).
    fn job(&self, cx: &ViewCtx) -> Result<TrainJob, String> {
        let m = cx.session.model.as_ref().ok_or("no model is loaded: open one first (File menu)")?;
        let f = &self.form;
        let path = |s: &str, what: &str| -> Result<PathBuf, String> {
            let s = s.trim();
            if s.is_empty() {
                return Err(format!("no {what} folder given"));
            }
            let p = PathBuf::from(s);
            training::text_files(std::slice::from_ref(&p)).map_err(|e| format!("{what}: {e:#}"))?;
            Ok(p)
        };
        let (data, heldout) = (path(&f.data, "training text")?, path(&f.heldout, "held-out text")?);
        if data == heldout {
            return Err("the held-out text must not be the training text: choose another folder".into());
        }
        let mut recipe = f.recipe.clone();
        // The default k of top-k inference within a K picked below it.
        recipe.spec.top_k = recipe.spec.top_k.min(recipe.spec.groups);
        // The run's own checks, every stage (sequence length against the context and the
        // window, memory, K), on a random adapter of the recipe's shape.
        let stages = training::fit_stages(&m.model, &recipe, &mut |_| {}).map_err(|e| format!("{e:#}"))?;
        let adapter = focus_core::Adapter::random(&m.model.identity(), m.model.device(), &recipe.spec, 0).map_err(|e| e.to_string())?;
        training::check_stages(&m.model, &adapter, &stages).map_err(|e| format!("{e:#}"))?;
        let out = match f.out.trim() {
            "" => {
                let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
                training::default_out(&crate::defaults::cache_dir(), &m.model.config().name, stamp)
            }
            s => PathBuf::from(s),
        };
        if out.join("train_log.jsonl").exists() {
            return Err(format!("{} already holds a run: choose another output folder (or leave it empty for a new one)", out.display()));
        }
        let plan = Plan {
            data: vec![data],
            heldout: vec![heldout],
            start: Start::New,
            recipe,
            max_seconds: 0.0,
            out,
            keep_checkpoints: true,
            device: f.device.label().to_string(),
            recompute: Default::default(),
        };
        let model_path = m.path.clone().unwrap_or_else(crate::defaults::default_model_path);
        Ok(TrainJob { model: m.model.clone(), model_path, model_device: m.device, device: f.device, plan, stop: Arc::new(AtomicBool::new(false)) })
    }

    fn form_ui(&mut self, ui: &mut egui::Ui, enabled: bool) {
        let f = &mut self.form;
        ui.add_enabled_ui(enabled, |ui| {
            // Rows of label and field (a grid squeezed the fields of its inner columns).
            ui.horizontal(|ui| {
                let l = ui.label("training text");
                ui.add(egui::TextEdit::singleline(&mut f.data).desired_width(320.0).hint_text("a folder of .txt files")).labelled_by(l.id);
                let l = ui.label("held-out text");
                ui.add(egui::TextEdit::singleline(&mut f.heldout).desired_width(320.0).hint_text("a folder of .txt files")).labelled_by(l.id);
            });
            ui.horizontal(|ui| {
                let l = ui.label("output folder");
                ui.add(egui::TextEdit::singleline(&mut f.out).desired_width(320.0).hint_text("empty: a new folder under the cache's runs/")).labelled_by(l.id);
                ui.label("device");
                for d in DeviceChoice::available() {
                    ui.radio_value(&mut f.device, d, d.label());
                }
            });
            let r = &mut f.recipe;
            ui.horizontal_wrapped(|ui| {
                egui::ComboBox::from_label("recipe").selected_text(r.name.clone()).show_ui(ui, |ui| {
                    for name in training::RECIPES {
                        if ui.selectable_label(r.name == name, name).clicked() && r.name != name {
                            *r = Recipe::named(name).expect("a listed recipe");
                        }
                    }
                })
                .response
                .on_hover_text("the values below start from this recipe (the CLI's --recipe): shipped, how the shipped SmolLM2 adapters were trained; paper, the paper's setting");
                let s = &mut r.spec;
                ui.add(egui::DragValue::new(&mut s.groups).range(1..=64).prefix("K ")).on_hover_text("groups (centroids) per layer");
                ui.add(egui::DragValue::new(&mut s.window).range(0..=1 << 20).prefix("window ")).on_hover_text("local window w: pairs with i - j <= w always attend");
                ui.add(egui::DragValue::new(&mut s.sink).range(0..=1024).prefix("sink ")).on_hover_text("[ours] the first N tokens are always attendable");
                egui::ComboBox::from_id_salt("train_gate").selected_text(format!("gate {}", gate_label(s.gate))).show_ui(ui, |ui| {
                    ui.selectable_value(&mut s.gate, Gate::Log, "log");
                    ui.selectable_value(&mut s.gate, Gate::Paper, "paper");
                });
                if s.gate == Gate::Paper {
                    ui.add(egui::DragValue::new(&mut s.lambda).range(0.0..=1e6).speed(0.1).prefix("lambda ")).on_hover_text("the paper gate's slope");
                }
                egui::ComboBox::from_id_salt("train_init").selected_text(format!("init {}", r.init.label())).show_ui(ui, |ui| {
                    for i in Init::ALL {
                        ui.selectable_value(&mut r.init, i, i.label());
                    }
                });
                ui.checkbox(&mut r.input_scale, "scale input").on_hover_text("[ours] each channel of the router's input scaled to unit RMS first (models with huge hidden-state channels, e.g. Gemma 3)");
                ui.add(egui::DragValue::new(&mut r.init_gain).range(1e-3..=100.0).speed(1e-3).max_decimals(3).prefix("W_g gain "))
                    .on_hover_text("[ours] W_g times this after the initialisation: softer memberships with the same top groups (Gemma 3's PCA-initialised routers train from 0.033)");
                // Values every stage shares: shown as the first stage's, set in all of them.
                let mut frozen = r.stages.first().is_some_and(|s| s.opts.freeze_projection);
                if ui.checkbox(&mut frozen, "freeze W_g").on_hover_text("[ours] train the centroids only: W_g stays at its initial directions").changed() {
                    r.set_all(|o| o.freeze_projection = frozen);
                }
            });
            for st in r.stages.iter_mut() {
                let (o, window) = (&mut st.opts, &mut st.window);
                ui.horizontal_wrapped(|ui| {
                    ui.label(format!("stage {}", st.name)).on_hover_text("each stage trains on the adapter the one before left, with a fresh optimiser and its own learning-rate schedule");
                    if let Some(w) = window.as_mut() {
                        ui.add(egui::DragValue::new(w).range(0..=1 << 20).prefix("window ")).on_hover_text("the adapter's local window from this stage on (the shipped recipe widens it to 512 for its 4,096-token stage)");
                    }
                    ui.add(egui::DragValue::new(&mut o.steps).range(1..=10_000_000).prefix("steps "));
                    ui.add(egui::DragValue::new(&mut o.lr).range(1e-6..=10.0).speed(1e-4).max_decimals(5).prefix("lr ")).on_hover_text("AdamW learning rate");
                    ui.checkbox(&mut o.cosine_decay, "cosine").on_hover_text("the learning rate decays along a cosine to lr/10 at the stage's last step");
                    ui.add(egui::DragValue::new(&mut o.seq_len).range(2..=1 << 20).prefix("seq len ")).on_hover_text("tokens per training sequence (capped at the model's context)");
                    ui.add(egui::DragValue::new(&mut o.batch).range(1..=4096).prefix("batch "));
                    ui.add(egui::DragValue::new(&mut o.sharpen).range(0.0..=10.0).speed(1e-3).max_decimals(3).prefix("sharpen ")).on_hover_text("[ours] weight of the memberships' mean row entropy in the loss (the shipped SmolLM2 adapters: 0.05)");
                    ui.add(egui::DragValue::new(&mut o.balance).range(0.0..=100.0).speed(1e-2).max_decimals(3).prefix("balance ")).on_hover_text("[ours] weight of the top-group balance term, K * sum of squared top-group shares - 1, in the loss");
                });
            }
            ui.horizontal_wrapped(|ui| {
                let (mut every, mut ckpt) = r.stages.first().map_or((100, 200), |s| (s.opts.eval_every, s.opts.checkpoint_every));
                if ui.add(egui::DragValue::new(&mut every).range(1..=10_000_000).prefix("evaluate every ")).on_hover_text("held-out perplexity, dominance and structure every this many steps of a stage").changed() {
                    r.set_all(|o| o.eval_every = every);
                }
                if ui.add(egui::DragValue::new(&mut ckpt).range(1..=10_000_000).prefix("checkpoint every ")).changed() {
                    r.set_all(|o| o.checkpoint_every = ckpt);
                }
            });
        });
    }

    fn progress(&self, cx: &ViewCtx, running: bool, ui: &mut egui::Ui) {
        let Some(run) = &self.run else { return };
        let p = cx.worker.progress().into_iter().find(|p| p.0 == TaskKind::Train);
        if let (true, Some((_, done, total, what, secs))) = (running, p) {
            ui.horizontal(|ui| {
                crate::gui::paint::busy::busy(ui);
                if total > 0 {
                    ui.add(egui::ProgressBar::new(done as f32 / total as f32).desired_width(260.0).text(format!("{done} / {total}")));
                }
                ui.label(format!("{what} ({} so far)", duration(secs)));
            });
            if run.figures.is_none() && !run.status.is_empty() {
                ui.weak(&run.status);
            }
        }
        if let Some(e) = &run.ended {
            ui.label(e);
        }
        if let Some(f) = &run.figures {
            ui.label(format!("step {} of {}: {}", f.step, f.steps, f.line()));
            ui.weak(&f.stage);
        }
    }

    fn plots(&self, ui: &mut egui::Ui) {
        let Some(run) = &self.run else { return };
        let f = run.figures.as_ref();
        let h = ((ui.available_height() - 30.0) / 2.0).clamp(140.0, 320.0);
        ui.columns(2, |cols| {
            // Room above the data for the legend (top right), so that it covers no point.
            let room = |v: &[[f64; 2]]| super::balance::headroom(v.iter().map(|p| p[1]));
            Plot::new("train_loss").height(h).legend(Legend::default()).x_axis_label("step").y_axis_label("nats/token").include_y(room(&run.loss)).show(&mut cols[0], |p| {
                p.line(Line::new("training loss", PlotPoints::from(run.loss.clone())).color(LINE));
            });
            Plot::new("train_ppl").height(h).legend(Legend::default()).x_axis_label("step").include_y(room(&run.ppl)).show(&mut cols[1], |p| {
                p.line(Line::new("held-out perplexity", PlotPoints::from(run.ppl.clone())).color(LINE));
                p.points(Points::new("held-out perplexity", PlotPoints::from(run.ppl.clone())).radius(3.0).color(LINE));
            });
        });
        ui.columns(2, |cols| {
            let bars: Vec<Bar> = run.dominance.iter().enumerate().filter_map(|(l, d)| d.map(|d| Bar::new(l as f64, d).width(0.7))).collect();
            let bar = f.map_or(0.0, |f| f.dominance_bar());
            let title = format!("dominance at step {}", run.dominance_step);
            let top = super::balance::headroom(run.dominance.iter().flatten().copied().chain([bar]));
            Plot::new("train_dominance").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).include_y(top).show(&mut cols[0], |p| {
                p.bar_chart(BarChart::new(title, bars).color(LINE));
                p.hline(HLine::new(format!("1.3/K = {bar:.3}"), bar).color(BAR));
            });
            let top = super::balance::headroom(run.nmi.iter().map(|p| p[1]).chain(f.and_then(|f| f.twin_median_nmi)));
            Plot::new("train_nmi").height(h).legend(Legend::default()).x_axis_label("step").include_y(0.0).include_y(top).show(&mut cols[1], |p| {
                p.line(Line::new("median NMI(group, category)", PlotPoints::from(run.nmi.clone())).color(LINE));
                p.points(Points::new("median NMI(group, category)", PlotPoints::from(run.nmi.clone())).radius(3.0).color(LINE));
                if let Some(t) = f.and_then(|f| f.twin_median_nmi) {
                    p.hline(HLine::new(format!("untrained twin {t:.3}"), t).color(TWIN).style(egui_plot::LineStyle::dashed_dense()));
                }
            });
        });
    }

    fn checkpoints(&self, cx: &ViewCtx, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        let Some(run) = &self.run else { return };
        if run.checkpoints.is_empty() {
            return;
        }
        let open = cx.session.adapter.as_ref().and_then(|a| a.path.as_ref());
        // Checkpoints are routers for the run's model: on another model they cannot load.
        let own_model = cx.session.model.as_ref().is_some_and(|m| m.model.fingerprint == run.model_fingerprint);
        if !own_model {
            ui.colored_label(Color32::from_rgb(150, 90, 0), format!("This run trained the routers of {}, not the loaded model: open that model again to open its checkpoints.", run.model));
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("Checkpoints:");
            for c in &run.checkpoints {
                let name = if c.last { format!("final (step {})", c.step) } else { format!("step {}", c.step) };
                let shown = open == Some(&c.dir);
                let b = ui.add_enabled(!shown && own_model, egui::Button::new(format!("Open {name}")));
                if b.on_hover_text(format!("open {} as the adapter and show it in the Tokens view", c.dir.display())).clicked() {
                    out.push(Command::Open(InputKind::Adapter, c.dir.clone()));
                    out.push(Command::Set(Setting::Tab(Tab::Tokens)));
                }
            }
        });
    }
}

fn gate_label(g: Gate) -> &'static str {
    match g {
        Gate::Log => "log",
        Gate::Paper => "paper",
    }
}

impl View for TrainView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        self.fit(cx);
        let running = cx.worker.is_running(TaskKind::Train);
        if let Some(m) = cx.session.model.as_ref() {
            ui.label(format!("Train the routers of {} (frozen) from random, k-means or PCA centroids; checkpoints open as adapters.", m.model.config().name));
        }
        if let Some(run) = self.run.as_ref().filter(|r| cx.session.model.as_ref().is_none_or(|m| m.model.fingerprint != r.model_fingerprint)) {
            ui.strong(format!("The run below is of {}, not of the loaded model.", run.model));
        }
        self.form_ui(ui, !running);
        ui.horizontal(|ui| {
            if running {
                let stopping = self.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
                if ui.add_enabled(!stopping, egui::Button::new(if stopping { "Stopping…" } else { "Stop training" })).on_hover_text("stops after the current step and keeps its checkpoint").clicked() {
                    self.request_stop();
                }
            } else if ui.button("Start training").clicked() {
                match self.job(cx) {
                    Ok(job) => {
                        self.error = None;
                        self.stop = Some(job.stop.clone());
                        self.run = Some(RunView {
                            out: job.plan.out.clone(),
                            status: "starting".into(),
                            model: job.model.config().name.clone(),
                            model_fingerprint: job.model.fingerprint.clone(),
                            ..Default::default()
                        });
                        out.push(Command::StartTrain(job));
                    }
                    Err(e) => self.error = Some(format!("cannot start training: {e}")),
                }
            }
            if let Some(run) = &self.run {
                ui.weak(format!("run of {}: folder {}", run.model, run.out.display()));
            }
        });
        if let Some(e) = &self.error {
            ui.colored_label(Color32::from_rgb(180, 30, 30), e);
        }
        self.progress(cx, running, ui);
        self.checkpoints(cx, ui, &mut out);
        ui.separator();
        if self.run.is_some() {
            self.plots(ui);
        } else {
            ui.weak("No run yet: set the text folders and press Start training. Each evaluation adds points to the plots.");
        }
        out
    }
}
