//! Balance: per layer, group mass before and after Sinkhorn (selected layer), and across layers
//! the dominance against the ideal 1/K, mean confidence and membership entropy against ln K; and
//! the same four charts as SVG.

use super::view::{Command, View, ViewCtx};
use crate::gui::export::svg::{bar_chart, line_chart, stack, Series};
use crate::gui::paint::palette;
use crate::gui::state::AnalysisResult;
use crate::gui::paint::reference;
use egui_plot::{uniform_grid_spacer, AxisHints, Bar, BarChart, GridMark, Legend, Line, Plot, PlotPoints, VLine};

/// The Balance view.
#[derive(Default)]
pub struct BalanceView;

impl View for BalanceView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let layer = cx.layer(res);
        let l = &res.analysis.layers[layer];
        let k = res.groups() as f64;
        let h = (ui.available_height() / 2.0 - 30.0).max(150.0);
        ui.columns(2, |cols| {
            cols[0].label(format!("layer {layer}: share of membership mass per group; pale: before Sinkhorn (softmax of S / tau), solid: after"));
            // Bars at the groups' shown numbers (matched across layers unless raw), in their colours.
            let sg = |g: usize| cx.shown(res, layer, g);
            let before: Vec<Bar> = l.mass_before.iter().enumerate().map(|(g, &m)| Bar::new(sg(g) as f64 - 0.2, m).width(0.38).fill(palette::group(sg(g)).gamma_multiply(0.5))).collect();
            let after: Vec<Bar> = l.mass_after.iter().enumerate().map(|(g, &m)| Bar::new(sg(g) as f64 + 0.2, m).width(0.38).fill(palette::group(sg(g)))).collect();
            // Bars are in group colours; the legend's grey dots only tell pale (before) from solid.
            let n = res.groups();
            let numbering = cx.numbering();
            let group_ticks = move |m: GridMark, _: &std::ops::RangeInclusive<f64>| {
                let g = m.value.round();
                if (m.value - g).abs() < 1e-6 && g >= 0.0 && (g as usize) < n { focus_core::analysis::identity::group_name(g as usize, numbering) } else { String::new() }
            };
            // One tick per group: "g1" is narrow, so labels may sit closer than egui_plot's default.
            let axis = AxisHints::new_x().label("group").formatter(group_ticks).label_spacing(20.0..=30.0);
            let mass = Plot::new("mass").height(h).legend(Legend::default()).custom_x_axes(vec![axis]).include_y(headroom(l.mass_before.iter().chain(&l.mass_after).cloned()));
            mass.x_grid_spacer(uniform_grid_spacer(|_| [1.0, 5.0, 10.0])).show(&mut cols[0], |p| {
                p.bar_chart(BarChart::new("before Sinkhorn (softmax)", before).color(egui::Color32::from_gray(200)));
                p.bar_chart(BarChart::new("after Sinkhorn", after).color(egui::Color32::from_gray(90)));
                reference::hline(p, format!("ideal 1/K = {:.3}", 1.0 / k), 1.0 / k, -0.5);
            });
            cols[1].label("dominance per layer (share of tokens in the largest group)");
            let dom: PlotPoints = res.analysis.layers.iter().map(|l| [l.layer as f64, l.dominance]).collect();
            Plot::new("dominance").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).include_y(headroom(res.analysis.layers.iter().map(|l| l.dominance))).show(&mut cols[1], |p| {
                p.line(Line::new("dominance", dom));
                p.vline(selected(layer));
                reference::hline(p, format!("ideal 1/K = {:.3}", 1.0 / k), 1.0 / k, 0.0);
            });
        });
        ui.columns(2, |cols| {
            cols[0].label("mean confidence (largest membership) per layer");
            let conf: PlotPoints = res.analysis.layers.iter().map(|l| [l.layer as f64, l.mean_confidence]).collect();
            Plot::new("confidence").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).include_y(headroom(res.analysis.layers.iter().map(|l| l.mean_confidence))).show(&mut cols[0], |p| {
                p.line(Line::new("confidence", conf));
                p.vline(selected(layer));
                reference::hline(p, format!("uniform 1/K = {:.3}", 1.0 / k), 1.0 / k, 0.0);
            });
            cols[1].label("mean membership entropy per layer (nats)");
            let ent: PlotPoints = res.analysis.layers.iter().map(|l| [l.layer as f64, l.mean_entropy]).collect();
            Plot::new("entropy").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).include_y(headroom(res.analysis.layers.iter().map(|l| l.mean_entropy).chain([k.ln()]))).show(&mut cols[1], |p| {
                p.line(Line::new("entropy", ent));
                p.vline(selected(layer));
                reference::hline(p, format!("uniform ln K = {:.2}", k.ln()), k.ln(), 0.0);
            });
        });
        Vec::new()
    }
}

/// Marks the layer chosen in the controls on the per-layer charts.
fn selected(layer: usize) -> VLine {
    VLine::new(format!("selected layer {layer}"), layer as f64).color(egui::Color32::from_gray(170)).style(egui_plot::LineStyle::dashed_dense())
}

/// A y bound above the data, so that the legend (top right) covers no point.
pub fn headroom(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(0.0, f64::max) * 1.45
}

/// The balance view as SVG: the mass chart of `layer` and the three per-layer charts, stacked.
/// The groups are in the order and under the names and colours of the screen (`raw`: the
/// centroids' own indices, named c0, c1, ...).
pub fn svg(res: &AnalysisResult, layer: usize, raw: bool) -> String {
    let l = &res.analysis.layers[layer];
    let k = res.groups() as f64;
    let order = res.groups_in_shown_order(layer, raw);
    let cats: Vec<String> = order.iter().map(|&g| res.group_name(layer, g, raw)).collect();
    let swatches: Vec<String> = order.iter().map(|&g| palette::hex(palette::group(res.shown_group(layer, g, raw)))).collect();
    let by_order = |v: &[f64]| order.iter().map(|&g| v.get(g).copied().unwrap_or(0.0)).collect::<Vec<f64>>();
    let mass = bar_chart(
        &format!("layer {layer}: membership mass per group"),
        &cats,
        &swatches,
        &[("before Sinkhorn".into(), "#9ecae1".into(), by_order(&l.mass_before)), ("after Sinkhorn".into(), "#3182bd".into(), by_order(&l.mass_after))],
        Some(("ideal 1/K".into(), 1.0 / k)),
    );
    let per_layer = |f: fn(&focus_core::analysis::stats::LayerStats) -> f64| res.analysis.layers.iter().map(|l| (l.layer as f64, f(l))).collect::<Vec<_>>();
    let dom = line_chart(
        "dominance per layer",
        "layer",
        "share of tokens in the largest group",
        &[Series { name: "dominance".into(), color: "#d62728".into(), points: per_layer(|l| l.dominance), dashed: false }],
        &[("ideal 1/K".into(), 1.0 / k)],
    );
    let conf = line_chart(
        "mean confidence per layer",
        "layer",
        "largest membership",
        &[Series { name: "confidence".into(), color: "#2ca02c".into(), points: per_layer(|l| l.mean_confidence), dashed: false }],
        &[("uniform 1/K".into(), 1.0 / k)],
    );
    let ent = line_chart(
        "mean membership entropy per layer",
        "layer",
        "nats",
        &[Series { name: "entropy".into(), color: "#9467bd".into(), points: per_layer(|l| l.mean_entropy), dashed: false }],
        &[("uniform ln K".into(), k.ln())],
    );
    stack(&[mass, dom, conf, ent], 640.0, &[400.0; 4])
}
