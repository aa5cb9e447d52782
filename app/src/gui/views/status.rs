//! The status bar: background progress with cancel buttons, errors (dismissable), messages and
//! timing figures.

use super::{Command, ViewCtx};
use crate::gui::worker::TaskKind;

pub fn show(cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
    let mut out = Vec::new();
    egui::Panel::bottom("status").show(ui, |ui| {
        for (n, e) in cx.errors.iter().enumerate() {
            ui.horizontal(|ui| {
                ui.colored_label(egui::Color32::from_rgb(200, 30, 30), format!("Error: {e}"));
                if ui.small_button("dismiss").clicked() {
                    out.push(Command::DismissError(n));
                }
            });
        }
        ui.horizontal(|ui| {
            for (kind, done, total, what, secs) in cx.worker.progress() {
                crate::gui::busy::busy(ui);
                if total > 0 {
                    ui.add(egui::ProgressBar::new(done as f32 / total as f32).desired_width(120.0).text(format!("{done}/{total}")));
                }
                ui.label(format!("{} {what} ({secs:.1} s)", kind.label()));
                // A stable id: the progress bar appears once the total is known, and must not
                // shift the button's automatic id between a click's press and release.
                let cancellable = matches!(kind, TaskKind::Analyze | TaskKind::Bench | TaskKind::Attention);
                if cancellable && ui.push_id(("cancel", kind), |ui| ui.button("Cancel")).inner.clicked() {
                    out.push(if kind == TaskKind::Analyze { Command::CancelAnalysis } else { Command::Cancel(kind) });
                }
                ui.separator();
            }
            if let Some((shown, all)) = cx.session.showing_preview() {
                ui.label(format!("showing the first {shown} tokens; analysing all {all} in the background"));
                ui.separator();
            }
            if !cx.worker.busy() {
                if let Some(r) = cx.result() {
                    ui.label(format!("{} tokens analysed in {:.2} s", r.tokens(), r.seconds));
                    ui.separator();
                }
            }
            if !cx.status.is_empty() {
                ui.label(cx.status);
                ui.separator();
            }
            if let Some(s) = cx.timing.first_view_seconds {
                ui.weak(format!("first view {s:.1} s after start"));
            }
            ui.weak(format!("UI {:.1} ms (worst of recent frames {:.1} ms)", cx.timing.last_frame() * 1e3, cx.timing.worst_frame() * 1e3));
        });
    });
    out
}
