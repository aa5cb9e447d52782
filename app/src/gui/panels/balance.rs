//! Balance: per layer, group mass before and after Sinkhorn (selected layer), and across layers
//! the dominance against the ideal 1/K, mean confidence and membership entropy against ln K.

use crate::gui::app::FocusLensApp;
use crate::gui::palette;
use egui_plot::{Bar, BarChart, HLine, Legend, Line, Plot, PlotPoints};

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    let Some(res) = app.result.clone() else { return };
    let layer = app.settings.layer.min(res.layers() - 1);
    let l = &res.analysis.layers[layer];
    let k = res.groups() as f64;
    let h = (ui.available_height() / 2.0 - 30.0).max(150.0);
    ui.columns(2, |cols| {
        cols[0].label(format!("layer {layer}: share of membership mass per group"));
        let before: Vec<Bar> = l.mass_before.iter().enumerate().map(|(g, &m)| Bar::new(g as f64 - 0.2, m).width(0.38).fill(palette::group(g).gamma_multiply(0.5))).collect();
        let after: Vec<Bar> = l.mass_after.iter().enumerate().map(|(g, &m)| Bar::new(g as f64 + 0.2, m).width(0.38).fill(palette::group(g))).collect();
        Plot::new("mass").height(h).legend(Legend::default()).x_axis_label("group").show(&mut cols[0], |p| {
            p.bar_chart(BarChart::new("before Sinkhorn (softmax)", before));
            p.bar_chart(BarChart::new("after Sinkhorn", after));
            p.hline(HLine::new("ideal 1/K", 1.0 / k).color(egui::Color32::GRAY));
        });
        cols[1].label("dominance per layer (share of tokens in the largest group)");
        let dom: PlotPoints = res.analysis.layers.iter().map(|l| [l.layer as f64, l.dominance]).collect();
        Plot::new("dominance").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).show(&mut cols[1], |p| {
            p.line(Line::new("dominance", dom));
            p.hline(HLine::new("ideal 1/K", 1.0 / k).color(egui::Color32::GRAY));
        });
    });
    ui.columns(2, |cols| {
        cols[0].label("mean confidence (largest membership) per layer");
        let conf: PlotPoints = res.analysis.layers.iter().map(|l| [l.layer as f64, l.mean_confidence]).collect();
        Plot::new("confidence").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).include_y(1.0).show(&mut cols[0], |p| {
            p.line(Line::new("confidence", conf));
            p.hline(HLine::new("uniform 1/K", 1.0 / k).color(egui::Color32::GRAY));
        });
        cols[1].label("mean membership entropy per layer (nats)");
        let ent: PlotPoints = res.analysis.layers.iter().map(|l| [l.layer as f64, l.mean_entropy]).collect();
        Plot::new("entropy").height(h).legend(Legend::default()).x_axis_label("layer").include_y(0.0).show(&mut cols[1], |p| {
            p.line(Line::new("entropy", ent));
            p.hline(HLine::new("uniform ln K", k.ln()).color(egui::Color32::GRAY));
        });
    });
}
