//! The app: owns settings, loaded inputs, results and the background worker. Each frame it
//! collects finished work, reconciles what is loaded with what the settings ask for (starting
//! loads and analyses in the background), then lays out the panels.

use super::dialogs::{Dialogs, Purpose};
use super::jobs::{self, Msg};
use super::panels::{self, PanelState};
use super::state::*;
use super::worker::{TaskKind, Worker};
use focus_core::Adapter;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The embedded defaults, compiled into the binary.
pub const SAMPLE_TEXT: &str = crate::cli::bench::SAMPLE_TEXT;
pub const SAMPLE_TEXT_NAME: &str = "assets/sample.txt";
/// How often the window repaints while background work runs (progress, busy indicators).
pub const BUSY_REPAINT: std::time::Duration = std::time::Duration::from_millis(200);

/// What the settings ask for, per input; compared with what was last attempted so that a failed
/// load is not retried every frame.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    Model(Option<PathBuf>, DeviceChoice),
    Adapter(Option<PathBuf>, u64),
    Text(Option<PathBuf>),
}

pub struct FocusLensApp {
    pub settings: Settings,
    pub worker: Worker<Msg>,
    pub model: Option<LoadedModel>,
    pub adapter: Option<LoadedAdapter>,
    pub text: Option<LoadedText>,
    pub result: Option<Arc<AnalysisResult>>,
    /// Recent analyses, so that toggling a control back is instant.
    cache: VecDeque<Arc<AnalysisResult>>,
    attempted: HashMap<InputKind, Wanted>,
    /// The key of the analysis running now, and of one the user cancelled or that failed (not
    /// restarted until something changes).
    running_key: Option<AnalysisKey>,
    stopped_key: Option<AnalysisKey>,
    next_gen: u64,
    /// Errors shown in the window until dismissed.
    pub errors: Vec<String>,
    /// The last informational message (exports, truncation).
    pub status: String,
    pub hovered: Option<usize>,
    /// The layer of the column the hovered token is in (layers view); else the selected layer.
    pub hovered_layer: Option<usize>,
    pub selected: Option<usize>,
    pub partners: Option<Partners>,
    pub bench: Option<BenchState>,
    pub attn_bench: Option<AttnBenchState>,
    /// When set, exports go to this folder without a file dialog (tests, scripted use).
    pub export_dir: Option<PathBuf>,
    /// The path field of the File menu (typed paths, for when no file dialog is available).
    pub path_input: String,
    pub panels: PanelState,
    /// Seconds our UI code took in recent frames (not counting rendering).
    pub frame_times: VecDeque<f32>,
    pub last_analysis_seconds: Option<f64>,
    /// Seconds from the app's start to the first analysis on screen (a preview counts).
    pub first_view_seconds: Option<f64>,
    started: Instant,
    /// The central panel's rectangle, for PNG exports of the current view.
    pub view_rect: Option<egui::Rect>,
    pub pending_png: Option<PathBuf>,
    pub png_rx: Option<std::sync::mpsc::Receiver<Result<PathBuf, String>>>,
    /// Native file dialogs (open, export), answered asynchronously.
    pub dialogs: Dialogs,
    ctx: Option<egui::Context>,
}

impl FocusLensApp {
    pub fn new(settings: Settings) -> Self {
        FocusLensApp {
            settings,
            worker: Worker::default(),
            model: None,
            adapter: None,
            text: None,
            result: None,
            cache: VecDeque::new(),
            attempted: HashMap::new(),
            running_key: None,
            stopped_key: None,
            next_gen: 1,
            errors: Vec::new(),
            status: String::new(),
            hovered: None,
            hovered_layer: None,
            selected: None,
            partners: None,
            bench: None,
            attn_bench: None,
            export_dir: None,
            path_input: String::new(),
            panels: PanelState::default(),
            frame_times: VecDeque::new(),
            last_analysis_seconds: None,
            first_view_seconds: None,
            started: Instant::now(),
            view_rect: None,
            pending_png: None,
            png_rx: None,
            dialogs: Dialogs::default(),
            ctx: None,
        }
    }

    /// True while anything runs in the background.
    pub fn busy(&self) -> bool {
        self.worker.busy()
    }

    pub fn is_running(&self, kind: TaskKind) -> bool {
        self.worker.is_running(kind)
    }

    fn gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    /// Opens a file as model, adapter or text (from a dialog, drag and drop, recent list).
    pub fn open(&mut self, kind: InputKind, path: PathBuf) {
        *self.settings.path_mut(kind) = Some(path);
        if kind == InputKind::Adapter {
            // A new adapter brings its own window and Sinkhorn variant.
            self.settings.params.window = None;
            self.settings.params.causal = None;
        }
        self.stopped_key = None;
    }

    /// Back to the embedded default for one input.
    pub fn use_default(&mut self, kind: InputKind) {
        *self.settings.path_mut(kind) = None;
        self.stopped_key = None;
    }

    /// Guesses what a dropped path is: a .gguf file or a folder with config.json is a model, a
    /// folder with adapter_config.json an adapter, anything else a text.
    pub fn classify(path: &Path) -> InputKind {
        if path.is_dir() {
            if path.join("adapter_config.json").exists() {
                InputKind::Adapter
            } else {
                InputKind::Model
            }
        } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            InputKind::Model
        } else if path.file_name().is_some_and(|n| n == "adapter_config.json" || n == "adapter_model.safetensors") {
            InputKind::Adapter
        } else {
            InputKind::Text
        }
    }

    pub fn open_dropped(&mut self, path: PathBuf) {
        let kind = Self::classify(&path);
        let path = if kind == InputKind::Adapter && path.is_file() { path.parent().map(Path::to_path_buf).unwrap_or(path) } else { path };
        self.open(kind, path);
    }

    /// A file dialog's answer: open the chosen file or write the export (nothing on cancel).
    pub fn dialog_closed(&mut self, purpose: Purpose, path: Option<PathBuf>) {
        let Some(path) = path else { return };
        match purpose {
            Purpose::Open(kind) => self.open(kind, path),
            Purpose::OpenModelFolder => self.open(InputKind::Model, path),
            Purpose::Export(kind) => super::export::export_to(self, kind, path),
        }
    }

    /// Cancels the running analysis; the previous result stays on screen.
    pub fn cancel_analysis(&mut self) {
        self.worker.cancel(TaskKind::Analyze);
        self.stopped_key = self.running_key.take();
        self.status = "analysis cancelled; the view shows the previous result".into();
    }

    /// Runs the current analysis again after a cancel or failure.
    pub fn rerun(&mut self) {
        self.stopped_key = None;
    }

    /// The key of the analysis running now, if any.
    pub fn running_analysis(&self) -> Option<&AnalysisKey> {
        self.running_key.as_ref()
    }

    /// The key the current settings ask for, once all inputs are loaded and consistent.
    pub fn wanted_key(&self) -> Option<AnalysisKey> {
        let (m, a, t) = (self.model.as_ref()?, self.adapter.as_ref()?, self.text.as_ref()?);
        if a.model_gen != m.gen {
            return None;
        }
        Some(AnalysisKey { model_gen: m.gen, adapter_gen: a.gen, text_gen: t.gen, params: self.settings.params.clone() })
    }

    /// The adapter as the controls configure it (window, Sinkhorn variant).
    fn configured_adapter(&self, a: &Adapter) -> Arc<Adapter> {
        let mut a = a.clone();
        if let Some(w) = self.settings.params.window {
            a.config.window = w;
        }
        if let Some(c) = self.settings.params.causal {
            a.config.causal_sinkhorn = c;
        }
        Arc::new(a)
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Model(r, path, device) => match r {
                Ok(model) => {
                    let gen = self.gen();
                    if let Some(p) = &path {
                        self.settings.remember(InputKind::Model, p.clone());
                    }
                    self.model = Some(LoadedModel { model, path, device, gen });
                }
                Err(e) => self.load_failed(InputKind::Model, e),
            },
            Msg::Adapter(r, path, model_gen) => match r {
                Ok(adapter) => {
                    let gen = self.gen();
                    if let Some(p) = &path {
                        self.settings.remember(InputKind::Adapter, p.clone());
                    }
                    let k = adapter.config.top_k;
                    let groups = adapter.config.groups;
                    let label = source_label(&path, crate::cli::demo::SAMPLE_ADAPTER_NAME);
                    self.adapter = Some(LoadedAdapter { adapter, path, label, model_gen, gen });
                    if self.settings.params.k == 0 || self.settings.params.k > groups {
                        self.settings.params.k = k.clamp(1, groups);
                    }
                }
                Err(e) => self.load_failed(InputKind::Adapter, e),
            },
            Msg::Text(r, path) => match r {
                Ok((text, note)) => {
                    let gen = self.gen();
                    if let Some(p) = &path {
                        self.settings.remember(InputKind::Text, p.clone());
                    }
                    if let Some(n) = &note {
                        self.status = n.clone();
                    }
                    let label = source_label(&path, SAMPLE_TEXT_NAME);
                    self.text = Some(LoadedText { text, path, label, note, gen });
                    self.selected = None;
                    self.partners = None;
                }
                Err(e) => self.load_failed(InputKind::Text, e),
            },
            Msg::Analysis(r) => {
                let key = self.running_key.take();
                match r {
                    Ok(res) => {
                        let res = Arc::new(res);
                        self.last_analysis_seconds = Some(res.seconds);
                        if let Some(n) = &res.note {
                            self.status = n.clone();
                        }
                        self.remember_result(res.clone());
                        self.set_result(res);
                    }
                    Err(e) if e == "cancelled" => {}
                    Err(e) => {
                        self.stopped_key = key;
                        self.errors.push(format!("analysis failed: {e}"));
                    }
                }
            }
            Msg::Preview(res) => {
                // Shown only while its full analysis is still the one wanted.
                if self.running_key.as_ref().and_then(jobs::preview_key).as_ref() == Some(&res.key) {
                    let res = Arc::new(res);
                    self.remember_result(res.clone());
                    self.set_result(res);
                }
            }
            Msg::Partners(r) => match r {
                Ok(p) => self.partners = Some(p),
                Err(e) if e == "cancelled" => {}
                Err(e) => self.errors.push(format!("attention weights: {e}")),
            },
            Msg::Mask(Some(img)) => self.panels.mask.receive(img),
            Msg::Mask(None) => {}
            Msg::Bench(r) => {
                let b = self.bench.get_or_insert_with(BenchState::default);
                match r {
                    Ok((rows, settings)) => {
                        b.rows = rows;
                        b.settings = settings;
                        b.error = None;
                    }
                    Err(e) if e == "cancelled" => b.error = Some("benchmark cancelled".into()),
                    Err(e) => b.error = Some(e),
                }
            }
            Msg::AttnBench(r) => {
                let b = self.attn_bench.get_or_insert_with(AttnBenchState::default);
                match r {
                    Ok(rows) => {
                        b.rows = rows;
                        b.error = None;
                    }
                    Err(e) if e == "cancelled" => b.error = Some("benchmark cancelled".into()),
                    Err(e) => b.error = Some(e),
                }
            }
        }
    }

    fn remember_result(&mut self, res: Arc<AnalysisResult>) {
        self.cache.retain(|c| c.key != res.key);
        self.cache.push_front(res);
        self.cache.truncate(6);
    }

    /// While the full analysis runs and the view shows its preview: (preview tokens, tokens to come).
    pub fn showing_preview(&self) -> Option<(usize, usize)> {
        let (running, res) = (self.running_key.as_ref()?, self.result.as_ref()?);
        (jobs::preview_key(running).as_ref() == Some(&res.key)).then(|| (res.tokens(), running.params.max_tokens.min(res.text_tokens)))
    }

    fn set_result(&mut self, res: Arc<AnalysisResult>) {
        let n_layers = res.layers();
        if self.settings.layer >= n_layers {
            self.settings.layer = n_layers.saturating_sub(1);
        }
        self.settings.side_layers.retain(|&l| l < n_layers);
        if self.settings.side_layers.is_empty() {
            self.settings.side_layers = vec![0, n_layers / 2, n_layers.saturating_sub(1)];
            self.settings.side_layers.dedup();
        }
        if self.selected.is_some_and(|s| s >= res.tokens()) {
            self.selected = None;
        }
        if self.partners.as_ref().is_some_and(|p| p.key != res.key) {
            self.partners = None;
        }
        self.result = Some(res);
        self.first_view_seconds.get_or_insert_with(|| self.started.elapsed().as_secs_f64());
    }

    /// A load failed: show why and go back to what was loaded before (the app keeps running).
    fn load_failed(&mut self, kind: InputKind, e: String) {
        let what = match self.settings.path(kind) {
            Some(p) => format!("{} {}", kind.label(), p.display()),
            None => format!("the default {}", kind.label()),
        };
        self.errors.push(format!("cannot open {what}: {e}"));
        let previous = match kind {
            InputKind::Model => self.model.as_ref().map(|m| m.path.clone()),
            InputKind::Adapter => self.adapter.as_ref().map(|a| a.path.clone()),
            InputKind::Text => self.text.as_ref().map(|t| t.path.clone()),
        };
        if let Some(p) = previous {
            *self.settings.path_mut(kind) = p;
            // What is loaded is what is wanted again: nothing to retry.
            let w = self.wanted(kind);
            if let Some(w) = w {
                self.attempted.insert(kind, w);
            }
        }
    }

    fn wanted(&self, kind: InputKind) -> Option<Wanted> {
        match kind {
            InputKind::Model => Some(Wanted::Model(self.settings.model.clone(), self.settings.params.device)),
            InputKind::Adapter => Some(Wanted::Adapter(self.settings.adapter.clone(), self.model.as_ref()?.gen)),
            InputKind::Text => Some(Wanted::Text(self.settings.text.clone())),
        }
    }

    fn loaded(&self, kind: InputKind) -> Option<Wanted> {
        match kind {
            InputKind::Model => self.model.as_ref().map(|m| Wanted::Model(m.path.clone(), m.device)),
            InputKind::Adapter => self.adapter.as_ref().map(|a| Wanted::Adapter(a.path.clone(), a.model_gen)),
            InputKind::Text => self.text.as_ref().map(|t| Wanted::Text(t.path.clone())),
        }
    }

    /// Starts whatever loads or analysis the settings ask for and is not loaded or running.
    pub fn reconcile(&mut self) {
        for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
            let Some(w) = self.wanted(kind) else { continue };
            if self.loaded(kind).as_ref() == Some(&w) || self.attempted.get(&kind) == Some(&w) {
                continue;
            }
            self.attempted.insert(kind, w.clone());
            match w {
                Wanted::Model(path, device) => {
                    self.worker.spawn(TaskKind::LoadModel, move |h| jobs::load_model(path, device, h));
                }
                Wanted::Adapter(path, model_gen) => {
                    let model = self.model.as_ref().expect("wanted only with a model").model.clone();
                    self.worker.spawn(TaskKind::LoadAdapter, move |h| jobs::load_adapter(model, path, model_gen, h));
                }
                Wanted::Text(path) => {
                    self.worker.spawn(TaskKind::LoadText, move |h| jobs::load_text(path, h));
                }
            }
        }
        let Some(key) = self.wanted_key() else { return };
        if self.result.as_ref().is_some_and(|r| r.key == key) || self.running_key.as_ref() == Some(&key) || self.stopped_key.as_ref() == Some(&key) {
            return;
        }
        if let Some(hit) = self.cache.iter().find(|c| c.key == key).cloned() {
            self.worker.cancel(TaskKind::Analyze);
            self.running_key = None;
            self.set_result(hit);
            return;
        }
        let (m, a, t) = (self.model.as_ref().unwrap(), self.adapter.as_ref().unwrap(), self.text.as_ref().unwrap());
        let job = jobs::AnalysisJob {
            model: m.model.clone(),
            adapter: self.configured_adapter(&a.adapter),
            adapter_label: a.label.clone(),
            text: t.text.clone(),
            key: key.clone(),
        };
        // A cached preview shows at once; otherwise the job computes one first.
        let cached_preview = jobs::preview_key(&key).and_then(|pk| self.cache.iter().find(|c| c.key == pk).cloned());
        let preview = cached_preview.is_none();
        self.running_key = Some(key);
        if let Some(p) = cached_preview {
            self.set_result(p);
        }
        self.worker.spawn_streaming(TaskKind::Analyze, move |h, interim| {
            Msg::Analysis(jobs::analyze(job, preview, h, &|r| interim.send(Msg::Preview(r))))
        });
    }

    /// Clicking a token: compute the attention its row gives, in the background.
    pub fn select_token(&mut self, i: Option<usize>) {
        self.selected = i;
        self.partners = None;
        self.worker.cancel(TaskKind::Attention);
        let (Some(i), Some(res)) = (i, self.result.clone()) else { return };
        let (layer, head) = (self.settings.layer, self.settings.head);
        self.worker.spawn(TaskKind::Attention, move |h| Msg::Partners(jobs::partners(&res, i, layer, head, h)));
    }

    /// Starts the speed panel's selected benchmark.
    pub fn start_bench(&mut self) {
        match self.settings.bench_kind {
            BenchKind::Attention => self.start_attention_bench(),
            BenchKind::WholeModel => self.start_model_bench(),
        }
    }

    pub fn start_attention_bench(&mut self) {
        let Some(res) = self.result.clone() else { return };
        let lengths = match parse_lengths(&self.settings.attn_bench_lengths) {
            Some(l) => l,
            None => {
                self.errors.push(format!("benchmark lengths {:?}: expected positive numbers separated by commas", self.settings.attn_bench_lengths));
                return;
            }
        };
        let device = if DeviceChoice::available().contains(&self.settings.attn_bench_device) { self.settings.attn_bench_device } else { DeviceChoice::Cpu };
        let cfg = jobs::attention_config(&res, lengths, self.settings.bench_repeats, device);
        let (settings, cli) = jobs::attention_settings(&res, &cfg, device);
        let live = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        self.attn_bench = Some(AttnBenchState { live: live.clone(), settings, cli, ..Default::default() });
        // One benchmark at a time (they would slow each other down): this cancels a running one.
        self.worker.spawn(TaskKind::Bench, move |h| Msg::AttnBench(jobs::attention_bench(cfg, device, &live, h)));
    }

    pub fn start_model_bench(&mut self) {
        let Some(res) = self.result.clone() else { return };
        let lengths: Result<Vec<usize>, _> = self.settings.bench_lengths.split(',').map(|s| s.trim().parse::<usize>()).collect();
        let lengths = match lengths {
            Ok(l) if !l.is_empty() => l,
            _ => {
                self.errors.push(format!("benchmark lengths {:?}: expected numbers separated by commas", self.settings.bench_lengths));
                return;
            }
        };
        let repeats = self.settings.bench_repeats.max(1);
        let device = self.settings.params.device;
        let live = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        self.bench = Some(BenchState { live: live.clone(), ..Default::default() });
        self.worker.spawn(TaskKind::Bench, move |h| Msg::Bench(jobs::bench(&res, lengths, repeats, device, &live, h)));
    }

    /// Collects finished background work and starts what is needed. Called every frame (and by
    /// tests between steps).
    pub fn update(&mut self, ctx: &egui::Context) {
        self.worker.set_context(ctx);
        if self.ctx.is_none() {
            self.ctx = Some(ctx.clone());
        }
        for f in self.worker.poll() {
            match f.value {
                Ok(m) => self.handle(m),
                Err(panic) => self.errors.push(format!("{} failed: internal error: {panic}", f.kind.label())),
            }
        }
        if let Some(rx) = &self.png_rx {
            if let Ok(r) = rx.try_recv() {
                match r {
                    Ok(p) => self.status = format!("wrote {}", p.display()),
                    Err(e) => self.errors.push(e),
                }
                self.png_rx = None;
            }
        }
        if let Some((purpose, path)) = self.dialogs.poll() {
            self.dialog_closed(purpose, path);
        }
        let dropped: Vec<PathBuf> = ctx.input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).filter(|p| !p.as_os_str().is_empty()).collect());
        for p in dropped {
            self.open_dropped(p);
        }
        self.reconcile();
        if self.busy() {
            // Progress and busy indicators move at this pace; results arrive with a repaint
            // request anyway. Not faster: every frame costs CPU that the work could use.
            ctx.request_repaint_after(BUSY_REPAINT);
        }
    }

    /// The whole window. `App::ui` calls this; tests call it through egui_kittest.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        let t0 = Instant::now();
        let ctx = ui.ctx().clone();
        self.update(&ctx);
        panels::menu::show(self, ui);
        panels::status::show(self, ui);
        panels::controls::show(self, ui);
        panels::details::show(self, ui);
        let central = egui::CentralPanel::default().show(ui, |ui| panels::central(self, ui));
        self.view_rect = Some(central.response.rect);
        self.frame_times.push_back(t0.elapsed().as_secs_f32());
        if self.frame_times.len() > 120 {
            self.frame_times.pop_front();
        }
    }

    /// The egui context of the window (once shown).
    pub fn worker_context(&self) -> Option<egui::Context> {
        self.ctx.clone()
    }

    /// Worst UI time over the recent frames, in seconds.
    pub fn worst_frame(&self) -> f32 {
        self.frame_times.iter().cloned().fold(0.0, f32::max)
    }
}

impl eframe::App for FocusLensApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.settings);
    }

    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        // Closing during work: ask every task to stop; their threads end at the next layer.
        self.worker.cancel_all();
    }
}

/// "1024, 2048,4096" -> lengths; None when empty, not numbers, or zero.
pub fn parse_lengths(s: &str) -> Option<Vec<usize>> {
    let v: Vec<usize> = s.split(',').filter(|p| !p.trim().is_empty()).map(|p| p.trim().parse::<usize>().ok().filter(|&n| n > 0)).collect::<Option<_>>()?;
    (!v.is_empty()).then_some(v)
}
