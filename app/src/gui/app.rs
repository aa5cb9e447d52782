//! The app: `FocusLensApp` owns the settings, the session (loaded inputs and analyses), the
//! selection, the views' state and the background worker; this file holds it and the frame loop.
//! Each frame it takes what came back on the worker's channel (`messages`: one `handle_*` method
//! per kind of message), opens dropped files, reconciles what is loaded with what the settings
//! ask for (`Session::reconcile` starts loads and analyses), then lets the views draw and applies
//! the commands they return (`commands`: `apply`, in one place). Its files:
//!
//! - `app.rs`: `FocusLensApp`, opening inputs, the selection and the result on screen, the
//!   frame loop (`update`, `show`) and `refit_k`;
//! - `app/messages.rs`: handling each `Msg`;
//! - `app/commands.rs`: applying the views' `Command`s;
//! - `app/exporting.rs`: the export flow (asking for a path, writing, reporting).

mod commands;
mod exporting;
mod messages;

use super::jobs::dialogs::Dialogs;
use super::jobs::{self, Msg};
use super::session::Session;
use super::state::*;
use super::views::{Command, ViewCtx, Views};
use super::worker::{TaskKind, Worker};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A restart on a remembered text of more tokens than this asks before analysing it
/// (`hold_long_restart`): 10K tokens take 1-2 minutes on 2 cores.
pub const LONG_RESTART_TOKENS: usize = 8192;

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
    /// A reopened session's file and the model and adapter fingerprints it recorded: compared
    /// with what loads (`check_session_inputs`), once.
    pub session_check: Option<(PathBuf, Option<String>, Option<String>)>,
    /// The captured layers of the segment last looked into, shared by the partners and grid
    /// jobs (`jobs::HeadsCache`).
    pub heads: jobs::HeadsCache,
    ctx: Option<egui::Context>,
}

impl FocusLensApp {
    pub fn new(settings: Settings) -> Self {
        let worker = Worker::default();
        let dialogs = Dialogs::new(worker.poster());
        // What the views remembered (`remember_views`).
        let mut views = Views::default();
        views.files.export_folder = settings.prefs.export_folder.clone().filter(|d| d.is_dir());
        views.centroids.corpus = settings.prefs.index_corpus.clone();
        views.centroids.index_path = settings.prefs.index_path.clone();
        if let Some(f) = settings.prefs.train.clone().and_then(|v| serde_json::from_value(v).ok()) {
            views.train.form = f;
        }
        FocusLensApp {
            settings,
            worker,
            session: Session::default(),
            selection: Selection::default(),
            views,
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
            session_check: None,
            heads: Default::default(),
            ctx: None,
        }
    }

    /// What the views hold that a restart should find again, into the settings (eframe saves
    /// them): the last export folder, the Centroids view's corpus and index, the Train form.
    pub fn remember_views(&mut self) {
        let p = &mut self.settings.prefs;
        p.export_folder = self.views.files.export_folder.clone();
        p.index_corpus = self.views.centroids.corpus.clone();
        p.index_path = self.views.centroids.index_path.clone();
        p.train = serde_json::to_value(&self.views.train.form).ok();
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
        // An input asked for now: a held restart analysis is no longer what waits.
        self.session.hold = false;
        // No `unstop` here: an input that loads is a new generation, so the analysis it asks
        // for has a new key and runs; one that is refused changes nothing, and a cancelled or
        // failed analysis must then stay stopped (it restarted by itself after a refused
        // adapter).
    }

    /// At a restart on the remembered inputs: a text whose analysis would take minutes (more
    /// than `LONG_RESTART_TOKENS` tokens at about 4 bytes a token, within the tokens asked for)
    /// waits for Run analysis instead of starting by itself; the status line says so.
    pub fn hold_long_restart(&mut self) {
        let Some(p) = &self.settings.inputs.text else { return };
        let Ok(m) = std::fs::metadata(p) else { return };
        let tokens = (m.len() as usize / 4).min(self.settings.setup.params.max_tokens);
        if tokens > LONG_RESTART_TOKENS {
            self.session.hold = true;
            self.status = format!(
                "{} is long (about {tokens} tokens to analyse, minutes of work): press Run analysis (left panel) to analyse it, or lower \"tokens\" first",
                p.display()
            );
        }
    }

    /// Reopens a session file: its inputs, settings, view and selection (an error in the window
    /// when it cannot be read; nothing changes then).
    pub fn open_session(&mut self, path: &Path) {
        match super::session::file::SessionFile::read(path) {
            Ok(f) => {
                f.apply(&mut self.settings);
                // Once its inputs load, they are compared with the fingerprints it recorded.
                self.session_check = Some((path.to_path_buf(), f.model_fingerprint.clone(), f.adapter_sha256.clone()));
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
        // One identity per group: the result is numbered by the app's one numbering.
        let res = self.number(res);
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

    /// Numbers a result's groups by the app's one identity (`analysis::identity`, held in
    /// `session.ids`): for the identity's own adapter its numbers as they are (another k, mode,
    /// Sinkhorn variant or text keeps every centroid's number and colour), for another adapter a
    /// match to the identity's reference run over the tokens both share; a result with nothing
    /// to match by keeps its own chain across layers. An unpinned identity then follows the
    /// result (its adapter, and its tokens for the next match); a pinned one stays.
    pub(super) fn number(&mut self, res: Arc<AnalysisResult>) -> Arc<AnalysisResult> {
        use focus_core::analysis::identity::GroupIds;
        let numbered = self.session.ids.as_ref().and_then(|ids| res.shown.numbered(ids, &res.adapter_sha256));
        let res = match numbered {
            // Numbered as it already is (a result from the cache): the same result, not a copy.
            Some((shown, _)) if shown.aligned == res.aligned && shown.aligned_to == res.aligned_to => res,
            Some((shown, _)) => Arc::new(res.with_shown(shown)),
            None => res,
        };
        let source = format!("{} on {}, adapter {}", res.mode, res.text_label, res.analysis.adapter);
        let (ids, masks) = (res.token_ids(), &res.masks);
        match &mut self.session.ids {
            Some(cur) if cur.pinned => {}
            // Its own adapter: the numbers stay, the reference tokens follow the screen.
            Some(cur) if cur.adapter == res.adapter_sha256 && cur.groups == res.groups() && cur.maps.len() == res.layers() => {
                cur.tokens = ids;
                cur.masks = masks.clone();
                cur.source = source;
            }
            // Another adapter (or none yet): its numbers, matched or its own, become the identity
            // (naming the run they were matched to).
            _ => {
                self.session.ids = Some(GroupIds {
                    adapter: res.adapter_sha256.clone(),
                    groups: res.groups(),
                    maps: res.aligned.clone(),
                    tokens: ids,
                    masks: masks.clone(),
                    source,
                    pinned: false,
                    matched_to: res.aligned_to.clone(),
                })
            }
        }
        res
    }

    /// A reopened session's inputs have loaded: say so when their weights are not the ones the
    /// session was saved with (another file at the same path, or another version's embedded
    /// default adapter).
    pub(super) fn check_session_inputs(&mut self) {
        let (Some(m), Some(a)) = (&self.session.model, &self.session.adapter) else { return };
        if a.model_gen != m.gen || self.settings.inputs.adapter != a.path || self.settings.inputs.model != m.path {
            return;
        }
        let Some((file, model_fp, adapter_sha)) = self.session_check.take() else { return };
        let mut differ = Vec::new();
        if model_fp.as_ref().is_some_and(|f| *f != m.model.fingerprint) {
            differ.push(format!("the model's weights (fingerprint {} then, {} now)", short(model_fp.as_deref().unwrap_or("")), short(&m.model.fingerprint)));
        }
        if adapter_sha.as_ref().is_some_and(|s| *s != a.sha256) {
            differ.push(format!("the adapter (sha256 {} then, {} now)", short(adapter_sha.as_deref().unwrap_or("")), short(&a.sha256)));
        }
        if !differ.is_empty() {
            self.errors.push(format!("session {} was saved with other inputs: {} differ; the figures on screen are not the saved ones", file.display(), differ.join(" and ")));
        }
    }

    /// Pins the numbering of the result on screen (`pin`), so that later runs (another k, mode,
    /// adapter of the same model, a generation) are numbered by their match to it; or unpins it.
    pub fn pin_numbers(&mut self, pin: bool) {
        if let Some(ids) = &mut self.session.ids {
            ids.pinned = pin;
        }
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
            // CJK and other scripts: the embedded fallback, then the system's fonts.
            super::paint::fonts::install(ctx);
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
        if self.session_check.is_some() && !self.is_running(TaskKind::LoadModel) && !self.is_running(TaskKind::LoadAdapter) {
            // A reopened session whose inputs were already loaded (nothing to load again).
            self.check_session_inputs();
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
        self.remember_views();
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
/// The first 12 characters of a fingerprint.
fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

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
