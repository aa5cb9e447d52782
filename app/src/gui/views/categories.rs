//! Categories: per layer, the K x category matrix of token counts (largest membership), each
//! centroid's purity, automatic label and top tokens (`focus_core::analysis::categories`), and
//! the matrix as SVG; also each token's category and its colour, for the other views.

use super::{Command, ViewCtx};
use crate::gui::export::svg::Svg;
use crate::gui::palette;
use crate::gui::state::AnalysisResult;
use focus_core::analysis::categories::{Category, Piece};

/// The linguistic category of token `i` (and where it sits in its word).
pub fn category_of(res: &AnalysisResult, i: usize) -> String {
    let Some(t) = res.analysis.tokens.get(i) else { return String::new() };
    match t.piece {
        Piece::Whole => t.category.name().to_string(),
        Piece::First => format!("{} (first piece of a word)", t.category.name()),
        Piece::Continuation => format!("{} (continues a word)", t.category.name()),
    }
}

/// One colour per category (for "colour by category").
pub fn color(c: Category) -> egui::Color32 {
    palette::group(c.index())
}

pub fn category_color(res: &AnalysisResult, i: usize) -> egui::Color32 {
    res.analysis.tokens.get(i).map(|t| color(t.category)).unwrap_or(egui::Color32::LIGHT_GRAY)
}

pub fn show(cx: &ViewCtx, res: &AnalysisResult, ui: &mut egui::Ui) -> Vec<Command> {
    let layer = cx.layer(res);
    let Some(p) = res.analysis.profiles.get(layer) else {
        ui.label("no category profile for this layer");
        return Vec::new();
    };
    ui.label(format!("layer {layer}: tokens per group (largest membership) by linguistic category; purity = the top category's share of the group"));
    // Vertical scrolling only: the matrix has numbers only, and each group's label and top
    // tokens below wrap to the panel's width.
    egui::ScrollArea::vertical().id_salt("cats").auto_shrink(false).show(ui, |ui| {
        egui::Grid::new("cat_matrix").striped(true).spacing([8.0, 4.0]).show(ui, |ui| {
            ui.strong("group");
            ui.strong("tokens");
            for c in &p.categories {
                ui.strong(c.name());
            }
            ui.strong("purity");
            ui.end_row();
            for c in &p.centroids {
                // The automatic label is on hover here and in full in the list below (as a
                // column it ran past the window's width).
                let (r, swatch) = ui.allocate_exact_size(egui::vec2(40.0, 16.0), egui::Sense::hover());
                swatch.on_hover_text(&c.label);
                ui.painter().rect_filled(r, 2.0, palette::group(c.group));
                ui.painter().text(r.center(), egui::Align2::CENTER_CENTER, format!("g{}", c.group), egui::FontId::proportional(12.0), egui::Color32::BLACK);
                ui.label(c.tokens.to_string());
                let max = c.by_category.iter().cloned().max().unwrap_or(0);
                for &n in &c.by_category {
                    let txt = egui::RichText::new(n.to_string());
                    ui.label(if n == max && n > 0 { txt.strong() } else if n == 0 { txt.weak() } else { txt });
                }
                ui.label(c.purity.map(|p| format!("{:.0}%", 100.0 * p)).unwrap_or_else(|| "-".into()));
                ui.end_row();
            }
        });
        ui.separator();
        ui.strong("Label and top tokens per centroid");
        for c in &p.centroids {
            let tops: Vec<String> = c.top_tokens.iter().map(|t| format!("{:?} {}", t.text, t.count)).collect();
            ui.horizontal_top(|ui| {
                let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
                ui.painter().rect_filled(r, 2.0, palette::group(c.group));
                // Wrapped to the panel's width, never wider.
                ui.add(egui::Label::new(format!("g{} ({}): {}", c.group, c.label, tops.join("  "))).wrap());
            });
        }
    });
    Vec::new()
}

/// The K x category matrix of one layer with purity and labels.
pub fn svg(res: &AnalysisResult, layer: usize) -> Result<String, String> {
    let p = res.analysis.profiles.get(layer).ok_or("no category profile for this layer")?;
    let (cell_w, cell_h, left, top) = (70.0, 22.0, 60.0, 60.0);
    let ncat = p.categories.len();
    let width = left + cell_w * (ncat as f64 + 1.0) + 260.0;
    let height = top + cell_h * (p.centroids.len() as f64 + 1.0);
    let mut s = Svg::new(width, height);
    s.text(10.0, 20.0, &format!("layer {layer}: tokens per group (largest membership) by category"), 14.0, "black", "start");
    for (c, cat) in p.categories.iter().enumerate() {
        s.text(left + cell_w * (c as f64 + 0.5), top - 8.0, cat.name(), 10.0, "black", "middle");
    }
    s.text(left + cell_w * (ncat as f64 + 0.5), top - 8.0, "purity", 10.0, "black", "middle");
    for (r, c) in p.centroids.iter().enumerate() {
        let y = top + r as f64 * cell_h;
        s.rect(10.0, y + 3.0, 40.0, cell_h - 6.0, &palette::hex(palette::group(c.group)), None);
        s.text(30.0, y + cell_h * 0.7, &format!("g{}", c.group), 11.0, "black", "middle");
        let max = c.by_category.iter().cloned().max().unwrap_or(0).max(1) as f64;
        for (k, &n) in c.by_category.iter().enumerate() {
            let shade = 255.0 - 155.0 * n as f64 / max;
            let fill = format!("#{0:02x}{0:02x}ff", shade as u8);
            s.rect(left + cell_w * k as f64, y, cell_w, cell_h, &fill, Some("#ffffff"));
            s.text(left + cell_w * (k as f64 + 0.5), y + cell_h * 0.7, &n.to_string(), 11.0, "black", "middle");
        }
        let pur = c.purity.map(|p| format!("{:.0}%", 100.0 * p)).unwrap_or_else(|| "-".into());
        s.text(left + cell_w * (ncat as f64 + 0.5), y + cell_h * 0.7, &pur, 11.0, "black", "middle");
        s.text(left + cell_w * (ncat as f64 + 1.0) + 10.0, y + cell_h * 0.7, &c.label, 11.0, "black", "start");
    }
    Ok(s.finish())
}
