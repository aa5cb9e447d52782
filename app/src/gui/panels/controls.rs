//! The left panel: what to run (device, mode, k, window, Sinkhorn variant, tokens) and what to
//! look at (layer, head). Changing a run control re-runs the analysis in the background.

use crate::gui::app::FocusLensApp;
use crate::gui::state::{DeviceChoice, ModeChoice, MAX_TOKENS_LIMIT};

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    egui::Panel::left("controls").resizable(false).show(ui, |ui| {
        ui.heading("Run");
        let (groups, adapter_window, adapter_causal) = app
            .adapter
            .as_ref()
            .map(|a| (a.adapter.config.groups, a.adapter.config.window, a.adapter.config.causal_sinkhorn))
            .unwrap_or((8, 128, false));
        let p = &mut app.settings.params;
        egui::ComboBox::from_label("device").selected_text(p.device.label()).show_ui(ui, |ui| {
            for d in DeviceChoice::available() {
                ui.selectable_value(&mut p.device, d, d.label());
            }
        });
        ui.label("attention");
        ui.horizontal(|ui| {
            for m in ModeChoice::ALL {
                ui.radio_value(&mut p.mode, m, m.label());
            }
        });
        ui.add(egui::Slider::new(&mut p.k, 1..=groups.max(1)).text("k (top-k groups)"));
        let mut w = p.window.unwrap_or(adapter_window);
        ui.horizontal(|ui| {
            if ui.add(egui::DragValue::new(&mut w).range(0..=8192).prefix("window w = ")).changed() {
                p.window = Some(w);
            }
            if p.window.is_some() && ui.small_button("adapter's").on_hover_text(format!("back to the adapter's w = {adapter_window}")).clicked() {
                p.window = None;
            }
        });
        let mut causal = p.causal.unwrap_or(adapter_causal);
        if ui.checkbox(&mut causal, "causal Sinkhorn").on_hover_text("column sums over each token's prefix only (unchecked: the paper's whole-sequence Sinkhorn)").changed() {
            p.causal = Some(causal);
        }
        ui.add(egui::Slider::new(&mut p.max_tokens, 16..=MAX_TOKENS_LIMIT).logarithmic(true).text("tokens"));
        let stopped = app.wanted_key().is_some() && app.result.as_ref().map(|r| Some(&r.key) != app.wanted_key().as_ref()).unwrap_or(true) && !app.is_running(crate::gui::worker::TaskKind::Analyze);
        if stopped && ui.button("Run analysis").clicked() {
            app.rerun();
        }
        ui.separator();
        ui.heading("View");
        let (layers, heads) = app.model.as_ref().map(|m| (m.model.config().n_layers, m.model.config().n_heads)).unwrap_or((1, 1));
        let old = (app.settings.layer, app.settings.head);
        ui.add(egui::Slider::new(&mut app.settings.layer, 0..=layers.saturating_sub(1)).text("layer"));
        ui.add(egui::Slider::new(&mut app.settings.head, 0..=heads.saturating_sub(1)).text("head"));
        if old != (app.settings.layer, app.settings.head) && app.selected.is_some() {
            app.select_token(app.selected);
        }
        ui.checkbox(&mut app.settings.color_by_category, "colour by category");
        ui.separator();
        if let Some(r) = &app.result {
            let l = &r.analysis.layers[app.settings.layer.min(r.layers() - 1)];
            ui.label(format!("layer {}: dominance {:.3} (ideal 1/K = {:.3})", l.layer, l.dominance, 1.0 / r.groups() as f64));
            ui.label(format!("confidence {:.3}, entropy {:.3} nats", l.mean_confidence, l.mean_entropy));
            ui.label(format!("pairs retained {:.2}%", 100.0 * l.pairs.retained));
            ui.label(format!("{} tokens, K = {}, w = {}, {}", r.tokens(), r.groups(), r.window(), r.analysis.mode));
        }
    });
}
