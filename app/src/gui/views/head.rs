//! Head view: one head's full attention pattern over a range of at most 512 tokens, as two
//! matrices side by side, dense (left) and Focus (right): row = query, column = key, each cell
//! coloured by what the top-k mask does with the pair (blue: kept local, orange: kept by a
//! shared group, grey: pruned; a faint tint where the weight is 0, so the mask shows everywhere)
//! and shaded by the weight the query gives the key. Above them, the attention mass each part
//! holds, dense and Focus. The range is the selected range, else the 256 tokens ending at the
//! selected token (else the first 256); the layer and head are the left panel's (arrow keys).
//! Computed in the background from the analysis' kept layers (`jobs::head_pattern`,
//! `focus_core::analysis::head_pattern`). "whole segment" shows the selected token's whole
//! segment instead, at level of detail (issue 52: an 8192-token segment is 33.5M pairs): blocks
//! of tokens, each coloured by its pairs' classes and shaded by the weight its queries give its
//! keys (`jobs::head_overview`); drawn as two textures of at most `OVERVIEW_SIDE` pixels a side,
//! so a frame costs the same at any length.

use super::view::{Command, View, ViewCtx};
use crate::gui::jobs::{HeadOverview, HeadPattern, JobError};
use crate::gui::paint::palette;
use crate::gui::state::{AnalysisKey, AnalysisResult};
use crate::gui::worker::TaskKind;
use focus_core::analysis::head_pattern::{Kind, MAX_RANGE};

/// Tokens shown around a single selected token (ending at it).
pub const DEFAULT_SPAN: usize = 256;

/// Blocks a side of the whole-segment overview at most (8192 tokens: blocks of 16 x 16).
pub const OVERVIEW_SIDE: usize = 512;

#[derive(Default)]
pub struct HeadView {
    pub pattern: Option<HeadPattern>,
    pub error: Option<String>,
    requested: Option<PatternId>,
    textures: Option<(PatternId, [egui::TextureHandle; 2])>,
    /// Show the selected token's whole segment in blocks instead of a range.
    pub whole: bool,
    pub overview: Option<HeadOverview>,
    overview_requested: Option<OverviewId>,
    overview_textures: Option<(OverviewId, [egui::TextureHandle; 2])>,
}

/// What an overview was made for (analysis, layer, head, segment start).
type OverviewId = (AnalysisKey, usize, usize, usize);

/// What a pattern was made for (analysis, layer, head, range): the two matrices' textures are
/// kept for it.
type PatternId = (AnalysisKey, usize, usize, (usize, usize));

/// What the view shows for a selection: the selected range, else `DEFAULT_SPAN` tokens ending
/// at the selected token, else the first `DEFAULT_SPAN` tokens (cut to the text).
pub fn range_for(res: &AnalysisResult, selected: Option<usize>, range: Option<(usize, usize)>) -> (usize, usize) {
    let n = res.tokens();
    match (range, selected) {
        (Some((a, b)), _) => (a.min(b), a.max(b).min(n - 1)),
        (None, Some(i)) => (i.saturating_sub(DEFAULT_SPAN - 1), i.min(n - 1)),
        (None, None) => (0, (DEFAULT_SPAN - 1).min(n - 1)),
    }
}

/// A cell's colour: the class's colour, faint where the weight is 0, full at the row's largest
/// weight (square root, so that small weights still show).
fn cell(kind: Kind, w: f32, row_max: f32) -> egui::Color32 {
    let class = match kind {
        Kind::Local => palette::LOCAL,
        Kind::Group => palette::SAME_GROUP,
        Kind::Pruned => palette::PRUNED,
    };
    let a = if row_max > 0.0 { (w / row_max).clamp(0.0, 1.0).sqrt() } else { 0.0 };
    palette::mix(&[(egui::Color32::WHITE, 0.88 * (1.0 - a)), (class, 0.12 + 0.88 * a)])
}

/// The matrix of `weights` (rows of growing length) as an image, one pixel per pair.
fn image(p: &focus_core::analysis::head_pattern::HeadPattern, focus: bool) -> egui::ColorImage {
    let n = p.len();
    let mut img = egui::ColorImage::new([n, n], vec![egui::Color32::WHITE; n * n]);
    let rows = if focus { &p.focus } else { &p.dense };
    for (r, row) in rows.iter().enumerate() {
        let max = row.iter().cloned().fold(0f32, f32::max);
        for (c, &w) in row.iter().enumerate() {
            img.pixels[r * n + c] = cell(p.kind[r][c], w, max);
        }
    }
    img
}

/// The overview's blocks as an image: each block's colour mixes its pairs' classes by their
/// counts, shaded by the weight its queries give its keys (per query), relative to the largest
/// block of its band of queries (square root, as the range's cells).
fn overview_image(o: &focus_core::analysis::head_pattern::HeadOverview, focus: bool) -> egui::ColorImage {
    let n = o.side;
    let w = if focus { &o.focus } else { &o.dense };
    let mut img = egui::ColorImage::new([n, n], vec![egui::Color32::WHITE; n * n]);
    for bi in 0..n {
        let band = &w[bi * n..(bi + 1) * n];
        let max = band.iter().cloned().fold(0f32, f32::max);
        for bj in 0..=bi {
            let [l, g, p] = o.counts[bi * n + bj];
            if l + g + p == 0 {
                continue;
            }
            let class = palette::mix(&[(palette::LOCAL, l as f32), (palette::SAME_GROUP, g as f32), (palette::PRUNED, p as f32)]);
            let a = if max > 0.0 { (band[bj] / max).clamp(0.0, 1.0).sqrt() } else { 0.0 };
            img.pixels[bi * n + bj] = palette::mix(&[(egui::Color32::WHITE, 0.88 * (1.0 - a)), (class, 0.12 + 0.88 * a)]);
        }
    }
    img
}

/// "local 61.2% · by group 30.1% · pruned 8.7%".
pub fn masses(m: &[f32; 3]) -> String {
    format!("local {:.1}% · by group {:.1}% · pruned {:.1}%", 100.0 * m[0], 100.0 * m[1], 100.0 * m[2])
}

impl HeadView {
    pub fn receive(&mut self, r: Result<HeadPattern, JobError>) {
        match r {
            Ok(p) => {
                self.pattern = Some(p);
                self.error = None;
            }
            Err(JobError::Cancelled) => {}
            Err(JobError::Failed(e)) => self.error = Some(e),
        }
    }

    pub fn receive_overview(&mut self, r: Result<HeadOverview, JobError>) {
        match r {
            Ok(o) => {
                self.overview = Some(o);
                self.error = None;
            }
            Err(JobError::Cancelled) => {}
            Err(JobError::Failed(e)) => self.error = Some(e),
        }
    }

    /// The overview on screen for this analysis, layer, head and segment, if computed.
    pub fn current_overview(&self, res: &AnalysisResult, layer: usize, head: usize, start: usize) -> Option<&HeadOverview> {
        self.overview.as_ref().filter(|o| o.key == res.key && o.overview.layer == layer && o.overview.head == head && o.start == start)
    }

    /// The whole segment of the selected token (else the first), in blocks.
    fn show_overview(&mut self, cx: &ViewCtx, res: &std::sync::Arc<AnalysisResult>, layer: usize, head: usize, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        let token = cx.selection.range.map(|r| r.0.min(r.1)).or(cx.selection.selected).unwrap_or(0).min(res.tokens() - 1);
        let seg = res.analysis.segment_len.max(1);
        let start = token / seg * seg;
        let end = (start + seg).min(res.tokens());
        // The field itself (not `current_overview`), so that the textures can be set below.
        let Some(ov) = self.overview.as_ref().filter(|o| o.key == res.key && o.overview.layer == layer && o.overview.head == head && o.start == start) else {
            let want = (res.key.clone(), layer, head, start);
            if self.overview_requested.as_ref() != Some(&want) || (!cx.worker.is_running(TaskKind::HeadPattern) && self.error.is_none()) {
                self.overview_requested = Some(want);
                self.error = None;
                out.push(Command::BuildHeadOverview(res.clone(), layer, head, token));
            }
            waiting(ui, self.error.as_deref(), format!("computing layer {layer}, head {head} over tokens {start}-{} (every row of the segment)…", end - 1));
            return out;
        };
        let o = &ov.overview;
        let focus_name = match res.mode {
            focus_core::Mode::Dense => format!("top-{} (the run is dense)", o.k),
            m => m.to_string(),
        };
        ui.label(format!(
            "Layer {layer}, head {head}, the whole segment: tokens {start}-{} ({} x {} causal pairs) in {} x {} blocks of {} x {} tokens, dense (left) and {focus_name} (right). Colour: the block's pairs by what the top-{} mask does with them (blue local, orange shared group, grey pruned, mixed by their counts); shade: the weight its queries give its keys, relative to the largest block of its row of blocks. Untick \"whole segment\" for one pixel per pair over a range.",
            end - 1,
            o.tokens,
            o.tokens,
            o.side,
            o.side,
            o.block,
            o.block,
            o.k
        ));
        ui.label(format!("dense attention mass (every query of the segment): {}", masses(&o.mass_dense)));
        ui.label(format!("{focus_name} attention mass: {}", masses(&o.mass_focus)));
        let id = (ov.key.clone(), layer, head, start);
        if self.overview_textures.as_ref().is_none_or(|t| t.0 != id) {
            let ctx = ui.ctx();
            let opts = egui::TextureOptions::NEAREST;
            self.overview_textures = Some((id, [ctx.load_texture("head-overview-dense", overview_image(o, false), opts), ctx.load_texture("head-overview-focus", overview_image(o, true), opts)]));
        }
        let tex = &self.overview_textures.as_ref().expect("made").1;
        side_by_side(ui, tex, &focus_name, o.side, |bi, bj| {
            let [l, g, p] = o.counts[bi * o.side + bj];
            (l + g + p > 0).then(|| {
                let rows = (o.block.min(o.tokens - bi * o.block)) as f32;
                let (q0, k0) = (start + bi * o.block, start + bj * o.block);
                format!(
                    "queries #{q0}-#{} to keys #{k0}-#{}: {l} local, {g} shared-group, {p} pruned pairs; weight per query: dense {:.4}, {focus_name} {:.4}",
                    (q0 + o.block).min(end) - 1,
                    (k0 + o.block).min(end) - 1,
                    o.dense[bi * o.side + bj] / rows,
                    o.focus[bi * o.side + bj] / rows
                )
            })
        });
        out
    }

    /// The pattern on screen for this analysis, layer, head and asked range, if computed.
    pub fn current(&self, res: &AnalysisResult, layer: usize, head: usize, asked: (usize, usize)) -> Option<&HeadPattern> {
        self.pattern.as_ref().filter(|p| p.key == res.key && p.pattern.layer == layer && p.pattern.head == head && p.asked == asked)
    }
}

impl View for HeadView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let mut out = Vec::new();
        let layer = cx.layer(res);
        let head = cx.settings.setup.head.min(res.model.config().n_heads - 1);
        ui.checkbox(&mut self.whole, "whole segment").on_hover_text(format!(
            "the selected token's whole segment ({} tokens) in blocks, instead of at most {MAX_RANGE} tokens at one pixel per pair",
            res.analysis.segment_len.min(res.tokens())
        ));
        if self.whole {
            return self.show_overview(cx, res, layer, head, ui);
        }
        let asked = range_for(res, cx.selection.selected, cx.selection.range);
        if self.current(res, layer, head, asked).is_none() {
            let want = (res.key.clone(), layer, head, asked);
            let running = cx.worker.is_running(TaskKind::HeadPattern);
            if self.requested.as_ref() != Some(&want) || (!running && self.error.is_none()) {
                self.requested = Some(want);
                self.error = None;
                out.push(Command::BuildHeadPattern(res.clone(), layer, head, asked));
            }
            waiting(ui, self.error.as_deref(), format!("computing layer {layer}, head {head} over tokens {}-{}…", asked.0, asked.1));
            return out;
        }
        let Self { pattern, textures, .. } = self;
        let hp = pattern.as_ref().expect("checked");
        let p = &hp.pattern;
        let (a, b) = hp.range;
        let cut = if hp.range != hp.asked { format!(" (of {}-{}: one segment, at most {MAX_RANGE} tokens)", hp.asked.0, hp.asked.1) } else { String::new() };
        let focus_name = match res.mode {
            focus_core::Mode::Dense => format!("top-{} (the run is dense)", p.k),
            m => m.to_string(),
        };
        ui.label(format!(
            "Layer {layer}, head {head}, tokens {a}-{b}{cut}: every query's (row) attention to every key (column), dense (left) and {focus_name} (right). Colour: what the top-{} mask does with the pair (blue kept local, orange kept by a shared group, grey pruned); shade: the weight, relative to the row's largest. Select a range or a token to move it; arrow keys change layer and head.",
            p.k
        ));
        ui.label(format!("dense attention mass: {}", masses(&p.mass_dense)));
        ui.label(format!("{focus_name} attention mass: {}", masses(&p.mass_focus)));
        let before = p.before.iter().fold([0f64; 2], |s, x| [s[0] + x[0] as f64, s[1] + x[1] as f64]);
        if a > 0 {
            let n = p.len() as f64;
            ui.weak(format!("(the rows hold {:.1}% dense, {:.1}% {focus_name} on tokens before {a}, not drawn)", 100.0 * before[0] / n, 100.0 * before[1] / n));
        }
        let id = (hp.key.clone(), layer, head, hp.range);
        if textures.as_ref().is_none_or(|t| t.0 != id) {
            let ctx = ui.ctx();
            let opts = egui::TextureOptions::NEAREST;
            *textures = Some((id, [ctx.load_texture("head-dense", image(p, false), opts), ctx.load_texture("head-focus", image(p, true), opts)]));
        }
        let tex = &textures.as_ref().expect("made").1;
        side_by_side(ui, tex, &focus_name, p.len(), |r, c| {
            (c <= r).then(|| {
                let kind = match p.kind[r][c] {
                    Kind::Local => "kept local",
                    Kind::Group => "kept: shares a group",
                    Kind::Pruned => "pruned",
                };
                let text = |i: usize| res.analysis.tokens[i].text.clone();
                format!("query #{} {:?} to key #{} {:?}: {kind}; dense {:.4}, {focus_name} {:.4}", a + r, text(a + r), a + c, text(a + c), p.dense[r][c], p.focus[r][c])
            })
        });
        out
    }
}

/// The dense (left) and Focus (right) squares of a head view, side by side, as large as the
/// panel allows; `tip(row, col)` of the `n` x `n` cell under the pointer (None: no tip).
fn side_by_side(ui: &mut egui::Ui, tex: &[egui::TextureHandle; 2], focus_name: &str, n: usize, tip: impl Fn(usize, usize) -> Option<String>) {
    let side = ((ui.available_width() - 30.0) / 2.0).min(ui.available_height() - 24.0).max(64.0);
    let mut shown = None;
    ui.horizontal(|ui| {
        for (s, name) in [(0, "dense"), (1, focus_name)] {
            ui.vertical(|ui| {
                ui.label(name);
                let (rect, resp) = ui.allocate_exact_size(egui::vec2(side, side), egui::Sense::hover());
                ui.painter().image(tex[s].id(), rect, egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)), egui::Color32::WHITE);
                ui.painter().rect_stroke(rect, 0.0, egui::Stroke::new(1.0, egui::Color32::GRAY), egui::StrokeKind::Outside);
                if let Some(q) = resp.hover_pos() {
                    let r = (((q.y - rect.min.y) / side * n as f32) as usize).min(n - 1);
                    let c = (((q.x - rect.min.x) / side * n as f32) as usize).min(n - 1);
                    if let Some(t) = tip(r, c) {
                        shown = Some((resp, t));
                    }
                }
            });
        }
    });
    if let Some((resp, t)) = shown {
        resp.on_hover_text_at_pointer(t);
    }
}

/// While a pattern is computed: the job's error in red, else a spinner and what is computed.
fn waiting(ui: &mut egui::Ui, error: Option<&str>, what: String) {
    match error {
        Some(e) => {
            ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
        }
        None => {
            ui.horizontal(|ui| {
                crate::gui::paint::busy::busy(ui);
                ui.label(what);
            });
        }
    }
}
