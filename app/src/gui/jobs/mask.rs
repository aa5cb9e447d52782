//! The mask view's job: one layer's hard mask as an image of blocks, each counting its local,
//! same-group and pruned pairs exactly.

use super::error::JobError;
use crate::gui::state::*;
use crate::gui::worker::Handle;
use focus_core::focus::mask::{classify, PairClass};

/// The hard mask of one layer as an image of at most `max_side` x `max_side` blocks. Each
/// block's colour mixes local, same-group and pruned pairs by their counts; the counts are
/// exact and cover every causal pair within a segment.
pub struct MaskImage {
    pub key: AnalysisKey,
    pub layer: usize,
    pub tokens: usize,
    /// Tokens per block side.
    pub block: usize,
    pub side: usize,
    /// Per block: (local, same_group, pruned) pair counts, row-major (query block, key block);
    /// shared, so that the view's tooltip holds them without a copy per frame (3 MB at 512 x 512).
    pub counts: std::sync::Arc<Vec<[u32; 3]>>,
    pub local: u64,
    pub same_group: u64,
    pub pruned: u64,
    /// The blocks' colours (`color`; `palette::NONE` where a block has no causal pair), made here
    /// so that the frame that shows the image only uploads it (512 x 512 mixes took that frame
    /// 4-5 ms on an 8K segment).
    pub pixels: Vec<egui::Color32>,
}

impl MaskImage {
    pub fn retained(&self) -> f64 {
        let all = self.local + self.same_group + self.pruned;
        if all == 0 {
            0.0
        } else {
            (self.local + self.same_group) as f64 / all as f64
        }
    }

    pub fn color(&self, b: usize) -> egui::Color32 {
        use crate::gui::paint::palette::*;
        let [l, s, p] = self.counts[b];
        mix(&[(LOCAL, l as f32), (SAME_GROUP, s as f32), (PRUNED, p as f32)])
    }
}

pub fn mask_image(res: &AnalysisResult, layer: usize, max_side: usize, h: &Handle) -> Result<MaskImage, JobError> {
    let masks = res.masks.get(layer).ok_or_else(|| JobError::Failed(format!("no layer {layer}")))?;
    let t = masks.len();
    let (w, s, seg) = (res.window(), res.sink(), res.analysis.segment_len.max(1));
    let block = t.div_ceil(max_side.max(1)).max(1);
    let side = t.div_ceil(block);
    let mut counts = vec![[0u32; 3]; side * side];
    let (mut local, mut same, mut pruned) = (0u64, 0u64, 0u64);
    for i in 0..t {
        if i % 256 == 0 {
            if h.cancelled() {
                return Err(JobError::Cancelled);
            }
            h.set_progress(i, t, format!("layer {layer}"));
        }
        let seg_start = i / seg * seg;
        let row = (i / block) * side;
        let mi = masks[i];
        for (j, &mj) in masks.iter().enumerate().take(i + 1).skip(seg_start) {
            // Positions within the segment: the sink is its first tokens.
            let c = match classify(i - seg_start, j - seg_start, mi, mj, w, s) {
                PairClass::Local => {
                    local += 1;
                    0
                }
                PairClass::SharedGroup(_) => {
                    same += 1;
                    1
                }
                PairClass::Pruned => {
                    pruned += 1;
                    2
                }
                // j <= i here.
                PairClass::Future => continue,
            };
            counts[row + j / block][c] += 1;
        }
    }
    let mut img = MaskImage { key: res.key.clone(), layer, tokens: t, block, side, counts: std::sync::Arc::new(counts), local, same_group: same, pruned, pixels: Vec::new() };
    img.pixels = (0..side * side).map(|b| if img.counts[b].iter().any(|&n| n > 0) { img.color(b) } else { crate::gui::paint::palette::NONE }).collect();
    Ok(img)
}
