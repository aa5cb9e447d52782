//! Attention: for the selected token, a head x layer grid of its attention, each cell split by
//! what the top-k mask does with the pairs: the share of the token's dense softmax attention on
//! local pairs, on distant pairs that share a group (kept), and on pairs the mask prunes. The
//! cell's colour mixes the three classes (as in the mask view), its number is the pruned share.
//! Click a cell to select that layer and head. Computed in the background
//! (`compare::attention_grid`: one pass over the token's segment).

use super::view::{Command, View, ViewCtx};
use crate::gui::jobs::AttnGrid;
use crate::gui::export::svg::Svg;
use crate::gui::paint::palette;
use crate::gui::state::{AnalysisResult, Setting};
use crate::gui::worker::TaskKind;

#[derive(Default)]
pub struct AttentionView {
    pub grid: Option<AttnGrid>,
    pub error: Option<String>,
    requested: Option<(crate::gui::state::AnalysisKey, usize)>,
}

fn cell_color(c: &[f32; 3]) -> egui::Color32 {
    palette::mix(&[(palette::LOCAL, c[0]), (palette::SAME_GROUP, c[1]), (palette::PRUNED, c[2])])
}

impl AttentionView {
    pub fn receive(&mut self, r: Result<AttnGrid, crate::gui::jobs::JobError>) {
        match r {
            Ok(g) => {
                self.grid = Some(g);
                self.error = None;
            }
            Err(crate::gui::jobs::JobError::Cancelled) => {}
            Err(crate::gui::jobs::JobError::Failed(e)) => self.error = Some(e),
        }
    }

    pub fn current(&self, res: &AnalysisResult, token: usize) -> Option<&AttnGrid> {
        self.grid.as_ref().filter(|g| g.key == res.key && g.token == token)
    }

    pub fn svg(&self, res: &AnalysisResult, token: Option<usize>) -> Result<String, String> {
        let g = token.and_then(|i| self.current(res, i)).ok_or("no attention grid yet: click a token first")?;
        let (layers, heads) = (g.cells.len(), g.cells.first().map_or(0, |r| r.len()));
        let (cw, ch, left, top) = (50.0, 16.0, 70.0, 50.0);
        let mut s = Svg::new(left + cw * heads as f64 + 20.0, top + ch * layers as f64 + 20.0);
        s.text(10.0, 20.0, &format!("token #{} {:?}: pruned share of its dense attention per layer and head", g.token, res.analysis.tokens[g.token].text), 13.0, "black", "start");
        for h in 0..heads {
            s.text(left + cw * (h as f64 + 0.5), top - 8.0, &format!("head {h}"), 10.0, "black", "middle");
        }
        for (l, row) in g.cells.iter().enumerate() {
            s.text(10.0, top + ch * (l as f64 + 0.75), &format!("layer {l}"), 10.0, "black", "start");
            for (h, c) in row.iter().enumerate() {
                let (x, y) = (left + cw * h as f64, top + ch * l as f64);
                s.rect(x, y, cw - 1.0, ch - 1.0, &palette::hex(cell_color(c)), None);
                s.text(x + cw / 2.0, y + ch * 0.75, &format!("{:.0}%", 100.0 * c[2]), 9.0, if c[2] > 0.5 { "white" } else { "black" }, "middle");
            }
        }
        Ok(s.finish())
    }
}

impl View for AttentionView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let mut out = Vec::new();
        let Some(i) = cx.selection.selected.filter(|&i| i < res.tokens()) else {
            ui.label("Click a token (Tokens or Layers view) to see its attention in every layer and head.");
            return out;
        };
        ui.label(format!(
            "token #{i} {:?}: the share of its dense softmax attention on local pairs (blue), on distant pairs that share a top-{} group (orange, kept) and on pairs the mask prunes (grey); the number is the pruned share. Rows: layers; columns: heads. Click a cell to select that layer and head.",
            res.analysis.tokens[i].text, res.key.params.k
        ));
        let want = (res.key.clone(), i);
        if self.current(res, i).is_none() {
            // Asked for once per token and analysis; again if that run ended without a result
            // (cancelled), so that the view never waits for nothing.
            let running = cx.worker.is_running(TaskKind::AttnGrid);
            if self.requested.as_ref() != Some(&want) || (!running && self.error.is_none()) {
                self.requested = Some(want);
                self.error = None;
                out.push(Command::BuildAttnGrid(res.clone(), i));
            }
            if let Some(e) = &self.error {
                ui.colored_label(egui::Color32::from_rgb(200, 30, 30), e);
            } else {
                ui.horizontal(|ui| {
                    crate::gui::paint::busy::busy(ui);
                    ui.label("computing the attention of every layer and head…");
                });
            }
            return out;
        }
        let g = self.current(res, i).expect("checked");
        let (layers, heads) = (g.cells.len(), g.cells.first().map_or(0, |r| r.len()));
        let label_w = 60.0;
        let cw = ((ui.available_width() - label_w - 20.0) / heads.max(1) as f32).clamp(30.0, 90.0);
        let ch = ((ui.available_height() - 40.0) / (layers + 1) as f32).clamp(12.0, 22.0);
        let (rect, resp) = ui.allocate_exact_size(egui::vec2(label_w + cw * heads as f32, ch * (layers + 1) as f32), egui::Sense::click());
        let p = ui.painter_at(rect);
        let fg = ui.visuals().text_color();
        for h in 0..heads {
            p.text(egui::pos2(rect.min.x + label_w + (h as f32 + 0.5) * cw, rect.min.y + ch / 2.0), egui::Align2::CENTER_CENTER, format!("head {h}"), egui::FontId::proportional(10.0), fg);
        }
        let mut tip = None;
        let mut clicked = None;
        for (l, row) in g.cells.iter().enumerate() {
            let y = rect.min.y + ch * (l + 1) as f32;
            p.text(egui::pos2(rect.min.x, y + ch / 2.0), egui::Align2::LEFT_CENTER, format!("layer {l}"), egui::FontId::proportional(10.0), fg);
            for (h, c) in row.iter().enumerate() {
                let r = egui::Rect::from_min_size(egui::pos2(rect.min.x + label_w + h as f32 * cw, y), egui::vec2(cw - 1.0, ch - 1.0));
                p.rect_filled(r, 0.0, cell_color(c));
                let txt_c = if c[2] > 0.5 { egui::Color32::WHITE } else { egui::Color32::BLACK };
                p.text(r.center(), egui::Align2::CENTER_CENTER, format!("{:.0}%", 100.0 * c[2]), egui::FontId::proportional(9.0), txt_c);
                if (l, h) == (cx.settings.setup.layer, cx.settings.setup.head) {
                    p.rect_stroke(r, 0.0, egui::Stroke::new(2.0, egui::Color32::BLACK), egui::StrokeKind::Inside);
                }
                if resp.hover_pos().is_some_and(|q| r.contains(q)) {
                    tip = Some(format!(
                        "layer {l}, head {h}: local {:.1}%, shared group (kept) {:.1}%, pruned {:.1}% of the dense softmax attention of #{i}",
                        100.0 * c[0],
                        100.0 * c[1],
                        100.0 * c[2]
                    ));
                    if resp.clicked() {
                        clicked = Some((l, h));
                    }
                }
            }
        }
        if let Some(t) = tip {
            resp.on_hover_text_at_pointer(t);
        }
        if let Some((l, h)) = clicked {
            out.push(Command::Set(Setting::Layer(l)));
            out.push(Command::Set(Setting::Head(h)));
            out.push(Command::Select(Some(i)));
        }
        out
    }
}
