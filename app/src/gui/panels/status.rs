//! The status bar: background progress with cancel buttons, errors (dismissable), messages and
//! timing figures.

use crate::gui::app::FocusLensApp;
use crate::gui::worker::TaskKind;

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    egui::Panel::bottom("status").show(ui, |ui| {
        let mut dismiss = None;
        for (n, e) in app.errors.iter().enumerate() {
            ui.horizontal(|ui| {
                ui.colored_label(egui::Color32::from_rgb(200, 30, 30), format!("Error: {e}"));
                if ui.small_button("dismiss").clicked() {
                    dismiss = Some(n);
                }
            });
        }
        if let Some(n) = dismiss {
            app.errors.remove(n);
        }
        ui.horizontal(|ui| {
            let mut cancel = None;
            for (kind, done, total, what, secs) in app.worker.progress() {
                super::busy::busy(ui);
                if total > 0 {
                    ui.add(egui::ProgressBar::new(done as f32 / total as f32).desired_width(120.0).text(format!("{done}/{total}")));
                }
                ui.label(format!("{} {what} ({secs:.1} s)", kind.label()));
                // A stable id: the progress bar appears once the total is known, and must not
                // shift the button's automatic id between a click's press and release.
                let cancellable = matches!(kind, TaskKind::Analyze | TaskKind::Bench | TaskKind::Attention);
                if cancellable && ui.push_id(("cancel", kind), |ui| ui.button("Cancel")).inner.clicked() {
                    cancel = Some(kind);
                }
                ui.separator();
            }
            match cancel {
                Some(TaskKind::Analyze) => app.cancel_analysis(),
                Some(k) => app.worker.cancel(k),
                None => {}
            }
            if let Some((shown, all)) = app.showing_preview() {
                ui.label(format!("showing the first {shown} tokens; analysing all {all} in the background"));
                ui.separator();
            }
            if !app.busy() {
                if let Some(r) = &app.result {
                    ui.label(format!("{} tokens analysed in {:.2} s", r.tokens(), r.seconds));
                    ui.separator();
                }
            }
            if !app.status.is_empty() {
                ui.label(&app.status);
                ui.separator();
            }
            if let Some(s) = app.first_view_seconds {
                ui.weak(format!("first view {s:.1} s after start"));
            }
            ui.weak(format!("UI {:.1} ms (worst of recent frames {:.1} ms)", app.frame_times.back().unwrap_or(&0.0) * 1e3, app.worst_frame() * 1e3));
        });
    });
}
