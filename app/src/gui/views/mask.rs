//! The hard mask of the selected layer over the analysed text: local, same-group and pruned pairs
//! in distinct colours, with zoom and pan (a plot image), and its SVG export. Long texts are
//! shown in blocks whose colour mixes the classes by their exact counts; the retained share is
//! exact. The image is built in the background (`jobs::mask_image`, classes from
//! `focus_core::focus::mask`); the view asks for it and keeps it with its texture.

use super::{Command, ViewCtx};
use crate::gui::export::svg::Svg;
use crate::gui::jobs::MaskImage;
use crate::gui::palette;
use crate::gui::state::{AnalysisKey, AnalysisResult};
use crate::gui::worker::TaskKind;
use egui_plot::{Plot, PlotImage, PlotPoint};
use std::sync::Arc;

/// Blocks per side at most (the image is side x side).
pub const MAX_SIDE: usize = 512;

#[derive(Default)]
pub struct MaskView {
    pub image: Option<MaskImage>,
    texture: Option<egui::TextureHandle>,
    requested: Option<(AnalysisKey, usize)>,
}

impl MaskView {
    pub fn receive(&mut self, img: MaskImage) {
        self.texture = None;
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

    pub fn show(&mut self, cx: &ViewCtx, res: &Arc<AnalysisResult>, ui: &mut egui::Ui) -> Vec<Command> {
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
                crate::gui::busy::busy(ui);
                ui.label("building the mask image…");
            });
            return out;
        };
        if img.block > 1 {
            ui.label(format!("{} tokens shown as {} x {} blocks of {} x {} tokens; colours mix the pairs of each block by their counts", img.tokens, img.side, img.side, img.block, img.block));
        }
        let tex = self.texture.get_or_insert_with(|| {
            let mut pixels = vec![palette::NONE; img.side * img.side];
            for (b, c) in img.counts.iter().enumerate() {
                if c.iter().any(|&n| n > 0) {
                    pixels[b] = img.color(b);
                }
            }
            let ci = egui::ColorImage::new([img.side, img.side], pixels);
            ui.ctx().load_texture("mask", ci, egui::TextureOptions::NEAREST)
        });
        let t = img.tokens as f64;
        let (block, side) = (img.block, img.side);
        let counts = img.counts.clone();
        let tokens = res.analysis.tokens.clone();
        Plot::new("mask_plot")
            .data_aspect(1.0)
            .invert_y(true)
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
                let tok = |n: usize| tokens.get(n).map(|x| format!("{:?}", x.text)).unwrap_or_default();
                Some(format!("query #{i} {}\nkey #{j} {}\nblock: {l} local, {s} same-group, {pr} pruned", tok(i), tok(j)))
            })
            .show(ui, |p| {
                let size = (side * block) as f32;
                p.image(PlotImage::new("mask", tex.id(), PlotPoint::new(size as f64 / 2.0, size as f64 / 2.0), egui::vec2(size, size)));
            });
        out
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
