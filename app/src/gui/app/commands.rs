//! Command application: the `Command`s the views returned this frame, applied in one place
//! (`apply`, one arm per command, grouped by family: files and exports, selection and scrolling,
//! settings and errors, background work). An arm that takes more than a line calls a method of
//! its own below.

use super::FocusLensApp;
use crate::gui::export;
use crate::gui::jobs::dialogs::Purpose;
use crate::gui::jobs::{self, Msg};
use crate::gui::state::*;
use focus_core::ModeKind;
use crate::gui::views::FileTask;
use crate::gui::views::{mask, Command};
use crate::gui::worker::TaskKind;
use std::sync::Arc;

impl FocusLensApp {
    pub(super) fn apply(&mut self, c: Command) {
        match c {
            // Files, dialogs and exports.
            Command::Open(kind, path) => self.open(kind, path),
            Command::OpenSession(path) => self.open_session(&path),
            Command::UseDefault(kind) => self.use_default(kind),
            Command::OpenTextLossy(p) => self.open_text_lossy(p),
            Command::Dialog(purpose) => self.show_dialog(purpose),
            Command::ShowFiles(task) => self.show_files(task),
            Command::Export(kind) => self.export(kind),
            Command::ExportTo(kind, path) => self.export_to(kind, path),
            Command::ShowGlossary => self.views.glossary.open = true,
            // Selection, hover and scrolling.
            Command::Select(i) => self.select_token(i),
            Command::SelectRange(r) => self.select_range(r),
            Command::Jump(i) => self.jump(i),
            Command::JumpToPartner(j) => self.jump_to_partner(j),
            Command::Hover { token, layer } => {
                self.selection.hovered = token;
                self.selection.hovered_layer = layer;
            }
            Command::ScrollTo(j) => self.views.scroll_to = Some(j),
            // Settings, errors and cancelling.
            Command::Set(s) => self.set(s),
            Command::Rerun => self.session.unstop(),
            Command::DismissErrors => self.errors.clear(),
            Command::PinNumbers(pin) => self.pin_numbers(pin),
            Command::Error(e) => self.errors.push(e),
            Command::CancelAnalysis => self.cancel_analysis(),
            Command::Cancel(kind) => self.worker.cancel(kind),
            // Background work for the views.
            Command::StartCompare(spec) => self.start_compare(spec),
            Command::BuildAttnGrid(res, i) => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::AttnGrid, move |h| Msg::AttnGrid(jobs::attention_grid(&res, i, &cache, h)));
            }
            Command::BuildHeadPattern(res, layer, head, range) => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::HeadPattern, move |h| Msg::HeadPattern(jobs::head_pattern(&res, range, layer, head, &cache, h)));
            }
            Command::BuildHeadOverview(res, layer, head, token) => {
                let cache = self.heads.clone();
                self.worker.spawn(TaskKind::HeadPattern, move |h| Msg::HeadOverview(jobs::head_overview(&res, token, layer, head, crate::gui::views::head::OVERVIEW_SIDE, &cache, h)));
            }
            Command::BuildBaseline(res) => self.build_baseline(res),
            Command::BuildMask(res, layer) => {
                self.worker.spawn(TaskKind::Mask, move |h| Msg::Mask(jobs::mask_image(&res, layer, mask::MAX_SIDE, h)));
            }
            Command::StartBench(job) => {
                // One benchmark at a time: this cancels a running one.
                self.worker.spawn(TaskKind::Bench, move |h| job.run(h));
            }
            Command::StartGenerate(job) => {
                // One generation at a time: this stops a running one.
                self.worker.spawn_streaming(TaskKind::Generate, move |h, interim| Msg::Generated(job.run(h, &|g| interim.send(Msg::GenStep(g)))));
            }
            Command::AnalyseGenerated { text, params, tokens } => self.analyse_generated(&text, params, tokens),
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
                self.worker.spawn(TaskKind::Index, move |h| Msg::Index(job.run(h)));
            }
        }
    }

    // ---- Files, dialogs and exports.

    /// A native file dialog, named for the export it is for.
    fn show_dialog(&mut self, purpose: Purpose) {
        let name = match purpose {
            Purpose::Export(k) => export::default_name(&self.settings, k),
            _ => String::new(),
        };
        self.dialogs.show(purpose, &name, self.ctx.clone())
    }

    /// The in-app file window, named for the export it is for.
    fn show_files(&mut self, task: FileTask) {
        let name = match task {
            FileTask::Export(k) => Some(export::default_name(&self.settings, k)),
            _ => None,
        };
        self.views.files.show_task(task, name.as_deref(), &self.settings.prefs.recent, None)
    }

    /// Reads a text refused as not UTF-8 as Latin-1 (the status bar's offer).
    fn open_text_lossy(&mut self, p: std::path::PathBuf) {
        self.lossy_offer = None;
        self.errors.retain(|e| !(e.contains("not valid UTF-8") && e.contains(&p.display().to_string())));
        self.session.latin1.insert(p.clone());
        self.open(InputKind::Text, p);
        self.session.retry(InputKind::Text);
    }

    // ---- Selection and scrolling.

    /// Shows token `i` in the token view, selected and scrolled to.
    fn jump(&mut self, i: usize) {
        self.settings.setup.tab = Tab::Tokens;
        self.views.scroll_to = Some(i);
        self.select_token(Some(i));
    }

    fn jump_to_partner(&mut self, j: usize) {
        // The partner is shown where tokens are drawn: the current view when it draws
        // them, else the token view.
        if !matches!(self.settings.setup.tab, Tab::Tokens | Tab::Layers) {
            self.settings.setup.tab = Tab::Tokens;
        }
        self.views.scroll_to = Some(j);
        self.selection.jumped = Some(j);
    }

    // ---- Settings.

    fn set(&mut self, s: Setting) {
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

    // ---- Background work.

    fn build_baseline(&mut self, res: Arc<AnalysisResult>) {
        // The text the analysis was made from (the loaded one, when it still is), else
        // its tokens put back together.
        let text = match self.session.text.as_ref().filter(|t| t.gen == res.key.text_gen) {
            Some(t) => t.text.clone(),
            None => Arc::new(res.analysis.tokens.iter().map(|t| t.text.as_str()).collect::<String>()),
        };
        self.worker.spawn(TaskKind::Baseline, move |h| Msg::Baseline(jobs::baseline(&res, &text, h)));
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
        let k_b = if spec.mode == ModeKind::TopK { spec.k.max(1) } else { res.key.params.k };
        // Top-k B with its own adapter: k is checked against B's K when B has loaded.
        let mode_b = match spec.mode {
            ModeKind::Dense => Some(focus_core::Mode::Dense),
            ModeKind::Soft => Some(focus_core::Mode::Soft),
            ModeKind::TopK if spec.adapter.is_some() => None,
            ModeKind::TopK => match focus_core::focus::mask::TopK::new(k_b, groups) {
                Ok(k) => Some(focus_core::Mode::TopK(k)),
                Err(e) => {
                    self.errors.push(format!("run B: {e}"));
                    return;
                }
            },
        };
        let a_label = crate::gui::views::compare::describe(&res.mode.to_string(), a_adapter.config.causal_sinkhorn, &res.analysis.adapter);
        let b_name = spec.adapter.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| res.analysis.adapter.clone());
        let b_mode_label = mode_b.map_or_else(|| format!("topk({k_b})"), |m| m.to_string());
        let b_label = crate::gui::views::compare::describe(&b_mode_label, b_adapter.config.causal_sinkhorn, &b_name);
        let job = jobs::CompareJob {
            res: res.clone(),
            spec: spec.clone(),
            a: jobs::CompareRun { label: a_label, mode: Some(res.mode), k: res.key.params.k, adapter: a_adapter },
            b: jobs::CompareRun { label: b_label, mode: mode_b, k: k_b, adapter: Arc::new(b_adapter) },
            b_adapter_path: spec.adapter.clone(),
        };
        self.views.compare.error = None;
        self.worker.spawn(TaskKind::Compare, move |h| Msg::Compare(job.run(h)));
    }
}
