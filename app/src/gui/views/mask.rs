//! The hard mask of the selected layer over the analysed text: local, same-group and pruned pairs
//! in distinct colours, with zoom and pan (a plot image), and its SVG export. Long texts are
//! shown in blocks whose colour mixes the classes by their exact counts; the retained share is
//! exact. The image is built in the background (`jobs::mask_image`, classes from
//! `focus_core::focus::mask`); the view asks for it and keeps it with its texture.

use super::view::{Command, View, ViewCtx};
use crate::gui::export::svg::Svg;
use crate::gui::jobs::MaskImage;
use crate::gui::paint::palette;
use crate::gui::state::{AnalysisKey, AnalysisResult};
use crate::gui::worker::TaskKind;
use egui_plot::{Plot, PlotImage, PlotPoint};
use focus_core::focus::mask::{classify, PairClass};
use std::sync::Arc;

/// Blocks per side at most (the image is side x side).
pub const MAX_SIDE: usize = 512;
/// The plot's id (its `egui_plot::PlotMemory`: the region on screen).
pub const MASK_PLOT: &str = "mask_plot";

#[derive(Default)]
pub struct MaskView {
    pub image: Option<MaskImage>,
    texture: Option<egui::TextureHandle>,
    requested: Option<(AnalysisKey, usize)>,
    /// The full-resolution image of the zoomed-in region: (key, layer, first query, first key,
    /// side in tokens) and its texture.
    pub zoom: Option<((AnalysisKey, usize, usize, usize, usize), egui::TextureHandle)>,
    /// The analysis the plot last showed: a new one resets its zoom and pan.
    shown_key: Option<AnalysisKey>,
    /// Screen pixels per token pair in the last frame (for the header).
    pub px_per_pair: Option<f64>,
    /// Frames drawn since the plot was reset: its bounds are the fitted ones (and the zoom is
    /// bounded, `bound_zoom`) from the third on, not the default ones of its first frames.
    frames: u32,
}

/// Why the pair (query i, key j) of `layer` is kept or not, in words: local, a shared group
/// (its shown number), pruned (with both tokens' groups), the future, or across segments.
pub fn pair_reason(res: &AnalysisResult, layer: usize, i: usize, j: usize, raw: bool) -> String {
    let Some(m) = res.masks.get(layer) else { return String::new() };
    if i >= m.len() || j >= m.len() {
        return String::new();
    }
    let seg = res.analysis.segment_len.max(1);
    if i / seg != j / seg {
        return "not computed: the tokens are in different segments".into();
    }
    let (w, s) = (res.window(), res.sink());
    let seg_start = i / seg * seg;
    let names = |set: u64| focus_core::focus::mask::groups(set).map(|g| res.group_name(layer, g, raw)).collect::<Vec<_>>().join(", ");
    match classify(i - seg_start, j - seg_start, m[i], m[j], w, s) {
        PairClass::Future => "not attended: the key comes after the query (causal)".into(),
        PairClass::Local if i - j > w => format!("kept: attention sink (the key is among the segment's first {s} tokens; i - j = {} > w)", i - j),
        PairClass::Local => format!("kept: local (i - j = {} <= w = {w})", i - j),
        PairClass::SharedGroup(g) => format!("kept: both in group {} (i - j = {} > w)", res.group_name(layer, g, raw), i - j),
        PairClass::Pruned => format!("pruned: no shared group (query in {}, key in {}; i - j = {} > w)", names(m[i]), names(m[j]), i - j),
    }
}

/// One token pair per pixel for queries i0.. and keys j0.. (side x side).
pub fn full_resolution(res: &AnalysisResult, layer: usize, i0: usize, j0: usize, side: usize) -> egui::ColorImage {
    let m = &res.masks[layer];
    let (w, s, seg) = (res.window(), res.sink(), res.analysis.segment_len.max(1));
    let mut px = vec![palette::NONE; side * side];
    for di in 0..side {
        let i = i0 + di;
        if i >= m.len() {
            break;
        }
        for dj in 0..side {
            let j = j0 + dj;
            if j >= m.len() || i / seg != j / seg {
                continue;
            }
            let seg_start = i / seg * seg;
            px[di * side + dj] = match classify(i - seg_start, j - seg_start, m[i], m[j], w, s) {
                PairClass::Local => palette::LOCAL,
                PairClass::SharedGroup(_) => palette::SAME_GROUP,
                PairClass::Pruned => palette::PRUNED,
                PairClass::Future => palette::NONE,
            };
        }
    }
    egui::ColorImage::new([side, side], px)
}

impl MaskView {
    pub fn receive(&mut self, img: MaskImage) {
        self.texture = None;
        self.zoom = None;
        self.image = Some(img);
    }
    /// The image for this analysis and layer, when ready.
    pub fn current(&self, key: &AnalysisKey, layer: usize) -> Option<&MaskImage> {
        self.image.as_ref().filter(|m| &m.key == key && m.layer == layer)
    }

    /// Asks for the mask image if it is not there or on its way.
    fn request(&mut self, cx: &ViewCtx, res: &Arc<AnalysisResult>, layer: usize) -> Option<Command> {
        let want = (res.key.clone(), layer);
        if self.current(&res.key, layer).is_some() || (self.requested.as_ref() == Some(&want) && cx.worker.is_running(TaskKind::Mask)) {
            return None;
        }
        self.requested = Some(want);
        Some(Command::BuildMask(res.clone(), layer))
    }

    /// The SVG of the mask (`Err` while the image is being built).
    pub fn svg(&self, res: &AnalysisResult, layer: usize) -> Result<String, String> {
        match self.current(&res.key, layer) {
            Some(m) => Ok(mask_svg(m, res, 128)),
            None => Err("the mask image is still being built: try again in a moment".into()),
        }
    }
}

impl View for MaskView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let layer = cx.layer(res);
        let out: Vec<Command> = self.request(cx, res, layer).into_iter().collect();
        let stats = &res.analysis.layers[layer].pairs;
        ui.horizontal_wrapped(|ui| {
            for (c, name) in [(palette::LOCAL, "local (i - j <= w)"), (palette::SAME_GROUP, "same group, distant"), (palette::PRUNED, "pruned"), (palette::NONE, "not causal / across segments")] {
                let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
                ui.painter().rect_filled(r, 2.0, c);
                ui.label(name);
            }
        });
        ui.label(format!(
            "layer {layer}: {:.3}% of causal pairs retained (exact: {} local + {} same-group of {} causal pairs, within segments of {} tokens)",
            100.0 * stats.retained,
            stats.local,
            stats.same_group_distant,
            stats.causal,
            res.analysis.segment_len
        ));
        let Some(img) = self.image.as_ref().filter(|m| m.key == res.key && m.layer == layer) else {
            ui.horizontal(|ui| {
                crate::gui::paint::busy::busy(ui);
                ui.label("building the mask image…");
            });
            return out;
        };
        // A new analysis: back to the whole mask (a zoom into the previous one may show nothing).
        let reset = self.shown_key.as_ref() != Some(&res.key);
        if reset {
            self.shown_key = Some(res.key.clone());
            self.zoom = None;
            self.px_per_pair = None;
            self.frames = 0;
        }
        let settled = self.frames >= 3;
        self.frames = self.frames.saturating_add(1);
        let zoomed = self.zoom.as_ref().filter(|(z, _)| z.0 == res.key && z.1 == layer).map(|(z, t)| (z.2, z.3, z.4, t.id()));
        let px = |n: f64| self.px_per_pair.map(|p| format!("{:.1} x {:.1} screen pixels", p * n, p * n)).unwrap_or_else(|| "…".into());
        if img.block > 1 {
            match zoomed {
                Some((i0, j0, n, _)) => ui.label(format!("zoomed in: queries {i0}..{} x keys {j0}..{} at full resolution, one pair = {}; zoom out for blocks of {} x {} tokens", i0 + n, j0 + n, px(1.0), img.block, img.block)),
                None => ui.label(format!("{} tokens shown as {} x {} blocks of {} x {} tokens, one block = {} (colours mix the pairs of each block by their counts); zoom in (Ctrl + scroll, or drag a box with the right button) to {} tokens or fewer for full resolution", img.tokens, img.side, img.side, img.block, img.block, px(img.block as f64), MAX_SIDE)),
            };
        } else {
            ui.label(format!("one pair = {}", px(1.0)));
        }
        let tex = self.texture.get_or_insert_with(|| {
            // The colours come made (`MaskImage::pixels`, in the job): this frame only uploads.
            let ci = egui::ColorImage::new([img.side, img.side], img.pixels.clone());
            ui.ctx().load_texture("mask", ci, egui::TextureOptions::NEAREST)
        });
        let t = img.tokens as f64;
        let (block, side) = (img.block, img.side);
        // Shared with the tooltip, not copied: each frame used to copy the block counts and
        // every token's text (8,192 strings on an 8K segment).
        let counts = img.counts.clone();
        let res2 = res.clone();
        let raw = cx.settings.setup.raw_groups;
        let mut plot = Plot::new(MASK_PLOT).id(egui::Id::unique(MASK_PLOT));
        if reset {
            plot = plot.reset();
        }
        let plot = plot
            .data_aspect(1.0)
            .invert_y(true)
            // Plain scrolling used to pan into negative indices; zoom is Ctrl + scroll.
            .allow_scroll(false)
            .x_axis_label("key token j")
            .y_axis_label("query token i")
            .label_formatter(move |hp| {
                let p = match hp {
                    egui_plot::HoverPosition::NearDataPoint { position, .. } | egui_plot::HoverPosition::Elsewhere { position } => *position,
                };
                let (i, j) = (p.y.floor(), p.x.floor());
                if i < 0.0 || j < 0.0 || i >= t || j >= t {
                    return None;
                }
                let (i, j) = (i as usize, j as usize);
                let [l, s, pr] = counts[(i / block) * side + j / block];
                let tok = |n: usize| res2.analysis.tokens.get(n).map(|x| format!("{:?}", x.text)).unwrap_or_default();
                let why = pair_reason(&res2, layer, i, j, raw);
                // Inside the full-resolution region a pixel is one pair: no block to describe.
                let exact = zoomed.is_some_and(|(i0, j0, n, _)| (i0..i0 + n).contains(&i) && (j0..j0 + n).contains(&j));
                let blk = if block > 1 && !exact { format!("\nblock of {block} x {block}: {l} local, {s} same-group, {pr} pruned") } else { String::new() };
                Some(format!("query #{i} {}\nkey #{j} {}\n{why}{blk}", tok(i), tok(j)))
            })
            .show(ui, |p| {
                if settled {
                    bound_zoom(p, t);
                }
                let size = (side * block) as f32;
                p.image(PlotImage::new("mask", tex.id(), PlotPoint::new(size as f64 / 2.0, size as f64 / 2.0), egui::vec2(size, size)));
                if let Some((i0, j0, n, id)) = zoomed {
                    let c = PlotPoint::new(j0 as f64 + n as f64 / 2.0, i0 as f64 + n as f64 / 2.0);
                    p.image(PlotImage::new("mask (full resolution)", id, c, egui::vec2(n as f32, n as f32)));
                }
            });
        let per_unit = plot.transform.dvalue_dpos()[0].abs();
        self.px_per_pair = (per_unit > 0.0).then(|| ui.ctx().pixels_per_point() as f64 / per_unit);
        // Zoomed in to MAX_SIDE tokens or fewer: draw that region at one pair per pixel of its
        // texture (from the next frame on).
        if img.block > 1 && !reset {
            let b = plot.transform.bounds();
            let (x0, x1, y0, y1) = (b.min()[0], b.max()[0], b.min()[1], b.max()[1]);
            let span = (x1 - x0).max(y1 - y0);
            if span <= MAX_SIDE as f64 {
                let n = (span.ceil() as usize + 2).min(img.tokens).max(1);
                let i0 = (y0.floor().max(0.0) as usize).min(img.tokens.saturating_sub(1));
                let j0 = (x0.floor().max(0.0) as usize).min(img.tokens.saturating_sub(1));
                let want = (res.key.clone(), layer, i0, j0, n);
                if self.zoom.as_ref().is_none_or(|(z, _)| *z != want) {
                    let ci = full_resolution(res, layer, i0, j0, n);
                    let tex = ui.ctx().load_texture("mask_zoom", ci, egui::TextureOptions::NEAREST);
                    self.zoom = Some((want, tex));
                }
            } else {
                self.zoom = None;
            }
        }
        out
    }
}

/// The fewest tokens a side of the mask view shows when zoomed in (egui_plot zooms without end:
/// it went in to half a token).
pub const MIN_SPAN: f64 = 8.0;

/// Keeps the mask view's zoom and pan on the mask: a side spans at least `MIN_SPAN` tokens (the
/// whole mask when smaller) and at most 1.5 times the mask, and its centre stays on the mask
/// (zooming out ran to -3,000,000 tokens).
fn bound_zoom(p: &mut egui_plot::PlotUi, tokens: f64) {
    let b = p.plot_bounds();
    let (w, h) = (b.width(), b.height());
    if !(w.is_finite() && h.is_finite()) || w <= 0.0 || h <= 0.0 || tokens <= 0.0 {
        return;
    }
    let span = w.max(h);
    let (lo, hi) = (MIN_SPAN.min(tokens), 1.5 * tokens);
    let scale = if span < lo { lo / span } else if span > hi { hi / span } else { 1.0 };
    let c = b.center();
    let (cx, cy) = (c.x.clamp(0.0, tokens), c.y.clamp(0.0, tokens));
    if scale != 1.0 || cx != c.x || cy != c.y {
        let (hw, hh) = (w * scale / 2.0, h * scale / 2.0);
        p.set_plot_bounds(egui_plot::PlotBounds::from_min_max([cx - hw, cy - hh], [cx + hw, cy + hh]));
    }
}

/// The mask in at most `max_side` blocks per side (blocks of the screen image merged).
pub fn mask_svg(m: &MaskImage, res: &AnalysisResult, max_side: usize) -> String {
    let merge = m.side.div_ceil(max_side.max(1)).max(1);
    let side = m.side.div_ceil(merge);
    let mut counts = vec![[0u64; 3]; side * side];
    for bi in 0..m.side {
        for bj in 0..m.side {
            let c = m.counts[bi * m.side + bj];
            let o = &mut counts[(bi / merge) * side + bj / merge];
            for n in 0..3 {
                o[n] += c[n] as u64;
            }
        }
    }
    let cell = (600.0 / side as f64).max(1.0);
    let top = 60.0;
    let mut s = Svg::new(side as f64 * cell + 40.0, side as f64 * cell + top + 30.0);
    s.text(
        20.0,
        20.0,
        &format!("layer {}: hard top-k mask, {:.3}% of causal pairs retained; {} tokens in blocks of {}", m.layer, 100.0 * res.analysis.layers[m.layer].pairs.retained, m.tokens, m.block * merge),
        13.0,
        "black",
        "start",
    );
    let mut lx = 20.0;
    for (c, name) in [(palette::LOCAL, "local"), (palette::SAME_GROUP, "same group"), (palette::PRUNED, "pruned")] {
        s.rect(lx, 32.0, 10.0, 10.0, &palette::hex(c), None);
        s.text(lx + 14.0, 41.0, name, 11.0, "black", "start");
        lx += 110.0;
    }
    for bi in 0..side {
        for bj in 0..=bi.min(side - 1) {
            let [l, g, p] = counts[bi * side + bj];
            if l + g + p == 0 {
                continue;
            }
            let c = palette::mix(&[(palette::LOCAL, l as f32), (palette::SAME_GROUP, g as f32), (palette::PRUNED, p as f32)]);
            s.rect(20.0 + bj as f64 * cell, top + bi as f64 * cell, cell, cell, &palette::hex(c), None);
        }
    }
    s.finish()
}
