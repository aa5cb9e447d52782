//! The status bar: background progress with cancel buttons, errors (one list, one dismiss
//! button), messages and timing figures. Its items wrap onto a second line rather than run past
//! the window's edge, and long messages are cut to the width (in full on hover).

use super::{Command, View, ViewCtx};
use crate::gui::worker::TaskKind;

/// What the status bar says about a running task: its kind, then what it reports, without
/// saying the same thing twice ("loading the model", not "loading the model loading the model").
pub fn progress_text(kind: TaskKind, what: &str, secs: f64) -> String {
    let label = kind.label();
    let what = what.trim();
    if what.is_empty() || what == label || label.contains(what) {
        format!("{label} ({secs:.1} s)")
    } else if what.starts_with(label) {
        format!("{what} ({secs:.1} s)")
    } else {
        format!("{label}: {what} ({secs:.1} s)")
    }
}

/// The status bar (the bottom panel).
#[derive(Default)]
pub struct StatusView;

impl View for StatusView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        egui::Panel::bottom("status").show(ui, |ui| {
            if let Some(last) = cx.errors.last() {
                // One line: the newest error, how many there are (all of them on hover and below,
                // when opened), and one button that dismisses them all.
                ui.horizontal(|ui| {
                    let red = egui::Color32::from_rgb(200, 30, 30);
                    let n = cx.errors.len();
                    let head = if n == 1 { "Error:".to_string() } else { format!("{n} errors; the last:") };
                    ui.colored_label(red, head);
                    if ui.small_button("dismiss").on_hover_text("dismiss every error").clicked() {
                        out.push(Command::DismissErrors);
                    }
                    ui.add(egui::Label::new(egui::RichText::new(last).color(red)).truncate()).on_hover_text(cx.errors.join("\n"));
                });
                if cx.errors.len() > 1 {
                    egui::CollapsingHeader::new(format!("all {} errors", cx.errors.len())).id_salt("all_errors").show(ui, |ui| {
                        egui::ScrollArea::vertical().max_height(120.0).show(ui, |ui| {
                            for e in cx.errors {
                                ui.add(egui::Label::new(egui::RichText::new(e).color(egui::Color32::from_rgb(200, 30, 30))).wrap());
                            }
                        });
                    });
                }
            }
            ui.horizontal_wrapped(|ui| {
                for (kind, done, total, what, secs) in cx.worker.progress() {
                    crate::gui::paint::busy::busy(ui);
                    if total > 0 {
                        ui.add(egui::ProgressBar::new(done as f32 / total as f32).desired_width(120.0).text(format!("{done}/{total}")));
                    }
                    ui.label(progress_text(kind, &what, secs));
                    // A stable id: the progress bar appears once the total is known, and must not
                    // shift the button's automatic id between a click's press and release.
                    let cancellable = matches!(kind, TaskKind::Analyze | TaskKind::Bench | TaskKind::Attention | TaskKind::Compare | TaskKind::AttnGrid | TaskKind::Generate);
                    if cancellable && ui.push_id(("cancel", kind), |ui| ui.button("Cancel")).inner.clicked() {
                        out.push(if kind == TaskKind::Analyze { Command::CancelAnalysis } else { Command::Cancel(kind) });
                    }
                    ui.separator();
                }
                if let Some((shown, all)) = cx.session.showing_preview() {
                    ui.colored_label(egui::Color32::from_rgb(170, 90, 0), format!("provisional: showing the first {shown} tokens; analysing all {all} in the background"));
                    ui.separator();
                }
                if cx.pending_full {
                    ui.colored_label(egui::Color32::from_rgb(170, 90, 0), "the full analysis is ready: it replaces the preview when the mouse moves");
                    ui.separator();
                }
                if let Some(r) = cx.result() {
                    // The result on screen, with its own text and count (not the last text's).
                    let of = if r.text_tokens > r.tokens() { format!(" of {}", r.text_tokens) } else { String::new() };
                    let stale = cx.session.text.as_ref().is_some_and(|t| t.gen != r.key.text_gen);
                    let what = format!("{}: {}{of} tokens analysed in {:.2} s{}", r.text_label, r.tokens(), r.seconds, if stale { " (the previous text)" } else { "" });
                    ui.label(what);
                    if r.text_tokens > r.tokens() {
                        ui.weak("(raise \"tokens\" to see more)");
                    }
                    ui.separator();
                }
                if !cx.status.is_empty() {
                    let w = (ui.available_width() - 8.0).max(200.0);
                    ui.allocate_ui(egui::vec2(w, ui.spacing().interact_size.y), |ui| {
                        ui.add(egui::Label::new(cx.status).truncate()).on_hover_text(cx.status);
                    });
                    ui.separator();
                }
                let timing = match cx.timing.first_view_seconds {
                    Some(s) => format!("first view {s:.1} s · UI {:.1} ms", cx.timing.last_frame() * 1e3),
                    None => format!("UI {:.1} ms", cx.timing.last_frame() * 1e3),
                };
                ui.weak(timing).on_hover_text(format!(
                    "seconds from start to the first analysis on screen; UI time of the last frame (worst of recent frames {:.1} ms)",
                    cx.timing.worst_frame() * 1e3
                ));
            });
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_each_thing_once() {
        assert_eq!(progress_text(TaskKind::LoadModel, "loading the model", 1.0), "loading the model (1.0 s)");
        assert_eq!(progress_text(TaskKind::LoadModel, "", 1.0), "loading the model (1.0 s)");
        assert_eq!(progress_text(TaskKind::Analyze, "300 tokens: layer 3 of 30", 2.0), "analysing: 300 tokens: layer 3 of 30 (2.0 s)");
    }
}
