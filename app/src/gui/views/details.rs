//! The right panel: the hovered (or selected) token's routing — membership bars, top-k groups,
//! confidence, category — and the selected token's long-range partners by attention weight.

use super::view::{Command, View, ViewCtx};
use crate::gui::paint::palette;

/// The right panel.
#[derive(Default)]
pub struct DetailsView;

impl View for DetailsView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        egui::Panel::right("details").min_size(300.0).show(ui, |ui| {
            let Some(res) = cx.result() else { return };
            let layer = cx.layer(res);
            let sel = cx.selection;
            let shown = sel.hovered.or(sel.selected);
            // A token hovered in a layer column is shown in that column's layer.
            let token_layer = sel.hovered.and(sel.hovered_layer).filter(|&l| l < res.layers()).unwrap_or(layer);
            ui.heading("Token");
            match shown {
                None => {
                    ui.weak("Hover a token to see its routing; click it for its long-range partners.");
                }
                Some(i) if i < res.tokens() => {
                    let t = &res.analysis.tokens[i];
                    ui.label(format!("#{i} {:?} (id {}, segment {})", t.text, t.id, t.segment));
                    ui.label(format!("category: {}", super::categories::category_of(res, i)));
                    if let Some(r) = res.token_routing(token_layer, i) {
                        let shown: Vec<usize> = (0..res.groups()).map(|g| cx.shown(res, token_layer, g)).collect();
                        let top: Vec<String> = r.top.iter().map(|&g| cx.name(res, token_layer, g)).collect();
                        ui.label(format!("layer {token_layer}: top groups {}, confidence {:.3}", top.join(", "), r.confidence));
                        membership_bars(ui, &r.memberships, &r.top, &res.labels[token_layer], &shown, cx.numbering());
                    }
                }
                Some(_) => {}
            }
            if let Some(r) = sel.range.filter(|&(_, b)| b < res.tokens()) {
                ui.separator();
                ui.heading("Selected range");
                for line in super::tokens::range_summary(res, layer, r, cx.settings.setup.raw_groups) {
                    ui.add(egui::Label::new(line).wrap());
                }
                if ui.small_button("clear the range").clicked() {
                    out.push(Command::SelectRange(None));
                }
            }
            ui.separator();
            ui.heading("Long-range partners");
            let Some(selected) = sel.selected else {
                ui.weak("Click a token, or drag over a range of tokens.");
                return;
            };
            if ui.small_button("Intervene on this token…").on_hover_text("force it into a group, or ablate or swap groups, and compare the loss").clicked() {
                out.push(Command::ShowIntervene(Some(selected)));
            }
            match &sel.partners {
                Some(p) if p.token == selected && p.range == sel.range && p.key == res.key => {
                    let who = match p.range {
                        Some((a, b)) => format!("#{a}-#{b} ({} queries, weights averaged over them)", b - a + 1),
                        None => format!("#{selected}"),
                    };
                    ui.label(format!(
                        "{who}, layer {}, head {}: {} same-group tokens beyond w = {}; they receive {:.1}% of the attention (local window {:.1}%)",
                        p.layer,
                        p.head,
                        p.partners.len(),
                        res.window(),
                        100.0 * p.partner_mass,
                        100.0 * p.local_mass
                    ));
                    let mut jump = None;
                    egui::ScrollArea::vertical().id_salt("partners").show_rows(ui, 18.0, p.partners.len(), |ui, range| {
                        for &(j, wt) in &p.partners[range] {
                            let txt = format!("{wt:.4}  #{j} {:?}", res.analysis.tokens[j].text);
                            if ui.selectable_label(sel.jumped == Some(j), txt).on_hover_text("click: scroll to this partner and ring it in the text").clicked() {
                                jump = Some(j);
                            }
                        }
                    });
                    if let Some(j) = jump {
                        out.push(Command::JumpToPartner(j));
                    }
                }
                _ if cx.worker.is_running(crate::gui::worker::TaskKind::Attention) => {
                    ui.horizontal(|ui| {
                        crate::gui::paint::busy::busy(ui);
                        ui.label("computing the attention row…");
                    });
                }
                _ => {
                    // Nothing runs for this analysis (it never says "computing" while nothing does).
                    ui.weak("The partners of this selection are not computed for the analysis on screen.");
                    if ui.button("Compute them").clicked() {
                        out.push(match sel.range {
                            Some(r) => Command::SelectRange(Some(r)),
                            None => Command::Select(Some(selected)),
                        });
                    }
                }
            }
        });
        out
    }
}

/// One row per group: a bar in the group's colour (full width = membership 1), the membership
/// and the group's label, cut to the panel's width (the whole label on hover). Top-k groups in bold.
pub fn membership_bars(ui: &mut egui::Ui, m: &[f32], top: &[usize], labels: &[String], shown: &[usize], numbering: focus_core::analysis::shown::Numbering) {
    let mut order: Vec<usize> = (0..m.len()).collect();
    order.sort_by_key(|&g| shown.get(g).copied().unwrap_or(g));
    for g in order {
        let v = m[g];
        let sg = shown.get(g).copied().unwrap_or(g);
        ui.horizontal(|ui| {
            ui.spacing_mut().item_spacing.x = 6.0;
            let (rect, _) = ui.allocate_exact_size(egui::vec2(90.0, 12.0), egui::Sense::hover());
            let p = ui.painter();
            p.rect_stroke(rect, 1.0, egui::Stroke::new(0.5, egui::Color32::from_gray(200)), egui::StrokeKind::Inside);
            p.rect_filled(egui::Rect::from_min_size(rect.min, egui::vec2(rect.width() * v.clamp(0.0, 1.0), rect.height())), 1.0, palette::group(sg));
            let label = labels.get(g).map(String::as_str).unwrap_or("");
            let name = focus_core::analysis::identity::group_name(sg, numbering);
            let mut text = egui::RichText::new(format!("{name} {v:.3}  {label}")).size(11.0);
            if top.contains(&g) {
                text = text.strong();
            }
            ui.add(egui::Label::new(text).truncate()).on_hover_text(format!("{name} (centroid {g}): membership {v:.4}; group: {label}"));
        });
    }
}
