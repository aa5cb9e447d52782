//! Speed: prefill time of the whole model, dense vs Focus top-k, over lengths, run in the
//! background (`jobs::bench`, the one data source) with the speedup against the theoretical K/k.

use crate::gui::app::FocusLensApp;
use crate::gui::worker::TaskKind;
use egui_plot::{HLine, Legend, Line, Plot, PlotPoints, Points};

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    ui.horizontal(|ui| {
        ui.label("lengths (tokens):");
        ui.add(egui::TextEdit::singleline(&mut app.settings.bench_lengths).desired_width(200.0));
        ui.add(egui::DragValue::new(&mut app.settings.bench_repeats).range(1..=10).prefix("repeats "));
        let running = app.is_running(TaskKind::Bench);
        if running {
            super::busy::busy(ui);
            if ui.button("Cancel benchmark").clicked() {
                app.worker.cancel(TaskKind::Bench);
                if let Some(b) = &mut app.bench {
                    b.error = Some("benchmark cancelled".into());
                }
            }
        } else if ui.button("Run benchmark").clicked() {
            app.start_bench();
        }
    });
    let Some(res) = app.result.clone() else { return };
    let (kk, k) = (res.groups() as f64, res.key.params.k as f64);
    ui.label(format!(
        "Machine: {}. Device {}. Settings: K = {}, k = {}, w = {}. The theoretical speedup of attention alone is K/k = {:.1} at long lengths; the whole model also runs projections and MLPs, which Focus does not change.",
        crate::gui::jobs::machine(),
        res.key.params.device.label(),
        res.groups(),
        res.key.params.k,
        res.window(),
        kk / k
    ));
    let Some(b) = &app.bench else {
        ui.weak("Run the benchmark to measure.");
        return;
    };
    if let Some(e) = &b.error {
        ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
    }
    let rows = b.current_rows();
    if rows.is_empty() {
        return;
    }
    if b.rows.is_empty() {
        ui.label(format!("{} length(s) measured so far", rows.len()));
    }
    ui.label(&b.settings);
    let h = (ui.available_height() - 20.0).max(150.0);
    ui.columns(2, |cols| {
        cols[0].label("seconds per prefill");
        Plot::new("bench_time").height(h).legend(Legend::default()).x_axis_label("tokens").y_axis_label("s").include_y(0.0).show(&mut cols[0], |p| {
            let d: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, r.dense_s]).collect();
            let t: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, r.topk_s]).collect();
            p.line(Line::new("dense", PlotPoints::from(d.clone())));
            p.points(Points::new("dense ", PlotPoints::from(d)).radius(3.0));
            p.line(Line::new("Focus top-k", PlotPoints::from(t.clone())));
            p.points(Points::new("Focus top-k ", PlotPoints::from(t)).radius(3.0));
        });
        cols[1].label("speedup (dense time / top-k time)");
        Plot::new("bench_speedup").height(h).legend(Legend::default()).x_axis_label("tokens").include_y(0.0).show(&mut cols[1], |p| {
            let s: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, r.topk_over_dense_speed]).collect();
            p.line(Line::new("measured", PlotPoints::from(s)));
            p.hline(HLine::new(format!("theoretical K/k = {:.1}", kk / k), kk / k).color(egui::Color32::GRAY));
            p.hline(HLine::new("1 (no gain)", 1.0).color(egui::Color32::LIGHT_GRAY));
        });
    });
}
