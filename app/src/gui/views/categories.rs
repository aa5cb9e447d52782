//! Categories: per layer, the K x category matrix of token counts (largest membership), each
//! centroid's purity, automatic label and top tokens (`focus_core::analysis::categories`), and
//! the matrix as SVG; across layers, a layer x centroid heatmap of purity with each cell's top
//! category and its lift over that category's base rate in the text (and its SVG); also each
//! token's category and its colour, for the other views.

use super::view::{Command, View, ViewCtx};
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
    /// Structure (FOCUS-METHOD section 6) per layer against the untrained twin and the
    /// permutation null, and the best layer's table in the paper's form.
    Structure,
}

/// The categories view's state: which view shows, and the untrained baseline of the purity
/// curve (computed in the background, `jobs::baseline`).
#[derive(Default)]
pub struct CategoriesView {
    pub mode: CatMode,
    pub baseline: Option<crate::gui::jobs::Baseline>,
    /// Why the baseline of `requested` could not be computed.
    pub baseline_error: Option<String>,
    /// The result a baseline was last asked for: its key and token count (a provisional result
    /// shares its key with the full one that replaces it).
    requested: Option<(crate::gui::state::AnalysisKey, usize)>,
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

/// A category's abbreviation for the heatmap's cells (the key below the heatmap spells them
/// out; cutting names at four letters gave "othe" and "dete").
pub fn short(c: Category) -> &'static str {
    match c {
        Category::Punctuation => "punct",
        Category::Determiner => "det",
        Category::Preposition => "prep",
        Category::Pronoun => "pron",
        Category::Conjunction => "conj",
        Category::Verb => "verb",
        Category::Noun => "noun",
        Category::Adjective => "adj",
        Category::Adverb => "adv",
        Category::Number => "num",
        Category::Other => "other",
    }
}

/// The abbreviations' key: "punct = punctuation, det = determiner, ...".
pub fn short_key() -> String {
    Category::ALL.iter().filter(|&&c| short(c) != c.name()).map(|&c| format!("{} = {}", short(c), c.name())).collect::<Vec<_>>().join(", ")
}

/// The purity colour scale, 0% to 100%, drawn in `rect` with ticks below it.
fn purity_legend(ui: &mut egui::Ui) {
    ui.horizontal(|ui| {
        ui.label("purity:");
        let (rect, _) = ui.allocate_exact_size(egui::vec2(220.0, 26.0), egui::Sense::hover());
        let p = ui.painter_at(rect);
        let bar = egui::Rect::from_min_size(rect.min, egui::vec2(rect.width(), 12.0));
        let steps = 44;
        for i in 0..steps {
            let x0 = bar.min.x + bar.width() * i as f32 / steps as f32;
            let r = egui::Rect::from_min_max(egui::pos2(x0, bar.min.y), egui::pos2(x0 + bar.width() / steps as f32 + 0.5, bar.max.y));
            p.rect_filled(r, 0.0, purity_color((i as f64 + 0.5) / steps as f64));
        }
        p.rect_stroke(bar, 0.0, egui::Stroke::new(1.0, egui::Color32::GRAY), egui::StrokeKind::Inside);
        let fg = ui.visuals().text_color();
        for (v, align) in [(0.0, egui::Align2::LEFT_TOP), (0.5, egui::Align2::CENTER_TOP), (1.0, egui::Align2::RIGHT_TOP)] {
            p.text(egui::pos2(bar.min.x + bar.width() * v, bar.max.y + 1.0), align, format!("{:.0}%", 100.0 * v), egui::FontId::proportional(10.0), fg);
        }
        ui.label("(the top category's share of the group; white text from 55%)");
    });
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

    /// The baseline for this analysis, when computed (for these tokens: not a provisional
    /// result's).
    pub fn baseline_for(&self, res: &AnalysisResult) -> Option<&crate::gui::jobs::Baseline> {
        self.baseline.as_ref().filter(|b| b.key == res.key && b.structure.adapter.tokens == res.tokens())
    }

    /// Asks for the baseline of `res` once per result (again only when the result changes, or
    /// after a failure when asked to try again): the purity curve and the structure share it.
    fn request(&mut self, res: &std::sync::Arc<AnalysisResult>) -> Option<Command> {
        let id = (res.key.clone(), res.tokens());
        if self.baseline_for(res).is_some() || self.requested.as_ref() == Some(&id) {
            return None;
        }
        self.requested = Some(id);
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
        let best = focus_core::analysis::categories::best_layer(res.analysis.routed_profiles());
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
        let base = base.map(|b| (b.seed, b.purity.clone()));
        self.twin_status(res, ui);
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
                if let Some((seed, purity)) = &base {
                    let name = format!("untrained (random init, seed {seed})");
                    p.line(egui_plot::Line::new(name.clone(), pts(purity)).color(base_c).width(2.0).style(egui_plot::LineStyle::dashed_dense()));
                    p.points(egui_plot::Points::new(name, pts(purity)).radius(2.5).color(base_c));
                }
                crate::gui::paint::reference::hline(p, format!("one group for all tokens = {:.0}%", 100.0 * one), one, 0.0);
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
                        let u = base.as_ref().and_then(|(_, b)| b.get(l).copied().flatten());
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
            CatMode::Layer => svg(res, layer, raw),
            CatMode::Curve => Ok(curve_svg(res, self.baseline_for(res))),
            CatMode::Structure => self.baseline_for(res).map(|b| structure_svg(res, &b.structure)).ok_or_else(|| "the structure is still being computed".to_string()),
        }
    }

    /// The busy line or the error while the twin is computed (nothing once it is); after an
    /// error, a button asks for it again.
    fn twin_status(&mut self, res: &AnalysisResult, ui: &mut egui::Ui) {
        if self.baseline_for(res).is_some() {
            return;
        }
        match &self.baseline_error {
            Some(e) => {
                ui.horizontal(|ui| {
                    ui.colored_label(egui::Color32::from_rgb(200, 30, 30), format!("the untrained baseline failed: {e}"));
                    if ui.button("try again").clicked() {
                        self.requested = None;
                    }
                });
            }
            None => {
                ui.horizontal(|ui| {
                    crate::gui::paint::busy::busy(ui);
                    ui.label("analysing the same tokens with the untrained adapter (in the background)…");
                });
            }
        }
    }

    /// Structure per layer against the untrained twin on the same tokens and the permutation
    /// null (NMI of the top group with category, token id, position bucket and repeats; purity;
    /// pure centroids; dominance), and the best layer's table in the paper's form.
    fn structure(&mut self, cx: &ViewCtx, res: &std::sync::Arc<AnalysisResult>, ui: &mut egui::Ui) -> Vec<Command> {
        use focus_core::analysis::structure::{PaperTable, PURE_MIN_TOKENS};
        let out: Vec<Command> = self.request(res).into_iter().collect();
        ui.add(
            egui::Label::new(
                "Structure (FOCUS-METHOD section 6): per layer, the normalised mutual information (NMI) between each token's top group and its word category, beside the permutation null (group labels shuffled, sizes kept) and the untrained twin (a random init with this adapter's config, on the same tokens); the same against token id, position and \"repeats an earlier token\", which tell category structure from copying and position. Pure: centroids >= 60% one category with >= 50 tokens.",
            )
            .wrap(),
        );
        self.twin_status(res, ui);
        let Some(b) = self.baseline_for(res) else { return out };
        let r = &b.structure;
        ui.add(egui::Label::new(r.summary().lines().take(4).map(str::trim).collect::<Vec<_>>().join("\n")).wrap());
        let layer = cx.layer(res);
        let pts = |f: &dyn Fn(&focus_core::analysis::structure::LayerStructure) -> f64, s: &focus_core::analysis::structure::Structure| {
            egui_plot::PlotPoints::from(s.layers.iter().map(|l| [l.layer as f64, f(l)]).collect::<Vec<_>>())
        };
        let (mine_c, twin_c, null_c) = (egui::Color32::from_rgb(0x1f, 0x77, 0xb4), egui::Color32::from_rgb(0x7f, 0x7f, 0x7f), egui::Color32::from_rgb(0xd6, 0x27, 0x28));
        // Room above the curves for the legend (top right), so that it covers none of them.
        let top = super::balance::headroom(r.adapter.layers.iter().flat_map(|l| [l.category.value, l.category.null_max]).chain(r.twin.iter().flat_map(|t| t.layers.iter().map(|l| l.category.value))));
        egui_plot::Plot::new("structure_nmi")
            .height(200.0)
            .legend(egui_plot::Legend::default().position(egui_plot::Corner::RightTop))
            .x_axis_label("layer")
            .y_axis_label("NMI(group, category)")
            .include_y(0.0)
            .include_y(top)
            .show(ui, |p| {
                p.line(egui_plot::Line::new("this adapter", pts(&|l| l.category.value, &r.adapter)).color(mine_c).width(2.5));
                if let Some(t) = &r.twin {
                    p.line(egui_plot::Line::new(format!("untrained twin (seed {})", b.seed), pts(&|l| l.category.value, t)).color(twin_c).width(2.0).style(egui_plot::LineStyle::dashed_dense()));
                }
                p.line(egui_plot::Line::new("null (shuffled groups, max)", pts(&|l| l.category.null_max, &r.adapter)).color(null_c).width(1.5).style(egui_plot::LineStyle::dotted_dense()));
                p.vline(egui_plot::VLine::new(format!("selected layer {layer}"), layer as f64).color(egui::Color32::from_gray(200)));
            });
        egui::CollapsingHeader::new("structure per layer (numbers)").id_salt("structure_numbers").default_open(true).show(ui, |ui| {
            egui::ScrollArea::vertical().id_salt("structure_numbers_scroll").max_height(220.0).show(ui, |ui| {
                egui::Grid::new("structure_table").striped(true).show(ui, |ui| {
                    for hd in ["layer", "NMI(cat)", "null", "twin", "ratio", "NMI(token)", "NMI(pos)", "NMI(repeat)", "purity", "twin", "pure", "twin", "dominance"] {
                        ui.strong(hd);
                    }
                    ui.end_row();
                    for (i, l) in r.adapter.layers.iter().enumerate() {
                        let t = r.twin_layer(i);
                        let f3 = |x: f64| format!("{x:.3}");
                        ui.label(l.layer.to_string());
                        ui.label(f3(l.category.value));
                        ui.label(f3(l.category.null_mean));
                        ui.label(t.map_or("-".into(), |t| f3(t.category.value)));
                        ui.label(r.vs_twin.as_ref().and_then(|v| v.per_layer.get(i)).map_or("-".into(), |x| format!("{x:.2}x")));
                        ui.label(format!("{:.3} ({:.3})", l.token.value, l.token.null_mean));
                        ui.label(format!("{:.3} ({:.3})", l.position.value, l.position.null_mean));
                        ui.label(format!("{:.3} ({:.3})", l.repeat.value, l.repeat.null_mean));
                        ui.label(format!("{:.1}%", 100.0 * l.purity));
                        ui.label(t.map_or("-".into(), |t| format!("{:.1}%", 100.0 * t.purity)));
                        ui.label(l.pure60.to_string());
                        ui.label(t.map_or("-".into(), |t| t.pure60.to_string()));
                        ui.label(format!("{:.1}%", 100.0 * l.dominance));
                        ui.end_row();
                    }
                });
            });
        });
        if let Some(t) = &r.table {
            ui.separator();
            ui.strong(format!(
                "paper-form table of the best layer ({}): {} of {} centroids >= 60% pure (>= {PURE_MIN_TOKENS} tokens), NMI {:.3}",
                t.layer,
                t.pure60,
                t.rows.len(),
                t.category_nmi
            ));
            let mut rows: Vec<_> = t.rows.iter().collect();
            rows.sort_by(|a, b| b.tokens.cmp(&a.tokens).then(a.group.cmp(&b.group)));
            egui::Grid::new("paper_table").striped(true).spacing([10.0, 3.0]).show(ui, |ui| {
                for hd in ["group", "category", "purity", "size", "most frequent tokens (count)"] {
                    ui.strong(hd);
                }
                ui.end_row();
                for row in rows {
                    let sg = cx.shown(res, t.layer, row.group);
                    let (rect, swatch) = ui.allocate_exact_size(egui::vec2(40.0, 16.0), egui::Sense::hover());
                    swatch.on_hover_text(format!("centroid {} of layer {}", row.group, t.layer));
                    ui.painter().rect_filled(rect, 2.0, palette::group(sg));
                    ui.painter().text(rect.center(), egui::Align2::CENTER_CENTER, cx.name(res, t.layer, row.group), egui::FontId::proportional(12.0), egui::Color32::BLACK);
                    let cat = row.top_category.map(|c| c.name()).unwrap_or("empty");
                    ui.label(if row.pure { egui::RichText::new(cat).strong() } else { egui::RichText::new(cat) });
                    ui.label(row.purity.map_or("-".into(), |p| format!("{:.0}%", 100.0 * p)));
                    ui.label(format!("{:.1}%", 100.0 * row.share));
                    ui.label(PaperTable::tokens_of(row));
                    ui.end_row();
                }
            });
        }
        out
    }
}

/// NMI(top group, category) per layer, the adapter's, its twin's and the null's, as SVG.
pub fn structure_svg(res: &AnalysisResult, r: &focus_core::analysis::structure::StructureReport) -> String {
    use crate::gui::export::svg::{line_chart, Series};
    let pts = |s: &focus_core::analysis::structure::Structure, null: bool| s.layers.iter().map(|l| (l.layer as f64, if null { l.category.null_max } else { l.category.value })).collect::<Vec<_>>();
    let mut series = vec![Series { name: "this adapter".into(), color: "#1f77b4".into(), points: pts(&r.adapter, false), dashed: false }];
    if let Some(t) = &r.twin {
        series.push(Series { name: format!("untrained (seed {})", r.twin_seed.unwrap_or(0)), color: "#7f7f7f".into(), points: pts(t, false), dashed: true });
    }
    series.push(Series { name: "null (max)".into(), color: "#d62728".into(), points: pts(&r.adapter, true), dashed: true });
    line_chart(&format!("NMI(top group, category) per layer: {}", res.analysis.adapter), "layer", "NMI", &series, &[])
}

impl View for CategoriesView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.mode, CatMode::Layer, "this layer");
            ui.selectable_value(&mut self.mode, CatMode::Heatmap, "all layers: purity heatmap");
            ui.selectable_value(&mut self.mode, CatMode::Curve, "purity by layer vs untrained");
            ui.selectable_value(&mut self.mode, CatMode::Structure, "structure vs untrained");
        });
        match self.mode {
            CatMode::Heatmap => {
                heatmap(cx, res, ui);
                Vec::new()
            }
            CatMode::Curve => self.curve(cx, res, ui),
            CatMode::Structure => self.structure(cx, res, ui),
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
pub fn purity_color(p: f64) -> egui::Color32 {
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
    ui.label(format!("abbreviations: {}.", short_key()));
    purity_legend(ui);
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
            p.text(r.center(), egui::Align2::CENTER_CENTER, focus_core::analysis::identity::group_name(g, cx.numbering()), egui::FontId::proportional(11.0), egui::Color32::BLACK);
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
                    "layer {}, {} (centroid {}): {} tokens; top category {}; purity {}; lift {}",
                    c.layer,
                    focus_core::analysis::identity::group_name(c.shown, cx.numbering()),
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
    let bottom = top + ch * layers as f64;
    let mut s = Svg::new((left + cw * groups as f64 + 20.0).max(640.0), bottom + 80.0);
    s.text(10.0, 20.0, "purity per layer and group (colour); top category and lift over its base rate (text)", 13.0, "black", "start");
    // The colour scale and the abbreviations' key.
    let steps = 20;
    for i in 0..steps {
        s.rect(left + 12.0 * i as f64, bottom + 14.0, 12.0, 12.0, &palette::hex(purity_color((i as f64 + 0.5) / steps as f64)), None);
    }
    s.text(10.0, bottom + 24.0, "purity", 11.0, "black", "start");
    for (v, anchor) in [(0.0, "start"), (0.5, "middle"), (1.0, "end")] {
        s.text(left + 12.0 * steps as f64 * v, bottom + 40.0, &format!("{:.0}%", 100.0 * v), 10.0, "black", anchor);
    }
    s.text(10.0, bottom + 62.0, &short_key(), 10.0, "black", "start");
    for g in 0..groups {
        s.rect(left + cw * g as f64 + 2.0, top - 22.0, cw - 4.0, 16.0, &palette::hex(palette::group(g)), None);
        s.text(left + cw * (g as f64 + 0.5), top - 10.0, &focus_core::analysis::identity::group_name(g, focus_core::analysis::shown::Numbering::raw_if(raw)), 11.0, "black", "middle");
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
            for c in in_shown_order(res, layer, &p.centroids, cx.settings.setup.raw_groups) {
                // The automatic label is on hover here and in full in the list below (as a
                // column it ran past the window's width).
                let (r, swatch) = ui.allocate_exact_size(egui::vec2(40.0, 16.0), egui::Sense::hover());
                swatch.on_hover_text(&c.label);
                let sg = cx.shown(res, layer, c.group);
                ui.painter().rect_filled(r, 2.0, palette::group(sg));
                ui.painter().text(r.center(), egui::Align2::CENTER_CENTER, cx.name(res, layer, c.group), egui::FontId::proportional(12.0), egui::Color32::BLACK);
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
        for c in in_shown_order(res, layer, &p.centroids, cx.settings.setup.raw_groups) {
            let tops: Vec<String> = c.top_tokens.iter().map(|t| format!("{:?} {}", t.text, t.count)).collect();
            ui.horizontal_top(|ui| {
                let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
                let sg = cx.shown(res, layer, c.group);
                ui.painter().rect_filled(r, 2.0, palette::group(sg));
                // Wrapped to the panel's width, never wider.
                ui.add(egui::Label::new(format!("{} ({}): {}", cx.name(res, layer, c.group), c.label, tops.join("  "))).wrap());
            });
        }
    });
    Vec::new()
}

/// A layer's centroid profiles in the order their groups are shown (by number).
fn in_shown_order<'a>(res: &AnalysisResult, layer: usize, centroids: &'a [focus_core::analysis::categories::CentroidProfile], raw: bool) -> Vec<&'a focus_core::analysis::categories::CentroidProfile> {
    let mut v: Vec<_> = centroids.iter().collect();
    v.sort_by_key(|c| res.shown_group(layer, c.group, raw));
    v
}

/// The K x category matrix of one layer with purity and labels, its rows in the order, names
/// and colours of the screen (`raw`: the centroids' own indices, c0, c1, ...).
pub fn svg(res: &AnalysisResult, layer: usize, raw: bool) -> Result<String, String> {
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
    for (r, c) in in_shown_order(res, layer, &p.centroids, raw).into_iter().enumerate() {
        let y = top + r as f64 * cell_h;
        s.rect(10.0, y + 3.0, 40.0, cell_h - 6.0, &palette::hex(palette::group(res.shown_group(layer, c.group, raw))), None);
        s.text(30.0, y + cell_h * 0.7, &res.group_name(layer, c.group, raw), 11.0, "black", "middle");
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
