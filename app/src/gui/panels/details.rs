//! The right panel: the hovered (or selected) token's routing — membership bars, top-k groups,
//! confidence, category — and the selected token's long-range partners by attention weight.

use crate::gui::app::FocusLensApp;
use crate::gui::palette;

pub fn show(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    egui::Panel::right("details").min_size(300.0).show(ui, |ui| {
        let Some(res) = app.result.clone() else { return };
        let layer = app.settings.layer.min(res.layers() - 1);
        let shown = app.hovered.or(app.selected);
        ui.heading("Token");
        match shown {
            None => {
                ui.weak("Hover a token to see its routing; click it for its long-range partners.");
            }
            Some(i) if i < res.tokens() => {
                let t = &res.analysis.tokens[i];
                ui.label(format!("#{i} {:?} (id {}, segment {})", t.text, t.id, t.segment));
                ui.label(format!("category: {}", crate::gui::panels::categories::category_of(&res, i)));
                if let Some(r) = res.token_routing(layer, i) {
                    ui.label(format!("layer {layer}: top groups {:?}, confidence {:.3}", r.top, r.confidence));
                    membership_bars(ui, &r.memberships, &res.labels[layer]);
                }
            }
            Some(_) => {}
        }
        ui.separator();
        ui.heading("Long-range partners");
        let Some(sel) = app.selected else {
            ui.weak("Click a token.");
            return;
        };
        match &app.partners {
            Some(p) if p.token == sel && p.key == res.key => {
                ui.label(format!(
                    "#{sel}, layer {}, head {}: {} same-group tokens beyond w = {}; they receive {:.1}% of the attention (local window {:.1}%)",
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
                        if ui.selectable_label(false, txt).clicked() {
                            jump = Some(j);
                        }
                    }
                });
                if let Some(j) = jump {
                    app.panels.scroll_to = Some(j);
                }
            }
            _ => {
                ui.horizontal(|ui| {
                    super::busy::busy(ui);
                    ui.label("computing the attention row…");
                });
            }
        }
    });
}

/// Horizontal bars, one per group, in group colours.
pub fn membership_bars(ui: &mut egui::Ui, m: &[f32], labels: &[String]) {
    let w = ui.available_width().min(260.0);
    for (g, &v) in m.iter().enumerate() {
        let (rect, _) = ui.allocate_exact_size(egui::vec2(w, 14.0), egui::Sense::hover());
        let p = ui.painter();
        let bar = egui::Rect::from_min_size(rect.min, egui::vec2(rect.width() * 0.55 * v.clamp(0.0, 1.0), rect.height() - 2.0));
        p.rect_filled(bar, 1.0, palette::group(g));
        p.text(
            egui::pos2(rect.min.x + rect.width() * 0.57, rect.center().y),
            egui::Align2::LEFT_CENTER,
            format!("g{g} {v:.3} {}", labels.get(g).map(String::as_str).unwrap_or("")),
            egui::FontId::proportional(10.0),
            ui.visuals().text_color(),
        );
    }
}
