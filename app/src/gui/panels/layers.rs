//! Layers side by side: the same text coloured per layer in columns that scroll together (one
//! scroll area, each row paints the same line in every column), or a compact token x layer
//! strip (rows tokens, columns layers, colour = group).

use super::tokens::{paint_line, partner_map, Marks, TokenLayout, ROW_H};
use crate::gui::app::FocusLensApp;
use crate::gui::palette;
use egui::{vec2, Rect, Sense};

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    let Some(res) = app.result.clone() else { return };
    let n_layers = res.layers();
    ui.horizontal_wrapped(|ui| {
        ui.checkbox(&mut app.settings.strip, "token x layer strip");
        if !app.settings.strip {
            ui.label("layers:");
            for l in 0..n_layers {
                let on = app.settings.side_layers.contains(&l);
                if ui.selectable_label(on, l.to_string()).clicked() {
                    if on {
                        app.settings.side_layers.retain(|&x| x != l);
                    } else if app.settings.side_layers.len() < 8 {
                        app.settings.side_layers.push(l);
                        app.settings.side_layers.sort();
                    }
                }
            }
        }
    });
    ui.separator();
    if app.settings.strip {
        strip(app, ui);
        return;
    }
    let cols = app.settings.side_layers.clone();
    if cols.is_empty() {
        ui.label("Choose layers above.");
        return;
    }
    let gap = 12.0;
    let col_w = ((ui.available_width() - 16.0 - gap * (cols.len() - 1) as f32) / cols.len() as f32).max(60.0);
    // Colours mean different groups in each layer: every column gets its own legend (hover a
    // swatch for the group's size and label).
    ui.horizontal(|ui| {
        for &l in &cols {
            ui.allocate_ui_with_layout(vec2(col_w + gap, 16.0), egui::Layout::left_to_right(egui::Align::Center), |ui| {
                ui.set_width(col_w + gap);
                ui.strong(format!("layer {l}"));
                for g in 0..res.groups() {
                    let (r, resp) = ui.allocate_exact_size(vec2(11.0, 11.0), Sense::hover());
                    ui.painter().rect_filled(r, 2.0, palette::group(g));
                    let size = res.analysis.layers[l].group_size[g];
                    resp.on_hover_text(format!("layer {l}, g{g}: {size} tokens, {}", res.labels[l][g]));
                }
            });
        }
    });
    app.panels.side.ensure(ui, &res, col_w);
    let lay: &TokenLayout = &app.panels.side;
    let by_cat = app.settings.color_by_category;
    let maps: Vec<_> = cols.iter().map(|&l| partner_map(app, &res, l)).collect();
    let mut hovered = None;
    let mut hovered_layer = None;
    let mut clicked = false;
    let mut area = egui::ScrollArea::vertical().id_salt("side").auto_shrink(false);
    if let Some(&l) = app.panels.scroll_to.take().and_then(|j| lay.line_of.get(j)) {
        area = area.vertical_scroll_offset((l as f32 * ROW_H - 100.0).max(0.0));
    }
    area.show_viewport(ui, |ui, viewport| {
        let total = lay.lines.len() as f32 * ROW_H;
        let full_w = cols.len() as f32 * (col_w + gap);
        let (rect, resp) = ui.allocate_exact_size(vec2(full_w, total), Sense::click());
        let pointer = resp.hover_pos();
        let first = (viewport.min.y / ROW_H).floor().max(0.0) as usize;
        let last = ((viewport.max.y / ROW_H).ceil() as usize + 1).min(lay.lines.len());
        let painter = ui.painter_at(rect);
        for (c, &l) in cols.iter().enumerate() {
            let marks = Marks { selected: app.selected, partners: &maps[c].0, max_weight: maps[c].1 };
            for line in first..last {
                let origin = rect.min + vec2(c as f32 * (col_w + gap), line as f32 * ROW_H);
                if let Some(i) = paint_line(&painter, &res, lay, line, origin, l, by_cat, &marks, pointer) {
                    hovered = Some(i);
                    hovered_layer = Some(l);
                }
            }
        }
        clicked = resp.clicked();
    });
    app.hovered = hovered;
    app.hovered_layer = hovered_layer;
    if clicked {
        app.select_token(hovered);
    }
}

const STRIP_ROW: f32 = 4.0;

fn strip(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    let Some(res) = app.result.clone() else { return };
    let (t, n_layers) = (res.tokens(), res.layers());
    let label_w = 60.0;
    let cell = ((ui.available_width() - label_w - 16.0) / n_layers as f32).clamp(4.0, 40.0);
    ui.label(format!("rows: tokens 0..{t} ({STRIP_ROW} px each); columns: layers 0..{}; colour: argmax group. Hover for the token.", n_layers - 1));
    let mut hovered = None;
    let mut hovered_layer = None;
    let mut area = egui::ScrollArea::vertical().id_salt("strip").auto_shrink(false);
    if let Some(j) = app.panels.scroll_to.take() {
        area = area.vertical_scroll_offset((j as f32 * STRIP_ROW - 100.0).max(0.0));
    }
    area.show_viewport(ui, |ui, viewport| {
        let (rect, resp) = ui.allocate_exact_size(vec2(label_w + cell * n_layers as f32, t as f32 * STRIP_ROW), Sense::hover());
        let painter = ui.painter_at(rect);
        let first = (viewport.min.y / STRIP_ROW).floor().max(0.0) as usize;
        let last = ((viewport.max.y / STRIP_ROW).ceil() as usize + 1).min(t);
        for i in first..last {
            let y = rect.min.y + i as f32 * STRIP_ROW;
            if i % 25 == 0 {
                painter.text(egui::pos2(rect.min.x, y), egui::Align2::LEFT_TOP, i.to_string(), egui::FontId::monospace(9.0), ui.visuals().text_color());
            }
            for l in 0..n_layers {
                let g = res.argmax[l][i] as usize;
                let r = Rect::from_min_size(egui::pos2(rect.min.x + label_w + l as f32 * cell, y), vec2(cell, STRIP_ROW));
                painter.rect_filled(r, 0.0, palette::group(g));
            }
        }
        if let Some(p) = resp.hover_pos() {
            let i = ((p.y - rect.min.y) / STRIP_ROW) as usize;
            let l = ((p.x - rect.min.x - label_w) / cell).floor();
            if i < t && l >= 0.0 && (l as usize) < n_layers {
                hovered = Some(i);
                let l = l as usize;
                hovered_layer = Some(l);
                resp.on_hover_text_at_pointer(format!("#{i} {:?}: layer {l}, group {}", res.analysis.tokens[i].text, res.argmax[l][i]));
            }
        }
    });
    app.hovered = hovered;
    app.hovered_layer = hovered_layer;
}
