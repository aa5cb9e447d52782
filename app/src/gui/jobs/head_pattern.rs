//! The head view's job: one head's full attention pattern over a range of tokens, dense and
//! Focus (`focus_core::analysis::head_pattern`), from the segment's captured layers.

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
