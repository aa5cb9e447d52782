//! Centroids: dashboards of a corpus index (`crate::index`). Build one from a folder with the
//! loaded model and adapter (in the background, with progress and Cancel; building again resumes)
//! or open an index file, then pick a layer and a centroid: its auto-label with the evidence, its
//! top examples in context (highest membership, across documents), its membership histogram, its
//! categories and tokens against the corpus base rate (lift), its best-overlapping centroid in
//! every other layer, and a search for the centroids that hold a token.
//!
//! Queries read the index's summary tables by key (a few milliseconds, measured by `focus-lens
//! bench centroids`), so they run on the UI thread when the selection changes; each result is
//! kept until the selection changes again.

use super::view::{Command, View, ViewCtx};
use crate::gui::jobs::index::{Built, IndexJob};
use crate::gui::jobs::JobError;
use crate::gui::paint::palette;
use crate::gui::worker::TaskKind;
use crate::index::{CentroidDetail, CentroidRow, Index, SearchHit};
use egui::{Color32, RichText};
use egui_plot::{Bar, BarChart, Plot};
use focus_core::index::label::quoted;
use std::path::PathBuf;
use std::time::Instant;

/// Examples and token rows shown.
pub const ROWS: usize = 20;
const HIGHLIGHT: Color32 = Color32::from_rgb(255, 225, 120);
const WEAK: Color32 = Color32::from_gray(110);

#[derive(Default)]
pub struct CentroidsView {
    /// The corpus folder to build from and the index file (typed or picked).
    pub corpus: String,
    pub index_path: String,
    pub index: Option<Index>,
    pub layer: usize,
    pub group: usize,
    /// The search box, whether it searches every layer, and its last result.
    pub search: String,
    pub search_all_layers: bool,
    pub hits: Option<Result<Vec<SearchHit>, String>>,
    /// The selected centroid's dashboard, for (layer, group).
    detail: Option<((usize, usize), Result<CentroidDetail, String>)>,
    /// The selected layer's centroids.
    rows: Option<(usize, Vec<CentroidRow>)>,
    /// How long the last dashboard query took, in ms.
    pub query_ms: f64,
    /// What the last build said (documents, tokens, times, files skipped), or why it stopped.
    pub message: String,
    pub error: Option<String>,
    /// The app's layer when last drawn: the layer box follows it when it moves.
    app_layer: Option<usize>,
}

/// How the Centroids view names and colours an index's centroids: by the app's one numbering
/// (`analysis::identity`) when the index was built with the adapter it numbers, as every other
/// view does; by the raw index, named c0, c1, ... (raw, in grey unless raw indices were asked
/// for), when the index's adapter is another or raw indices were asked for.
pub struct Names<'a> {
    pub ids: Option<&'a focus_core::analysis::identity::GroupIds>,
    pub raw: bool,
}

impl Names<'_> {
    /// For the open index: the app's numbering applies when the index's adapter fingerprint is
    /// the numbering's adapter (and K and the layers agree).
    pub fn for_index<'a>(ix: &crate::index::Index, cx: &'a ViewCtx) -> Names<'a> {
        let id = &ix.identity;
        let ids = cx.session.ids.as_ref().filter(|i| i.adapter == id.adapter_sha256 && i.groups == id.groups && i.maps.len() == id.n_layers);
        Names { ids, raw: cx.settings.setup.raw_groups }
    }
    fn numbered(&self) -> Option<&focus_core::analysis::identity::GroupIds> {
        self.ids.filter(|_| !self.raw)
    }
    /// "g3" (the number every view gives it), or "c5" (its raw index).
    pub fn name(&self, layer: usize, g: usize) -> String {
        use focus_core::analysis::identity::group_name;
        use focus_core::analysis::shown::Numbering;
        match self.numbered() {
            Some(i) => group_name(i.number(layer, g), Numbering::Shown),
            None => group_name(g, Numbering::Raw),
        }
    }
    pub fn colour(&self, layer: usize, g: usize) -> Color32 {
        match (self.numbered(), self.raw) {
            (Some(i), _) => palette::group(i.number(layer, g)),
            (None, true) => palette::group(g),
            (None, false) => Color32::from_gray(90),
        }
    }
    /// The raw centroids of a layer in the order they are named.
    pub fn order(&self, layer: usize, groups: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..groups).collect();
        if let Some(i) = self.numbered() {
            v.sort_by_key(|&g| i.number(layer, g));
        }
        v
    }
}

impl CentroidsView {
    /// Opens an index file; on failure the error is shown and the open index (if any) stays.
    pub fn open(&mut self, path: PathBuf) {
        match Index::open(&path) {
            Ok(ix) => {
                self.layer = self.layer.min(ix.identity.n_layers - 1);
                self.group = self.group.min(ix.identity.groups - 1);
                self.index_path = path.display().to_string();
                self.index = Some(ix);
                self.detail = None;
                self.rows = None;
                self.hits = None;
                self.error = None;
            }
            Err(e) => self.error = Some(format!("{e:#}")),
        }
    }

    /// A build ended: say what it did and open the index.
    pub fn receive(&mut self, r: Result<Built, JobError>) {
        match r {
            Ok((rep, notes)) => {
                let mut m = if rep.up_to_date {
                    format!("{} is up to date: {} documents, {} tokens", rep.index.display(), rep.documents, rep.tokens)
                } else {
                    format!(
                        "indexed {} documents, {} tokens ({} routed now in {:.1} s, {} already indexed, {} skipped); summaries {:.1} s",
                        rep.documents, rep.tokens, rep.routed, rep.route_seconds, rep.reused, rep.skipped.len(), rep.summary_seconds
                    )
                };
                for n in notes {
                    m += &format!("\n{n}");
                }
                self.message = m;
                self.open(rep.index);
            }
            Err(JobError::Cancelled) => self.message = "build cancelled: the documents routed so far are kept; Build again resumes".into(),
            Err(JobError::Failed(e)) => self.error = Some(format!("index build failed: {e}")),
        }
    }

    /// Selects a centroid (from the list, a search hit or a neighbour).
    pub fn select(&mut self, layer: usize, group: usize) {
        self.layer = layer;
        self.group = group;
    }

    /// The selected centroid's dashboard, queried when the selection changed.
    pub fn current(&mut self) -> Option<&Result<CentroidDetail, String>> {
        let ix = self.index.as_ref()?;
        let key = (self.layer, self.group);
        if self.detail.as_ref().is_none_or(|(k, _)| *k != key) {
            let t = Instant::now();
            let d = ix.centroid(key.0, key.1, ROWS).map_err(|e| format!("{e:#}"));
            self.query_ms = t.elapsed().as_secs_f64() * 1e3;
            self.detail = Some((key, d));
        }
        if self.rows.as_ref().is_none_or(|(l, _)| *l != self.layer) {
            self.rows = ix.layer(self.layer).ok().map(|r| (self.layer, r));
        }
        self.detail.as_ref().map(|(_, d)| d)
    }

    pub fn run_search(&mut self) {
        let Some(ix) = &self.index else { return };
        let layer = (!self.search_all_layers).then_some(self.layer);
        self.hits = Some(ix.search(&self.search, layer).map_err(|e| format!("{e:#}")));
    }

    fn build_controls(&mut self, cx: &ViewCtx, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        let running = cx.worker.is_running(TaskKind::Index);
        ui.horizontal_wrapped(|ui| {
            let l = ui.label("Corpus folder:");
            ui.add(egui::TextEdit::singleline(&mut self.corpus).id_salt("index_corpus").hint_text("a folder of .txt files").desired_width(260.0)).labelled_by(l.id);
            let l = ui.label("Index file:");
            ui.add(egui::TextEdit::singleline(&mut self.index_path).id_salt("index_file").hint_text("corpus.focus-index").desired_width(260.0)).labelled_by(l.id);
            let (model, adapter) = (cx.session.model.as_ref(), cx.session.adapter.as_ref());
            if running {
                if ui.button("Cancel").on_hover_text("stop the build; the documents routed so far stay in the file and Build resumes").clicked() {
                    // A cancelled task's own message is dropped by the worker: the view says it.
                    out.push(Command::Cancel(TaskKind::Index));
                    self.message = "build cancelled: the documents routed so far are kept; Build again resumes".into();
                }
            } else {
                let ready = model.is_some() && adapter.is_some() && !self.corpus.trim().is_empty();
                let why = if model.is_none() || adapter.is_none() { "needs the model and the adapter loaded" } else { "type the corpus folder first" };
                let b = ui.add_enabled(ready, egui::Button::new("Build index")).on_hover_text("route every text of the folder once with the loaded model and adapter (top-k, the adapter's k, segments of 1024 tokens); an index of the same model, adapter and settings is resumed or brought up to date").on_disabled_hover_text(why);
                if b.clicked() {
                    if let (Some(m), Some(a)) = (model, adapter) {
                        let corpus = PathBuf::from(self.corpus.trim());
                        let out_path = if self.index_path.trim().is_empty() {
                            let name = corpus.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "corpus".into());
                            let p = corpus.parent().map(|d| d.join(format!("{name}.focus-index"))).unwrap_or_else(|| PathBuf::from(format!("{name}.focus-index")));
                            self.index_path = p.display().to_string();
                            p
                        } else {
                            PathBuf::from(self.index_path.trim())
                        };
                        self.error = None;
                        self.message.clear();
                        out.push(Command::StartIndex(IndexJob { model: m.model.clone(), adapter: a.adapter.clone(), adapter_path: a.path.clone(), corpus, out: out_path }));
                    }
                }
            }
            if ui.add_enabled(!running && !self.index_path.trim().is_empty(), egui::Button::new("Open index")).clicked() {
                self.open(PathBuf::from(self.index_path.trim()));
            }
        });
        if running {
            if let Some((_, done, total, what, _)) = cx.worker.progress().into_iter().find(|p| p.0 == TaskKind::Index) {
                let f = if total > 0 { done as f32 / total as f32 } else { 0.0 };
                ui.add(egui::ProgressBar::new(f).show_percentage().text(format!("{:.0}%  {what}", 100.0 * f)));
            }
        }
        if let Some(e) = &self.error {
            ui.colored_label(Color32::from_rgb(200, 30, 30), e);
        }
        if !self.message.is_empty() {
            ui.label(RichText::new(&self.message).color(WEAK));
        }
    }

    fn header(&mut self, cx: &ViewCtx, ui: &mut egui::Ui, out: &mut Vec<Command>) {
        let Some(ix) = &self.index else { return };
        let names = Names::for_index(ix, cx);
        let id = &ix.identity;
        ui.label(format!(
            "{} documents, {} tokens  ·  {} with {}  ·  K = {}, k = {}, {}, segments of {} tokens",
            ix.documents, ix.tokens, id.model, id.adapter, id.groups, id.settings.k, id.settings.mode, id.settings.segment_len
        ));
        match (names.ids.is_some(), names.raw) {
            (_, true) => ui.weak("raw centroid indices (c0, c1, ...), as \"raw group indices\" asks"),
            (true, false) => ui.weak("groups numbered and coloured as in every other view (the loaded adapter built this index)"),
            (false, false) => ui.weak("this index was built with another adapter than the one loaded: its centroids go by their raw indices (c0, c1, ...), in grey"),
        };
        let (n_layers, groups) = (id.n_layers, id.groups);
        ui.horizontal_wrapped(|ui| {
            let l = ui.label("Layer");
            let mut layer = self.layer;
            if ui.add(egui::DragValue::new(&mut layer).range(0..=n_layers - 1)).labelled_by(l.id).changed() {
                // The app's layer: every view follows.
                self.layer = layer;
                out.push(Command::Set(crate::gui::state::Setting::Layer(layer)));
            }
            ui.separator();
            ui.label("Centroid");
            let rows = self.rows.as_ref().filter(|(l, _)| *l == self.layer).map(|(_, r)| r.clone()).unwrap_or_default();
            for g in names.order(self.layer, groups) {
                let name = names.name(self.layer, g);
                let label = rows.get(g).map(|r| format!("{name} {}", r.label)).unwrap_or(name);
                // The group's colour as the label's background with dark text (the pastel colours
                // do not read as text on the light panel); bold when selected.
                let text = swatch(label, names.colour(self.layer, g));
                let text = if self.group == g { text.strong() } else { text };
                if ui.selectable_label(self.group == g, text).clicked() {
                    self.group = g;
                }
            }
        });
        ui.horizontal_wrapped(|ui| {
            let l = ui.label("Which centroid holds");
            let r = ui.add(egui::TextEdit::singleline(&mut self.search).id_salt("index_search").hint_text("a token, e.g. ' of'").desired_width(140.0)).labelled_by(l.id);
            ui.label(if self.search_all_layers { "at every layer" } else { "at this layer" });
            ui.checkbox(&mut self.search_all_layers, "every layer");
            if ui.button("Search").clicked() || (r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter))) {
                self.run_search();
            }
        });
    }

    fn search_results(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) {
        let Some(hits) = &self.hits else { return };
        let Some(ix) = &self.index else { return };
        let names = Names::for_index(ix, cx);
        let mut pick = None;
        match hits {
            Err(e) => {
                ui.colored_label(Color32::from_rgb(200, 30, 30), e);
            }
            Ok(h) if h.is_empty() => {
                ui.label(format!("no token {} in the index", quoted(&self.search)));
            }
            Ok(h) => {
                egui::ScrollArea::vertical().id_salt("hits").max_height(110.0).show(ui, |ui| {
                    egui::Grid::new("hits_grid").striped(true).show(ui, |ui| {
                        for hit in h.iter().take(200) {
                            ui.monospace(quoted(&hit.text));
                            if ui.link(format!("layer {} {}", hit.layer, names.name(hit.layer, hit.group))).clicked() {
                                pick = Some((hit.layer, hit.group));
                            }
                            ui.label(format!("{} ({:.1}% of its occurrences)", hit.count, 100.0 * hit.share));
                            ui.label(RichText::new(&hit.label).color(WEAK));
                            ui.end_row();
                        }
                    });
                });
            }
        }
        if let Some((l, g)) = pick {
            self.select(l, g);
        }
    }
}

/// A group's name on its colour, in dark text: the group's identity kept (the colour every
/// view gives it) and readable on the light panel, where the pastel colours as text were not.
pub fn swatch(text: impl Into<String>, colour: Color32) -> RichText {
    RichText::new(text).color(SWATCH_TEXT).background_color(colour)
}

/// The text on a group's colour: dark enough on every colour of the palettes (contrast >= 4.5).
const SWATCH_TEXT: Color32 = Color32::from_gray(20);

/// Characters of context shown before an example's token (the index keeps more; the right side
/// is cut to the row's width).
const SHOWN_LEFT: usize = 36;

/// The example's context on one line, the token highlighted.
fn example_line(ui: &mut egui::Ui, left: &str, token: &str, right: &str) {
    let flat = |s: &str| s.replace(['\n', '\r', '\t'], " ");
    let n = left.chars().count();
    let left: String = left.chars().skip(n.saturating_sub(SHOWN_LEFT)).collect();
    let mut job = egui::text::LayoutJob::default();
    let font = egui::FontId::monospace(12.0);
    let plain = egui::TextFormat { font_id: font.clone(), color: ui.visuals().text_color(), ..Default::default() };
    job.append(&flat(&left), 0.0, plain.clone());
    job.append(&flat(token), 0.0, egui::TextFormat { font_id: font, color: Color32::BLACK, background: HIGHLIGHT, ..Default::default() });
    job.append(&flat(right), 0.0, plain);
    ui.add(egui::Label::new(job).truncate());
}

fn dashboard(d: &CentroidDetail, names: &Names, ui: &mut egui::Ui, pick: &mut Option<(usize, usize)>) {
    ui.horizontal_wrapped(|ui| {
        let centroid = if names.numbered().is_some() { format!(" (centroid {})", d.group) } else { String::new() };
        // One heading: the group's name on its colour in dark text, the rest in the panel's.
        let font = egui::TextStyle::Heading.resolve(ui.style());
        let plain = egui::TextFormat { font_id: font.clone(), color: ui.visuals().text_color(), ..Default::default() };
        let mut job = egui::text::LayoutJob::default();
        job.append(&format!("layer {} ", d.layer), 0.0, plain.clone());
        job.append(&names.name(d.layer, d.group), 0.0, egui::TextFormat { font_id: font, color: SWATCH_TEXT, background: names.colour(d.layer, d.group), ..Default::default() });
        job.append(&format!("{centroid}: {}", d.label), 0.0, plain);
        ui.label(job);
        ui.label(format!("{} members ({:.1}% of the layer), mean membership where held {:.2}", d.members, 100.0 * d.size_share, d.mean_held_membership));
    });
    ui.label(RichText::new(format!("auto-label ({} rule), from:", d.rule)).strong());
    for e in &d.evidence {
        ui.label(format!("  • {e}"));
    }
    ui.separator();
    ui.columns(2, |cols| {
        let ui = &mut cols[0];
        ui.label(RichText::new("Top examples (highest membership, across documents)").strong());
        egui::Grid::new("examples").striped(true).num_columns(3).show(ui, |ui| {
            for e in &d.examples {
                ui.monospace(format!("{:.3}", e.membership));
                ui.label(RichText::new(format!("{}:{}", e.document, e.position)).color(WEAK));
                example_line(ui, &e.left, &e.token, &e.right);
                ui.end_row();
            }
        });
        ui.add_space(6.0);
        ui.label(RichText::new(format!("Membership histogram (tokens it holds in their top k; {} not held)", d.not_held)).strong());
        let n = d.histogram.len().max(1) as f64;
        let bars: Vec<Bar> = d.histogram.iter().enumerate().map(|(i, &c)| Bar::new((i as f64 + 0.5) / n, c as f64).width(0.9 / n).fill(names.colour(d.layer, d.group))).collect();
        Plot::new(("hist", d.layer, d.group)).height(150.0).x_axis_label("membership").y_axis_label("tokens").include_x(0.0).include_x(1.0).include_y(0.0).allow_drag(false).allow_zoom(false).allow_scroll(false).show(ui, |p| {
            p.bar_chart(BarChart::new("tokens held", bars));
        });
        let ui = &mut cols[1];
        ui.label(RichText::new("Categories: share of members vs the corpus (lift)").strong());
        egui::Grid::new("cats").striped(true).show(ui, |ui| {
            for c in &d.categories {
                ui.label(&c.name);
                ui.label(format!("{:.1}% vs {:.1}%", 100.0 * c.share, 100.0 * c.base));
                let col = if c.lift >= 1.5 { Color32::from_rgb(20, 120, 40) } else if c.lift < 0.67 { Color32::from_rgb(160, 60, 40) } else { WEAK };
                ui.colored_label(col, format!("x{:.2}", c.lift));
                ui.end_row();
            }
        });
        ui.add_space(6.0);
        ui.columns(2, |tc| {
            tc[0].label(RichText::new("Most frequent tokens").strong());
            egui::Grid::new("top_tokens").striped(true).show(&mut tc[0], |ui| {
                for t in d.top_tokens.iter().take(12) {
                    ui.monospace(quoted(&t.name));
                    ui.label(format!("{}  x{:.1}", t.count, t.lift));
                    ui.end_row();
                }
            });
            tc[1].label(RichText::new("Most over-represented").strong());
            egui::Grid::new("lifted").striped(true).show(&mut tc[1], |ui| {
                for t in d.lifted_tokens.iter().take(12) {
                    ui.monospace(quoted(&t.name));
                    ui.label(format!("{}  x{:.1}", t.count, t.lift));
                    ui.end_row();
                }
            });
        });
        ui.add_space(6.0);
        ui.label(RichText::new("Neighbours: the centroid sharing most members in each other layer").strong());
        egui::ScrollArea::vertical().id_salt("neighbours").max_height(220.0).show(ui, |ui| {
            egui::Grid::new("neighbours_grid").striped(true).show(ui, |ui| {
                for n in &d.neighbours {
                    if ui.link(format!("layer {} {}", n.layer, names.name(n.layer, n.group))).clicked() {
                        *pick = Some((n.layer, n.group));
                    }
                    ui.label(format!("{:.0}% of members", 100.0 * n.share));
                    ui.label(format!("Jaccard {:.2}", n.jaccard));
                    ui.label(RichText::new(&n.label).color(WEAK));
                    ui.end_row();
                }
            });
        });
    });
}

impl View for CentroidsView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        self.build_controls(cx, ui, &mut out);
        ui.separator();
        if self.index.is_none() {
            ui.label("No index open: type a corpus folder and press Build index (with the model and adapter loaded), or type an index file and press Open index. `focus-lens index` builds the same files from the command line.");
            return out;
        }
        // The layer box is the app's layer: it follows the app's when that moves.
        let n_layers = self.index.as_ref().map_or(1, |ix| ix.identity.n_layers);
        if self.app_layer != Some(cx.settings.setup.layer) {
            self.app_layer = Some(cx.settings.setup.layer);
            self.layer = cx.settings.setup.layer.min(n_layers - 1);
        }
        self.header(cx, ui, &mut out);
        self.search_results(cx, ui);
        ui.separator();
        let mut pick = None;
        let ms = self.query_ms;
        let detail = self.current().cloned();
        match detail {
            Some(Ok(d)) => {
                let names = Names::for_index(self.index.as_ref().expect("an index is open"), cx);
                egui::ScrollArea::vertical().id_salt("dashboard").show(ui, |ui| {
                    dashboard(&d, &names, ui, &mut pick);
                    ui.label(RichText::new(format!("query {ms:.1} ms")).color(WEAK).small());
                });
            }
            Some(Err(e)) => {
                ui.colored_label(Color32::from_rgb(200, 30, 30), e);
            }
            None => {}
        }
        if let Some((l, g)) = pick {
            if l != self.layer {
                out.push(Command::Set(crate::gui::state::Setting::Layer(l)));
            }
            self.select(l, g);
        }
        out
    }
}
