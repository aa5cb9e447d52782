//! What is loaded and analysed, and what is on its way: the three inputs (model, adapter, text),
//! the analysis on screen, recent analyses (so that toggling a control back is instant), and the
//! bookkeeping that `reconcile` uses to start the loads and the analysis the settings ask for,
//! once each (a failed or cancelled one is not retried until something changes). `file` reads
//! and writes session files.

pub mod file;

use crate::gui::jobs::{self, Msg};
use crate::gui::state::*;
use crate::gui::worker::{TaskKind, Worker};
use focus_core::Adapter;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

/// What the settings ask for, per input; compared with what was last attempted so that a failed
/// load is not retried every frame.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    Model(Option<PathBuf>, DeviceChoice),
    Adapter(Option<PathBuf>, u64),
    Text(Option<PathBuf>),
}

pub struct Session {
    pub model: Option<LoadedModel>,
    pub adapter: Option<LoadedAdapter>,
    pub text: Option<LoadedText>,
    /// The analysis on screen.
    pub result: Option<Arc<AnalysisResult>>,
    /// Recent analyses, so that toggling a control back is instant.
    cache: VecDeque<Arc<AnalysisResult>>,
    attempted: HashMap<InputKind, Wanted>,
    /// The key of the analysis running now, and of one the user cancelled or that failed (not
    /// restarted until something changes).
    running_key: Option<AnalysisKey>,
    stopped_key: Option<AnalysisKey>,
    next_gen: u64,
    /// Texts the user chose to read as Latin-1 after they were refused as not UTF-8.
    pub latin1: std::collections::HashSet<PathBuf>,
    /// Where finished analyses are kept between runs (the window's default; `None` in tests
    /// that do not ask for it, so that they run the model).
    pub disk_cache: Option<jobs::disk_cache::DiskCache>,
    /// The one numbering of groups every view and export uses (`analysis::identity`): set by
    /// the first result, kept for its adapter, matched for another; pinned by the user.
    pub ids: Option<focus_core::analysis::identity::GroupIds>,
    /// A long analysis remembered from the last run waits to be asked for (Run analysis): a
    /// restart does not launch minutes of work by itself. Cleared by `unstop`.
    pub hold: bool,
    /// What analyses keep of their passes, in memory and in scratch files (`jobs::Keep`).
    pub keep: jobs::Keep,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            model: None,
            adapter: None,
            text: None,
            result: None,
            cache: VecDeque::new(),
            attempted: HashMap::new(),
            running_key: None,
            stopped_key: None,
            next_gen: 1,
            latin1: Default::default(),
            disk_cache: None,
            ids: None,
            hold: false,
            keep: jobs::Keep::default(),
        }
    }
}

impl Session {
    /// A fresh generation number for a newly loaded input.
    pub fn gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    /// The key `params` ask for, once all inputs are loaded and consistent.
    pub fn wanted_key(&self, params: &RunParams) -> Option<AnalysisKey> {
        let (m, a, t) = (self.model.as_ref()?, self.adapter.as_ref()?, self.text.as_ref()?);
        if a.model_gen != m.gen {
            return None;
        }
        Some(AnalysisKey { model_gen: m.gen, adapter_gen: a.gen, text_gen: t.gen, params: params.clone() })
    }

    /// The key of the analysis running now, if any.
    pub fn running_analysis(&self) -> Option<&AnalysisKey> {
        self.running_key.as_ref()
    }

    /// The running analysis ended (finished, failed or cancelled): its key.
    pub fn analysis_ended(&mut self) -> Option<AnalysisKey> {
        self.running_key.take()
    }

    /// Do not restart the analysis of `key` (cancelled or failed) until something changes.
    pub fn stop(&mut self, key: Option<AnalysisKey>) {
        self.stopped_key = key;
    }

    /// Something changed (an input, or the user asked): a stopped analysis may run again.
    pub fn unstop(&mut self) {
        self.stopped_key = None;
        self.hold = false;
    }

    /// While the full analysis runs and the view shows its preview: (preview tokens, tokens to come).
    pub fn showing_preview(&self) -> Option<(usize, usize)> {
        let (running, res) = (self.running_key.as_ref()?, self.result.as_ref()?);
        (jobs::preview_key(running).as_ref() == Some(&res.key)).then(|| (res.tokens(), running.params.max_tokens.min(res.text_tokens)))
    }

    /// Is `key` the preview of the analysis running now?
    pub fn is_running_preview(&self, key: &AnalysisKey) -> bool {
        self.running_key.as_ref().and_then(jobs::preview_key).as_ref() == Some(key)
    }

    pub fn remember_result(&mut self, res: Arc<AnalysisResult>) {
        self.cache.retain(|c| c.key != res.key);
        self.cache.push_front(res);
        self.cache.truncate(6);
    }

    /// Drops the recent analyses (another model loaded: they hold the old one, its adapter and
    /// their kept passes).
    pub fn forget_results(&mut self) {
        self.cache.clear();
    }

    /// The path of the loaded input of this kind (`Some(None)`: the embedded default).
    pub fn loaded_path(&self, kind: InputKind) -> Option<Option<PathBuf>> {
        match kind {
            InputKind::Model => self.model.as_ref().map(|m| m.path.clone()),
            InputKind::Adapter => self.adapter.as_ref().map(|a| a.path.clone()),
            InputKind::Text => self.text.as_ref().map(|t| t.path.clone()),
        }
    }

    /// What `settings` ask for now counts as attempted: nothing to start for this input.
    /// Loads `kind` again even when its path was tried last (a text to read as Latin-1 now).
    pub fn retry(&mut self, kind: InputKind) {
        self.attempted.remove(&kind);
    }

    pub fn mark_attempted(&mut self, kind: InputKind, settings: &Settings) {
        if let Some(w) = self.wanted(kind, settings) {
            self.attempted.insert(kind, w);
        }
    }

    fn wanted(&self, kind: InputKind, settings: &Settings) -> Option<Wanted> {
        match kind {
            InputKind::Model => Some(Wanted::Model(settings.inputs.model.clone(), settings.setup.params.device)),
            InputKind::Adapter => Some(Wanted::Adapter(settings.inputs.adapter.clone(), self.model.as_ref()?.gen)),
            InputKind::Text => Some(Wanted::Text(settings.inputs.text.clone())),
        }
    }

    fn loaded(&self, kind: InputKind) -> Option<Wanted> {
        match kind {
            InputKind::Model => self.model.as_ref().map(|m| Wanted::Model(m.path.clone(), m.device)),
            InputKind::Adapter => self.adapter.as_ref().map(|a| Wanted::Adapter(a.path.clone(), a.model_gen)),
            InputKind::Text => self.text.as_ref().map(|t| Wanted::Text(t.path.clone())),
        }
    }

    /// The adapter as the controls configure it (window, Sinkhorn variant).
    pub fn configured_adapter(a: &Adapter, params: &RunParams) -> Arc<Adapter> {
        let mut a = a.clone();
        if let Some(w) = params.window {
            a.config.window = w;
        }
        if let Some(c) = params.causal {
            a.config.causal_sinkhorn = c;
        }
        Arc::new(a)
    }

    /// Starts whatever loads or analysis the settings ask for and is not loaded or running.
    /// Returns a result to put on screen now: a cached analysis, or the cached preview of the
    /// analysis just started.
    pub fn reconcile(&mut self, settings: &Settings, worker: &mut Worker<Msg>) -> Option<Arc<AnalysisResult>> {
        for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
            let Some(w) = self.wanted(kind, settings) else { continue };
            if self.loaded(kind).as_ref() == Some(&w) || self.attempted.get(&kind) == Some(&w) {
                continue;
            }
            self.attempted.insert(kind, w.clone());
            match w {
                Wanted::Model(path, device) => {
                    worker.spawn(TaskKind::LoadModel, move |h| jobs::load_model(path, device, h));
                }
                Wanted::Adapter(path, model_gen) => {
                    let model = self.model.as_ref().expect("wanted only with a model").model.clone();
                    worker.spawn(TaskKind::LoadAdapter, move |h| jobs::load_adapter(model, path, model_gen, h));
                }
                Wanted::Text(path) => {
                    let latin1 = path.as_ref().is_some_and(|p| self.latin1.contains(p));
                    worker.spawn(TaskKind::LoadText, move |h| jobs::load_text(path, latin1, h));
                }
            }
        }
        // A model or adapter on its way: nothing is analysed with the one it replaces.
        for kind in [InputKind::Model, InputKind::Adapter] {
            if self.wanted(kind, settings) != self.loaded(kind) {
                return None;
            }
        }
        let key = self.wanted_key(&settings.setup.params)?;
        if self.result.as_ref().is_some_and(|r| r.key == key) || self.running_key.as_ref() == Some(&key) || self.stopped_key.as_ref() == Some(&key) {
            return None;
        }
        if let Some(hit) = self.cache.iter().find(|c| c.key == key).cloned() {
            worker.cancel(TaskKind::Analyze);
            self.running_key = None;
            return Some(hit);
        }
        if self.hold {
            return None;
        }
        let (m, a, t) = (self.model.as_ref().unwrap(), self.adapter.as_ref().unwrap(), self.text.as_ref().unwrap());
        let job = jobs::AnalysisJob {
            model: m.model.clone(),
            adapter: Self::configured_adapter(&a.adapter, &settings.setup.params),
            adapter_label: a.label.clone(),
            text_label: t.label.clone(),
            text: t.text.clone(),
            key: key.clone(),
            disk: self.disk_cache.clone(),
            adapter_file: jobs::disk_cache::adapter_identity(a.path.as_deref()),
            adapter_sha256: a.sha256.clone(),
            keep: self.keep.clone(),
        };
        // A cached preview shows at once; otherwise the job computes one first.
        let cached_preview = jobs::preview_key(&key).and_then(|pk| self.cache.iter().find(|c| c.key == pk).cloned());
        let preview = cached_preview.is_none();
        self.running_key = Some(key);
        worker.spawn_streaming(TaskKind::Analyze, move |h, interim| {
            Msg::Analysis(jobs::analyze(job, preview, h, &|r| interim.send(Msg::Preview(r))))
        });
        cached_preview
    }
}
