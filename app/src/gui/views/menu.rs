//! The menu bar: open files (dialogs, typed paths, recent files), defaults, exports, and what is
//! loaded. Owns the File menu's path field.

use super::{Command, ViewCtx};
use crate::gui::dialogs::Purpose;
use crate::gui::export::ExportKind;
use crate::gui::state::InputKind;

#[derive(Default)]
pub struct MenuView {
    /// The path field of the File menu (typed paths, for when no file dialog is available).
    pub path_input: String,
}

impl MenuView {
    pub fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        egui::Panel::top("menu").show(ui, |ui| {
            egui::MenuBar::new().ui(ui, |ui| {
                ui.menu_button("File", |ui| self.file_menu(cx, ui, &mut out));
                ui.menu_button("Export", |ui| {
                    let free = !cx.dialog_open;
                    for kind in ExportKind::ALL {
                        if ui.add_enabled(free, egui::Button::new(kind.label())).clicked() {
                            out.push(Command::Export(kind));
                            ui.close();
                        }
                    }
                });
                ui.separator();
                let s = cx.session;
                let m = s.model.as_ref().map(|m| m.model.config().name.clone()).unwrap_or_else(|| "no model".into());
                let a = s.adapter.as_ref().map(|a| a.label.clone()).unwrap_or_else(|| "no adapter".into());
                let t = s.text.as_ref().map(|t| t.label.clone()).unwrap_or_else(|| "no text".into());
                ui.label(format!("{m}  ·  {a}  ·  {t}"));
            });
        });
        out
    }

    fn file_menu(&mut self, cx: &ViewCtx, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
            // Disabled while a dialog is open: its answer arrives in a later frame.
            let free = !cx.dialog_open;
            if ui.add_enabled(free, egui::Button::new(format!("Open {}…", kind.label()))).clicked() {
                ui.close();
                out.push(Command::Dialog(Purpose::Open(kind)));
            }
            if kind == InputKind::Model && ui.add_enabled(free, egui::Button::new("Open model folder (Hugging Face)…")).clicked() {
                ui.close();
                out.push(Command::Dialog(Purpose::OpenModelFolder));
            }
        }
        ui.separator();
        ui.label("Or type a path:");
        ui.add(egui::TextEdit::singleline(&mut self.path_input).hint_text("/path/to/file").desired_width(320.0));
        ui.horizontal(|ui| {
            for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
                if ui.button(format!("as {}", kind.label())).clicked() && !self.path_input.trim().is_empty() {
                    out.push(Command::Open(kind, std::path::PathBuf::from(self.path_input.trim())));
                    ui.close();
                }
            }
        });
        ui.separator();
        ui.label("Defaults:");
        ui.horizontal(|ui| {
            for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
                if ui.button(format!("default {}", kind.label())).clicked() {
                    out.push(Command::UseDefault(kind));
                    ui.close();
                }
            }
        });
        ui.separator();
        ui.label("Recent:");
        let recent = &cx.settings.recent;
        if recent.is_empty() {
            ui.weak("(none yet)");
        }
        for (kind, p) in recent {
            if ui.button(format!("{}: {}", kind.label(), p.display())).clicked() {
                out.push(Command::Open(*kind, p.clone()));
                ui.close();
            }
        }
    }
}
