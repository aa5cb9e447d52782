//! The head view's jobs: one head's full attention pattern over a range of tokens, dense and
//! Focus (`focus_core::analysis::head_pattern`), and the same over a whole segment in blocks
//! (`head_overview`: an 8192-token segment at level of detail), from the segment's captured
//! layers.

use super::error::JobError;
use super::partners::{segment, HeadsCache};
use crate::gui::state::*;
use crate::gui::worker::Handle;

/// One head's full attention pattern over a range of tokens, dense and Focus, for the head view
/// (`head_pattern::head_pattern`), and what it was computed for.
pub struct HeadPattern {
    pub key: AnalysisKey,
    /// The range as asked for (the pattern covers it cut to its first token's segment and to
    /// `head_pattern::MAX_RANGE` tokens).
    pub asked: (usize, usize),
    /// Indices within the text (`pattern`'s are within its segment).
    pub range: (usize, usize),
    pub pattern: focus_core::analysis::head_pattern::HeadPattern,
}

/// The head view's pattern of `layer`/`head` over tokens `[a, b]` of `res`: cut to the segment
/// of `a` and to `MAX_RANGE` tokens, from the segment's kept layers (`HeadsCache`).
pub fn head_pattern(res: &AnalysisResult, (a, b): (usize, usize), layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<HeadPattern, JobError> {
    use focus_core::analysis::head_pattern::{head_pattern, MAX_RANGE};
    let n = res.tokens();
    if a > b || b >= n || layer >= res.layers() {
        return Err(JobError::Failed(format!("tokens {a}-{b} or layer {layer} out of range")));
    }
    let (start, end) = segment(res, a);
    let b2 = b.min(end - 1).min(a + MAX_RANGE - 1);
    h.set_progress(0, 0, format!("layer {layer}, head {head}, tokens {a}-{b2}"));
    let heads = cache.get(res, (start, end), h)?;
    let (hd, routing) = heads.layers.get(layer).ok_or_else(|| JobError::Failed(format!("layer {layer} out of range")))?;
    let routing = routing.as_ref().ok_or_else(|| JobError::Failed("the run has no routing (no adapter)".into()))?;
    let pattern = head_pattern(hd, routing, &res.adapter.config, res.mode, res.key.params.k, layer, head, (a - start, b2 - start))?;
    Ok(HeadPattern { key: res.key.clone(), asked: (a, b), range: (a, b2), pattern })
}

/// One head over a whole segment in blocks (`head_pattern::head_overview`), for the head view's
/// "whole segment" mode, and what it was computed for.
pub struct HeadOverview {
    pub key: AnalysisKey,
    /// The segment's first token in the text.
    pub start: usize,
    pub overview: focus_core::analysis::head_pattern::HeadOverview,
}

/// The head view's overview of `layer`/`head` over the segment holding token `i`, in at most
/// `max_side` blocks a side, from the segment's kept layers (no model pass once kept).
pub fn head_overview(res: &AnalysisResult, i: usize, layer: usize, head: usize, max_side: usize, cache: &HeadsCache, h: &Handle) -> Result<HeadOverview, JobError> {
    if i >= res.tokens() || layer >= res.layers() {
        return Err(JobError::Failed(format!("token {i} or layer {layer} out of range")));
    }
    let (start, end) = segment(res, i);
    h.set_progress(0, 0, format!("layer {layer}, head {head}, tokens {start}-{} in blocks", end - 1));
    let heads = cache.get(res, (start, end), h)?;
    let (hd, routing) = heads.layers.get(layer).ok_or_else(|| JobError::Failed(format!("layer {layer} out of range")))?;
    let routing = routing.as_ref().ok_or_else(|| JobError::Failed("the run has no routing (no adapter)".into()))?;
    let overview = focus_core::analysis::head_pattern::head_overview(hd, routing, &res.adapter.config, res.mode, res.key.params.k, layer, head, max_side, Some(&h.cancel))?;
    Ok(HeadOverview { key: res.key.clone(), start, overview })
}
