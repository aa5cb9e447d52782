//! Layers side by side: the same text coloured per layer in columns that scroll together (one
//! scroll area, each row paints the same line in every column), or a compact token x layer
//! strip (rows tokens, columns layers, colour = group); and the SVG export of the columns.

use super::tokens::{paint_line, partner_map, tokens_svg, Colouring, Marks, TokenLayout, ROW_H};
use super::view::{Command, View, ViewCtx};
use std::cell::Cell;
use crate::gui::paint::palette;
use crate::gui::state::{AnalysisResult, Setting};
use egui::{vec2, Rect, Sense};
use std::sync::Arc;

/// The layers view's state: the columns' layout cache.
#[derive(Default)]
pub struct LayersView {
    pub layout: TokenLayout,
}

/// The layers view as SVG: the chosen layers' columns.
pub fn svg(res: &AnalysisResult, side_layers: &[usize], raw: bool) -> String {
    tokens_svg(res, side_layers, 48, 0..1500, raw)
}

impl LayersView {

    fn columns(&mut self, cx: &ViewCtx, res: &Arc<AnalysisResult>, cols: Vec<usize>, scroll_to: &Cell<Option<usize>>, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        if cols.is_empty() {
            ui.label("Choose layers above.");
            return out;
        }
        let gap = 12.0;
        let col_w = ((ui.available_width() - 16.0 - gap * (cols.len() - 1) as f32) / cols.len() as f32).max(60.0);
        // Group numbers are matched across layers (unless raw indices are asked for), so a colour
        // means the same tokens in every column; each column still has its own legend (hover a
        // swatch for the group's size and label).
        let colouring = Colouring::of(cx);
        ui.horizontal(|ui| {
            for &l in &cols {
                ui.allocate_ui_with_layout(vec2(col_w + gap, 16.0), egui::Layout::left_to_right(egui::Align::Center), |ui| {
                    ui.set_width(col_w + gap);
                    ui.strong(format!("layer {l}"));
                    if colouring.by_category {
                        ui.weak("(by category)");
                        return;
                    }
                    for g in res.groups_in_shown_order(l, colouring.raw) {
                        let shown = res.shown_group(l, g, colouring.raw);
                        let (r, resp) = ui.allocate_exact_size(vec2(11.0, 11.0), Sense::hover());
                        ui.painter().rect_filled(r, 2.0, palette::group(shown));
                        let size = res.analysis.layers[l].group_size[g];
                        resp.on_hover_text(format!("layer {l}, g{shown} (centroid {g}): {size} tokens, {}", res.labels[l][g]));
                    }
                });
            }
        });
        self.layout.ensure(ui, res, col_w);
        let lay: &TokenLayout = &self.layout;
        let maps: Vec<_> = cols.iter().map(|&l| partner_map(cx, res, l)).collect();
        // The token hovered last frame, in any column, is outlined in all of them.
        let hovered_before = cx.selection.hovered;
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
                let marks = Marks { selected: cx.selection.selected, hovered: hovered_before, found: None, current: None, jumped: cx.selection.jumped, range: cx.selection.range, partners: &maps[c].0, max_weight: maps[c].1 };
                for line in first..last {
                    let origin = rect.min + vec2(c as f32 * (col_w + gap), line as f32 * ROW_H);
                    if let Some(i) = paint_line(&painter, res, lay, line, origin, l, colouring, &marks, pointer) {
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

impl View for LayersView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let scroll_to = &cx.scroll_to;
        let mut out = Vec::new();
        let n_layers = res.layers();
        // Edited here, asked for below; this frame shows the edited values.
        let mut strip = cx.settings.setup.strip;
        let mut side_layers = cx.settings.setup.side_layers.clone();
        ui.horizontal_wrapped(|ui| {
            ui.checkbox(&mut strip, "token x layer strip");
            if !strip {
                ui.label("layers:");
                for l in 0..n_layers {
                    let on = side_layers.contains(&l);
                    // Models with interleaved layers (Gemma): sliding-window layers are marked "s".
                    let sliding = res.model.config().is_sliding(l);
                    let label = if sliding { format!("{l}s") } else { l.to_string() };
                    let resp = ui.selectable_label(on, label);
                    let resp = if res.model.config().sliding.is_some() {
                        resp.on_hover_text(if sliding { "sliding-window layer" } else { "global layer" })
                    } else {
                        resp
                    };
                    if resp.clicked() {
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
        if strip != cx.settings.setup.strip {
            out.push(Command::Set(Setting::Strip(strip)));
        }
        if side_layers != cx.settings.setup.side_layers {
            out.push(Command::Set(Setting::SideLayers(side_layers.clone())));
        }
        ui.separator();
        if strip {
            out.push(strip_view(cx, res, scroll_to, ui));
            return out;
        }
        out.extend(self.columns(cx, res, side_layers, scroll_to, ui));
        out
    }
}

const STRIP_ROW: f32 = 4.0;
/// The strip header's corner, over the token index column.
pub const STRIP_CORNER: &str = "token \\ layer";

/// The token x layer strip, under a header that numbers its layer columns; returns what is
/// hovered.
fn strip_view(cx: &ViewCtx, res: &AnalysisResult, scroll_to: &Cell<Option<usize>>, ui: &mut egui::Ui) -> Command {
    let (t, n_layers) = (res.tokens(), res.layers());
    let label_w = 60.0;
    let cell = ((ui.available_width() - label_w - 16.0) / n_layers as f32).clamp(4.0, 40.0);
    let colouring = Colouring::of(cx);
    // The rows' real range: the analysed tokens, first and last by number (inclusive), and the
    // text's length when only part of it was analysed.
    let of = if res.text_tokens > t { format!(" of the text's {}", res.text_tokens) } else { String::new() };
    ui.label(format!(
        "rows: tokens #0-#{} ({t} tokens{of}; {STRIP_ROW} px each); columns: layers 0-{}; colour: {}. Hover for the token.",
        t.saturating_sub(1),
        n_layers - 1,
        if colouring.by_category { "category" } else if colouring.raw { "argmax group (raw indices)" } else { "argmax group (numbers matched across layers)" }
    ));
    // The header: "token \ layer" over the index column, then every layer's number (every 2nd
    // or 5th when the cells are narrow) centred over its column, outside the scroll area so that
    // it stays. Labels, not painted text, so that they are in the accessibility tree.
    let (hr, _) = ui.allocate_exact_size(vec2(label_w + cell * n_layers as f32, 14.0), Sense::hover());
    let corner = egui::UiBuilder::new().max_rect(Rect::from_min_size(hr.min, vec2(label_w, hr.height()))).layout(egui::Layout::left_to_right(egui::Align::Center));
    ui.scope_builder(corner, |ui| ui.add(egui::Label::new(egui::RichText::new(STRIP_CORNER).size(10.0)).selectable(false).extend()));
    let every = if cell >= 16.0 { 1 } else if cell >= 8.0 { 2 } else { 5 };
    for l in (0..n_layers).filter(|l| l % every == 0) {
        let x = hr.min.x + label_w + (l as f32 + 0.5) * cell;
        let number = egui::Label::new(egui::RichText::new(l.to_string()).monospace().size(9.0)).selectable(false);
        ui.put(Rect::from_center_size(egui::pos2(x, hr.center().y), vec2(cell * every as f32, hr.height())), number);
    }
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
                let r = Rect::from_min_size(egui::pos2(rect.min.x + label_w + l as f32 * cell, y), vec2(cell, STRIP_ROW));
                painter.rect_filled(r, 0.0, super::tokens::token_color(res, l, i, colouring));
            }
            if cx.selection.hovered == Some(i) {
                let r = Rect::from_min_size(egui::pos2(rect.min.x + label_w, y), vec2(cell * n_layers as f32, STRIP_ROW));
                painter.rect_stroke(r, 0.0, egui::Stroke::new(1.5, egui::Color32::from_rgb(230, 0, 230)), egui::StrokeKind::Outside);
            }
        }
        if let Some(p) = resp.hover_pos() {
            let i = ((p.y - rect.min.y) / STRIP_ROW) as usize;
            let l = ((p.x - rect.min.x - label_w) / cell).floor();
            if i < t && l >= 0.0 && (l as usize) < n_layers {
                hovered = Some(i);
                let l = l as usize;
                hovered_layer = Some(l);
                let g = res.argmax[l][i] as usize;
                resp.on_hover_text_at_pointer(format!("#{i} {:?}: layer {l}, group {} (centroid {g})", res.analysis.tokens[i].text, res.group_name(l, g, colouring.raw)));
            }
        }
    });
    Command::Hover { token: hovered, layer: hovered_layer }
}
