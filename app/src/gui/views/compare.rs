//! Compare: the analysis on screen (run A) against run B (dense, soft, another k, another
//! adapter, the other Sinkhorn variant) on the same tokens: per token the change in next-token
//! loss, the attention mass the top-k mask prunes and whether the top-k groups change; per layer
//! the same as curves; a sortable table whose rows jump to the token (with its partners); and
//! its export (the table as CSV, the curves as SVG). The computation is `gui::compare`.

use super::{Command, ViewCtx};
use crate::gui::compare::Comparison;
use crate::gui::export::svg::{line_chart, Series};
use crate::gui::export::ExportKind;
use crate::gui::state::{AnalysisResult, CompareSpec, ModeChoice, Setting};
use crate::gui::worker::TaskKind;
use egui_plot::{Legend, Line, Plot, PlotPoints, VLine};
use focus_core::Mode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    Index,
    Delta,
    PrunedA,
    PrunedB,
    Changed,
}

pub struct CompareView {
    pub result: Option<Comparison>,
    pub error: Option<String>,
    pub sort: SortBy,
    /// Largest first.
    pub descending: bool,
    /// Adapter B's path field.
    pub adapter_field: String,
}

impl Default for CompareView {
    fn default() -> Self {
        CompareView { result: None, error: None, sort: SortBy::Delta, descending: true, adapter_field: String::new() }
    }
}

/// A run in words: "top-k k=2, whole-sequence Sinkhorn, adapter X".
pub fn describe(mode: Mode, causal: bool, adapter: &str) -> String {
    format!("{mode}, {} Sinkhorn, adapter {adapter}", if causal { "causal" } else { "whole-sequence" })
}

impl CompareView {
    pub fn receive(&mut self, r: Result<Comparison, crate::gui::jobs::JobError>) {
        match r {
            Ok(c) => {
                self.result = Some(c);
                self.error = None;
            }
            Err(crate::gui::jobs::JobError::Cancelled) => self.error = Some("comparison cancelled".into()),
            Err(crate::gui::jobs::JobError::Failed(e)) => self.error = Some(e),
        }
    }

    /// Token indices in the table's order.
    pub fn order(&self, c: &Comparison) -> Vec<usize> {
        let mut v: Vec<usize> = (0..c.tokens()).collect();
        let key = |i: usize| -> f64 {
            let x = match self.sort {
                SortBy::Index => i as f64,
                SortBy::Delta => c.delta(i) as f64,
                SortBy::PrunedA => c.pruned_a_at(i).unwrap_or(0.0) as f64,
                SortBy::PrunedB => c.pruned_b_at(i).unwrap_or(0.0) as f64,
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

    pub fn show(&mut self, cx: &ViewCtx, res: &AnalysisResult, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        let a_causal = res.adapter.config.causal_sinkhorn;
        ui.label(format!("Run A (the analysis on screen): {}", describe(res.key.params.mode(), a_causal, &res.analysis.adapter)));
        let mut spec = cx.settings.compare.clone();
        let groups = res.groups();
        ui.horizontal_wrapped(|ui| {
            ui.label("presets:");
            if ui.button("B = dense").clicked() {
                spec = CompareSpec { mode: ModeChoice::Dense, causal: None, adapter: None, ..spec.clone() };
            }
            if ui.button("B = soft").clicked() {
                spec = CompareSpec { mode: ModeChoice::Soft, causal: None, adapter: None, ..spec.clone() };
            }
            let k1 = (res.key.params.k + 1).min(groups);
            if ui.button(format!("B = top-k, k = {k1}")).clicked() {
                spec = CompareSpec { mode: ModeChoice::TopK, k: k1, causal: None, adapter: None, ..spec.clone() };
            }
            let other = if a_causal { "whole-sequence" } else { "causal" };
            if ui.button(format!("B = {other} Sinkhorn")).clicked() {
                spec = CompareSpec { mode: cx.settings.params.mode, k: res.key.params.k, causal: Some(!a_causal), adapter: None, ..spec.clone() };
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.label("Run B:");
            for m in ModeChoice::ALL {
                ui.radio_value(&mut spec.mode, m, m.label());
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
            egui::ComboBox::from_id_salt("compare_adapter_pick").selected_text("pick…").show_ui(ui, |ui| {
                for a in super::files::adapters(&cx.settings.recent) {
                    if ui.selectable_label(false, format!("{}  ({})", a.name, a.summary())).clicked() {
                        self.adapter_field = a.path.display().to_string();
                    }
                }
            });
            spec.adapter = (!self.adapter_field.trim().is_empty()).then(|| self.adapter_field.trim().into());
        });
        if spec.mode == ModeChoice::TopK && spec.adapter.is_none() && spec.k > groups {
            spec.k = groups;
        }
        if spec != cx.settings.compare {
            out.push(Command::Set(Setting::Compare(spec.clone())));
        }
        ui.horizontal(|ui| {
            if cx.worker.is_running(TaskKind::Compare) {
                crate::gui::busy::busy(ui);
                ui.label("comparing…");
                if ui.button("Cancel comparison").clicked() {
                    out.push(Command::Cancel(TaskKind::Compare));
                }
            } else if ui.button("Run comparison").clicked() {
                out.push(Command::StartCompare(spec.clone()));
            }
            if self.result.is_some() {
                if ui.button("Export table (CSV)…").clicked() {
                    out.push(Command::Export(ExportKind::CompareCsv));
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
        ui.label(format!("A: {}\nB: {}", c.a, c.b));
        let (la, lb) = (Comparison::mean_loss(&c.loss_a), Comparison::mean_loss(&c.loss_b));
        ui.label(format!(
            "{} tokens: mean next-token loss A {la:.4} (PPL {:.2}), B {lb:.4} (PPL {:.2}), delta = {:+.4} nats; computed in {:.1} s. delta loss = loss(A) - loss(B): > 0 where A predicts the next token worse.",
            c.tokens(),
            la.exp(),
            lb.exp(),
            la - lb,
            c.seconds
        ));
        let layer = cx.layer(res);
        let changed = c.changed_per_layer();
        let pa = c.pruned_a.as_ref().map(|v| Comparison::pruned_per_layer(v));
        let pb = c.pruned_b.as_ref().map(|v| Comparison::pruned_per_layer(v));
        ui.label("per layer: share of tokens whose top-k groups change; attention mass the top-k mask prunes (mean over tokens and heads)");
        Plot::new("compare_layers").height(170.0).legend(Legend::default()).x_axis_label("layer").include_y(0.0).include_y(1.0).show(ui, |p| {
            let pts = |v: &[f64]| PlotPoints::from(v.iter().enumerate().map(|(l, &y)| [l as f64, y]).collect::<Vec<_>>());
            p.line(Line::new("top-k groups change", pts(&changed)));
            if let Some(v) = &pa {
                p.line(Line::new("pruned mass A", pts(v)));
            }
            if let Some(v) = &pb {
                p.line(Line::new("pruned mass B", pts(v)));
            }
            p.vline(VLine::new(format!("selected layer {layer}"), layer as f64).color(egui::Color32::from_gray(170)));
        });
        // The table: click a header to sort (again: reverse), a row to jump to the token.
        let order = self.order(c);
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
            egui::ScrollArea::vertical().id_salt("compare_table").auto_shrink(false).show_rows(ui, 18.0, order.len(), |ui, range| {
                for &i in &order[range] {
                    let d = c.delta(i);
                    let cells = [
                        i.to_string(),
                        if d.is_finite() { format!("{d:+.3}") } else { "-".into() },
                        f(c.pruned_a_at(i)),
                        f(c.pruned_b_at(i)),
                        format!("{}/{}", c.changed_layers(i), c.layers()),
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

    /// The per-layer curves as SVG.
    pub fn svg(&self) -> Result<String, String> {
        let c = self.result.as_ref().ok_or("no comparison yet: press Run comparison first")?;
        let pts = |v: &[f64]| v.iter().enumerate().map(|(l, &y)| (l as f64, y)).collect::<Vec<_>>();
        let mut series = vec![Series { name: "top-k groups change".into(), color: "#1f77b4".into(), points: pts(&c.changed_per_layer()), dashed: false }];
        if let Some(v) = &c.pruned_a {
            series.push(Series { name: "pruned mass A".into(), color: "#d62728".into(), points: pts(&Comparison::pruned_per_layer(v)), dashed: false });
        }
        if let Some(v) = &c.pruned_b {
            series.push(Series { name: "pruned mass B".into(), color: "#ff7f0e".into(), points: pts(&Comparison::pruned_per_layer(v)), dashed: true });
        }
        Ok(line_chart(&format!("A: {} vs B: {}", c.a, c.b), "layer", "share", &series, &[]))
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
