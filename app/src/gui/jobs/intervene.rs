//! The Intervene window's background job: core's `analysis::intervene` (the CLI's `intervene`)
//! on the start of the analysed text, with the analysis' adapter and mode. Its comparison
//! (A: intervened, B: original) comes back as a `Compared`, so the Compare view shows it with its
//! per-token Δ loss, per-layer curves and exports; it runs as the Compare task (progress, and
//! the Compare view's Cancel).

use super::error::JobError;
use crate::gui::compared::Compared;
use crate::gui::state::{AnalysisResult, CompareSpec};
use crate::gui::worker::Handle;
use focus_core::analysis::intervene::{intervene, Intervention};
use std::sync::Arc;

pub struct InterveneJob {
    pub res: Arc<AnalysisResult>,
    pub layer: usize,
    /// In the router's own group indices.
    pub intervention: Intervention,
    /// The same in the names the screen gives the groups (`views::intervene::describe`): what
    /// the result line says.
    pub shown: String,
    /// At most this many tokens (the start of the text).
    pub max_tokens: usize,
    /// The Compare view's run B settings, kept with the result.
    pub spec: CompareSpec,
}

impl InterveneJob {
    pub fn run(self, h: &Handle) -> Result<Compared, JobError> {
        let res = &self.res;
        let model = res.model.clone();
        let n = res.tokens().min(self.max_tokens.max(2)).min(model.config().context);
        let ids: Vec<u32> = res.analysis.tokens[..n].iter().map(|t| t.id).collect();
        let texts = res.analysis.tokens[..n].iter().map(|t| t.text.clone()).collect();
        let layers = model.config().n_layers;
        let r = intervene(&model, &res.adapter, &ids, texts, res.mode, self.layer, self.intervention, Some(&h.cancel), |d, t| {
            let what = if d <= layers { "the original run" } else { "the intervened run" };
            h.set_progress(d, t, format!("intervention: {what}"))
        })?;
        let p = &r.pairs;
        let note = format!(
            "Intervention: {} at layer {}, {} mode, on the first {n} tokens: A = intervened, B = original. {} token(s) edited; {} queries attend differently at layer {}; pairs kept there {} -> {} of {} causal.",
            self.shown, r.layer, r.mode, r.edited.len(), p.queries_changed, r.layer, p.kept_before, p.kept_after, p.causal
        );
        let groups = res.adapter.config.groups;
        Ok(Compared { key: res.key.clone(), spec: self.spec, result: r.comparison, groups: (groups, groups), note: Some(note) })
    }
}
