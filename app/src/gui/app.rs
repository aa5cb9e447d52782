//! The app: owns the settings, the session (loaded inputs and analyses), the selection, the
//! views' state and the background worker. Each frame it takes what came back on the worker's
//! channel (one `handle_*` function per kind of message), opens dropped files, reconciles what
//! is loaded with what the settings ask for (`Session::reconcile` starts loads and analyses),
//! then lets the views draw and applies the commands they return (`apply`), in one place.

use super::dialogs::{Dialogs, Purpose};
use super::export::{self, ExportKind};
use super::jobs::{self, JobError, MaskImage, Msg};
use super::session::Session;
use super::state::*;
use super::views::{mask, Command, ViewCtx, Views};
use super::worker::{TaskKind, Worker};
use focus_core::Adapter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// How often the window repaints while background work runs (progress, busy indicators).
pub const BUSY_REPAINT: std::time::Duration = std::time::Duration::from_millis(200);

pub struct FocusLensApp {
    pub settings: Settings,
    pub worker: Worker<Msg>,
    /// The loaded inputs, the analysis on screen and what is on its way.
    pub session: Session,
    /// The hovered and selected token, and the selected one's partners.
    pub selection: Selection,
    /// Every view's own state.
    pub views: Views,
    /// Native file dialogs (open, export), answered through the worker's channel.
    pub dialogs: Dialogs,
    /// Errors shown in the window until dismissed.
    pub errors: Vec<String>,
    /// The last informational message (exports, truncation, cancel).
    pub status: String,
    /// When set, exports go to this folder without a file dialog (tests, scripted use).
    pub export_dir: Option<PathBuf>,
    pub timing: Timing,
    ctx: Option<egui::Context>,
}

impl FocusLensApp {
    pub fn new(settings: Settings) -> Self {
        let worker = Worker::default();
        let dialogs = Dialogs::new(worker.poster());
        FocusLensApp {
            settings,
            worker,
            session: Session::default(),
            selection: Selection::default(),
            views: Views::default(),
            dialogs,
            errors: Vec::new(),
            status: String::new(),
            export_dir: None,
            timing: Timing::default(),
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

    /// The key the current settings ask for, once all inputs are loaded and consistent.
    pub fn wanted_key(&self) -> Option<AnalysisKey> {
        self.session.wanted_key(&self.settings.params)
    }

    /// The key of the analysis running now, if any.
    pub fn running_analysis(&self) -> Option<&AnalysisKey> {
        self.session.running_analysis()
    }

    /// While the full analysis runs and the view shows its preview: (preview tokens, tokens to come).
    pub fn showing_preview(&self) -> Option<(usize, usize)> {
        self.session.showing_preview()
    }

    /// Opens a file as model, adapter or text (from a dialog, drag and drop, recent list).
    pub fn open(&mut self, kind: InputKind, path: PathBuf) {
        *self.settings.path_mut(kind) = Some(path);
        if kind == InputKind::Adapter {
            // A new adapter brings its own window and Sinkhorn variant.
            self.settings.params.window = None;
            self.settings.params.causal = None;
        }
        self.session.unstop();
    }

    /// Back to the embedded default for one input.
    pub fn use_default(&mut self, kind: InputKind) {
        *self.settings.path_mut(kind) = None;
        self.session.unstop();
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

    /// Cancels the running analysis; the previous result stays on screen.
    pub fn cancel_analysis(&mut self) {
        self.worker.cancel(TaskKind::Analyze);
        let key = self.session.analysis_ended();
        self.session.stop(key);
        self.status = "analysis cancelled; the view shows the previous result".into();
    }

    /// Clicking a token: compute the attention its row gives, in the background.
    pub fn select_token(&mut self, i: Option<usize>) {
        self.selection.selected = i;
        self.selection.partners = None;
        self.worker.cancel(TaskKind::Attention);
        let (Some(i), Some(res)) = (i, self.session.result.clone()) else { return };
        let (layer, head) = (self.settings.layer, self.settings.head);
        self.worker.spawn(TaskKind::Attention, move |h| Msg::Partners(jobs::partners(&res, i, layer, head, h)));
    }

    /// Puts an analysis on screen, fitting the layer choices to it.
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
        if self.selection.selected.is_some_and(|s| s >= res.tokens()) {
            self.selection.selected = None;
        }
        if self.selection.partners.as_ref().is_some_and(|p| p.key != res.key) {
            self.selection.partners = None;
        }
        self.session.result = Some(res);
        self.timing.first_view();
    }

    // ---- What comes back on the worker's channel, one function per kind of message.

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Model(r, path, device) => self.handle_model(r, path, device),
            Msg::Adapter(r, path, model_gen) => self.handle_adapter(r, path, model_gen),
            Msg::Text(r, path) => self.handle_text(r, path),
            Msg::Analysis(r) => self.handle_analysis(r),
            Msg::Preview(res) => self.handle_preview(res),
            Msg::Partners(r) => self.handle_partners(r),
            Msg::Mask(r) => self.handle_mask(r),
            Msg::Bench(r) => self.views.speed.receive_model(r),
            Msg::AttnBench(r) => self.views.speed.receive_attention(r),
            Msg::Dialog(purpose, path) => self.handle_dialog(purpose, path),
            Msg::Png(r) => self.handle_png(r),
        }
    }

    fn handle_model(&mut self, r: Result<Arc<focus_core::Model>, JobError>, path: Option<PathBuf>, device: DeviceChoice) {
        match r {
            Ok(model) => {
                let gen = self.session.gen();
                if let Some(p) = &path {
                    self.settings.remember(InputKind::Model, p.clone());
                }
                self.session.model = Some(LoadedModel { model, path, device, gen });
            }
            Err(e) => self.load_failed(InputKind::Model, e),
        }
    }

    fn handle_adapter(&mut self, r: Result<Arc<Adapter>, JobError>, path: Option<PathBuf>, model_gen: u64) {
        match r {
            Ok(adapter) => {
                let gen = self.session.gen();
                if let Some(p) = &path {
                    self.settings.remember(InputKind::Adapter, p.clone());
                }
                let k = adapter.config.top_k;
                let groups = adapter.config.groups;
                let label = source_label(&path, crate::defaults::SAMPLE_ADAPTER_NAME);
                self.session.adapter = Some(LoadedAdapter { adapter, path, label, model_gen, gen });
                if self.settings.params.k == 0 || self.settings.params.k > groups {
                    self.settings.params.k = k.clamp(1, groups);
                }
            }
            Err(e) => self.load_failed(InputKind::Adapter, e),
        }
    }

    fn handle_text(&mut self, r: Result<(Arc<String>, Option<String>), JobError>, path: Option<PathBuf>) {
        match r {
            Ok((text, note)) => {
                let gen = self.session.gen();
                if let Some(p) = &path {
                    self.settings.remember(InputKind::Text, p.clone());
                }
                if let Some(n) = &note {
                    self.status = n.clone();
                }
                let label = source_label(&path, crate::defaults::SAMPLE_TEXT_NAME);
                self.session.text = Some(LoadedText { text, path, label, note, gen });
                self.selection.selected = None;
                self.selection.partners = None;
            }
            Err(e) => self.load_failed(InputKind::Text, e),
        }
    }

    /// A load failed: show why and go back to what was loaded before (the app keeps running).
    fn load_failed(&mut self, kind: InputKind, e: JobError) {
        let what = match self.settings.path(kind) {
            Some(p) => format!("{} {}", kind.label(), p.display()),
            None => format!("the default {}", kind.label()),
        };
        self.errors.push(format!("cannot open {what}: {e}"));
        if let Some(p) = self.session.loaded_path(kind) {
            *self.settings.path_mut(kind) = p;
            // What is loaded is what is wanted again: nothing to retry.
            self.session.mark_attempted(kind, &self.settings);
        }
    }

    fn handle_analysis(&mut self, r: Result<AnalysisResult, JobError>) {
        let key = self.session.analysis_ended();
        match r {
            Ok(res) => {
                let res = Arc::new(res);
                if let Some(n) = &res.note {
                    self.status = n.clone();
                }
                self.session.remember_result(res.clone());
                self.set_result(res);
            }
            Err(JobError::Cancelled) => {}
            Err(JobError::Failed(e)) => {
                self.session.stop(key);
                self.errors.push(format!("analysis failed: {e}"));
            }
        }
    }

    /// Shown only while its full analysis is still the one wanted.
    fn handle_preview(&mut self, res: AnalysisResult) {
        if self.session.is_running_preview(&res.key) {
            let res = Arc::new(res);
            self.session.remember_result(res.clone());
            self.set_result(res);
        }
    }

    fn handle_partners(&mut self, r: Result<Partners, JobError>) {
        match r {
            Ok(p) => self.selection.partners = Some(p),
            Err(JobError::Cancelled) => {}
            Err(JobError::Failed(e)) => self.errors.push(format!("attention weights: {e}")),
        }
    }

    fn handle_mask(&mut self, r: Result<MaskImage, JobError>) {
        // A cancelled or impossible image leaves the view waiting, as it always has.
        if let Ok(img) = r {
            self.views.mask.receive(img);
        }
    }

    /// A file dialog's answer: open the chosen file or write the export (nothing on cancel).
    fn handle_dialog(&mut self, purpose: Purpose, path: Option<PathBuf>) {
        self.dialogs.closed();
        let Some(path) = path else { return };
        match purpose {
            Purpose::Open(kind) => self.open(kind, path),
            Purpose::OpenModelFolder => self.open(InputKind::Model, path),
            Purpose::Export(kind) => self.export_to(kind, path),
        }
    }

    fn handle_png(&mut self, r: Result<PathBuf, String>) {
        match r {
            Ok(p) => self.status = format!("wrote {}", p.display()),
            Err(e) => self.errors.push(e),
        }
    }

    // ---- Exports.

    /// The Export menu: asks for a path (a native dialog, answered in a later frame), or writes
    /// into `export_dir` at once when that is set.
    fn export(&mut self, kind: ExportKind) {
        if self.session.result.is_none() {
            self.errors.push("nothing to export yet: no analysis has finished".into());
            return;
        }
        let name = export::default_name(&self.settings, kind);
        match &self.export_dir {
            Some(d) => {
                let path = d.join(name);
                self.export_to(kind, path)
            }
            None => self.dialogs.show(Purpose::Export(kind), &name, self.ctx.clone()),
        }
    }

    /// Writes the export to `path` (atomically); a PNG is written when its screenshot arrives.
    fn export_to(&mut self, kind: ExportKind, path: PathBuf) {
        let Some(res) = self.session.result.clone() else {
            self.errors.push("nothing to export yet: no analysis has finished".into());
            return;
        };
        if kind == ExportKind::ViewPng {
            return self.request_png(path);
        }
        let text = match kind {
            ExportKind::StatsCsv | ExportKind::StatsJson => export::stats(&res, kind),
            ExportKind::ViewSvg => self.views.svg(&self.settings, &res),
            ExportKind::ViewPng => unreachable!(),
        };
        match text.and_then(|t| export::write(&path, t.as_bytes())) {
            Ok(()) => self.status = format!("wrote {}", path.display()),
            Err(e) => self.errors.push(format!("export to {} failed: {e}", path.display())),
        }
    }

    /// Asks for a screenshot of the central view; the PNG's outcome arrives as `Msg::Png`.
    fn request_png(&mut self, path: PathBuf) {
        let Some(rect) = self.views.rect else {
            self.errors.push("PNG export: the view has not been drawn yet".into());
            return;
        };
        let Some(ctx) = self.ctx.clone() else {
            self.errors.push("PNG export needs the window".into());
            return;
        };
        let post = self.worker.poster();
        export::request_png(&ctx, rect, path, move |r| post.send(Msg::Png(r)));
    }

    // ---- The views' commands, applied once per frame.

    fn apply(&mut self, c: Command) {
        match c {
            Command::Open(kind, path) => self.open(kind, path),
            Command::UseDefault(kind) => self.use_default(kind),
            Command::Dialog(purpose) => self.dialogs.show(purpose, "", self.ctx.clone()),
            Command::Export(kind) => self.export(kind),
            Command::Set(s) => self.settings.set(s),
            Command::Rerun => self.session.unstop(),
            Command::Select(i) => self.select_token(i),
            Command::Hover { token, layer } => {
                self.selection.hovered = token;
                self.selection.hovered_layer = layer;
            }
            Command::ScrollTo(j) => self.views.scroll_to = Some(j),
            Command::DismissError(n) => {
                if n < self.errors.len() {
                    self.errors.remove(n);
                }
            }
            Command::Error(e) => self.errors.push(e),
            Command::CancelAnalysis => self.cancel_analysis(),
            Command::Cancel(kind) => self.worker.cancel(kind),
            Command::StartBench(job) => {
                // One benchmark at a time: this cancels a running one.
                self.worker.spawn(TaskKind::Bench, move |h| job.run(h));
            }
            Command::BuildMask(res, layer) => {
                self.worker.spawn(TaskKind::Mask, move |h| Msg::Mask(jobs::mask_image(&res, layer, mask::MAX_SIDE, h)));
            }
        }
    }

    // ---- The frame.

    /// Collects finished background work and starts what is needed. Called every frame (and by
    /// tests between steps).
    pub fn update(&mut self, ctx: &egui::Context) {
        self.worker.set_context(ctx);
        if self.ctx.is_none() {
            self.ctx = Some(ctx.clone());
        }
        for m in self.worker.poll() {
            match m {
                Ok(m) => self.handle(m),
                Err(p) => self.errors.push(format!("{} failed: internal error: {}", p.kind.label(), p.message)),
            }
        }
        let dropped: Vec<PathBuf> = ctx.input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).filter(|p| !p.as_os_str().is_empty()).collect());
        for p in dropped {
            self.open_dropped(p);
        }
        if let Some(res) = self.session.reconcile(&self.settings, &mut self.worker) {
            self.set_result(res);
        }
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
        let cx = ViewCtx {
            settings: &self.settings,
            session: &self.session,
            selection: &self.selection,
            worker: &self.worker,
            errors: &self.errors,
            status: &self.status,
            timing: &self.timing,
            dialog_open: self.dialogs.open().is_some(),
        };
        let commands = self.views.show(&cx, ui);
        // What the commands change shows in the next frame. (Every frame says what is hovered:
        // that alone asks for no frame, as before.)
        if commands.iter().any(|c| !matches!(c, Command::Hover { .. })) {
            ctx.request_repaint();
        }
        for c in commands {
            self.apply(c);
        }
        self.timing.frame(t0.elapsed().as_secs_f32());
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
