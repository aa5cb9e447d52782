//! The menu bar: open files (each item opens the in-app file window, `files`, with its path
//! field, browser and system-dialog button), defaults, recent files, exports, the
//! glossary, and what is loaded.

use super::view::FileTask;
use super::view::{Command, View, ViewCtx};
use crate::gui::export::ExportKind;
use crate::gui::state::InputKind;

#[derive(Default)]
pub struct MenuView {}

impl MenuView {

    fn file_menu(&mut self, _cx: &ViewCtx, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
            if ui.button(format!("Open {}…", kind.label())).clicked() {
                ui.close();
                out.push(Command::ShowFiles(FileTask::Open(kind)));
            }
            if kind == InputKind::Model && ui.button("Open model folder (Hugging Face)…").clicked() {
                ui.close();
                out.push(Command::ShowFiles(FileTask::OpenModelFolder));
            }
        }
        ui.separator();
        if ui.button("Open session…").clicked() {
            ui.close();
            out.push(Command::ShowFiles(FileTask::OpenSession));
        }
        if ui.button("Save session…").clicked() {
            ui.close();
            out.push(Command::Export(ExportKind::Session));
        }
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
        let recent = &_cx.settings.prefs.recent;
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

impl View for MenuView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        egui::Panel::top("menu").show(ui, |ui| {
            egui::MenuBar::new().ui(ui, |ui| {
                ui.menu_button("File", |ui| self.file_menu(cx, ui, &mut out));
                ui.menu_button("Export", |ui| {
                    for kind in ExportKind::ALL {
                        if ui.button(kind.label()).clicked() {
                            out.push(Command::Export(kind));
                            ui.close();
                        }
                    }
                });
                if ui.button("Intervene…").on_hover_text("ablate a group, force a token into one, or swap two, and compare the loss (Compare view)").clicked() {
                    out.push(Command::ShowIntervene(None));
                }
                ui.menu_button("Help", |ui| {
                    if ui.button("Glossary…").clicked() {
                        out.push(Command::ShowGlossary);
                        ui.close();
                    }
                });
                ui.separator();
                let s = cx.session;
                let m = s.model.as_ref().map(|m| m.model.config().name.clone()).unwrap_or_else(|| "no model".into());
                let a = s.adapter.as_ref().map(|a| a.label.clone()).unwrap_or_else(|| "no adapter".into());
                let t = s.text.as_ref().map(|t| t.label.clone()).unwrap_or_else(|| "no text".into());
                ui.add(egui::Label::new(format!("{m}  ·  {a}  ·  {t}")).truncate());
            });
        });
        out
    }
}
