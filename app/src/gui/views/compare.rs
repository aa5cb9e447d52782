//! Compare: the analysis on screen (run A) against run B (dense, soft, another k, another
//! adapter, the other Sinkhorn variant) on the same tokens: per token the change in next-token
//! loss, the attention mass the top-k mask prunes (over layers and heads, in the selected layer,
//! or in its selected head) and whether the top-k groups change; per layer the same as curves;
//! a sortable table whose rows jump to the token (with its partners); and its exports (the
//! table and the per-layer figures as CSV, everything as JSON, the curves as SVG). The
//! computation is core's `analysis::compare`, run by `gui::jobs::CompareJob`.

use super::view::{Command, View, ViewCtx};
use crate::gui::compared::Compared;
use focus_core::analysis::compare::{Comparison, LayerRow, Scope};
use crate::gui::export::svg::{line_chart, stack, Series};
use crate::gui::export::ExportKind;
use crate::gui::state::{CompareSpec, Setting, mode_label};
use focus_core::ModeKind;
use crate::gui::worker::TaskKind;
use egui_plot::{Legend, Line, Plot, PlotPoints, VLine};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    Index,
    Delta,
    PrunedA,
    PrunedB,
    Changed,
}

pub struct CompareView {
    pub result: Option<Compared>,
    pub error: Option<String>,
    pub sort: SortBy,
    /// Largest first.
    pub descending: bool,
    /// Adapter B's path field.
    pub adapter_field: String,
    /// What the table's pruned mass is taken over (and sorted by).
    pub scope: Scope,
}

impl Default for CompareView {
    fn default() -> Self {
        CompareView { result: None, error: None, sort: SortBy::Delta, descending: true, adapter_field: String::new(), scope: Scope::All }
    }
}

/// The per-layer plots' height: low, so that the table below keeps 20 rows at 900 px.
const PLOT_H: f32 = 130.0;
/// The table's row height (compact rows: a button's height would show fewer).
const ROW_H: f32 = 17.0;

/// The ids of the per-layer plots (their `egui_plot::PlotMemory`).
pub const SHARES_PLOT: &str = "compare_layers_plot";
pub const DELTA_PLOT: &str = "compare_delta_plot";

/// The curves' names, on screen and in the SVG.
const CHANGED: &str = "top-k groups change";
const PRUNED_A: &str = "pruned mass A";
const PRUNED_B: &str = "pruned mass B";
const DELTA_CHANGED: &str = "Δ loss, groups change";
const DELTA_UNCHANGED: &str = "Δ loss, groups stay";

/// The per-layer curves: (name, colour, dashed, points) per series, the shares and the Δ loss.
type Curve = (String, &'static str, bool, Vec<(f64, f64)>);

/// `correspond`: the runs' group numbers name the same groups (else no "groups change" curves).
fn curves(rows: &[LayerRow], head: Option<usize>, correspond: bool) -> (Vec<Curve>, Vec<Curve>) {
    type Get = fn(&LayerRow) -> Option<f64>;
    // Layers without a value (no token whose groups change, say) are left out.
    let pts = |f: Get| rows.iter().filter_map(|r| f(r).filter(|y| y.is_finite()).map(|y| (r.layer as f64, y))).collect::<Vec<_>>();
    let mut shares = if correspond { vec![(CHANGED.to_string(), "#1f77b4", false, pts(|r| Some(r.changed_share)))] } else { Vec::new() };
    let runs: [(&str, &'static str, Get, Get); 2] = [(PRUNED_A, "#d62728", |r| r.pruned_a, |r| r.pruned_a_head), (PRUNED_B, "#ff7f0e", |r| r.pruned_b, |r| r.pruned_b_head)];
    for (name, colour, mean, sel) in runs {
        // Only top-k runs prune.
        if rows.first().is_some_and(|r| mean(r).is_some()) {
            shares.push((format!("{name} (mean over heads)"), colour, false, pts(mean)));
            if let Some(h) = head {
                shares.push((format!("{name}, head {h}"), colour, true, pts(sel)));
            }
        }
    }
    let delta = if correspond {
        vec![
            (DELTA_CHANGED.to_string(), "#9467bd", false, pts(|r| Some(r.delta_changed))),
            (DELTA_UNCHANGED.to_string(), "#2ca02c", true, pts(|r| Some(r.delta_unchanged))),
        ]
    } else {
        Vec::new()
    };
    (shares, delta)
}

/// A run in words: "top-k k=2, whole-sequence Sinkhorn, adapter X".
pub fn describe(mode: &str, causal: bool, adapter: &str) -> String {
    format!("{mode}, {} Sinkhorn, adapter {adapter}", if causal { "causal" } else { "whole-sequence" })
}

impl CompareView {
    pub fn receive(&mut self, r: Result<Compared, crate::gui::jobs::JobError>) {
        match r {
            Ok(c) => {
                self.result = Some(c);
                self.error = None;
            }
            Err(crate::gui::jobs::JobError::Cancelled) => self.error = Some("comparison cancelled".into()),
            Err(crate::gui::jobs::JobError::Failed(e)) => self.error = Some(e),
        }
    }

    /// Token indices in the table's order (`layer`, `head`: the selected ones, for the pruned
    /// mass of the view's scope).
    pub fn order(&self, c: &Comparison, layer: usize, head: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..c.tokens()).collect();
        let key = |i: usize| -> f64 {
            let x = match self.sort {
                SortBy::Index => i as f64,
                SortBy::Delta => c.delta(i) as f64,
                SortBy::PrunedA => c.pruned_at(i, self.scope, layer, head).0.unwrap_or(0.0) as f64,
                SortBy::PrunedB => c.pruned_at(i, self.scope, layer, head).1.unwrap_or(0.0) as f64,
                SortBy::Changed => c.changed_layers(i) as f64,
            };
            // NaN (the last position has no next token) sorts last either way.
            if x.is_nan() {
                f64::NEG_INFINITY
            } else {
                x
            }
        };
        v.sort_by(|&a, &b| {
            let o = key(a).total_cmp(&key(b));
            let o = if self.descending { o.reverse() } else { o };
            o.then(a.cmp(&b))
        });
        if !self.descending {
            // Keep NaN last when ascending too.
            v.sort_by_key(|&i| key(i) == f64::NEG_INFINITY);
        }
        v
    }

    /// The per-layer curves as SVG (the selected head's too when the table shows it).
    pub fn svg(&self, head: usize) -> Result<String, String> {
        let c = self.result.as_ref().ok_or("no comparison yet: press Run comparison first")?;
        let rows = c.layer_rows(head);
        let (shares, delta) = curves(&rows, (self.scope == Scope::Head).then_some(head), c.groups_correspond());
        let series = |v: Vec<Curve>| v.into_iter().map(|(name, colour, dashed, points)| Series { name, color: colour.into(), points, dashed }).collect::<Vec<_>>();
        let mean_delta = Comparison::mean_loss(&c.loss_a) - Comparison::mean_loss(&c.loss_b);
        let top = line_chart(&format!("A: {} vs B: {}", c.a, c.b), "layer", "share", &series(shares), &[]);
        if !c.groups_correspond() {
            return Ok(stack(&[top], 640.0, &[400.0]));
        }
        let bottom = line_chart(
            &format!("Δ loss (whole model) of the tokens whose top-{} groups change or stay, per layer", c.k),
            "layer",
            "nats",
            &series(delta),
            &[("mean Δ loss, all tokens".into(), mean_delta)],
        );
        Ok(stack(&[top, bottom], 640.0, &[400.0, 400.0]))
    }
}

impl View for CompareView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let mut out = Vec::new();
        let a_causal = res.adapter.config.causal_sinkhorn;
        ui.label(format!("Run A (the analysis on screen): {}", describe(&res.mode.to_string(), a_causal, &res.analysis.adapter)));
        let mut spec = cx.settings.setup.compare.clone();
        let groups = res.groups();
        ui.horizontal_wrapped(|ui| {
            ui.label("presets:");
            if ui.button("B = dense").clicked() {
                spec = CompareSpec { mode: ModeKind::Dense, causal: None, adapter: None, ..spec.clone() };
            }
            if ui.button("B = soft").clicked() {
                spec = CompareSpec { mode: ModeKind::Soft, causal: None, adapter: None, ..spec.clone() };
            }
            let k1 = (res.key.params.k + 1).min(groups);
            if ui.button(format!("B = top-k, k = {k1}")).clicked() {
                spec = CompareSpec { mode: ModeKind::TopK, k: k1, causal: None, adapter: None, ..spec.clone() };
            }
            let other = if a_causal { "whole-sequence" } else { "causal" };
            if ui.button(format!("B = {other} Sinkhorn")).clicked() {
                spec = CompareSpec { mode: cx.settings.setup.params.mode, k: res.key.params.k, causal: Some(!a_causal), adapter: None, ..spec.clone() };
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.label("Run B:");
            for m in ModeKind::ALL {
                ui.radio_value(&mut spec.mode, m, mode_label(m));
            }
            ui.add(egui::DragValue::new(&mut spec.k).range(1..=64).prefix("k = "));
            egui::ComboBox::from_id_salt("compare_causal")
                .selected_text(match spec.causal {
                    None => "A's Sinkhorn",
                    Some(true) => "causal Sinkhorn",
                    Some(false) => "whole-sequence Sinkhorn",
                })
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut spec.causal, None, "A's Sinkhorn");
                    ui.selectable_value(&mut spec.causal, Some(true), "causal Sinkhorn");
                    ui.selectable_value(&mut spec.causal, Some(false), "whole-sequence Sinkhorn");
                });
            ui.add(egui::DragValue::new(&mut spec.max_tokens).range(16..=2048).prefix("tokens <= "));
        });
        ui.horizontal(|ui| {
            let l = ui.label("adapter B:");
            if self.adapter_field.is_empty() {
                if let Some(p) = &spec.adapter {
                    self.adapter_field = p.display().to_string();
                }
            }
            ui.add(egui::TextEdit::singleline(&mut self.adapter_field).id_salt("compare_adapter").hint_text("empty: A's adapter").desired_width(300.0)).labelled_by(l.id);
            // Run B runs on A's model: only the adapters that fit it are offered.
            egui::ComboBox::from_id_salt("compare_adapter_pick").selected_text("pick…").show_ui(ui, |ui| {
                let (offered, hidden) = super::files::fitting(&super::files::adapters(&cx.settings.prefs.recent), Some(&res.model.identity()));
                for a in offered {
                    if ui.selectable_label(false, format!("{}  ({})", a.name, a.summary())).clicked() {
                        self.adapter_field = a.path.display().to_string();
                    }
                }
                if let Some(note) = super::files::hidden_note(&hidden) {
                    ui.weak(note);
                }
            });
            spec.adapter = (!self.adapter_field.trim().is_empty()).then(|| self.adapter_field.trim().into());
        });
        if spec.mode == ModeKind::TopK && spec.adapter.is_none() && spec.k > groups {
            spec.k = groups;
        }
        if spec != cx.settings.setup.compare {
            out.push(Command::Set(Setting::Compare(spec.clone())));
        }
        ui.horizontal(|ui| {
            if cx.worker.is_running(TaskKind::Compare) {
                crate::gui::paint::busy::busy(ui);
                ui.label("comparing…");
                if ui.button("Cancel comparison").clicked() {
                    out.push(Command::Cancel(TaskKind::Compare));
                }
            } else if ui.button("Run comparison").clicked() {
                out.push(Command::StartCompare(spec.clone()));
            }
            if self.result.is_some() {
                if ui.button("Export table (CSV)…").on_hover_text("the per-token table (STEM.csv) and the per-layer figures (STEM.layers.csv)").clicked() {
                    out.push(Command::Export(ExportKind::CompareCsv));
                }
                if ui.button("Export as JSON…").on_hover_text("both runs per token and per layer, with the pruned mass of every layer and head").clicked() {
                    out.push(Command::Export(ExportKind::CompareJson));
                }
            }
        });
        if let Some(e) = &self.error {
            ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
        }
        let Some(c) = &self.result else {
            ui.weak("Choose run B and press Run comparison: both runs go through the model once more on the same tokens (the start of the text).");
            return out;
        };
        if c.key != res.key {
            ui.colored_label(egui::Color32::from_rgb(170, 90, 0), "This comparison was made for another analysis (run A has changed since): press Run comparison again.");
        }
        if let Some(n) = &c.note {
            ui.colored_label(egui::Color32::from_rgb(60, 60, 160), n);
        }
        if let Some(w) = c.groups_warning() {
            ui.colored_label(egui::Color32::from_rgb(170, 90, 0), w);
        }
        // One line each, so that the table keeps its room (20 rows or more at 900 px).
        ui.label(format!("Run B (compared): {}", c.b)).on_hover_text(format!("A: {}\nB: {}", c.a, c.b));
        let (la, lb) = (Comparison::mean_loss(&c.loss_a), Comparison::mean_loss(&c.loss_b));
        ui.label(format!("{} tokens, mean loss A {la:.4} (PPL {:.2}), B {lb:.4} (PPL {:.2}): Δ = {:+.4} nats (Δ loss = loss(A) - loss(B), > 0: A worse)", c.tokens(), la.exp(), lb.exp(), la - lb))
            .on_hover_text(format!("next-token negative log-likelihood, mean over the scored positions; both runs computed in {:.1} s", c.seconds));
        let layer = cx.layer(res);
        let head = cx.settings.setup.head.min(res.model.config().n_heads.saturating_sub(1));
        ui.horizontal_wrapped(|ui| {
            ui.label("pruned mass in the table:").on_hover_text("the selected layer and head are the left panel's (arrow keys move them)");
            ui.radio_value(&mut self.scope, Scope::All, "mean over layers and heads");
            ui.radio_value(&mut self.scope, Scope::Layer, format!("layer {layer}, mean over heads"));
            ui.radio_value(&mut self.scope, Scope::Head, format!("layer {layer}, head {head}"));
        });
        let rows = c.layer_rows(head);
        let (shares, delta) = curves(&rows, (self.scope == Scope::Head).then_some(head), c.groups_correspond());
        let line = |p: &mut egui_plot::PlotUi, (name, colour, dashed, pts): &Curve| {
            let c = egui::Color32::from_hex(colour).unwrap_or(egui::Color32::GRAY);
            let l = Line::new(name.as_str(), PlotPoints::from(pts.iter().map(|&(x, y)| [x, y]).collect::<Vec<_>>())).color(c);
            p.line(if *dashed { l.style(egui_plot::LineStyle::dashed_loose()) } else { l });
        };
        let mean_delta = Comparison::mean_loss(&c.loss_a) - Comparison::mean_loss(&c.loss_b);
        // Small, see-through legends: the plots are low. The selected layer's line has no name,
        // so no legend entry (the left panel names it).
        let legend = |corner| Legend::default().text_style(egui::TextStyle::Small).background_alpha(0.5).follow_insertion_order(true).position(corner);
        let selected = VLine::new("", layer as f64).color(egui::Color32::from_gray(170));
        // Room above the Δ loss curves for the legend.
        let (lo, hi) = delta.iter().flat_map(|c| c.3.iter().map(|p| p.1)).chain([0.0, mean_delta]).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| (a.min(y), b.max(y)));
        let headroom = hi + 0.8 * (hi - lo);
        ui.columns(2, |cols| {
            cols[0].label("per layer: tokens whose groups change, mass pruned").on_hover_text("shares: of the tokens, and of the dense attention (mean over tokens)");
            Plot::new(SHARES_PLOT).id(egui::Id::unique(SHARES_PLOT)).height(PLOT_H).legend(legend(egui_plot::Corner::LeftTop)).x_axis_label("layer").include_y(0.0).include_y(1.0).show(&mut cols[0], |p| {
                shares.iter().for_each(|s| line(p, s));
                p.vline(selected.clone());
            });
            cols[1]
                .label("per layer: Δ loss of tokens whose groups change there, or stay")
                .on_hover_text(format!("Loss is the whole model's: a layer has none of its own. Per layer, the mean Δ loss (nats) of the tokens whose top-{} groups change in that layer, and of those whose groups stay.", c.k));
            Plot::new(DELTA_PLOT).id(egui::Id::unique(DELTA_PLOT)).height(PLOT_H).legend(legend(egui_plot::Corner::RightTop)).x_axis_label("layer").include_y(lo).include_y(headroom).show(&mut cols[1], |p| {
                delta.iter().for_each(|s| line(p, s));
                crate::gui::paint::reference::hline(p, format!("mean Δ loss, all tokens = {mean_delta:+.3}"), mean_delta, 0.0);
                p.vline(selected);
            });
        });
        // The table: click a header to sort (again: reverse), a row to jump to the token.
        let order = self.order(c, layer, head);
        // Header cells and rows are monospace text in the same column widths (`COLUMNS`), with
        // no padding or spacing between cells, so each header sits over its column.
        let mut jump = None;
        let f = |x: Option<f32>| x.map(|v| format!("{:.1}%", 100.0 * v)).unwrap_or_else(|| "-".into());
        ui.scope(|ui| {
            ui.spacing_mut().item_spacing.x = 0.0;
            ui.spacing_mut().button_padding.x = 0.0;
            ui.horizontal(|ui| {
                ui.spacing_mut().item_spacing.x = 0.0;
                for (s, name, width, right) in COLUMNS {
                    let arrow = if self.sort == s { if self.descending { "↓" } else { "↑" } } else { "" };
                    let text = header_cell(name, arrow, width, right);
                    let r = ui.selectable_label(self.sort == s, egui::RichText::new(text).monospace().strong()).on_hover_text("click: sort by this column (again: reverse)");
                    if r.clicked() {
                        if self.sort == s {
                            self.descending = !self.descending;
                        } else {
                            self.sort = s;
                            self.descending = s != SortBy::Index;
                        }
                    }
                }
                ui.label(egui::RichText::new("    token (loss A / loss B)").monospace().strong());
            });
            ui.weak(match self.scope {
                Scope::All => "pruned A / B: mean over layers and heads".to_string(),
                Scope::Layer => format!("pruned A / B: layer {layer}, mean over heads"),
                Scope::Head => format!("pruned A / B: layer {layer}, head {head}"),
            });
            ui.spacing_mut().interact_size.y = ROW_H;
            ui.spacing_mut().button_padding.y = 0.0;
            ui.spacing_mut().item_spacing.y = 0.0;
            egui::ScrollArea::vertical().id_salt("compare_table").auto_shrink(false).show_rows(ui, ROW_H, order.len(), |ui, range| {
                for &i in &order[range] {
                    let d = c.delta(i);
                    let (pa, pb) = c.pruned_at(i, self.scope, layer, head);
                    let cells = [
                        i.to_string(),
                        if d.is_finite() { format!("{d:+.3}") } else { "-".into() },
                        f(pa),
                        f(pb),
                        if c.groups_correspond() { format!("{}/{}", c.changed_layers(i), c.layers()) } else { "-".into() },
                    ];
                    let row = format!("{}    {:?} ({} / {})", table_cells(&cells), c.texts[i], fmt_loss(c.loss_a[i]), fmt_loss(c.loss_b[i]));
                    let mut text = egui::RichText::new(row).monospace();
                    if d.is_finite() && d > 0.5 {
                        text = text.color(egui::Color32::from_rgb(180, 20, 20));
                    } else if d.is_finite() && d < -0.5 {
                        text = text.color(egui::Color32::from_rgb(20, 110, 20));
                    }
                    if ui.selectable_label(cx.selection.selected == Some(i), text).on_hover_text("click: show this token in the text, with its partners").clicked() {
                        jump = Some(i);
                    }
                }
            });
        });
        if let Some(i) = jump {
            out.push(Command::Jump(i));
        }
        out
    }
}

/// The table's columns: sort key, header, width in characters, right-aligned.
pub const COLUMNS: [(SortBy, &str, usize, bool); 5] = [
    (SortBy::Index, "#", 7, false),
    (SortBy::Delta, "delta loss", 12, true),
    (SortBy::PrunedA, "pruned A", 10, true),
    (SortBy::PrunedB, "pruned B", 10, true),
    (SortBy::Changed, "layers changed", 16, true),
];

/// A header cell: its name and sort mark, padded to the column's width (as its values are).
pub fn header_cell(name: &str, mark: &str, width: usize, right: bool) -> String {
    // The mark goes on the side away from the values' edge, so that the name ends (or starts)
    // where they do.
    if right {
        format!("{:>width$}", format!("{mark}{name}"))
    } else {
        format!("{:<width$}", format!("{name}{mark}"))
    }
}

/// A row's cells in the columns' widths and alignment.
pub fn table_cells(cells: &[String]) -> String {
    COLUMNS.iter().zip(cells).map(|((_, _, w, right), c)| if *right { format!("{c:>w$}") } else { format!("{c:<w$}") }).collect()
}

fn fmt_loss(x: f32) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "-".into()
    }
}
