//! The categories view's baseline job: the same tokens analysed with the untrained twin of the
//! adapter (its purity per layer, and the structure report beside the trained one's).

use super::error::JobError;
use crate::gui::state::*;
use crate::gui::worker::Handle;
use focus_core::analysis::{analyze as core_analyze, AnalyzeOptions};
use focus_core::Adapter;
use std::time::Instant;

/// The untrained twin of an adapter: a random init with its configuration (K, d_g, tau,
/// Sinkhorn, window, gate, score) and the seed its `init` records (0 when it records none),
/// i.e. what `adapter init` with those flags writes. Returns it and the seed.
pub fn untrained_twin(a: &Adapter) -> Result<(Adapter, u64), JobError> {
    let c = &a.config;
    let seed = c
        .init
        .split("seed")
        .nth(1)
        .and_then(|r| r.trim_start_matches([' ', '=', ':']).split(|ch: char| !ch.is_ascii_digit()).next().and_then(|d| d.parse().ok()))
        .unwrap_or(0);
    Ok((a.untrained_twin(seed)?, seed))
}

/// Per-layer purity of the untrained twin of the analysis' adapter, on the same tokens, mode
/// and k: the baseline the categories view draws the trained purity against.
pub struct Baseline {
    /// The analysis it was computed for.
    pub key: AnalysisKey,
    /// Token-weighted purity per layer (`LayerProfile::purity`).
    pub purity: Vec<Option<f64>>,
    pub seed: u64,
    /// Whether the analysed adapter records any training (else it may itself be untrained).
    pub trained: bool,
    pub seconds: f64,
    /// Structure (`analysis::structure`) of the analysis beside the twin's, with the best
    /// layer's paper-form table.
    pub structure: focus_core::analysis::structure::StructureReport,
}

/// Analyses the same text prefix as `res` with the untrained twin of its adapter (same mode, k
/// and segmenting). `text`: the text `res` was analysed from.
pub fn baseline(res: &AnalysisResult, text: &str, h: &Handle) -> Result<Baseline, JobError> {
    let t0 = Instant::now();
    h.set_progress(0, 0, "untrained adapter: initialising");
    let (twin, seed) = untrained_twin(&res.adapter)?;
    let end = res.analysis.tokens.last().map(|t| t.end).unwrap_or(0);
    let text = text.get(..end).filter(|t| !t.is_empty()).ok_or_else(|| JobError::Failed("the analysed text is not at hand".into()))?;
    let k = res.key.params.topk(res.adapter.config.groups).map_err(|e| JobError::Failed(e.to_string()))?;
    let opts = AnalyzeOptions { mode: res.mode.kind(), k, segment_len: res.analysis.segment_len, keep_tokens: false, cancel: Some(&h.cancel) };
    let layers = res.layers();
    let an = core_analyze(&res.model, &twin, "untrained", text, &opts, |d, t| h.set_progress(d, t, format!("untrained adapter: layer {} of {layers}", (d % layers.max(1)) + 1)))?;
    if an.tokens.len() != res.tokens() {
        return Err(JobError::Failed(format!("the untrained run saw {} tokens, the analysis {}", an.tokens.len(), res.tokens())));
    }
    use focus_core::analysis::structure::{of_analysis, of_tops, PaperTable, StructureReport};
    let tops: Vec<Vec<usize>> = res.argmax.iter().map(|l| l.iter().map(|&g| g as usize).collect()).collect();
    let mine = of_tops(&res.analysis.tokens, &tops, res.groups(), &res.analysis.routed_layers());
    let table = PaperTable::best(&mine, &tops, &res.analysis.tokens);
    let structure = StructureReport::new(mine, Some((of_analysis(&an), seed)), table);
    Ok(Baseline {
        structure,
        key: res.key.clone(),
        purity: an.profiles.iter().map(|p| p.centroids.iter().any(|c| c.tokens > 0).then(|| p.purity())).collect(),
        seed,
        trained: res.adapter.config.training.is_some(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}
