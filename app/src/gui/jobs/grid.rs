//! The attention view's job: one token's attention in every layer and head, split into local,
//! shared-group and pruned shares (from the segment's captured layers, `HeadsCache`).

use super::error::JobError;
use super::partners::{segment, HeadsCache};
use crate::gui::state::*;
use crate::gui::worker::Handle;

/// One token's attention in every layer and head, split by what the top-k mask does with each
/// pair: for the attention view's head x layer grid.
pub struct AttnGrid {
    pub key: AnalysisKey,
    pub token: usize,
    /// `cells[layer][head]` = (local, shared-group, pruned) shares of the token's dense softmax
    /// attention (summing to 1).
    pub cells: Vec<Vec<[f32; 3]>>,
}

/// The head x layer grid of token `i` of `res` (its segment, run in `res`'s mode;
/// `compare::attention_grid`).
pub fn attention_grid(res: &AnalysisResult, i: usize, cache: &HeadsCache, h: &Handle) -> Result<AttnGrid, JobError> {
    let an = &res.analysis;
    if i >= an.tokens.len() {
        return Err(JobError::Failed("token out of range".into()));
    }
    h.set_progress(0, 0, format!("token {i}, every layer and head"));
    let (start, end) = segment(res, i);
    // From the segment's captured layers (shared with the partners: no model pass when they
    // were computed for this segment).
    let heads = cache.get(res, (start, end), h)?;
    let c = &res.adapter.config;
    let cells = heads.grid(res.key.params.k, c.window, c.sink, i - start)?;
    Ok(AttnGrid { key: res.key.clone(), token: i, cells })
}
