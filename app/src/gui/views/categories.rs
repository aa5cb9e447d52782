//! Categories: per layer, the K x category matrix of token counts (largest membership), each
//! centroid's purity, automatic label and top tokens (`focus_core::analysis::categories`), and
//! the matrix as SVG; across layers, a layer x centroid heatmap of purity with each cell's top
//! category and its lift over that category's base rate in the text (and its SVG); also each
//! token's category and its colour, for the other views.

use super::{Command, View, ViewCtx};
use crate::gui::export::svg::Svg;
use crate::gui::paint::palette;
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

/// Which of the categories view's three views shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatMode {
    /// One layer's K x category matrix.
    #[default]
    Layer,
    /// The layer x centroid purity heatmap.
    Heatmap,
    /// Token-weighted purity per layer against the untrained adapter's.
    Curve,
}

/// The categories view's state: which view shows, and the untrained baseline of the purity
/// curve (computed in the background, `jobs::baseline`).
#[derive(Default)]
pub struct CategoriesView {
    pub mode: CatMode,
    pub baseline: Option<crate::gui::jobs::Baseline>,
    /// Why the baseline of `requested` could not be computed.
    pub baseline_error: Option<String>,
    /// The analysis a baseline was last asked for.
    requested: Option<crate::gui::state::AnalysisKey>,
}

/// Token-weighted purity per layer of the analysis (`LayerProfile::purity`).
pub fn purity_curve(res: &AnalysisResult) -> Vec<Option<f64>> {
    res.analysis.profiles.iter().map(|p| p.centroids.iter().any(|c| c.tokens > 0).then(|| p.purity())).collect()
}

/// Mean of the known values.
fn mean(v: &[Option<f64>]) -> Option<f64> {
    let k: Vec<f64> = v.iter().flatten().cloned().collect();
    (!k.is_empty()).then(|| k.iter().sum::<f64>() / k.len() as f64)
}

/// The purity if every token sat in one group: the largest category's base rate.
pub fn one_group_purity(res: &AnalysisResult) -> f64 {
    base_rates(res).into_iter().fold(0.0, f64::max)
}

/// Each category's share of the analysed tokens (the base rate a group's purity is measured
/// against).
pub fn base_rates(res: &AnalysisResult) -> Vec<f64> {
    let mut n = vec![0usize; Category::ALL.len()];
    for t in &res.analysis.tokens {
        n[t.category.index()] += 1;
    }
    let total = res.tokens().max(1) as f64;
    n.iter().map(|&c| c as f64 / total).collect()
}

/// One heatmap cell: a group of a layer, at its shown column.
pub struct Cell {
    pub layer: usize,
    pub group: usize,
    pub shown: usize,
    pub tokens: usize,
    pub top: Option<Category>,
    pub purity: Option<f64>,
    /// purity / base rate of the top category.
    pub lift: Option<f64>,
}

/// Every layer's groups with purity, top category and lift.
pub fn heatmap_cells(res: &AnalysisResult, raw: bool) -> Vec<Cell> {
    let base = base_rates(res);
    let mut out = Vec::new();
    for p in &res.analysis.profiles {
        for c in &p.centroids {
            let lift = match (c.purity, c.top_category) {
                (Some(pu), Some(cat)) if base[cat.index()] > 0.0 => Some(pu / base[cat.index()]),
                _ => None,
            };
            out.push(Cell { layer: p.layer, group: c.group, shown: res.shown_group(p.layer, c.group, raw), tokens: c.tokens, top: c.top_category, purity: c.purity, lift });
        }
    }
    out
}

/// Three letters of a category, for the heatmap's cells.
fn short(c: Category) -> String {
    c.name().chars().take(4).collect()
}

impl CategoriesView {

    /// The untrained baseline's result.
    pub fn receive(&mut self, r: Result<crate::gui::jobs::Baseline, crate::gui::jobs::JobError>) {
        match r {
            Ok(b) => {
                self.baseline = Some(b);
                self.baseline_error = None;
            }
            Err(e) => self.baseline_error = Some(e.to_string()),
        }
    }

    /// The baseline for this analysis, when computed.
    pub fn baseline_for(&self, res: &AnalysisResult) -> Option<&crate::gui::jobs::Baseline> {
        self.baseline.as_ref().filter(|b| b.key == res.key)
    }

    /// Asks for the baseline of `res` once (again only when the analysis changes).
    fn request(&mut self, res: &std::sync::Arc<AnalysisResult>) -> Option<Command> {
        if self.baseline_for(res).is_some() || self.requested.as_ref() == Some(&res.key) {
            return None;
        }
        self.requested = Some(res.key.clone());
        self.baseline_error = None;
        Some(Command::BuildBaseline(res.clone()))
    }

    /// Token-weighted purity per layer, this adapter against its untrained twin: where the two
    /// part is where training made groups of one kind of token.
    fn curve(&mut self, cx: &ViewCtx, res: &std::sync::Arc<AnalysisResult>, ui: &mut egui::Ui) -> Vec<Command> {
        let out: Vec<Command> = self.request(res).into_iter().collect();
        let trained = purity_curve(res);
        let base = self.baseline_for(res);
        let one = one_group_purity(res);
        let best = focus_core::analysis::categories::best_layer(&res.analysis.profiles);
        let mut words = format!(
            "Token-weighted purity per layer: the share of tokens whose group's top category is their own (every centroid's purity weighted by its tokens). This adapter: mean {}",
            mean(&trained).map_or("-".into(), |m| format!("{:.1}%", 100.0 * m))
        );
        if let Some((l, p)) = best {
            words += &format!(", best layer {l} ({:.1}%)", 100.0 * p);
        }
        match base {
            Some(b) => {
                words += &format!(
                    ". Untrained twin (a random init with this adapter's config and seed {}, same tokens, mode and k): mean {}",
                    b.seed,
                    mean(&b.purity).map_or("-".into(), |m| format!("{:.1}%", 100.0 * m))
                );
                if let Some((l, _)) = best {
                    if let Some(Some(u)) = b.purity.get(l) {
                        words += &format!(", layer {l} {:.1}%", 100.0 * u);
                    }
                }
                if !b.trained {
                    words += " (this adapter records no training: it may itself be a random init)";
                }
                words += &format!(". All tokens in one group would give {:.1}% (the largest category's share).", 100.0 * one);
            }
            None => words += ".",
        }
        ui.add(egui::Label::new(words).wrap());
        if base.is_none() {
            match &self.baseline_error {
                Some(e) => {
                    ui.colored_label(egui::Color32::from_rgb(200, 30, 30), format!("the untrained baseline failed: {e}"));
                }
                None => {
                    ui.horizontal(|ui| {
                        crate::gui::paint::busy::busy(ui);
                        ui.label("analysing the same tokens with the untrained adapter (in the background)…");
                    });
                }
            }
        }
        let layer = cx.layer(res);
        let pts = |v: &[Option<f64>]| egui_plot::PlotPoints::from(v.iter().enumerate().filter_map(|(l, p)| p.map(|p| [l as f64, p])).collect::<Vec<_>>());
        let (trained_c, base_c) = (egui::Color32::from_rgb(0x1f, 0x77, 0xb4), egui::Color32::from_rgb(0x7f, 0x7f, 0x7f));
        let h = (ui.available_height() - 30.0).clamp(160.0, 420.0);
        egui_plot::Plot::new("purity_curve")
            .height(h)
            .legend(egui_plot::Legend::default().position(egui_plot::Corner::RightTop))
            .x_axis_label("layer")
            .y_axis_label("purity")
            .include_y(0.0)
            .include_y(1.0)
            .show(ui, |p| {
                p.line(egui_plot::Line::new("this adapter", pts(&trained)).color(trained_c).width(2.5));
                p.points(egui_plot::Points::new("this adapter", pts(&trained)).radius(3.0).color(trained_c));
                if let Some(b) = base {
                    let name = format!("untrained (random init, seed {})", b.seed);
                    p.line(egui_plot::Line::new(name.clone(), pts(&b.purity)).color(base_c).width(2.0).style(egui_plot::LineStyle::dashed_dense()));
                    p.points(egui_plot::Points::new(name, pts(&b.purity)).radius(2.5).color(base_c));
                }
                p.hline(egui_plot::HLine::new(format!("one group for all tokens = {:.0}%", 100.0 * one), one).color(egui::Color32::from_gray(190)));
                p.vline(egui_plot::VLine::new(format!("selected layer {layer}"), layer as f64).color(egui::Color32::from_gray(200)));
            });
        egui::CollapsingHeader::new("per layer (numbers)").id_salt("purity_numbers").show(ui, |ui| {
            egui::ScrollArea::vertical().id_salt("purity_numbers_scroll").max_height(220.0).show(ui, |ui| {
                egui::Grid::new("purity_table").striped(true).show(ui, |ui| {
                    for hd in ["layer", "purity", "untrained", "difference"] {
                        ui.strong(hd);
                    }
                    ui.end_row();
                    for (l, p) in trained.iter().enumerate() {
                        let u = base.and_then(|b| b.purity.get(l).copied().flatten());
                        let pct = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x));
                        ui.label(l.to_string());
                        ui.label(pct(*p));
                        ui.label(pct(u));
                        ui.label(match (p, u) {
                            (Some(p), Some(u)) => format!("{:+.1} pt", 100.0 * (p - u)),
                            _ => "-".into(),
                        });
                        ui.end_row();
                    }
                });
            });
        });
        out
    }

    pub fn svg(&self, res: &AnalysisResult, layer: usize, raw: bool) -> Result<String, String> {
        match self.mode {
            CatMode::Heatmap => heatmap_svg(res, raw),
            CatMode::Layer => svg(res, layer),
            CatMode::Curve => Ok(curve_svg(res, self.baseline_for(res))),
        }
    }
}

impl View for CategoriesView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.mode, CatMode::Layer, "this layer");
            ui.selectable_value(&mut self.mode, CatMode::Heatmap, "all layers: purity heatmap");
            ui.selectable_value(&mut self.mode, CatMode::Curve, "purity by layer vs untrained");
        });
        match self.mode {
            CatMode::Heatmap => {
                heatmap(cx, res, ui);
                Vec::new()
            }
            CatMode::Curve => self.curve(cx, res, ui),
            CatMode::Layer => layer_table(cx, res, ui),
        }
    }
}

/// The purity curve as SVG (the baseline when computed).
pub fn curve_svg(res: &AnalysisResult, base: Option<&crate::gui::jobs::Baseline>) -> String {
    use crate::gui::export::svg::{line_chart, Series};
    let pts = |v: &[Option<f64>]| v.iter().enumerate().filter_map(|(l, p)| p.map(|p| (l as f64, p))).collect::<Vec<_>>();
    let mut series = vec![Series { name: "this adapter".into(), color: "#1f77b4".into(), points: pts(&purity_curve(res)), dashed: false }];
    if let Some(b) = base {
        series.push(Series { name: format!("untrained (seed {})", b.seed), color: "#7f7f7f".into(), points: pts(&b.purity), dashed: true });
    }
    let one = one_group_purity(res);
    line_chart(&format!("token-weighted purity per layer: {}", res.analysis.adapter), "layer", "purity", &series, &[(format!("one group = {:.2}", one), one)])
}

/// Purity as a colour: white (0) to dark blue (1).
fn purity_color(p: f64) -> egui::Color32 {
    let p = p.clamp(0.0, 1.0) as f32;
    let lerp = |a: f32, b: f32| (a + (b - a) * p).round() as u8;
    egui::Color32::from_rgb(lerp(255.0, 33.0), lerp(255.0, 80.0), lerp(255.0, 160.0))
}

/// Layers as rows, groups (by shown number) as columns; the cell's colour is the group's
/// purity, its text the top category and the lift (purity over base rate).
fn heatmap(cx: &ViewCtx, res: &AnalysisResult, ui: &mut egui::Ui) {
    let raw = cx.settings.setup.raw_groups;
    let base = base_rates(res);
    let rates: Vec<String> = Category::ALL.iter().map(|c| format!("{} {:.0}%", c.name(), 100.0 * base[c.index()])).collect();
    ui.label(format!(
        "rows: layers; columns: groups ({}); colour: purity (the top category's share of the group); text: top category and lift = purity / that category's base rate. Base rates in this text: {}.",
        if raw { "raw indices" } else { "numbers matched across layers" },
        rates.join(", ")
    ));
    let cells = heatmap_cells(res, raw);
    let (layers, groups) = (res.layers(), res.groups());
    let label_w = 60.0;
    let cw = ((ui.available_width() - label_w - 20.0) / groups as f32).clamp(40.0, 120.0);
    let ch = 18.0;
    egui::ScrollArea::vertical().id_salt("purity_heatmap").auto_shrink(false).show(ui, |ui| {
        let (rect, resp) = ui.allocate_exact_size(egui::vec2(label_w + cw * groups as f32, ch * (layers + 1) as f32), egui::Sense::hover());
        let p = ui.painter_at(rect);
        let fg = ui.visuals().text_color();
        for g in 0..groups {
            let x = rect.min.x + label_w + (g as f32 + 0.5) * cw;
            let r = egui::Rect::from_center_size(egui::pos2(x, rect.min.y + ch / 2.0), egui::vec2(cw - 4.0, ch - 4.0));
            p.rect_filled(r, 2.0, palette::group(g));
            p.text(r.center(), egui::Align2::CENTER_CENTER, format!("g{g}"), egui::FontId::proportional(11.0), egui::Color32::BLACK);
        }
        let mut tip = None;
        for c in &cells {
            let r = egui::Rect::from_min_size(egui::pos2(rect.min.x + label_w + c.shown as f32 * cw, rect.min.y + ch * (c.layer + 1) as f32), egui::vec2(cw - 1.0, ch - 1.0));
            let pur = c.purity.unwrap_or(0.0);
            p.rect_filled(r, 0.0, purity_color(pur));
            let text_c = if pur > 0.55 { egui::Color32::WHITE } else { egui::Color32::BLACK };
            let txt = match (c.top, c.lift) {
                (Some(t), Some(l)) => format!("{} {l:.1}x", short(t)),
                _ => "-".into(),
            };
            p.text(r.center(), egui::Align2::CENTER_CENTER, txt, egui::FontId::proportional(10.0), text_c);
            if resp.hover_pos().is_some_and(|h| r.contains(h)) {
                tip = Some(format!(
                    "layer {}, g{} (centroid {}): {} tokens; top category {}; purity {}; lift {}",
                    c.layer,
                    c.shown,
                    c.group,
                    c.tokens,
                    c.top.map(|t| t.name()).unwrap_or("-"),
                    c.purity.map(|x| format!("{:.0}%", 100.0 * x)).unwrap_or_else(|| "-".into()),
                    c.lift.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
                ));
            }
        }
        for l in 0..layers {
            p.text(egui::pos2(rect.min.x, rect.min.y + ch * (l as f32 + 1.5)), egui::Align2::LEFT_CENTER, format!("layer {l}"), egui::FontId::proportional(11.0), fg);
        }
        if let Some(t) = tip {
            resp.on_hover_text_at_pointer(t);
        }
    });
}

/// The purity heatmap as SVG.
pub fn heatmap_svg(res: &AnalysisResult, raw: bool) -> Result<String, String> {
    if res.analysis.profiles.is_empty() {
        return Err("no category profiles in this analysis".into());
    }
    let cells = heatmap_cells(res, raw);
    let (layers, groups) = (res.layers(), res.groups());
    let (cw, ch, left, top) = (64.0, 18.0, 70.0, 60.0);
    let mut s = Svg::new(left + cw * groups as f64 + 20.0, top + ch * layers as f64 + 20.0);
    s.text(10.0, 20.0, "purity per layer and group (colour); top category and lift over its base rate (text)", 13.0, "black", "start");
    for g in 0..groups {
        s.rect(left + cw * g as f64 + 2.0, top - 22.0, cw - 4.0, 16.0, &palette::hex(palette::group(g)), None);
        s.text(left + cw * (g as f64 + 0.5), top - 10.0, &format!("g{g}"), 11.0, "black", "middle");
    }
    for l in 0..layers {
        s.text(10.0, top + ch * (l as f64 + 0.7), &format!("layer {l}"), 11.0, "black", "start");
    }
    for c in &cells {
        let (x, y) = (left + cw * c.shown as f64, top + ch * c.layer as f64);
        let pur = c.purity.unwrap_or(0.0);
        s.rect(x, y, cw - 1.0, ch - 1.0, &palette::hex(purity_color(pur)), None);
        let txt = match (c.top, c.lift) {
            (Some(t), Some(l)) => format!("{} {l:.1}x", short(t)),
            _ => "-".into(),
        };
        s.text(x + cw / 2.0, y + ch * 0.7, &txt, 10.0, if pur > 0.55 { "white" } else { "black" }, "middle");
    }
    Ok(s.finish())
}

/// One layer's groups by category (tokens per group and category, purity, label).
pub fn layer_table(cx: &ViewCtx, res: &AnalysisResult, ui: &mut egui::Ui) -> Vec<Command> {
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
                let sg = cx.shown(res, layer, c.group);
                ui.painter().rect_filled(r, 2.0, palette::group(sg));
                ui.painter().text(r.center(), egui::Align2::CENTER_CENTER, format!("g{sg}"), egui::FontId::proportional(12.0), egui::Color32::BLACK);
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
                let sg = cx.shown(res, layer, c.group);
                ui.painter().rect_filled(r, 2.0, palette::group(sg));
                // Wrapped to the panel's width, never wider.
                ui.add(egui::Label::new(format!("g{sg} ({}): {}", c.label, tops.join("  "))).wrap());
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
