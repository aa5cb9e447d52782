//! Message handling: what comes back on the worker's channel (`Msg`: loads, analyses, the
//! views' background results, file dialogs' answers, PNG screenshots), one `handle_*` method per
//! kind of message. A failed load shows why and goes back to what was loaded before.

use super::{refit_k, FocusLensApp};
use crate::gui::export::{self, ExportKind};
use crate::gui::jobs::dialogs::{Purpose, FAILED_WITHIN};
use crate::gui::jobs::{self, JobError, MaskImage, Msg};
use crate::gui::state::*;
use crate::gui::views::FileTask;
use crate::gui::worker::TaskKind;
use focus_core::Adapter;
use std::path::PathBuf;
use std::sync::Arc;

impl FocusLensApp {
    pub(super) fn handle(&mut self, msg: Msg) {
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
            Msg::HeadOverview(r) => self.views.head.receive_overview(r),
            Msg::AttnBench(r) => self.views.speed.receive_attention(r),
            Msg::Quality(r) => self.views.speed.receive_quality(r),
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
                    // Another model's groups have nothing in common with these numbers.
                    self.session.ids = None;
                    self.pending_full = None;
                    self.selection = Selection::default();
                    self.release_old_model();
                }
                let gen = self.session.gen();
                if let Some(p) = &path {
                    self.settings.remember(InputKind::Model, p.clone());
                }
                self.session.model = Some(LoadedModel { model, path, device, gen });
                self.drop_errors_of(InputKind::Model);
            }
            Err(e) => self.load_failed(InputKind::Model, e),
        }
    }

    /// Lets the previous model go once another has loaded (issue 50: memory grew over model
    /// switches): the recent analyses (each holds its model, adapter and kept passes, up to
    /// `jobs::KEEP_BYTES`), the segment's heads kept for partners, and the jobs that read
    /// them (a cancelled job drops its share when it stops). Training, a corpus index build and
    /// a benchmark run on with the model they started with and let it go when they end. Then the
    /// freed heap goes back to the system (`trim_heap`), so the process' size follows.
    fn release_old_model(&mut self) {
        self.session.forget_results();
        self.heads = jobs::HeadsCache::default();
        for kind in [TaskKind::Attention, TaskKind::AttnGrid, TaskKind::HeadPattern, TaskKind::Mask, TaskKind::Compare, TaskKind::Baseline, TaskKind::Generate] {
            self.worker.cancel(kind);
        }
        trim_heap();
    }

    fn handle_adapter(&mut self, r: Result<(Arc<Adapter>, String), JobError>, path: Option<PathBuf>, model_gen: u64) {
        match r {
            Ok((adapter, sha256)) => {
                self.adapter_restore = None;
                let gen = self.session.gen();
                if let Some(p) = &path {
                    self.settings.remember(InputKind::Adapter, p.clone());
                }
                let label = source_label(&path, crate::defaults::SAMPLE_ADAPTER_NAME);
                // Another adapter brings its own k: another than the one k was set for (whatever
                // was loaded in between: a model switch unloads the adapter, and at start-up
                // the remembered k belongs to the remembered adapter); the same one loaded again
                // for a new model keeps k.
                let id = path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
                let changed = match &self.settings.setup.k_adapter {
                    Some(was) => *was != id,
                    None => self.session.adapter.as_ref().is_some_and(|a| a.path != path),
                };
                self.settings.setup.k_adapter = Some(id);
                if let Some(msg) = refit_k(&mut self.settings.setup.params.k, &adapter.config, changed) {
                    self.status = msg;
                }
                self.session.adapter = Some(LoadedAdapter { adapter, path, label, model_gen, gen, sha256 });
                self.drop_errors_of(InputKind::Adapter);
                self.check_session_inputs();
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
                self.drop_errors_of(InputKind::Text);
                self.selection.selected = None;
                self.selection.jumped = None;
                self.selection.partners = None;
            }
            Err(e) => self.load_failed(InputKind::Text, e),
        }
    }

    /// An input of `kind` loaded: the errors about earlier attempts to load one (and, for an
    /// adapter, that none is loaded) are stale now and go (they stayed red beside the result).
    fn drop_errors_of(&mut self, kind: InputKind) {
        let (named, default) = (format!("cannot open {} ", kind.label()), format!("cannot open the default {}", kind.label()));
        self.errors.retain(|e| !e.starts_with(&named) && !e.starts_with(&default) && !(kind == InputKind::Adapter && e.starts_with("no adapter is loaded")));
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
                // The adapter was being loaded for a newly loaded model (File → default model,
                // say) and does not fit it: where the embedded default adapter fits that model,
                // it is loaded instead (said in the status line), rather than leaving the model
                // with no adapter.
                if self.settings.inputs.adapter.is_some() && crate::gui::views::files::embedded_fits(&m.model.identity()) {
                    self.settings.inputs.adapter = None;
                    // One error that says both (it stays: its cause, the adapter asked for, is
                    // not fixed by the default's load).
                    self.errors.pop();
                    self.errors.push(format!("{what} was not loaded for {}, so the embedded default adapter ({}) is: {e}", m.model.config().name, crate::defaults::SAMPLE_ADAPTER_NAME));
                    return;
                }
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
                // A finished analysis: an earlier one's failure is no longer what the window shows.
                self.errors.retain(|e| !e.starts_with("analysis failed"));
                // Numbered before it is kept, so that the cache holds what the screen shows.
                let res = self.number(Arc::new(res));
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
            let res = self.number(Arc::new(res));
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
}

/// Hands the heap's free pages back to the system (glibc keeps freed memory for reuse, so the
/// process' resident size would not fall after a model and its analyses are dropped).
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases free memory of glibc's own heaps; it has no
        // preconditions.
        unsafe {
            malloc_trim(0);
        }
    }
}
