//! Layers side by side: the same text coloured per layer in columns that scroll together (one
//! scroll area, each row paints the same line in every column), or a compact token x layer
//! strip (rows tokens, columns layers, colour = group); and the SVG export of the columns.

use super::tokens::{paint_line, partner_map, tokens_svg, Marks, TokenLayout, ROW_H};
use super::{Command, ViewCtx};
use crate::gui::palette;
use crate::gui::state::{AnalysisResult, Setting};
use egui::{vec2, Rect, Sense};
use std::sync::Arc;

/// The layers view's state: the columns' layout cache.
#[derive(Default)]
pub struct LayersView {
    pub layout: TokenLayout,
}

/// The layers view as SVG: the chosen layers' columns.
pub fn svg(res: &AnalysisResult, side_layers: &[usize]) -> String {
    tokens_svg(res, side_layers, 48, 1500)
}

impl LayersView {
    /// `scroll_to`: a token to scroll to, taken when shown.
    pub fn show(&mut self, cx: &ViewCtx, res: &Arc<AnalysisResult>, scroll_to: &mut Option<usize>, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        let n_layers = res.layers();
        // Edited here, asked for below; this frame shows the edited values.
        let mut strip = cx.settings.strip;
        let mut side_layers = cx.settings.side_layers.clone();
        ui.horizontal_wrapped(|ui| {
            ui.checkbox(&mut strip, "token x layer strip");
            if !strip {
                ui.label("layers:");
                for l in 0..n_layers {
                    let on = side_layers.contains(&l);
                    if ui.selectable_label(on, l.to_string()).clicked() {
                        if on {
                            side_layers.retain(|&x| x != l);
                        } else if side_layers.len() < 8 {
                            side_layers.push(l);
                            side_layers.sort();
                        }
                    }
                }
            }
        });
        if strip != cx.settings.strip {
            out.push(Command::Set(Setting::Strip(strip)));
        }
        if side_layers != cx.settings.side_layers {
            out.push(Command::Set(Setting::SideLayers(side_layers.clone())));
        }
        ui.separator();
        if strip {
            out.push(strip_view(res, scroll_to, ui));
            return out;
        }
        out.extend(self.columns(cx, res, side_layers, scroll_to, ui));
        out
    }

    fn columns(&mut self, cx: &ViewCtx, res: &Arc<AnalysisResult>, cols: Vec<usize>, scroll_to: &mut Option<usize>, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        if cols.is_empty() {
            ui.label("Choose layers above.");
            return out;
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
        self.layout.ensure(ui, res, col_w);
        let lay: &TokenLayout = &self.layout;
        let by_cat = cx.settings.color_by_category;
        let maps: Vec<_> = cols.iter().map(|&l| partner_map(cx, res, l)).collect();
        let mut hovered = None;
        let mut hovered_layer = None;
        let mut clicked = false;
        let mut area = egui::ScrollArea::vertical().id_salt("side").auto_shrink(false);
        if let Some(&l) = scroll_to.take().and_then(|j| lay.line_of.get(j)) {
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
                let marks = Marks { selected: cx.selection.selected, partners: &maps[c].0, max_weight: maps[c].1 };
                for line in first..last {
                    let origin = rect.min + vec2(c as f32 * (col_w + gap), line as f32 * ROW_H);
                    if let Some(i) = paint_line(&painter, res, lay, line, origin, l, by_cat, &marks, pointer) {
                        hovered = Some(i);
                        hovered_layer = Some(l);
                    }
                }
            }
            clicked = resp.clicked();
        });
        out.push(Command::Hover { token: hovered, layer: hovered_layer });
        if clicked {
            out.push(Command::Select(hovered));
        }
        out
    }
}

const STRIP_ROW: f32 = 4.0;

/// The token x layer strip; returns what is hovered.
fn strip_view(res: &AnalysisResult, scroll_to: &mut Option<usize>, ui: &mut egui::Ui) -> Command {
    let (t, n_layers) = (res.tokens(), res.layers());
    let label_w = 60.0;
    let cell = ((ui.available_width() - label_w - 16.0) / n_layers as f32).clamp(4.0, 40.0);
    ui.label(format!("rows: tokens 0..{t} ({STRIP_ROW} px each); columns: layers 0..{}; colour: argmax group. Hover for the token.", n_layers - 1));
    let mut hovered = None;
    let mut hovered_layer = None;
    let mut area = egui::ScrollArea::vertical().id_salt("strip").auto_shrink(false);
    if let Some(j) = scroll_to.take() {
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
    Command::Hover { token: hovered, layer: hovered_layer }
}
