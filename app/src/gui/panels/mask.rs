//! The hard mask of the selected layer over the analysed text: local, same-group and pruned pairs
//! in distinct colours, with zoom and pan (a plot image). Long texts are shown in blocks whose
//! colour mixes the classes by their exact counts; the retained share is exact.

use crate::gui::app::FocusLensApp;
use crate::gui::jobs::{self, MaskImage, Msg};
use crate::gui::palette;
use crate::gui::state::AnalysisKey;
use crate::gui::worker::TaskKind;
use egui_plot::{Plot, PlotImage, PlotPoint};

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
}

/// Starts building the mask image if it is not there or on its way.
pub fn request(app: &mut FocusLensApp, layer: usize) {
    let Some(res) = app.result.clone() else { return };
    let want = (res.key.clone(), layer);
    if app.panels.mask.current(&res.key, layer).is_some() || (app.panels.mask.requested.as_ref() == Some(&want) && app.is_running(TaskKind::Mask)) {
        return;
    }
    app.panels.mask.requested = Some(want);
    app.worker.spawn(TaskKind::Mask, move |h| match jobs::mask_image(&res, layer, MAX_SIDE, h) {
        Some(m) => Msg::Mask(Some(m)),
        None => Msg::Mask(None),
    });
}

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    let Some(res) = app.result.clone() else { return };
    let layer = app.settings.layer.min(res.layers() - 1);
    request(app, layer);
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
    let view = &mut app.panels.mask;
    let Some(img) = view.image.as_ref().filter(|m| m.key == res.key && m.layer == layer) else {
        ui.horizontal(|ui| {
            super::busy::busy(ui);
            ui.label("building the mask image…");
        });
        return;
    };
    if img.block > 1 {
        ui.label(format!("{} tokens shown as {} x {} blocks of {} x {} tokens; colours mix the pairs of each block by their counts", img.tokens, img.side, img.side, img.block, img.block));
    }
    let tex = view.texture.get_or_insert_with(|| {
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
}
