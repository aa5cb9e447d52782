//! The Compare view's job: the analysis on screen (run A) beside run B (another mode, k or
//! adapter) over the start of the text (`focus_core::analysis::compare`).

use super::error::JobError;
use crate::gui::compared::Compared;
use crate::gui::state::*;
use crate::gui::worker::Handle;
use focus_core::analysis::compare;
use focus_core::{Adapter, Mode};
use std::path::PathBuf;
use std::sync::Arc;

/// One run of a comparison, as the compare view prepares it.
#[derive(Clone)]
pub struct CompareRun {
    pub label: String,
    /// `None`: top-k with run B's own adapter, whose K is known once it has loaded.
    pub mode: Option<Mode>,
    /// k of the mask in top-k mode (and of the groups compared, with the other run's).
    pub k: usize,
    /// The adapter as run (window and Sinkhorn variant applied).
    pub adapter: Arc<Adapter>,
}

/// Everything a comparison needs, prepared on the UI thread.
pub struct CompareJob {
    pub res: Arc<AnalysisResult>,
    pub spec: CompareSpec,
    pub a: CompareRun,
    /// Run B, or the path of its adapter still to load (with the rest of run B).
    pub b: CompareRun,
    pub b_adapter_path: Option<PathBuf>,
}

impl CompareJob {
    /// Over the start of the analysed text (`compare::compare`).
    pub fn run(mut self, h: &Handle) -> Result<Compared, JobError> {
        let model = self.res.model.clone();
        if let Some(p) = &self.b_adapter_path {
            h.set_progress(0, 0, "loading adapter B");
            let mut a = Adapter::load(p, &model.identity(), model.device())?;
            if let Some(c) = self.spec.causal {
                a.config.causal_sinkhorn = c;
            }
            if self.b.mode.is_none() {
                let k = a.config.topk(self.b.k).map_err(|e| JobError::Failed(format!("run B (adapter B): {e}")))?;
                self.b.mode = Some(Mode::TopK(k));
            }
            self.b.adapter = Arc::new(a);
        }
        let mode_b = self.b.mode.ok_or_else(|| JobError::Failed("run B: top-k needs adapter B's K, and it has not loaded".into()))?;
        let n = self.res.tokens().min(self.spec.max_tokens.max(2)).min(model.config().context);
        let ids: Vec<u32> = self.res.analysis.tokens[..n].iter().map(|t| t.id).collect();
        let texts = self.res.analysis.tokens[..n].iter().map(|t| t.text.clone()).collect();
        let a = compare::Run { label: &self.a.label, mode: self.res.mode, k: self.a.k, adapter: &self.a.adapter };
        let a = compare::Run { mode: self.a.mode.unwrap_or(a.mode), ..a };
        let b = compare::Run { label: &self.b.label, mode: mode_b, k: self.b.k, adapter: &self.b.adapter };
        // Run A is the analysis on screen: read from its kept pass when one covers these tokens
        // as they were analysed (only run B then runs the model).
        let kept_a = self.res.kept.iter().find(|k| Arc::ptr_eq(&self.a.adapter, &self.res.adapter) && k.serves(a.mode, n)).map(|k| &**k);
        let result = compare::compare_reusing(&model, &ids, texts, &a, kept_a, &b, self.b_adapter_path.is_none(), Some(&h.cancel), |d, t, what| h.set_progress(d, t, what))?;
        let groups = (self.a.adapter.config.groups, self.b.adapter.config.groups);
        Ok(Compared { key: self.res.key.clone(), spec: self.spec, result, groups, note: None })
    }
}
