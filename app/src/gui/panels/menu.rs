//! The menu bar: open files (dialogs, typed paths, recent files), defaults, exports.

use crate::gui::app::FocusLensApp;
use crate::gui::dialogs::Purpose;
use crate::gui::export::ExportKind;
use crate::gui::state::InputKind;

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    egui::Panel::top("menu").show(ui, |ui| {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| file_menu(app, ui));
            ui.menu_button("Export", |ui| {
                let free = app.dialogs.open().is_none();
                for kind in ExportKind::ALL {
                    if ui.add_enabled(free, egui::Button::new(kind.label())).clicked() {
                        crate::gui::export::export(app, kind);
                        ui.close();
                    }
                }
            });
            ui.separator();
            let m = app.model.as_ref().map(|m| m.model.config().name.clone()).unwrap_or_else(|| "no model".into());
            let a = app.adapter.as_ref().map(|a| a.label.clone()).unwrap_or_else(|| "no adapter".into());
            let t = app.text.as_ref().map(|t| t.label.clone()).unwrap_or_else(|| "no text".into());
            ui.label(format!("{m}  ·  {a}  ·  {t}"));
        });
    });
}

fn file_menu(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
        // Disabled while a dialog is open: its answer arrives in a later frame.
        let free = app.dialogs.open().is_none();
        if ui.add_enabled(free, egui::Button::new(format!("Open {}…", kind.label()))).clicked() {
            ui.close();
            let ctx = ui.ctx().clone();
            app.dialogs.show(Purpose::Open(kind), "", Some(ctx));
        }
        if kind == InputKind::Model && ui.add_enabled(free, egui::Button::new("Open model folder (Hugging Face)…")).clicked() {
            ui.close();
            let ctx = ui.ctx().clone();
            app.dialogs.show(Purpose::OpenModelFolder, "", Some(ctx));
        }
    }
    ui.separator();
    ui.label("Or type a path:");
    ui.add(egui::TextEdit::singleline(&mut app.path_input).hint_text("/path/to/file").desired_width(320.0));
    ui.horizontal(|ui| {
        for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
            if ui.button(format!("as {}", kind.label())).clicked() && !app.path_input.trim().is_empty() {
                let p = std::path::PathBuf::from(app.path_input.trim());
                app.open(kind, p);
                ui.close();
            }
        }
    });
    ui.separator();
    ui.label("Defaults:");
    ui.horizontal(|ui| {
        for kind in [InputKind::Model, InputKind::Adapter, InputKind::Text] {
            if ui.button(format!("default {}", kind.label())).clicked() {
                app.use_default(kind);
                ui.close();
            }
        }
    });
    ui.separator();
    ui.label("Recent:");
    let recent = app.settings.recent.clone();
    if recent.is_empty() {
        ui.weak("(none yet)");
    }
    for (kind, p) in recent {
        if ui.button(format!("{}: {}", kind.label(), p.display())).clicked() {
            app.open(kind, p);
            ui.close();
        }
    }
}
