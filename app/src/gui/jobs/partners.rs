//! The partners view's job: one token's (or a range's) attention row in a layer and head, and
//! its same-group partners beyond the window; and `HeadsCache`, the captured layers of the
//! segment last looked into, which the partners, grid and head-pattern jobs share (one model
//! pass per segment).

use super::error::JobError;
use crate::gui::state::*;
use crate::gui::worker::Handle;
use std::sync::Arc;

/// The attention row of token `i` in `layer`/`head` and its same-group partners beyond the
/// window, in the segment that holds it.
pub fn partners(res: &AnalysisResult, i: usize, layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<Partners, JobError> {
    let an = &res.analysis;
    if i >= an.tokens.len() || layer >= an.layers.len() {
        return Err(JobError::Failed("token or layer out of range".into()));
    }
    h.set_progress(0, 0, format!("token {i}, layer {layer}, head {head}"));
    segment_partners(res, (i, i), None, layer, head, cache, h)
}

/// The long-range partners of a range of tokens `[a, b]` in `layer`/`head`
/// (`partners::partners`: a key's weight and the masses are means over the range's queries, so
/// a range of one token gives that token's partners). A range is cut to the segment of its
/// first token (pairs never cross segments).
pub fn range_partners(res: &AnalysisResult, range: (usize, usize), layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<Partners, JobError> {
    let an = &res.analysis;
    let (a, b) = (range.0.min(range.1), range.0.max(range.1));
    if b >= an.tokens.len() || layer >= an.layers.len() {
        return Err(JobError::Failed("range or layer out of range".into()));
    }
    let (_, end) = segment(res, a);
    let b = b.min(end - 1);
    h.set_progress(0, 0, format!("tokens {a}-{b}, layer {layer}, head {head}"));
    segment_partners(res, (a, b), Some((a, b)), layer, head, cache, h)
}

/// Every layer's queries, keys and routing of the segment the user looks into
/// (`partners::SequenceHeads`), shared by the partners and attention-grid jobs: the analysis'
/// own pass when it kept it in memory; else the first job for a segment reads them back from
/// the analysis' scratch file (`AnalysisResult::spilled`, a fraction of a second) or, where
/// none was kept (an analysis from the disk cache, a scratch budget spent), runs one model
/// pass; every later one (another token, range, layer or head, the grid) computes its rows from
/// them without running the model. One segment is kept (about 190 MB for SmolLM2-135M at 2048
/// tokens).
#[derive(Clone, Default)]
pub struct HeadsCache(Arc<std::sync::Mutex<Option<(AnalysisKey, usize, usize, Arc<focus_core::analysis::partners::SequenceHeads>)>>>);

impl HeadsCache {
    /// The heads of segment `[start, end)` of `res`: the analysis' own pass when it kept it,
    /// else read now unless kept here.
    pub fn get(&self, res: &AnalysisResult, (start, end): (usize, usize), h: &Handle) -> Result<Arc<focus_core::analysis::partners::SequenceHeads>, JobError> {
        if let Some(k) = res.kept.iter().find(|k| k.start == start && k.tokens() == end - start) {
            return Ok(k.heads.clone());
        }
        // Held while the pass runs: a second job for the same segment waits and reuses it.
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // The key with the token count: a preview and its full result differ in their routing.
        if let Some((k, n, s, heads)) = slot.as_ref() {
            if *k == res.key && *n == res.tokens() && *s == start {
                return Ok(heads.clone());
            }
        }
        // The old segment's memory goes before the new one is read.
        *slot = None;
        if let Some(sp) = res.spilled.iter().find(|k| k.start == start && k.tokens() == end - start) {
            h.set_progress(0, 0, format!("reading the kept layers of tokens {start}-{} (no model run)", end - 1));
            // A scratch file that cannot be read back: the pass runs instead.
            if let Ok(heads) = sp.load() {
                let heads = Arc::new(heads);
                *slot = Some((res.key.clone(), res.tokens(), start, heads.clone()));
                return Ok(heads);
            }
        }
        let ids: Vec<u32> = res.analysis.tokens[start..end].iter().map(|t| t.id).collect();
        let layers = res.layers();
        let what = format!("every layer's queries and keys for tokens {start}-{} (once; then no model run)", end - 1);
        h.set_progress(0, layers, what.clone());
        let heads = focus_core::analysis::partners::sequence_heads(&res.model, Some(&res.adapter), &ids, res.mode, Some(&h.cancel), &|l| h.set_progress(l, layers, what.clone()))?;
        let heads = Arc::new(heads);
        *slot = Some((res.key.clone(), res.tokens(), start, heads.clone()));
        Ok(heads)
    }
}

fn segment_partners(res: &AnalysisResult, (a, b): (usize, usize), range: Option<(usize, usize)>, layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<Partners, JobError> {
    let (start, end) = segment(res, a);
    let masks = &res.masks[layer][start..end];
    // From the segment's captured layers: a model pass only for the first look into a segment.
    let heads = cache.get(res, (start, end), h)?;
    let p = heads.partners(&res.adapter.config, res.mode, masks, layer, head, (a - start, b - start), Some(&h.cancel))?;
    let partners = p.partners.into_iter().map(|(j, w)| (start + j, w)).collect();
    Ok(Partners { token: a, range, layer, head, key: res.key.clone(), partners, partner_mass: p.partner_mass, local_mass: p.local_mass })
}

/// The segment `[start, end)` of `res` that holds token `i`.
pub(super) fn segment(res: &AnalysisResult, i: usize) -> (usize, usize) {
    let seg = res.analysis.segment_len.max(1);
    let start = i / seg * seg;
    (start, (start + seg).min(res.analysis.tokens.len()))
}
