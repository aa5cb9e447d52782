//! The Intervene window (issue 31, item 2): on the analysis on screen, edit one layer's routing
//! (ablate a group: its members attend locally only; force a token into a group; swap two
//! groups' queries) and see the change in per-token loss and in attention in the Compare view
//! (A: intervened, B: original). Opened from the menu bar (Intervene…) or the right panel's
//! "Intervene on this token…"; the run is `jobs::intervene::InterveneJob` (core's
//! `analysis::intervene`, as `focus-lens intervene`).
//!
//! Groups are chosen by the numbers on screen (matched across layers unless "raw group indices"
//! is ticked) and handed to core as the router's own indices.

use super::view::{Command, View, ViewCtx};
use crate::gui::jobs::intervene::InterveneJob;
use crate::gui::state::{AnalysisResult, Setting, Tab};
use crate::gui::worker::TaskKind;
use focus_core::analysis::intervene::Intervention;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ablate,
    Force,
    Swap,
}

pub struct InterveneView {
    pub open: bool,
    pub kind: Kind,
    /// None: the selected layer.
    pub layer: Option<usize>,
    /// Groups as shown on screen.
    pub group: usize,
    pub other: usize,
    /// None: the selected token.
    pub token: Option<usize>,
    pub max_tokens: usize,
    pub error: Option<String>,
}

impl Default for InterveneView {
    fn default() -> Self {
        InterveneView { open: false, kind: Kind::Ablate, layer: None, group: 0, other: 1, token: None, max_tokens: 512, error: None }
    }
}

/// The router's index of the group shown as `shown` in `layer`.
pub fn raw_group(res: &AnalysisResult, layer: usize, shown: usize, raw: bool) -> Option<usize> {
    (0..res.groups()).find(|&g| res.shown_group(layer, g, raw) == shown)
}

/// An intervention (in the router's indices) in the names the screen gives its groups, with
/// the centroid's index beside each: "ablate g0 (centroid 3)".
pub fn describe(res: &AnalysisResult, layer: usize, i: &Intervention, raw: bool) -> String {
    let name = |g: usize| {
        let n = res.group_name(layer, g, raw);
        if raw { n } else { format!("{n} (centroid {g})") }
    };
    match *i {
        Intervention::Ablate { group } => format!("ablate {}", name(group)),
        Intervention::Force { token, group } => format!("force token {token} into {}", name(group)),
        Intervention::Swap { a, b } => format!("swap {} and {} (queries)", name(a), name(b)),
    }
}

/// The name of number `n`: "g3", or raw "c3".
fn cx_name(n: usize, raw: bool) -> String {
    focus_core::analysis::identity::group_name(n, focus_core::analysis::shown::Numbering::raw_if(raw))
}

impl InterveneView {
    /// Opens the window on a token: force it into a group, its own top group ablated by default.
    pub fn open_for(&mut self, token: Option<usize>) {
        self.open = true;
        if token.is_some() {
            self.token = token;
            self.kind = Kind::Force;
        }
    }

    /// The job the window asks for (`Err`: one line saying why not).
    fn job(&self, cx: &ViewCtx, res: &std::sync::Arc<AnalysisResult>, layer: usize) -> Result<InterveneJob, String> {
        if matches!(res.mode, focus_core::Mode::Dense) {
            return Err("an intervention edits the routing: switch the Run controls to soft or top-k".into());
        }
        let raw = cx.settings.setup.raw_groups;
        let g = |s: usize| raw_group(res, layer, s, raw).ok_or_else(|| format!("there is no group {} in layer {layer} (K = {})", cx_name(s, raw), res.groups()));
        let intervention = match self.kind {
            Kind::Ablate => Intervention::Ablate { group: g(self.group)? },
            Kind::Force => {
                let token = self.token.or(cx.selection.selected).ok_or("no token: click one in the text, or set its index")?;
                Intervention::Force { token, group: g(self.group)? }
            }
            Kind::Swap => {
                if self.group == self.other {
                    return Err("swap needs two different groups".into());
                }
                Intervention::Swap { a: g(self.group)?, b: g(self.other)? }
            }
        };
        let n = res.tokens().min(self.max_tokens);
        intervention.check(res.groups(), n).map_err(|e| e.to_string())?;
        let shown = describe(res, layer, &intervention, raw);
        Ok(InterveneJob { res: res.clone(), layer, intervention, shown, max_tokens: self.max_tokens, spec: cx.settings.setup.compare.clone() })
    }
}

impl View for InterveneView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        if !self.open {
            return out;
        }
        let mut open = true;
        egui::Window::new("Intervene").open(&mut open).default_width(460.0).show(ui.ctx(), |ui| {
            let Some(res) = cx.result() else {
                ui.label("Nothing analysed yet.");
                return;
            };
            let layer = self.layer.unwrap_or_else(|| cx.layer(res)).min(res.layers() - 1);
            let k = res.groups();
            ui.label(format!("Edit one layer's routing on the analysed text ({}, {}) and compare with the original in the Compare view.", res.text_label, res.mode));
            ui.horizontal(|ui| {
                ui.radio_value(&mut self.kind, Kind::Ablate, "ablate a group").on_hover_text("its members attend locally only (window and sinks); no distant query reaches them through a group");
                ui.radio_value(&mut self.kind, Kind::Force, "force a token into a group").on_hover_text("the token's weakest top-k group is replaced by this one");
                ui.radio_value(&mut self.kind, Kind::Swap, "swap two groups").on_hover_text("every query's two groups are exchanged: the members of one attend the distant members of the other");
            });
            ui.horizontal_wrapped(|ui| {
                let mut l = layer;
                ui.add(egui::DragValue::new(&mut l).range(0..=res.layers() - 1).prefix("layer "));
                if l != layer || self.layer.is_some() {
                    self.layer = Some(l);
                }
                // Named as every view names groups: g (shown numbers) or c (raw centroid indices).
                let letter = if cx.settings.setup.raw_groups { "centroid c" } else { "group g" };
                ui.add(egui::DragValue::new(&mut self.group).range(0..=k - 1).prefix(letter));
                if self.kind == Kind::Swap {
                    ui.add(egui::DragValue::new(&mut self.other).range(0..=k - 1).prefix(if cx.settings.setup.raw_groups { "and c" } else { "and g" }));
                }
                if self.kind == Kind::Force {
                    let mut t = self.token.or(cx.selection.selected).unwrap_or(0);
                    ui.add(egui::DragValue::new(&mut t).range(0..=res.tokens() - 1).prefix("token #"));
                    if Some(t) != self.token.or(cx.selection.selected) {
                        self.token = Some(t);
                    }
                    if let Some(tok) = res.analysis.tokens.get(t) {
                        ui.weak(format!("{:?}", tok.text));
                    }
                }
                ui.add(egui::DragValue::new(&mut self.max_tokens).range(16..=2048).prefix("tokens <= "));
            });
            if let Some(raw) = raw_group(res, layer, self.group, cx.settings.setup.raw_groups) {
                let members = res.masks.get(layer).map_or(0, |m| m.iter().filter(|&&s| s >> raw & 1 == 1).count());
                let what = if cx.settings.setup.raw_groups { format!("{} of layer {layer} is the router's own index", cx_name(self.group, true)) } else { format!("{} of layer {layer} is the router's group {raw}", cx_name(self.group, false)) };
                ui.weak(format!("{what}; {members} of the {} analysed tokens hold it in their top-{}", res.tokens(), res.key.params.k));
            }
            ui.horizontal(|ui| {
                let running = cx.worker.is_running(TaskKind::Compare);
                if ui.add_enabled(!running, egui::Button::new("Run intervention")).clicked() {
                    match self.job(cx, res, layer) {
                        Ok(job) => {
                            self.error = None;
                            out.push(Command::StartIntervene(job));
                            out.push(Command::Set(Setting::Tab(Tab::Compare)));
                        }
                        Err(e) => self.error = Some(format!("cannot intervene: {e}")),
                    }
                }
                if running {
                    crate::gui::paint::busy::busy(ui);
                    ui.label("running (Cancel in the Compare view)");
                }
            });
            if let Some(e) = &self.error {
                ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
            }
        });
        self.open = open;
        out
    }
}
