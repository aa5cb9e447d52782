//! The app: owns the settings, the session (loaded inputs and analyses), the selection, the
//! views' state and the background worker. Each frame it takes what came back on the worker's
//! channel (one `handle_*` function per kind of message), opens dropped files, reconciles what
//! is loaded with what the settings ask for (`Session::reconcile` starts loads and analyses),
//! then lets the views draw and applies the commands they return (`apply`), in one place.

use super::jobs::dialogs::{Dialogs, Purpose, FAILED_WITHIN};
use super::export::{self, ExportKind};
use super::jobs::{self, JobError, MaskImage, Msg};
use super::session::Session;
use super::state::*;
use super::views::files::FileTask;
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
    pub dialogs: Dialogs<Msg>,
    /// Errors shown in the window until dismissed.
    pub errors: Vec<String>,
    /// The last informational message (exports, truncation, cancel).
    pub status: String,
    /// When set, exports go to this folder without a file dialog (tests, scripted use).
    pub export_dir: Option<PathBuf>,
    pub timing: Timing,
    /// The full analysis, arrived while the pointer rests on its preview: it replaces the
    /// preview when the pointer moves (nothing changes under a still mouse).
    pub pending_full: Option<Arc<AnalysisResult>>,
    /// A reopened session's selected token, selected once an analysis long enough arrives.
    pub pending_select: Option<usize>,
    /// And its selected range, restored with it.
    pub pending_range: Option<(usize, usize)>,
    /// The window and Sinkhorn overrides an adapter being opened replaced: restored when it is
    /// refused (a refused input changes nothing).
    adapter_restore: Option<(Option<usize>, Option<bool>)>,
    /// A text refused as not UTF-8, which the status bar offers to read as Latin-1.
    pub lossy_offer: Option<PathBuf>,
    /// The captured layers of the segment last looked into, shared by the partners and grid
    /// jobs (`jobs::HeadsCache`).
    pub heads: jobs::HeadsCache,
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
            pending_full: None,
            pending_select: None,
            pending_range: None,
            adapter_restore: None,
            lossy_offer: None,
            heads: Default::default(),
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
        self.session.wanted_key(&self.settings.setup.params)
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
        // What the status line said was about the inputs before.
        self.status.clear();
        *self.settings.inputs.path_mut(kind) = Some(path);
        if kind == InputKind::Adapter {
            // A new adapter brings its own window and Sinkhorn variant (the current ones come
            // back if it is refused).
            let p = &self.settings.setup.params;
            self.adapter_restore.get_or_insert((p.window, p.causal));
            self.settings.setup.params.window = None;
            self.settings.setup.params.causal = None;
        }
        self.session.unstop();
    }

    /// Reopens a session file: its inputs, settings, view and selection (an error in the window
    /// when it cannot be read; nothing changes then).
    pub fn open_session(&mut self, path: &Path) {
        match super::session::file::SessionFile::read(path) {
            Ok(f) => {
                f.apply(&mut self.settings);
                self.selection = Selection::default();
                self.pending_select = f.selected;
                self.pending_range = f.range;
                self.session.unstop();
                self.status = format!("opened session {}", path.display());
            }
            Err(e) => self.errors.push(format!("cannot open session: {e}")),
        }
    }

    /// Back to the embedded default for one input.
    pub fn use_default(&mut self, kind: InputKind) {
        *self.settings.inputs.path_mut(kind) = None;
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

    /// Clicking a token: compute the attention its row gives, in the background (a selected
    /// range is dropped).
    pub fn select_token(&mut self, i: Option<usize>) {
        self.selection.selected = i;
        self.selection.range = None;
        self.selection.jumped = None;
        self.refresh_partners();
    }

    /// Dragging over tokens, or shift-clicking after a click: the range `[a, b]` (in either
    /// order) is selected, its first token too, and the range's partners are computed. A range
    /// of one token is that token's selection.
    pub fn select_range(&mut self, r: Option<(usize, usize)>) {
        match r {
            Some((a, b)) if a != b => {
                let (a, b) = (a.min(b), a.max(b));
                self.selection.selected = Some(a);
                self.selection.range = Some((a, b));
                self.selection.jumped = None;
                self.refresh_partners();
            }
            Some((a, _)) => self.select_token(Some(a)),
            None => self.select_token(None),
        }
    }

    /// (Re)computes the partners of the selection (the range, else the token) for the analysis
    /// on screen, in the selected layer and head.
    fn refresh_partners(&mut self) {
        self.selection.partners = None;
        self.worker.cancel(TaskKind::Attention);
        let (Some(i), Some(res)) = (self.selection.selected, self.session.result.clone()) else { return };
        let (layer, head) = (self.settings.setup.layer, self.settings.setup.head);
        match self.selection.range {
            Some(r) => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::Attention, move |h| Msg::Partners(jobs::range_partners(&res, r, layer, head, &cache, h)))
            }
            None => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::Attention, move |h| Msg::Partners(jobs::partners(&res, i, layer, head, &cache, h)))
            }
        };
    }

    /// Puts an analysis on screen, fitting the layer choices to it; a selected token's partners
    /// are computed again for it (they belong to one analysis).
    fn set_result(&mut self, res: Arc<AnalysisResult>) {
        self.pending_full = None;
        // A new result: the cancelled analysis is no longer what the view shows.
        if self.status.starts_with("analysis cancelled") && self.session.result.as_ref().is_none_or(|r| r.key != res.key) {
            self.status.clear();
        }
        // Another adapter on the same tokens: number its groups by the previous run's, layer by
        // layer, so that one colour keeps meaning the same tokens.
        let res = match &self.session.result {
            Some(prev)
                if prev.key.adapter_gen != res.key.adapter_gen
                    && prev.key.text_gen == res.key.text_gen
                    && prev.key.model_gen == res.key.model_gen
                    && prev.tokens() == res.tokens()
                    && res.aligned_to.is_none() =>
            {
                Arc::new(res.aligned_to(prev))
            }
            _ => res,
        };
        let n_layers = res.layers();
        if self.settings.setup.layer >= n_layers {
            self.settings.setup.layer = n_layers.saturating_sub(1);
        }
        self.settings.setup.side_layers.retain(|&l| l < n_layers);
        if self.settings.setup.side_layers.is_empty() {
            self.settings.setup.side_layers = vec![0, n_layers / 2, n_layers.saturating_sub(1)];
            self.settings.setup.side_layers.dedup();
        }
        if self.selection.selected.is_some_and(|s| s >= res.tokens()) {
            self.selection.selected = None;
        }
        if self.selection.range.is_some_and(|(_, b)| b >= res.tokens()) || self.selection.selected.is_none() {
            self.selection.range = None;
        }
        if self.selection.partners.as_ref().is_some_and(|p| p.key != res.key) {
            self.selection.partners = None;
        }
        if let Some(i) = self.pending_select.filter(|&i| i < res.tokens() && self.wanted_key().as_ref() == Some(&res.key)) {
            self.pending_select = None;
            self.selection.selected = Some(i);
            self.selection.range = self.pending_range.take().filter(|&(a, b)| a == i && b < res.tokens() && b > a);
            self.selection.partners = None;
            self.views.scroll_to = Some(i);
        }
        let stale_partners = self.selection.partners.as_ref().is_none_or(|p| p.key != res.key);
        self.session.result = Some(res);
        self.timing.first_view();
        if self.selection.selected.is_some() && stale_partners {
            self.refresh_partners();
        }
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
            Msg::Baseline(r) => self.views.categories.receive(r),
            Msg::Mask(r) => self.handle_mask(r),
            Msg::Bench(r) => self.views.speed.receive_model(r),
            Msg::Compare(r) => self.views.compare.receive(r),
            Msg::AttnGrid(r) => self.views.attention.receive(r),
            Msg::HeadPattern(r) => self.views.head.receive(r),
            Msg::AttnBench(r) => self.views.speed.receive_attention(r),
            Msg::GenStep(g) => self.views.generate.receive(g),
            Msg::Generated(r) => match r {
                Ok(g) => self.views.generate.receive(g),
                Err(JobError::Cancelled) => {}
                Err(JobError::Failed(e)) => self.errors.push(format!("generation failed: {e}")),
            },
            Msg::TrainStep(u) => self.views.train.receive(u),
            Msg::Trained(r) => match r {
                Ok(end) => self.views.train.finished(end),
                Err(JobError::Cancelled) => self.views.train.cancelled(),
                Err(JobError::Failed(e)) => {
                    self.views.train.failed(&e);
                    self.errors.push(format!("training failed: {e}"));
                }
            },
            Msg::Dialog(purpose, path) => self.handle_dialog(purpose, path),
            Msg::Png(r) => self.handle_png(r),
            Msg::Index(r) => self.views.centroids.receive(r),
        }
    }

    fn handle_model(&mut self, r: Result<Arc<focus_core::Model>, JobError>, path: Option<PathBuf>, device: DeviceChoice) {
        match r {
            Ok(model) => {
                if self.session.model.is_some() {
                    // Another model: nothing of the previous one stays on screen or runs on. The
                    // adapter is loaded again for it (or refused, with a message).
                    if self.session.running_analysis().is_some() {
                        self.worker.cancel(TaskKind::Analyze);
                        self.session.analysis_ended();
                    }
                    self.session.adapter = None;
                    self.session.result = None;
                    self.pending_full = None;
                    self.selection = Selection::default();
                }
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
                self.adapter_restore = None;
                let gen = self.session.gen();
                if let Some(p) = &path {
                    self.settings.remember(InputKind::Adapter, p.clone());
                }
                let label = source_label(&path, crate::defaults::SAMPLE_ADAPTER_NAME);
                // Another adapter (not the same one loaded again for a new model, nor the first
                // load at start-up, which keeps the remembered k) brings its own k.
                let changed = self.session.adapter.as_ref().is_some_and(|a| a.path != path);
                if let Some(msg) = refit_k(&mut self.settings.setup.params.k, &adapter.config, changed) {
                    self.status = msg;
                }
                self.session.adapter = Some(LoadedAdapter { adapter, path, label, model_gen, gen });
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
                self.lossy_offer = None;
                let label = source_label(&path, crate::defaults::SAMPLE_TEXT_NAME);
                self.session.text = Some(LoadedText { text, path, label, note, gen });
                self.selection.selected = None;
                self.selection.jumped = None;
                self.selection.partners = None;
            }
            Err(e) => self.load_failed(InputKind::Text, e),
        }
    }

    /// A load failed: show why and go back to what was loaded before (the app keeps running).
    fn load_failed(&mut self, kind: InputKind, e: JobError) {
        let what = match self.settings.inputs.path(kind) {
            Some(p) => format!("{} {}", kind.label(), p.display()),
            None => format!("the default {}", kind.label()),
        };
        // A text refused only for its encoding (Latin-1, say) can still be read: offer it.
        self.lossy_offer = match (kind, self.settings.inputs.path(kind)) {
            (InputKind::Text, Some(p)) if e.to_string().contains("not valid UTF-8") => Some(p.to_path_buf()),
            (InputKind::Text, _) => None,
            _ => self.lossy_offer.take(),
        };
        self.errors.push(format!("cannot open {what}: {e}"));
        if kind == InputKind::Adapter {
            if let Some((window, causal)) = self.adapter_restore.take() {
                self.settings.setup.params.window = window;
                self.settings.setup.params.causal = causal;
            }
            if let (None, Some(m)) = (&self.session.adapter, &self.session.model) {
                self.errors.push(format!("no adapter is loaded: open one made for {} (File menu, Open adapter…)", m.model.config().name));
            }
        }
        if let Some(p) = self.session.loaded_path(kind) {
            *self.settings.inputs.path_mut(kind) = p;
            // What is loaded is what is wanted again: nothing to retry.
            self.session.mark_attempted(kind, &self.settings);
        }
    }

    fn handle_analysis(&mut self, r: Result<AnalysisResult, JobError>) {
        let key = self.session.analysis_ended();
        match r {
            Ok(res) => {
                let res = Arc::new(res);
                self.session.remember_result(res.clone());
                // The preview on screen and the pointer resting on it: wait for the pointer to
                // move, so that nothing changes under a still mouse.
                let over_preview = self.session.result.as_ref().is_some_and(|r| key.as_ref().and_then(jobs::preview_key).as_ref() == Some(&r.key));
                if over_preview && self.selection.hovered.is_some() {
                    self.pending_full = Some(res);
                } else {
                    self.set_result(res);
                }
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
        let open_for = self.dialogs.closed();
        let Some(path) = path else {
            if open_for < FAILED_WITHIN {
                // Answered "cancelled" at once: no dialog showed (no portal, no zenity). Say so,
                // and offer the path field and the browser instead.
                let task = match purpose {
                    Purpose::Open(k) => FileTask::Open(k),
                    Purpose::OpenModelFolder => FileTask::OpenModelFolder,
                    Purpose::OpenSession => FileTask::OpenSession,
                    Purpose::Export(k) => FileTask::Export(k),
                };
                let name = matches!(task, FileTask::Export(_)).then(|| export::default_name(&self.settings, match task {
                    FileTask::Export(k) => k,
                    _ => ExportKind::StatsCsv,
                }));
                let msg = "The system file dialog did not open (no XDG desktop portal or zenity answered): type a path or pick one below.".to_string();
                self.views.files.show_task(task, name.as_deref(), &self.settings.prefs.recent, Some(msg));
            }
            return;
        };
        match purpose {
            Purpose::Open(kind) => self.open(kind, path),
            Purpose::OpenModelFolder => self.open(InputKind::Model, path),
            Purpose::OpenSession => self.open_session(&path),
            Purpose::Export(kind) => self.export_to(kind, path),
        }
    }

    fn handle_png(&mut self, r: Result<PathBuf, String>) {
        match r {
            Ok(p) => self.export_done(format!("wrote {}", p.display())),
            Err(e) => self.errors.push(if e.starts_with("PNG export") { e } else { format!("PNG export failed: {e}") }),
        }
    }

    // ---- Exports.

    /// The Export menu: asks for a path in the file window (which offers the system dialog
    /// too), or writes into `export_dir` at once when that is set.
    fn export(&mut self, kind: ExportKind) {
        if self.session.result.is_none() && kind != ExportKind::Session {
            self.errors.push("nothing to export yet: no analysis has finished".into());
            return;
        }
        let name = export::default_name(&self.settings, kind);
        match &self.export_dir {
            Some(d) => {
                let path = d.join(name);
                self.export_to(kind, path)
            }
            None => self.views.files.show_task(FileTask::Export(kind), Some(&name), &self.settings.prefs.recent, None),
        }
    }

    /// Writes the export to `path` (atomically); a PNG is written when its screenshot arrives.
    fn export_to(&mut self, kind: ExportKind, path: PathBuf) {
        if kind == ExportKind::Session {
            let mut f = super::session::file::SessionFile::from_settings(&self.settings, self.selection.selected);
            f.range = self.selection.range;
            let json = f.to_json();
            match export::write(&path, json.as_bytes()) {
                Ok(()) => self.export_done(format!("saved session {}", path.display())),
                Err(e) => self.export_failed(kind, &path, format!("saving the session to {} failed: {e}", path.display())),
            }
            return;
        }
        let Some(res) = self.session.result.clone() else {
            self.errors.push("nothing to export yet: no analysis has finished".into());
            return;
        };
        if kind == ExportKind::ViewPng {
            return self.request_png(path);
        }
        // The selected layer and head (the compare exports' pruned mass in them).
        let (layer, head) = (self.settings.setup.layer.min(res.layers() - 1), self.settings.setup.head.min(res.model.config().n_heads.saturating_sub(1)));
        if matches!(kind, ExportKind::StatsCsv | ExportKind::CompareCsv) {
            // Sets of files: `focus-lens analyze`'s (per group, profiles, tokens), or the
            // comparison's (per token, per layer).
            let written = match (kind, &self.views.compare.result) {
                (ExportKind::StatsCsv, _) => export::write_csv_set(&res, &path, self.settings.setup.raw_groups),
                (_, Some(c)) => export::write_compare_csv(c, &path, layer, head),
                (_, None) => Err("no comparison yet: press Run comparison first".to_string()),
            };
            match written {
                Ok(paths) => self.export_done(format!("wrote {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))),
                Err(e) => self.export_failed(kind, &path, format!("export to {} failed: {e}", path.display())),
            }
            return;
        }
        let text = match kind {
            ExportKind::StatsJson => {
                let text = self.session.text.as_ref().filter(|t| t.gen == res.key.text_gen).map(|t| t.text.clone());
                export::stats_json(&res, export::provenance(&res, &self.settings, text.as_deref().map(|s| s.as_str()), &self.selection), self.settings.setup.raw_groups)
            }
            ExportKind::ViewSvg => self.views.svg(&self.settings, &res, self.selection.selected, self.selection.range),
            ExportKind::CompareJson => self.views.compare.result.as_ref().map(|c| c.json(layer, head)).ok_or_else(|| "no comparison yet: press Run comparison first".to_string()),
            ExportKind::StatsCsv | ExportKind::CompareCsv | ExportKind::ViewPng | ExportKind::Session => unreachable!(),
        };
        match text.and_then(|t| export::write(&path, t.as_bytes())) {
            Ok(()) => self.export_done(format!("wrote {}", path.display())),
            Err(e) => self.export_failed(kind, &path, format!("export to {} failed: {e}", path.display())),
        }
    }

    /// An export succeeded: say so, and drop the errors of earlier attempts (now stale).
    fn export_done(&mut self, status: String) {
        self.errors.retain(|e| !(e.starts_with("export to ") || e.starts_with("saving the session to ") || e.starts_with("PNG export")));
        self.status = status;
    }

    /// An export failed: the error, and the file window again with the path the user typed
    /// (when exports go through it), so that it can be corrected rather than typed again.
    fn export_failed(&mut self, kind: ExportKind, path: &Path, error: String) {
        self.errors.push(error.clone());
        if self.export_dir.is_none() {
            self.views.files.show_task(FileTask::Export(kind), Some(&path.display().to_string()), &self.settings.prefs.recent, Some(format!("{error}. Correct the path and press Save again.")));
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
            Command::OpenSession(path) => self.open_session(&path),
            Command::UseDefault(kind) => self.use_default(kind),
            Command::Dialog(purpose) => {
                let name = match purpose {
                    Purpose::Export(k) => export::default_name(&self.settings, k),
                    _ => String::new(),
                };
                self.dialogs.show(purpose, &name, self.ctx.clone())
            }
            Command::ShowFiles(task) => {
                let name = match task {
                    FileTask::Export(k) => Some(export::default_name(&self.settings, k)),
                    _ => None,
                };
                self.views.files.show_task(task, name.as_deref(), &self.settings.prefs.recent, None)
            }
            Command::Export(kind) => self.export(kind),
            Command::ExportTo(kind, path) => self.export_to(kind, path),
            Command::ShowGlossary => self.views.glossary.open = true,
            Command::Jump(i) => {
                self.settings.setup.tab = Tab::Tokens;
                self.views.scroll_to = Some(i);
                self.select_token(Some(i));
            }
            Command::StartCompare(spec) => self.start_compare(spec),
            Command::BuildAttnGrid(res, i) => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::AttnGrid, move |h| Msg::AttnGrid(super::jobs::attention_grid(&res, i, &cache, h)));
            }
            Command::BuildHeadPattern(res, layer, head, range) => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::HeadPattern, move |h| Msg::HeadPattern(super::jobs::head_pattern(&res, range, layer, head, &cache, h)));
            }
            Command::Set(s) => {
                // A status about the Sinkhorn variant goes stale when the user sets it.
                if let Setting::Params(p) = &s {
                    if p.causal != self.settings.setup.params.causal && self.status.contains("Sinkhorn set to") {
                        self.status.clear();
                    }
                    // And one about a cancelled analysis, when the user asks for another.
                    if *p != self.settings.setup.params && self.status.starts_with("analysis cancelled") {
                        self.status.clear();
                    }
                }
                self.settings.set(s)
            }
            Command::Rerun => self.session.unstop(),
            Command::Select(i) => self.select_token(i),
            Command::SelectRange(r) => self.select_range(r),
            Command::BuildBaseline(res) => {
                // The text the analysis was made from (the loaded one, when it still is), else
                // its tokens put back together.
                let text = match self.session.text.as_ref().filter(|t| t.gen == res.key.text_gen) {
                    Some(t) => t.text.clone(),
                    None => Arc::new(res.analysis.tokens.iter().map(|t| t.text.as_str()).collect::<String>()),
                };
                self.worker.spawn(TaskKind::Baseline, move |h| Msg::Baseline(jobs::baseline(&res, &text, h)));
            }
            Command::Hover { token, layer } => {
                self.selection.hovered = token;
                self.selection.hovered_layer = layer;
            }
            Command::ScrollTo(j) => self.views.scroll_to = Some(j),
            Command::OpenTextLossy(p) => {
                self.lossy_offer = None;
                self.errors.retain(|e| !(e.contains("not valid UTF-8") && e.contains(&p.display().to_string())));
                self.session.latin1.insert(p.clone());
                self.open(InputKind::Text, p);
                self.session.retry(InputKind::Text);
            }
            Command::JumpToPartner(j) => {
                // The partner is shown where tokens are drawn: the current view when it draws
                // them, else the token view.
                if !matches!(self.settings.setup.tab, Tab::Tokens | Tab::Layers) {
                    self.settings.setup.tab = Tab::Tokens;
                }
                self.views.scroll_to = Some(j);
                self.selection.jumped = Some(j);
            }
            Command::DismissErrors => self.errors.clear(),
            Command::Error(e) => self.errors.push(e),
            Command::CancelAnalysis => self.cancel_analysis(),
            Command::Cancel(kind) => self.worker.cancel(kind),
            Command::StartBench(job) => {
                // One benchmark at a time: this cancels a running one.
                self.worker.spawn(TaskKind::Bench, move |h| job.run(h));
            }
            Command::StartGenerate(job) => {
                // One generation at a time: this stops a running one.
                self.worker.spawn_streaming(TaskKind::Generate, move |h, interim| Msg::Generated(job.run(h, &|g| interim.send(Msg::GenStep(g)))));
            }
            Command::ShowIntervene(token) => self.views.intervene.open_for(token),
            Command::StartIntervene(job) => {
                // Its result is a comparison (A intervened, B original): it runs as the Compare
                // task, replacing a running comparison.
                self.views.compare.error = None;
                self.worker.spawn(TaskKind::Compare, move |h| Msg::Compare(job.run(h)));
            }
            Command::StartTrain(job) => {
                // One run at a time: the view offers Start only when none runs.
                self.worker.spawn_streaming(TaskKind::Train, move |h, interim| Msg::Trained(job.run(h, &|u| interim.send(Msg::TrainStep(u)))));
            }
            Command::StartIndex(job) => {
                // One build at a time: this cancels a running one (its documents stay in the file).
                self.worker.spawn(TaskKind::Index, move |h| job.run(h));
            }
            Command::AnalyseGenerated { text, params, tokens } => self.analyse_generated(&text, params, tokens),
            Command::BuildMask(res, layer) => {
                self.worker.spawn(TaskKind::Mask, move |h| Msg::Mask(jobs::mask_image(&res, layer, mask::MAX_SIDE, h)));
            }
        }
    }

    /// Writes a generated text to a file (in `export_dir` when set, else the cache folder's
    /// `generated/`), opens it as the text and analyses it with the settings it was generated
    /// with, in the token view.
    fn analyse_generated(&mut self, text: &str, params: RunParams, tokens: usize) {
        let dir = self.export_dir.clone().unwrap_or_else(|| crate::defaults::cache_dir().join("generated"));
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let path = dir.join(format!("generated-{stamp}.txt"));
        if let Err(e) = std::fs::create_dir_all(&dir).map_err(|e| e.to_string()).and_then(|()| export::write(&path, text.as_bytes())) {
            self.errors.push(format!("cannot save the generated text to {}: {e}", path.display()));
            return;
        }
        let max_tokens = params.max_tokens.max(tokens).min(MAX_TOKENS_LIMIT);
        let changed = params.causal != self.settings.setup.params.causal;
        self.settings.setup.params = RunParams { max_tokens, ..params };
        self.open(InputKind::Text, path.clone());
        self.settings.setup.tab = Tab::Tokens;
        let sinkhorn = if changed { format!("; Sinkhorn set to {} as generated", if self.settings.setup.params.causal == Some(true) { "causal" } else { "whole-sequence" }) } else { String::new() };
        self.status = format!("analysing the generated text, saved as {}{sinkhorn}", path.display());
    }

    /// Starts the comparison of the analysis on screen (run A) with run B.
    fn start_compare(&mut self, spec: CompareSpec) {
        let Some(res) = self.session.result.clone() else { return };
        let groups = res.groups();
        let a_adapter = res.adapter.clone();
        let mut b_adapter = (*self.session.adapter.as_ref().map(|a| a.adapter.clone()).unwrap_or_else(|| a_adapter.clone())).clone();
        b_adapter.config.window = a_adapter.config.window;
        b_adapter.config.causal_sinkhorn = spec.causal.unwrap_or(a_adapter.config.causal_sinkhorn);
        // Dense and soft B have no k of their own: their groups are compared at A's k.
        let k_b = if spec.mode == ModeChoice::TopK { spec.k.max(1) } else { res.key.params.k };
        // Top-k B with its own adapter: k is checked against B's K when B has loaded.
        let mode_b = match spec.mode {
            ModeChoice::Dense => Some(focus_core::Mode::Dense),
            ModeChoice::Soft => Some(focus_core::Mode::Soft),
            ModeChoice::TopK if spec.adapter.is_some() => None,
            ModeChoice::TopK => match focus_core::focus::mask::TopK::new(k_b, groups) {
                Ok(k) => Some(focus_core::Mode::TopK(k)),
                Err(e) => {
                    self.errors.push(format!("run B: {e}"));
                    return;
                }
            },
        };
        let a_label = super::views::compare::describe(&res.mode.to_string(), a_adapter.config.causal_sinkhorn, &res.analysis.adapter);
        let b_name = spec.adapter.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| res.analysis.adapter.clone());
        let b_mode_label = mode_b.map_or_else(|| format!("topk({k_b})"), |m| m.to_string());
        let b_label = super::views::compare::describe(&b_mode_label, b_adapter.config.causal_sinkhorn, &b_name);
        let job = super::jobs::CompareJob {
            res: res.clone(),
            spec: spec.clone(),
            a: super::jobs::CompareRun { label: a_label, mode: Some(res.mode), k: res.key.params.k, adapter: a_adapter },
            b: super::jobs::CompareRun { label: b_label, mode: mode_b, k: k_b, adapter: Arc::new(b_adapter) },
            b_adapter_path: spec.adapter.clone(),
        };
        self.views.compare.error = None;
        self.worker.spawn(TaskKind::Compare, move |h| Msg::Compare(job.run(h)));
    }

    /// Arrow keys move the layer (left/right) and the head (up/down) while no text field has
    /// the keyboard.
    fn keys(&mut self, ctx: &egui::Context) {
        if ctx.memory(|m| m.focused().is_some()) {
            return;
        }
        let Some(m) = self.session.model.as_ref() else { return };
        let (layers, heads) = (m.model.config().n_layers, m.model.config().n_heads);
        let (l, h) = (self.settings.setup.layer, self.settings.setup.head);
        ctx.input(|i| {
            if i.key_pressed(egui::Key::ArrowRight) {
                self.settings.setup.layer = (l + 1).min(layers - 1);
            }
            if i.key_pressed(egui::Key::ArrowLeft) {
                self.settings.setup.layer = l.saturating_sub(1);
            }
            if i.key_pressed(egui::Key::ArrowUp) {
                self.settings.setup.head = h.saturating_sub(1);
            }
            if i.key_pressed(egui::Key::ArrowDown) {
                self.settings.setup.head = (h + 1).min(heads - 1);
            }
        });
        if (l, h) != (self.settings.setup.layer, self.settings.setup.head) && self.selection.selected.is_some() {
            self.refresh_partners();
        }
    }

    // ---- The frame.

    /// Collects finished background work and starts what is needed. Called every frame (and by
    /// tests between steps).
    pub fn update(&mut self, ctx: &egui::Context) {
        super::paint::palette::set_colour_blind(self.settings.setup.colour_blind);
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
            // The cache holds the full result that waits for the mouse: it keeps waiting.
            if self.pending_full.as_ref().is_none_or(|p| p.key != res.key) {
                self.set_result(res);
            }
        }
        if let Some(p) = &self.pending_full {
            let moved = ctx.input(|i| i.pointer.delta() != egui::Vec2::ZERO || i.pointer.hover_pos().is_none());
            if self.wanted_key().as_ref() != Some(&p.key) {
                self.pending_full = None;
            } else if moved || self.selection.hovered.is_none() {
                let p = p.clone();
                self.set_result(p);
            }
        }
        self.keys(ctx);
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
            pending_full: self.pending_full.is_some(),
            lossy_offer: self.lossy_offer.as_deref(),
            scroll_to: Default::default(),
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

/// Fits k to a newly loaded adapter: a different adapter (`changed`) brings its own top_k; any
/// k outside 1..=K is clamped. Returns what changed, in words, for the status line (k used to
/// stay at 3 when K went from 8 to 4: every pair then shares a group, i.e. dense attention).
pub fn refit_k(k: &mut usize, cfg: &focus_core::AdapterConfig, changed: bool) -> Option<String> {
    let groups = cfg.groups.max(1);
    let before = *k;
    if changed {
        *k = cfg.top_k.clamp(1, groups);
    } else if *k == 0 || *k > groups {
        *k = cfg.top_k.clamp(1, groups);
    }
    (*k != before).then(|| format!("k set to {} (the adapter's top_k; K = {groups}), was {before}", *k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_is_refitted_when_the_adapter_changes() {
        let mut cfg: focus_core::AdapterConfig = serde_json::from_str(include_str!("../../../sample_adapters/smollm2-135m-k4/adapter_config.json")).unwrap();
        let mut k = 3;
        let msg = refit_k(&mut k, &cfg, true).expect("stated");
        assert_eq!(k, 2);
        assert!(msg.contains("k set to 2") && msg.contains("K = 4"), "{msg}");
        // Start-up (the same adapter as remembered): the remembered k stays when valid.
        let mut k = 3;
        assert!(refit_k(&mut k, &cfg, false).is_none());
        assert_eq!(k, 3);
        cfg.groups = 2;
        let mut k = 3;
        refit_k(&mut k, &cfg, false).unwrap();
        assert_eq!(k, 2);
    }
}
