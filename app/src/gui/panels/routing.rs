//! Routing space: a 2D PCA projection of each token's routing vector h W_g in the selected layer,
//! with the K centroids projected onto the same axes (`focus_core::projection`). Points are
//! coloured by group or by category; hovering names the nearest token.

use crate::gui::app::FocusLensApp;
use crate::gui::palette;
use crate::gui::state::AnalysisKey;
use egui_plot::{Corner, Legend, MarkerShape, Plot, PlotPoints, Points};
use focus_core::categories::Category;
use focus_core::projection::Projection;
use std::sync::Arc;

#[derive(Default)]
pub struct RoutingView {
    cached: Option<(AnalysisKey, usize, Result<Arc<Projection>, String>)>,
}

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    let Some(res) = app.result.clone() else { return };
    let layer = app.settings.layer.min(res.layers() - 1);
    let view = &mut app.panels.routing;
    if !view.cached.as_ref().is_some_and(|(k, l, _)| k == &res.key && *l == layer) {
        // A T x d_g PCA (d_g = 16): milliseconds even for 10K tokens.
        let p = res.analysis.projection(&res.adapter, layer).map(Arc::new).map_err(|e| e.to_string());
        view.cached = Some((res.key.clone(), layer, p));
    }
    let proj = match &view.cached.as_ref().expect("just set").2 {
        Ok(p) => p.clone(),
        Err(e) => {
            ui.colored_label(egui::Color32::from_rgb(200, 30, 30), format!("projection: {e}"));
            return;
        }
    };
    let by_cat = app.settings.color_by_category;
    let group_name = |g: usize| format!("g{g} {}", res.labels[layer][g]);
    ui.label(format!(
        "layer {layer}: routing vectors h W_g (d_g = {}) on their two principal axes ({:.0}% and {:.0}% of the variance); diamonds: the K centroids on the same axes. Colour: {}.",
        proj.d_g,
        100.0 * proj.explained[0],
        100.0 * proj.explained[1],
        if by_cat { "category" } else { "group (largest membership)" }
    ));
    let (hover_res, hover_proj) = (res.clone(), proj.clone());
    Plot::new("routing_space")
        .legend(Legend::default().position(Corner::LeftBottom))
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
            Some(format!("#{i} {:?}\ngroup {}, {}", t.text, hover_res.argmax[layer][i], t.category))
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
                for g in 0..res.groups() {
                    let pts: Vec<[f64; 2]> = proj.points.iter().zip(&res.argmax[layer]).filter(|(_, &a)| a as usize == g).map(|(p, _)| *p).collect();
                    if !pts.is_empty() {
                        p.points(Points::new(group_name(g), PlotPoints::from(pts)).color(palette::group(g)).radius(2.0));
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
                        .color(palette::group(g)),
                );
            }
        });
}
