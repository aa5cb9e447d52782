//! Routing space: a 2D PCA projection of each token's routing vector h W_g in the selected layer,
//! with the K centroids projected onto the same axes (`focus_core::analysis::projection`), and
//! its SVG. Points are coloured by group or by category; hovering names the nearest token. The
//! view keeps the last projection.

use super::view::{Command, View, ViewCtx};
use crate::gui::export::svg::Svg;
use crate::gui::paint::palette;
use crate::gui::state::{AnalysisKey, AnalysisResult};
use egui_plot::{MarkerShape, Plot, PlotPoints, Points};
use focus_core::analysis::categories::Category;
use focus_core::analysis::projection::Projection;
use std::sync::Arc;

/// Rows of `v` (n x d) scaled to unit length (zero rows stay zero).
fn normalised(v: &[f32], d: usize) -> Vec<f32> {
    v.chunks(d)
        .flat_map(|r| {
            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            r.iter().map(move |x| if n > 0.0 { x / n } else { 0.0 })
        })
        .collect()
}

/// Does the adapter score by cosine (so that the projection should show normalised vectors)?
pub fn cosine(res: &AnalysisResult) -> bool {
    res.adapter.config.score == focus_core::Score::Cosine
}

/// The projection of what the scores use: for a cosine adapter, the routing vectors and the
/// centroids each normalised to unit length (the raw vectors' lengths play no part in the
/// scores, and plotting them left the unit-length centroids outside the cloud); for a dot-product
/// adapter, the raw ones.
pub fn projection(res: &AnalysisResult, layer: usize) -> Result<Projection, String> {
    if !cosine(res) {
        return res.analysis.projection(&res.adapter, layer).map_err(|e| e.to_string());
    }
    let r = res.analysis.routing.get(layer).ok_or_else(|| format!("layer {layer} out of range"))?;
    let v = r.vectors.as_ref().ok_or("routing vectors were not recorded for this layer")?;
    let router = res.adapter.layers.get(layer).ok_or_else(|| format!("layer {layer} out of range"))?;
    let c = router.centroids.to_dtype(candle_core::DType::F32).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).map_err(|e| e.to_string())?;
    focus_core::analysis::projection::pca_2d(&normalised(v, r.d_g), r.t, r.d_g, &normalised(&c, r.d_g), res.groups()).map_err(|e| e.to_string())
}

#[derive(Default)]
pub struct RoutingView {
    cached: Option<(AnalysisKey, usize, Result<Arc<Projection>, String>)>,
}

impl View for RoutingView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let layer = cx.layer(res);
        if !self.cached.as_ref().is_some_and(|(k, l, _)| k == &res.key && *l == layer) {
            // A T x d_g PCA (d_g = 16): milliseconds even for 10K tokens.
            let p = projection(res, layer).map(Arc::new);
            self.cached = Some((res.key.clone(), layer, p));
        }
        let proj = match &self.cached.as_ref().expect("just set").2 {
            Ok(p) => p.clone(),
            Err(e) => {
                ui.colored_label(egui::Color32::from_rgb(200, 30, 30), format!("projection: {e}"));
                return Vec::new();
            }
        };
        let by_cat = cx.settings.setup.color_by_category;
        let raw = cx.settings.setup.raw_groups;
        let shown = |g: usize| res.shown_group(layer, g, raw);
        let group_name = |g: usize| format!("{} {}", res.group_name(layer, g, raw), res.labels[layer][g]);
        ui.label(format!(
            "layer {layer}: {} (d_g = {}) on their two principal axes ({:.0}% and {:.0}% of the variance); diamonds: the K centroids{} on the same axes. Colour: {}.",
            if cosine(res) { "routing vectors h W_g normalised to unit length (the adapter scores by cosine)" } else { "routing vectors h W_g" },
            proj.d_g,
            100.0 * proj.explained[0],
            100.0 * proj.explained[1],
            if cosine(res) { " (normalised)" } else { "" },
            if by_cat { "category" } else { "group (largest membership)" }
        ));
        // The legend above the plot, not on it: a scatter has points in every corner.
        ui.horizontal_wrapped(|ui| {
            if by_cat {
                for c in Category::ALL {
                    let (r, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
                    ui.painter().rect_filled(r, 2.0, super::categories::color(c));
                    ui.label(c.name());
                }
            } else {
                for g in res.groups_in_shown_order(layer, raw) {
                    let (r, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
                    ui.painter().rect_filled(r, 2.0, palette::group(shown(g)));
                    ui.label(group_name(g));
                }
            }
            ui.weak("(diamonds: centroids)");
        });
        let (hover_res, hover_proj) = (res.clone(), proj.clone());
        Plot::new("routing_space")
            .data_aspect(1.0)
            .label_formatter(move |hp| {
                let pos = match hp {
                    egui_plot::HoverPosition::NearDataPoint { position, .. } | egui_plot::HoverPosition::Elsewhere { position } => *position,
                };
                let (i, d) = hover_proj
                    .points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (i, (p[0] - pos.x).powi(2) + (p[1] - pos.y).powi(2)))
                    .min_by(|a, b| a.1.total_cmp(&b.1))?;
                let _ = d;
                let t = &hover_res.analysis.tokens[i];
                Some(format!("#{i} {:?}\n{} {}, {}", t.text, hover_res.group_name(layer, hover_res.argmax[layer][i] as usize, cx.settings.setup.raw_groups), hover_res.labels[layer][hover_res.argmax[layer][i] as usize], t.category))
            })
            .show(ui, |p| {
                if by_cat {
                    for c in Category::ALL {
                        let pts: Vec<[f64; 2]> = proj.points.iter().zip(&res.analysis.tokens).filter(|(_, t)| t.category == c).map(|(p, _)| *p).collect();
                        if !pts.is_empty() {
                            p.points(Points::new(c.name(), PlotPoints::from(pts)).color(super::categories::color(c)).radius(2.0));
                        }
                    }
                } else {
                    for g in res.groups_in_shown_order(layer, raw) {
                        let pts: Vec<[f64; 2]> = proj.points.iter().zip(&res.argmax[layer]).filter(|(_, &a)| a as usize == g).map(|(p, _)| *p).collect();
                        if !pts.is_empty() {
                            p.points(Points::new(group_name(g), PlotPoints::from(pts)).color(palette::group(shown(g))).radius(2.0));
                        }
                    }
                }
                // A centroid shares its group's legend entry (one entry per group, not two).
                for (g, c) in proj.centroids.iter().enumerate() {
                    let name = if by_cat { "centroids".to_string() } else { group_name(g) };
                    p.points(
                        Points::new(name, PlotPoints::from(vec![*c]))
                            .shape(MarkerShape::Diamond)
                            .radius(8.0)
                            .filled(true)
                            .color(palette::group(shown(g))),
                    );
                }
            });
        Vec::new()
    }
}

/// The routing space of one layer: tokens coloured by group, centroids outlined.
pub fn svg(res: &AnalysisResult, layer: usize, raw: bool) -> Result<String, String> {
    let p = projection(res, layer)?;
    let all = p.points.iter().chain(&p.centroids);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for q in all {
        x0 = x0.min(q[0]);
        x1 = x1.max(q[0]);
        y0 = y0.min(q[1]);
        y1 = y1.max(q[1]);
    }
    let span = (x1 - x0).max(y1 - y0).max(1e-9);
    let (size, m) = (600.0, 40.0);
    let px = |x: f64| m + (x - x0) / span * size;
    let py = |y: f64| m + size - (y - y0) / span * size;
    let mut s = Svg::new(size + 2.0 * m + 200.0, size + 2.0 * m);
    s.text(10.0, 20.0, &format!("layer {layer}: routing vectors on their two principal axes ({:.0}% / {:.0}% of the variance)", 100.0 * p.explained[0], 100.0 * p.explained[1]), 13.0, "black", "start");
    for (i, q) in p.points.iter().enumerate() {
        let g = res.shown_group(layer, res.argmax[layer].get(i).cloned().unwrap_or(0) as usize, raw);
        s.circle(px(q[0]), py(q[1]), 1.8, &palette::hex(palette::group(g)));
    }
    for (g, q) in p.centroids.iter().enumerate() {
        let sg = res.shown_group(layer, g, raw);
        s.rect(px(q[0]) - 5.0, py(q[1]) - 5.0, 10.0, 10.0, &palette::hex(palette::group(sg)), Some("#000000"));
        s.text(px(q[0]) + 8.0, py(q[1]) + 4.0, &res.group_name(layer, g, raw), 11.0, "black", "start");
    }
    for (n, g) in res.groups_in_shown_order(layer, raw).into_iter().enumerate() {
        let y = m + 18.0 * n as f64;
        let sg = res.shown_group(layer, g, raw);
        s.rect(size + 2.0 * m, y, 10.0, 10.0, &palette::hex(palette::group(sg)), None);
        s.text(size + 2.0 * m + 14.0, y + 9.0, &format!("{} {}", res.group_name(layer, g, raw), res.labels[layer][g]), 10.0, "black", "start");
    }
    Ok(s.finish())
}
