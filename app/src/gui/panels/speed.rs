//! Speed: prefill time of the whole model, dense vs Focus top-k, over lengths, run in the
//! background (`jobs::bench`, the one data source) with the speedup against the theoretical K/k.

use crate::gui::app::FocusLensApp;
use crate::gui::worker::TaskKind;
use egui_plot::{Corner, HLine, Legend, Line, LineStyle, Plot, PlotPoints, Points};
use focus_core::bench::BenchRow;

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
    // Why the measured gain can be far below K/k: the window and shared groups keep pairs.
    let kept = res.analysis.layers.iter().map(|l| l.pairs.retained).sum::<f64>() / res.layers().max(1) as f64;
    ui.label(format!(
        "Prefill time of the whole model, dense vs Focus top-k (K = {}, k = {}, w = {}). Attention alone could gain up to K/k = {:.1} at long lengths; on the analysed {} tokens this adapter keeps {:.0}% of causal pairs (mean over layers), so attention gains at most {:.1}x there, and projections and MLPs, which Focus does not change, take the rest of the time.",
        res.groups(),
        res.key.params.k,
        res.window(),
        kk / k,
        res.tokens(),
        100.0 * kept,
        1.0 / kept.max(1e-9)
    ));
    let Some(b) = &app.bench else {
        ui.weak(format!("Machine: {}, device {}. Run the benchmark to measure.", crate::gui::jobs::machine(), res.key.params.device.label()));
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
    } else {
        ui.weak(format!("Measured on {}", b.settings));
    }
    table(ui, &rows);
    let h = (ui.available_height() - 20.0).max(150.0);
    // One colour per series for its line and its points (as in the SVG export), so that the
    // legend has one entry per series; legends at the top left, away from the longest lengths.
    let (dense_c, topk_c, speed_c) = (egui::Color32::from_rgb(0x1f, 0x77, 0xb4), egui::Color32::from_rgb(0xff, 0x7f, 0x0e), egui::Color32::from_rgb(0x2c, 0xa0, 0x2c));
    let legend = || Legend::default().position(Corner::LeftTop);
    ui.columns(2, |cols| {
        cols[0].label("seconds per prefill");
        Plot::new("bench_time").height(h).legend(legend()).x_axis_label("tokens").y_axis_label("s").include_y(0.0).show(&mut cols[0], |p| {
            let series: [(&str, egui::Color32, fn(&BenchRow) -> f64); 2] = [("dense", dense_c, |r| r.dense_s), ("Focus top-k", topk_c, |r| r.topk_s)];
            for (name, c, f) in series {
                let pts: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, f(r)]).collect();
                p.line(Line::new(name, PlotPoints::from(pts.clone())).color(c));
                p.points(Points::new(name, PlotPoints::from(pts)).radius(3.0).color(c));
            }
        });
        cols[1].label("speedup (dense time / top-k time)");
        Plot::new("bench_speedup").height(h).legend(legend()).x_axis_label("tokens").include_y(0.0).show(&mut cols[1], |p| {
            let s: Vec<[f64; 2]> = rows.iter().map(|r| [r.tokens as f64, r.topk_over_dense_speed]).collect();
            p.line(Line::new("measured", PlotPoints::from(s.clone())).color(speed_c));
            p.points(Points::new("measured", PlotPoints::from(s)).radius(3.0).color(speed_c));
            p.hline(HLine::new(format!("theoretical K/k = {:.1}", kk / k), kk / k).color(egui::Color32::from_gray(110)).style(LineStyle::dashed_loose()));
            p.hline(HLine::new("1 (no gain)", 1.0).color(egui::Color32::from_gray(160)));
        });
    });
}

/// The measured numbers, one row per length.
fn table(ui: &mut egui::Ui, rows: &[BenchRow]) {
    egui::Grid::new("bench_table").striped(true).num_columns(6).show(ui, |ui| {
        for h in ["tokens", "dense s", "top-k s", "dense tok/s", "top-k tok/s", "speedup"] {
            ui.strong(h);
        }
        ui.end_row();
        for r in rows {
            ui.label(r.tokens.to_string());
            ui.label(format!("{:.3}", r.dense_s));
            ui.label(format!("{:.3}", r.topk_s));
            ui.label(format!("{:.0}", r.dense_tokens_per_s));
            ui.label(format!("{:.0}", r.topk_tokens_per_s));
            ui.label(format!("{:.2}x", r.topk_over_dense_speed));
            ui.end_row();
        }
    });
}
