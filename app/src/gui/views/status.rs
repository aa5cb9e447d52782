//! The status bar: background progress with cancel buttons, errors (one list, one dismiss
//! button), messages and timing figures. Its items wrap onto a second line rather than run past
//! the window's edge, and long messages are cut to the width (in full on hover).

use super::view::{Command, View, ViewCtx};
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

/// "~12 s left" (or "~3 min left"): the time a task with `done` of `total` steps needs, at the
/// rate of its steps since `since` (its step count and seconds when that count was first seen).
pub fn time_left(done: usize, total: usize, secs: f64, since: (usize, f64)) -> Option<String> {
    let (d0, t0) = since;
    if done <= d0 || done >= total || secs <= t0 {
        return None;
    }
    let left = (secs - t0) / (done - d0) as f64 * (total - done) as f64;
    Some(if left < 90.0 { format!("~{:.0} s left", left.max(1.0)) } else { format!("~{:.0} min left", left / 60.0) })
}

/// The status bar (the bottom panel), with what it needs to estimate the time left: per running
/// task, its total and the step count and seconds where the current count run began (a task
/// that starts a new count, such as the full analysis after the preview, starts again).
#[derive(Default)]
pub struct StatusView {
    rates: std::collections::HashMap<TaskKind, (usize, (usize, f64))>,
}

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
            if let Some(p) = cx.lossy_offer {
                // A text that is not UTF-8 (Latin-1, say) is refused, with this offer beside the error.
                ui.horizontal_wrapped(|ui| {
                    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string());
                    ui.colored_label(egui::Color32::from_rgb(170, 90, 0), format!("{name} is not UTF-8."));
                    if ui.button("Read it as Latin-1 (lossy)").on_hover_text("every byte read as one ISO-8859-1 character: right for Latin-1 text, wrong characters for other encodings; the status line says so").clicked() {
                        out.push(Command::OpenTextLossy(p.to_path_buf()));
                    }
                });
            }
            let progress = cx.worker.progress();
            self.rates.retain(|k, _| progress.iter().any(|p| p.0 == *k));
            ui.horizontal_wrapped(|ui| {
                for (kind, done, total, what, secs) in progress {
                    crate::gui::paint::busy::busy(ui);
                    // Cancel first: where the bar and the words that change length cannot move it.
                    // A stable id: the progress bar appears once the total is known, and must not
                    // shift the button's automatic id between a click's press and release.
                    let cancellable = matches!(kind, TaskKind::Analyze | TaskKind::Bench | TaskKind::Attention | TaskKind::Compare | TaskKind::AttnGrid | TaskKind::Generate);
                    if cancellable && ui.push_id(("cancel", kind), |ui| ui.button("Cancel")).inner.clicked() {
                        out.push(if kind == TaskKind::Analyze { Command::CancelAnalysis } else { Command::Cancel(kind) });
                    }
                    let rate = self.rates.entry(kind).or_insert((total, (done, secs)));
                    if rate.0 != total || done < rate.1 .0 {
                        *rate = (total, (done, secs));
                    }
                    let left = time_left(done, total, secs, rate.1);
                    if total > 0 {
                        let bar = match &left {
                            Some(l) => format!("{done}/{total} · {l}"),
                            None => format!("{done}/{total}"),
                        };
                        ui.add(egui::ProgressBar::new(done as f32 / total as f32).desired_width(150.0).text(bar));
                    }
                    let text = progress_text(kind, &what, secs);
                    ui.label(match &left {
                        Some(l) => format!("{text}, {l}"),
                        None => text,
                    });
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
                    let how = if r.from_disk { "read from the disk cache" } else { "analysed" };
                    let what = format!("{}: {}{of} tokens {how} in {:.2} s{}", r.text_label, r.tokens(), r.seconds, if stale { " (the previous text)" } else { "" });
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
    fn time_left_from_the_rate_since_the_count_began() {
        assert_eq!(time_left(0, 30, 5.0, (0, 1.0)), None, "no step done yet");
        // 10 steps in 4 s since the count began at 1 s: 20 more take 8 s.
        assert_eq!(time_left(10, 30, 5.0, (0, 1.0)).as_deref(), Some("~8 s left"));
        assert_eq!(time_left(1, 480, 2.0, (0, 0.0)).as_deref(), Some("~16 min left"));
        assert_eq!(time_left(30, 30, 5.0, (0, 1.0)), None, "done");
    }

    #[test]
    fn progress_says_each_thing_once() {
        assert_eq!(progress_text(TaskKind::LoadModel, "loading the model", 1.0), "loading the model (1.0 s)");
        assert_eq!(progress_text(TaskKind::LoadModel, "", 1.0), "loading the model (1.0 s)");
        assert_eq!(progress_text(TaskKind::Analyze, "300 tokens: layer 3 of 30", 2.0), "analysing: 300 tokens: layer 3 of 30 (2.0 s)");
    }
}
