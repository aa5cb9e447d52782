//! The left panel: what to run (device, mode, k, window, Sinkhorn variant, tokens) and what to
//! look at (layer, head), with the selected layer's figures. Changing a run control re-runs the
//! analysis in the background (the app's reconcile step sees the new settings).

use super::view::{Command, View, ViewCtx};
use crate::gui::state::{DeviceChoice, MAX_TOKENS_LIMIT, Setting, mode_label};
use focus_core::ModeKind;
use crate::gui::worker::TaskKind;

/// The left panel.
#[derive(Default)]
pub struct ControlsView;

impl View for ControlsView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        egui::Panel::left("controls").resizable(false).show(ui, |ui| egui::ScrollArea::vertical().show(ui, |ui| {
            ui.heading("Run");
            let session = cx.session;
            let (groups, adapter_window, adapter_causal) = session
                .adapter
                .as_ref()
                .map(|a| (a.adapter.config.groups, a.adapter.config.window, a.adapter.config.causal_sinkhorn))
                .unwrap_or((8, 128, false));
            // Edited here, asked for below; this frame shows the edited values.
            let mut p = cx.settings.setup.params.clone();
            egui::ComboBox::from_label("device").selected_text(p.device.label()).show_ui(ui, |ui| {
                for d in DeviceChoice::available() {
                    ui.selectable_value(&mut p.device, d, d.label());
                }
            });
            ui.label("attention");
            ui.horizontal(|ui| {
                for m in ModeKind::ALL {
                    ui.radio_value(&mut p.mode, m, mode_label(m));
                }
            });
            ui.add(egui::Slider::new(&mut p.k, 1..=groups.max(1)).text("k (top-k groups)"));
            if session.adapter.is_some() && p.mode == ModeKind::TopK && 2 * p.k > groups {
                // Two k-sets of K groups always intersect when 2k > K: nothing is pruned.
                ui.colored_label(egui::Color32::from_rgb(170, 90, 0), format!("k = {} of K = {groups}: every pair shares a group (2k > K), so top-k is dense attention", p.k));
            }
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
            // Segments up to the model's context (issue 52): each runs from position 0, so a
            // longer one lets pairs reach further back; its kept pass grows with it (an 8K
            // segment of SmolLM2-135M holds ~750 MB, beyond the memory budget: the scratch file).
            let context = session.model.as_ref().map_or(focus_core::analysis::DEFAULT_SEGMENT, |m| m.model.config().context);
            let mut seg = p.segment.min(context);
            let resp = ui
                .add(egui::Slider::new(&mut seg, 128.min(context)..=context).logarithmic(true).text("segment"))
                .on_hover_text(format!("tokens per analysis segment, up to the model's context ({context}): each segment runs from position 0 and pairs never cross one; a segment's kept layers grow with its length (memory first, then the scratch file)"));
            if resp.changed() {
                p.segment = seg;
            }
            let wanted = session.wanted_key(&p);
            let stopped = wanted.is_some() && session.result.as_ref().map(|r| Some(&r.key) != wanted.as_ref()).unwrap_or(true) && !cx.worker.is_running(TaskKind::Analyze) && !cx.pending_full;
            if stopped && ui.button("Run analysis").clicked() {
                out.push(Command::Rerun);
            }
            if p != cx.settings.setup.params {
                out.push(Command::Set(Setting::Params(p)));
            }
            ui.separator();
            ui.heading("View");
            let (mut layer, mut head) = (cx.settings.setup.layer, cx.settings.setup.head);
            match session.model.as_ref().map(|m| (m.model.config().n_layers, m.model.config().n_heads)) {
                // Sliders only once the model says how many layers and heads there are: a slider
                // over 0..=0 would clamp the remembered layer and head to 0.
                Some((layers, heads)) => {
                    ui.add(egui::Slider::new(&mut layer, 0..=layers.saturating_sub(1)).text("layer"));
                    ui.add(egui::Slider::new(&mut head, 0..=heads.saturating_sub(1)).text("head"));
                    ui.weak("(arrow keys: left/right layer, up/down head)");
                }
                // Loading, or no model at all (its load failed: the error says why).
                None if cx.worker.is_running(TaskKind::LoadModel) => {
                    ui.label(format!("layer {layer}, head {head} (the model is loading)"));
                }
                None => {
                    ui.label(format!("layer {layer}, head {head} (no model loaded: File menu, Open model…)"));
                }
            }
            if (layer, head) != (cx.settings.setup.layer, cx.settings.setup.head) {
                out.push(Command::Set(Setting::Layer(layer)));
                out.push(Command::Set(Setting::Head(head)));
                // The partners of the selected token, in the new layer and head.
                if cx.selection.selected.is_some() {
                    out.push(Command::Select(cx.selection.selected));
                }
            }
            let mut by_cat = cx.settings.setup.color_by_category;
            if ui.checkbox(&mut by_cat, "colour by category").changed() {
                out.push(Command::Set(Setting::ColorByCategory(by_cat)));
            }
            let mut raw = cx.settings.setup.raw_groups;
            if ui
                .checkbox(&mut raw, "raw group indices")
                .on_hover_text("unchecked: each layer's groups are numbered (and coloured) by the previous layer's group they share most tokens with, so one colour means the same tokens throughout, and a centroid keeps its number in every view, export and run of its adapter; checked: the centroids' own indices, named c0, c1, ... everywhere")
                .changed()
            {
                out.push(Command::Set(Setting::RawGroups(raw)));
            }
            if let Some(ids) = &session.ids {
                let mut pinned = ids.pinned;
                if ui
                    .checkbox(&mut pinned, "pin these group numbers")
                    .on_hover_text(format!("number later runs (another k, mode or adapter of this model) by their match to this one: {}", ids.source))
                    .changed()
                {
                    out.push(Command::PinNumbers(pinned));
                }
            }
            let mut cb = cx.settings.setup.colour_blind;
            if ui.checkbox(&mut cb, "colour-blind palette").on_hover_text("Okabe-Ito colours for the first 8 groups").changed() {
                out.push(Command::Set(Setting::ColourBlind(cb)));
            }
            ui.separator();
            if let Some(r) = &session.result {
                let l = &r.analysis.layers[layer.min(r.layers() - 1)];
                ui.label(format!("layer {}: dominance {:.3} (ideal 1/K = {:.3})", l.layer, l.dominance, 1.0 / r.groups() as f64));
                ui.label(format!("confidence {:.3}, entropy {:.3} nats", l.mean_confidence, l.mean_entropy));
                ui.label(format!("pairs retained {:.2}%", 100.0 * l.pairs.retained));
                ui.label(format!("{} tokens, K = {}, w = {}, {}", r.tokens(), r.groups(), r.window(), r.analysis.mode));
            }
        }));
        out
    }
}
