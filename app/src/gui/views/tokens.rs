//! The token view: the analysed text as tokens coloured by group for the selected layer, with a
//! legend, and its SVG export. Only visible lines are painted: token widths are measured once per
//! analysis and lines are laid out once per width, so scrolling 10K+ tokens costs only the rows
//! on screen. The layout, line painting and partner marks are shared with the layers view.

use super::view::{Command, View, ViewCtx};
use std::cell::Cell;
use crate::gui::export::svg::Svg;
use crate::gui::paint::palette;
use crate::gui::state::AnalysisResult;
use egui::{pos2, vec2, Color32, FontId, Pos2, Rect, Sense, Stroke};
use std::sync::Arc;

pub const ROW_H: f32 = 20.0;
pub const FONT: f32 = 13.0;
/// Space between a token's text and its box.
pub const PAD: f32 = 2.0;

/// Cached measurements and line breaks of one list of tokens (an analysis, or a generation as
/// it grows) at one width.
#[derive(Default)]
pub struct TokenLayout {
    widths_of: usize,
    pub texts: Vec<String>,
    pub widths: Vec<f32>,
    /// Tokens that end a line (they hold a newline).
    newline: Vec<bool>,
    lines_for: Option<(usize, u32)>,
    /// Token ranges [start, end) per line.
    pub lines: Vec<(usize, usize)>,
    /// x offset of each token within its line.
    pub xs: Vec<f32>,
    /// Line of each token.
    pub line_of: Vec<u32>,
}

pub use crate::gui::paint::token_text::{display_text, pieces, CONTINUES};

impl TokenLayout {
    pub fn ensure(&mut self, ui: &egui::Ui, res: &Arc<AnalysisResult>, width: f32) {
        self.ensure_texts(ui, Arc::as_ptr(res) as usize, || pieces(&res.analysis.tokens).into_iter(), width);
    }

    /// Lays out the tokens `texts` gives, measured again only when `id` (non-zero) changes and
    /// broken into lines again only when the width does.
    pub fn ensure_texts<'t, I: Iterator<Item = &'t str>>(&mut self, ui: &egui::Ui, id: usize, texts: impl FnOnce() -> I, width: f32) {
        if self.widths_of != id {
            let font = FontId::monospace(FONT);
            let (shown, newline): (Vec<String>, Vec<bool>) = texts().map(|t| (display_text(t), t.contains('\n'))).unzip();
            self.texts = shown;
            self.newline = newline;
            // Monospace: width = characters x one glyph's advance (measured once).
            let glyph = ui.painter().layout_no_wrap("0000000000".into(), font, Color32::BLACK).size().x / 10.0;
            self.widths = self.texts.iter().map(|t| t.chars().count() as f32 * glyph + 2.0 * PAD).collect();
            self.widths_of = id;
            self.lines_for = None;
        }
        let key = (id, width.max(50.0) as u32);
        if self.lines_for == Some(key) {
            return;
        }
        let width = key.1 as f32;
        self.lines.clear();
        self.xs.clear();
        self.line_of.clear();
        let n = self.widths.len();
        let mut start = 0;
        let mut x = 0.0;
        for i in 0..n {
            let w = self.widths[i];
            if x > 0.0 && x + w > width {
                self.lines.push((start, i));
                start = i;
                x = 0.0;
            }
            self.xs.push(x);
            self.line_of.push(self.lines.len() as u32);
            x += w + 1.0;
            if self.newline[i] {
                self.lines.push((start, i + 1));
                start = i + 1;
                x = 0.0;
            }
        }
        if start < n || self.lines.is_empty() {
            self.lines.push((start, n));
        }
        self.lines_for = Some(key);
    }
}

/// How tokens are coloured: by category, or by group (matched across layers, or raw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Colouring {
    pub by_category: bool,
    pub raw: bool,
}

impl Colouring {
    pub fn of(cx: &ViewCtx) -> Colouring {
        Colouring { by_category: cx.settings.setup.color_by_category, raw: cx.settings.setup.raw_groups }
    }
}

/// Fill colour of token `i` in `layer`.
pub fn token_color(res: &AnalysisResult, layer: usize, i: usize, c: Colouring) -> Color32 {
    if c.by_category {
        return super::categories::category_color(res, i);
    }
    res.argmax.get(layer).and_then(|a| a.get(i)).map(|&g| palette::group(res.shown_group(layer, g as usize, c.raw))).unwrap_or(Color32::LIGHT_GRAY)
}

/// The outline of a selected token's long-range partners: dark, with a white line inside, so
/// that it shows on every group colour (the old red vanished on red groups).
pub const PARTNER_OUTLINE: Color32 = Color32::from_rgb(25, 25, 140);

/// The bar over the tokens of a selected range.
pub const RANGE_BAR: Color32 = Color32::from_rgb(20, 20, 20);

/// Search matches are filled (as a browser highlights them; a thin underline was missed): every
/// match in yellow, the one shown last in orange. The token's group colour stays as a strip
/// along its bottom edge.
pub const FIND_FILL: Color32 = Color32::from_rgb(255, 236, 60);
pub const FIND_CURRENT: Color32 = Color32::from_rgb(255, 150, 30);

/// The ring around the partner last jumped to from the partners list (it must stand out among
/// the other partners' outlines).
pub const JUMPED_RING: Color32 = Color32::from_rgb(230, 0, 120);

pub struct Marks<'a> {
    pub selected: Option<usize>,
    /// The token under the pointer (in any column): outlined in every column.
    pub hovered: Option<usize>,
    /// Tokens that hold a match of the search (filled), and those of the match shown last.
    pub found: Option<&'a std::collections::HashSet<usize>>,
    pub current: Option<(usize, usize)>,
    /// The partner jumped to from the partners list (ringed).
    pub jumped: Option<usize>,
    /// The selected range `[a, b]` (a bar over each of its tokens).
    pub range: Option<(usize, usize)>,
    /// Weight of each of the selected token's partners, and the largest weight.
    pub partners: &'a std::collections::HashMap<usize, f32>,
    pub max_weight: f32,
}

/// Paints one line of tokens at `origin`; returns the token under `pointer`, if any.
#[allow(clippy::too_many_arguments)]
pub fn paint_line(
    painter: &egui::Painter,
    res: &AnalysisResult,
    lay: &TokenLayout,
    line: usize,
    origin: Pos2,
    layer: usize,
    colouring: Colouring,
    marks: &Marks,
    pointer: Option<Pos2>,
) -> Option<usize> {
    let (s, e) = lay.lines[line];
    let mut hit = None;
    let font = FontId::monospace(FONT);
    for i in s..e {
        let r = Rect::from_min_size(origin + vec2(lay.xs[i], 0.0), vec2(lay.widths[i], ROW_H - 2.0));
        let found = marks.found.is_some_and(|f| f.contains(&i));
        if found {
            let fill = if marks.current.is_some_and(|(a, b)| (a..=b).contains(&i)) { FIND_CURRENT } else { FIND_FILL };
            painter.rect_filled(r, 2.0, fill);
            let strip = Rect::from_min_max(pos2(r.min.x, r.max.y - 4.0), r.max);
            painter.rect_filled(strip, 0.0, token_color(res, layer, i, colouring));
        } else {
            painter.rect_filled(r, 2.0, token_color(res, layer, i, colouring));
        }
        painter.text(pos2(r.min.x + PAD, r.center().y), egui::Align2::LEFT_CENTER, &lay.texts[i], font.clone(), Color32::BLACK);
        if let Some(&w) = marks.partners.get(&i) {
            let a = (w / marks.max_weight.max(1e-9)).sqrt().clamp(0.15, 1.0);
            let width = 1.5 + 2.0 * a;
            painter.rect_stroke(r, 2.0, Stroke::new(width, PARTNER_OUTLINE), egui::StrokeKind::Inside);
            painter.rect_stroke(r.shrink(width), 1.0, Stroke::new(1.0, Color32::WHITE), egui::StrokeKind::Inside);
        }
        if marks.selected == Some(i) {
            painter.rect_stroke(r, 2.0, Stroke::new(2.5, Color32::BLACK), egui::StrokeKind::Outside);
        }
        if marks.range.is_some_and(|(a, b)| (a..=b).contains(&i)) {
            let bar = Rect::from_min_max(r.min, pos2(r.max.x, r.min.y + 4.0));
            painter.rect_filled(bar, 0.0, RANGE_BAR);
        }
        if marks.jumped == Some(i) {
            painter.rect_stroke(r.expand(2.0), 3.0, Stroke::new(3.0, JUMPED_RING), egui::StrokeKind::Outside);
        }
        let under = pointer.is_some_and(|p| r.contains(p));
        if under || marks.hovered == Some(i) {
            painter.rect_stroke(r, 2.0, Stroke::new(2.0, Color32::from_rgb(230, 0, 230)), egui::StrokeKind::Outside);
        }
        if under {
            hit = Some(i);
        }
    }
    hit
}

/// The token at `pos` in a token area laid out by `lay` from `origin` (rows of `ROW_H`).
pub fn token_at(lay: &TokenLayout, origin: Pos2, pos: Pos2) -> Option<usize> {
    let y = pos.y - origin.y;
    if y < 0.0 {
        return None;
    }
    let &(s, e) = lay.lines.get((y / ROW_H) as usize)?;
    let x = pos.x - origin.x;
    (s..e).find(|&i| x >= lay.xs[i] && x < lay.xs[i] + lay.widths[i])
}

/// Legend: colour, size and automatic label of each group in `layer` (in their shown order and
/// numbers), or, when colouring by category, each category's colour and count.
pub fn legend(ui: &mut egui::Ui, res: &AnalysisResult, layer: usize, c: Colouring) {
    let t = res.tokens().max(1) as f64;
    if c.by_category {
        let mut counts = [0usize; focus_core::analysis::categories::Category::ALL.len()];
        for tok in &res.analysis.tokens {
            counts[tok.category.index()] += 1;
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("colour = linguistic category:");
            for cat in focus_core::analysis::categories::Category::ALL {
                let (rect, _) = ui.allocate_exact_size(vec2(14.0, 14.0), Sense::hover());
                ui.painter().rect_filled(rect, 2.0, super::categories::color(cat));
                let n = counts[cat.index()];
                ui.label(format!("{} {n} ({:.0}%)", cat.name(), 100.0 * n as f64 / t));
            }
        });
        return;
    }
    if let (Some(a), false) = (&res.aligned_to, c.raw) {
        ui.weak(format!("group numbers matched, layer by layer, to the reference run ({a})"));
    }
    if c.raw {
        ui.weak("raw centroid indices (c0, c1, ...): untick \"raw group indices\" for the numbers every view shares");
    }
    ui.horizontal_wrapped(|ui| {
        ui.label(format!("layer {layer}:"));
        for g in res.groups_in_shown_order(layer, c.raw) {
            let shown = res.shown_group(layer, g, c.raw);
            let (rect, _) = ui.allocate_exact_size(vec2(14.0, 14.0), Sense::hover());
            ui.painter().rect_filled(rect, 2.0, palette::group(shown));
            let centroid = if shown != g || c.raw { format!("; centroid {g}") } else { String::new() };
            let entry = ui.label(legend_entry(res, layer, g, c.raw, t));
            let tops = res.analysis.profiles.get(layer).and_then(|p| p.centroids.get(g)).map(|c| {
                c.top_tokens.iter().take(8).map(|t| format!("{:?} x{}", t.text, t.count)).collect::<Vec<_>>().join("  ")
            });
            entry.on_hover_text(format!("{}{centroid}: {}{}", res.group_name(layer, g, c.raw), res.labels[layer][g], tops.map(|t| format!("\ntop tokens: {t}")).unwrap_or_default()));
        }
    });
}

/// One group's legend entry, label first as in the categories view: "g3 determiner 71% · 120
/// tokens (12%)" (the label is the centroid's category profile, `jobs::analyze`).
pub fn legend_entry(res: &AnalysisResult, layer: usize, g: usize, raw: bool, total: f64) -> String {
    let n = res.analysis.layers[layer].group_size[g];
    format!("{} {} · {n} tokens ({:.0}%)", res.group_name(layer, g, raw), res.labels[layer][g], 100.0 * n as f64 / total)
}

/// The group and category make-up of the tokens `[a, b]` in `layer`, in words: per shown group
/// its count and share (with its share of the whole text), then the categories by count.
pub fn range_summary(res: &AnalysisResult, layer: usize, (a, b): (usize, usize), raw: bool) -> Vec<String> {
    let n = b - a + 1;
    let t = res.tokens().max(1) as f64;
    let mut lines = vec![format!("#{a}-#{b}: {n} tokens, layer {layer}")];
    let argmax = &res.argmax[layer];
    let sizes = &res.analysis.layers[layer].group_size;
    let mut counts = vec![0usize; res.groups()];
    for &g in &argmax[a..=b] {
        counts[g as usize] += 1;
    }
    for g in res.groups_in_shown_order(layer, raw) {
        if counts[g] > 0 {
            lines.push(format!(
                "{} {}: {} ({:.0}%; {:.0}% of the text)",
                res.group_name(layer, g, raw),
                res.labels[layer][g],
                counts[g],
                100.0 * counts[g] as f64 / n as f64,
                100.0 * sizes[g] as f64 / t
            ));
        }
    }
    let mut cats = [0usize; focus_core::analysis::categories::Category::COUNT];
    for tok in &res.analysis.tokens[a..=b] {
        cats[tok.category.index()] += 1;
    }
    let mut order: Vec<usize> = (0..cats.len()).filter(|&c| cats[c] > 0).collect();
    order.sort_by(|&x, &y| cats[y].cmp(&cats[x]));
    let cat = order.iter().map(|&c| format!("{} {}", focus_core::analysis::categories::Category::ALL[c].name(), cats[c])).collect::<Vec<_>>();
    lines.push(format!("categories: {}", cat.join(", ")));
    lines
}

/// The banner over a provisional result (the preview of a long text), over every view of it
/// (`Views::central`).
pub fn provisional_banner(cx: &ViewCtx, res: &AnalysisResult, ui: &mut egui::Ui) {
    if !(cx.session.showing_preview().is_some() || cx.pending_full) {
        return;
    }
    let all = res.text_tokens.min(cx.settings.setup.params.max_tokens);
    let why = if res.adapter.config.causal_sinkhorn {
        "causal Sinkhorn: these tokens' groups are final; the labels and statistics will change"
    } else {
        "whole-sequence Sinkhorn balanced over these tokens only: groups, colours and labels will change"
    };
    ui.colored_label(
        Color32::from_rgb(170, 90, 0),
        format!("PROVISIONAL: the first {} of {all} tokens, analysed alone ({why}). The full analysis replaces it when ready (not while the mouse rests on a token).", res.tokens()),
    );
}

/// The token view's state: its layout cache and the search (Ctrl+F).
#[derive(Default)]
pub struct TokensView {
    pub layout: TokenLayout,
    pub find_open: bool,
    pub find: String,
    /// The tokens each match covers, in text order (one entry per match: its first token).
    pub matches: Vec<usize>,
    /// The last token of each match.
    pub match_ends: Vec<usize>,
    pub found: std::collections::HashSet<usize>,
    /// The match shown last (index into `matches`).
    pub at: usize,
    /// While dragging over tokens: the token the drag started on, and the one under the pointer.
    pub dragging: Option<(usize, usize)>,
    /// Where the token area's top-left corner was drawn last (screen points): with `layout`, a
    /// token's place on screen.
    pub origin: Option<Pos2>,
    matches_for: Option<(usize, String)>,
    /// The first token of the first line on screen: the SVG export starts there (it follows
    /// the screen), without a selected range.
    pub first_visible: usize,
    /// The result drawn last (its key): a new one starts at the top, not at the old offset.
    shown_key: Option<crate::gui::state::AnalysisKey>,
}

/// Where `query` occurs in the analysed text (ASCII case folded): for each occurrence, the
/// tokens it overlaps.
pub fn find_tokens(res: &AnalysisResult, query: &str) -> Vec<Vec<usize>> {
    let q = query.to_ascii_lowercase();
    if q.is_empty() {
        return Vec::new();
    }
    let toks = &res.analysis.tokens;
    let text: String = toks.iter().map(|t| t.text.as_str()).collect::<String>().to_ascii_lowercase();
    // Byte offset of each token in the concatenation.
    let mut starts = Vec::with_capacity(toks.len());
    let mut o = 0;
    for t in toks {
        starts.push(o);
        o += t.text.len();
    }
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = text[from..].find(&q) {
        let (a, b) = (from + p, from + p + q.len());
        let first = starts.partition_point(|&s| s <= a).saturating_sub(1);
        let last = starts.partition_point(|&s| s < b).saturating_sub(1);
        out.push((first..=last).collect());
        from = a + q.len().max(1);
        if from >= text.len() {
            break;
        }
    }
    out
}

impl TokensView {
    /// The centre of token `i` on screen as last drawn (`None` before the view has been drawn).
    pub fn token_center(&self, i: usize) -> Option<Pos2> {
        let o = self.origin?;
        let lay = &self.layout;
        let line = *lay.line_of.get(i)? as f32;
        Some(o + vec2(lay.xs[i] + lay.widths[i] / 2.0, line * ROW_H + ROW_H / 2.0 - 1.0))
    }

    /// The search bar (Ctrl+F opens it; Enter or Next goes to the next match).
    fn search_bar(&mut self, res: &Arc<AnalysisResult>, scroll_to: &Cell<Option<usize>>, ui: &mut egui::Ui) {
        let id = ui.make_persistent_id("token_find");
        if ui.input_mut(|i| i.consume_key(egui::Modifiers::COMMAND, egui::Key::F)) {
            self.find_open = true;
            ui.memory_mut(|m| m.request_focus(id));
        }
        if !self.find_open {
            return;
        }
        let key = (Arc::as_ptr(res) as usize, self.find.clone());
        let mut go = None;
        if self.matches_for.as_ref() != Some(&key) {
            let m = find_tokens(res, &self.find);
            self.found = m.iter().flatten().cloned().collect();
            self.matches = m.iter().map(|v| v[0]).collect();
            self.match_ends = m.iter().map(|v| v[v.len() - 1]).collect();
            self.at = 0;
            // Typing searches as it goes: show the first match.
            if !self.matches.is_empty() {
                go = Some(0);
            }
            self.matches_for = Some(key);
        }
        ui.horizontal(|ui| {
            let l = ui.label("Find:");
            let r = ui.add(egui::TextEdit::singleline(&mut self.find).id(id).desired_width(220.0)).labelled_by(l.id);
            let enter = r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if enter {
                r.request_focus();
            }
            let n = self.matches.len();
            ui.label(if self.find.is_empty() { String::new() } else if n == 0 { "no match".into() } else { format!("match {} of {n}", self.at + 1) });
            let prev = ui.add_enabled(n > 0, egui::Button::new("Previous")).clicked();
            let next = ui.add_enabled(n > 0, egui::Button::new("Next")).clicked() || enter;
            if n > 0 && prev {
                self.at = (self.at + n - 1) % n;
                go = Some(self.at);
            }
            if n > 0 && next {
                self.at = (self.at + 1) % n;
                go = Some(self.at);
            }
            if ui.button("Close").clicked() {
                self.find_open = false;
                self.find.clear();
            }
        });
        if let Some(a) = go {
            scroll_to.set(self.matches.get(a).copied());
        }
    }
}

impl View for TokensView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let Some(res) = cx.result() else { return Vec::new() };
        let scroll_to = &cx.scroll_to;
        let mut out = Vec::new();
        let layer = cx.layer(res);
        legend(ui, res, layer, Colouring::of(cx));
        self.search_bar(res, scroll_to, ui);
        ui.separator();
        let width = ui.available_width() - 16.0;
        self.layout.ensure(ui, res, width);
        let (partners, max_weight) = partner_map(cx, res, layer);
        let found = (self.find_open && !self.found.is_empty()).then_some(&self.found);
        let current = found.and_then(|_| Some((*self.matches.get(self.at)?, *self.match_ends.get(self.at)?)));
        let range = self.dragging.map(|(a, b)| (a.min(b), a.max(b))).or(cx.selection.range);
        let marks = Marks { selected: cx.selection.selected, hovered: None, found, current, jumped: cx.selection.jumped, range, partners: &partners, max_weight };
        let lay = &self.layout;
        let mut area = egui::ScrollArea::vertical().id_salt("tokens").auto_shrink(false);
        // Another text (or model: other tokens): from the top, unless a token is to be scrolled
        // to (the old offset meant nothing in it). Another k, mode or adapter on the same text,
        // or the full result after its preview, keeps the place.
        let other_tokens = self.shown_key.as_ref().is_some_and(|k| (k.text_gen, k.model_gen) != (res.key.text_gen, res.key.model_gen));
        if self.shown_key.as_ref() != Some(&res.key) {
            self.shown_key = Some(res.key.clone());
            if other_tokens {
                area = area.vertical_scroll_offset(0.0);
                self.first_visible = 0;
            }
        }
        if let Some(j) = scroll_to.take() {
            if let Some(&l) = lay.line_of.get(j) {
                area = area.vertical_scroll_offset((l as f32 * ROW_H - 100.0).max(0.0));
            }
        }
        let colouring = Colouring::of(cx);
        let mut hovered = None;
        let mut clicked = None;
        let mut range_done = None;
        area.show_viewport(ui, |ui, viewport| {
            let total = lay.lines.len() as f32 * ROW_H;
            let (rect, resp) = ui.allocate_exact_size(vec2(width, total), Sense::click_and_drag());
            let pointer = resp.hover_pos();
            self.origin = Some(rect.min);
            let first = (viewport.min.y / ROW_H).floor().max(0.0) as usize;
            let last = ((viewport.max.y / ROW_H).ceil() as usize + 1).min(lay.lines.len());
            self.first_visible = lay.lines.get(first).map_or(0, |l| l.0);
            let painter = ui.painter_at(rect);
            for line in first..last {
                let origin = rect.min + vec2(0.0, line as f32 * ROW_H);
                if let Some(i) = paint_line(&painter, res, lay, line, origin, layer, colouring, &marks, pointer) {
                    hovered = Some(i);
                }
            }
            // A drag over tokens selects the range from the token it started on to the one it
            // ends on; shift-click selects from the selected token to the clicked one.
            if resp.drag_started() {
                let from = ui.input(|i| i.pointer.press_origin()).and_then(|p| token_at(lay, rect.min, p));
                self.dragging = from.map(|a| (a, a));
            }
            if let (Some((a, _)), Some(p)) = (self.dragging, resp.interact_pointer_pos()) {
                if let Some(b) = token_at(lay, rect.min, p) {
                    self.dragging = Some((a, b));
                }
            }
            if resp.drag_stopped() {
                if let Some((a, b)) = self.dragging.take() {
                    range_done = Some((a, b));
                }
            }
            if resp.clicked() {
                let shift = ui.input(|i| i.modifiers.shift);
                match (shift, cx.selection.selected, hovered) {
                    (true, Some(a), Some(b)) => range_done = Some((a, b)),
                    _ => clicked = Some(hovered),
                }
            }
            if let Some(i) = hovered {
                let tip = match res.token_routing(layer, i) {
                    Some(r) => format!(
                        "#{i} {:?}: groups {:?}, confidence {:.3}, {}",
                        res.analysis.tokens[i].text,
                        r.top.iter().map(|&g| res.group_name(layer, g, colouring.raw)).collect::<Vec<_>>(),
                        r.confidence,
                        super::categories::category_of(res, i)
                    ),
                    None => format!("#{i}"),
                };
                resp.on_hover_text_at_pointer(tip);
            }
        });
        out.push(Command::Hover { token: hovered, layer: None });
        if let Some(c) = clicked {
            out.push(Command::Select(c));
        }
        if let Some(r) = range_done {
            out.push(Command::SelectRange(Some(r)));
        }
        out
    }
}

/// The selected token's partners (when computed for this analysis and layer) by token.
pub fn partner_map(cx: &ViewCtx, res: &AnalysisResult, layer: usize) -> (std::collections::HashMap<usize, f32>, f32) {
    let sel = cx.selection;
    let p = sel.partners.as_ref().filter(|p| Some(p.token) == sel.selected && p.range == sel.range && p.key == res.key && p.layer == layer);
    let map = p.map(|p| p.partners.iter().cloned().collect()).unwrap_or_default();
    (map, p.and_then(|p| p.partners.first().map(|x| x.1)).unwrap_or(1.0))
}

/// The token view as SVG: the selected layer; with a selected range, only the range's tokens,
/// its legend counting the range's tokens.
/// The Tokens view as SVG: the selected range, else (at most 4000 tokens) from the first token
/// on screen (`from`), as the screen shows them; its title says which tokens it holds.
pub fn svg(res: &AnalysisResult, layer: usize, raw: bool, range: Option<(usize, usize)>, from: usize) -> String {
    let span = match range {
        Some((a, b)) if b < res.tokens() => a..b + 1,
        _ => {
            let a = from.min(res.tokens().saturating_sub(1));
            a..res.tokens().min(a + 4000)
        }
    };
    tokens_svg(res, &[layer], 100, span, raw)
}

/// The tokens of `span` (at most the first 4000 of it) coloured by group, one column per layer,
/// wrapped at `cols` characters (monospace), with a legend per column (group sizes over `span`).
pub fn tokens_svg(res: &AnalysisResult, layers: &[usize], cols: usize, span: std::ops::Range<usize>, raw: bool) -> String {
    let size = 11.0;
    let cw = size * 0.6;
    let row = size * 1.6;
    let first = span.start.min(res.tokens());
    let end = span.end.min(res.tokens()).min(first + 4000).max(first);
    let n = end - first;
    let whole = first == 0 && end == res.tokens();
    // Line breaks by character count, the same for every column.
    let mut pos = Vec::with_capacity(n);
    let (mut line, mut x) = (0usize, 0usize);
    // A character split over byte tokens is written once (`pieces`).
    let shown = pieces(&res.analysis.tokens[first..end]);
    for (t, piece) in res.analysis.tokens[first..end].iter().zip(&shown) {
        let len = display_text(piece).chars().count();
        if x > 0 && x + len > cols {
            line += 1;
            x = 0;
        }
        pos.push((line, x));
        x += len;
        if t.text.contains('\n') {
            line += 1;
            x = 0;
        }
    }
    let col_w = cols as f64 * cw + 30.0;
    let legend_h = (res.groups() as f64 + 2.0) * row;
    let height = legend_h + (line + 2) as f64 * row + 20.0;
    let mut s = Svg::new(col_w * layers.len().max(1) as f64 + 20.0, height);
    for (c, &l) in layers.iter().enumerate() {
        let x0 = 10.0 + c as f64 * col_w;
        let mut sizes = vec![0usize; res.groups()];
        for &g in &res.argmax[l][first..end] {
            sizes[g as usize] += 1;
        }
        let title = if first == 0 && n == res.tokens() {
            format!("layer {l} ({n} tokens)")
        } else if first == 0 {
            format!("layer {l}: tokens #0-#{} ({n} of {} tokens)", end - 1, res.tokens())
        } else {
            format!("layer {l}: tokens #{first}-#{} ({n} of {})", end - 1, res.tokens())
        };
        s.text(x0, row, &title, size + 2.0, "black", "start");
        for (n, g) in res.groups_in_shown_order(l, raw).into_iter().enumerate() {
            let y = row * (n as f64 + 1.5);
            let shown = res.shown_group(l, g, raw);
            s.rect(x0, y, 10.0, 10.0, &palette::hex(palette::group(shown)), None);
            let of = if whole { String::new() } else { format!(" here, {} in all", res.analysis.layers[l].group_size[g]) };
            s.text(x0 + 14.0, y + 9.0, &format!("{}: {} tokens{of}, {}", res.group_name(l, g, raw), sizes[g], res.labels[l][g]), size, "black", "start");
        }
        for i in 0..n {
            let (ln, cx) = pos[i];
            let txt = display_text(shown[i]);
            let (x, y) = (x0 + cx as f64 * cw, legend_h + ln as f64 * row);
            let g = res.shown_group(l, res.argmax[l][first + i] as usize, raw);
            s.rect(x, y, txt.chars().count() as f64 * cw, row - 2.0, &palette::hex(palette::group(g)), None);
            s.mono(x, y + row * 0.7, &txt, size);
        }
    }
    s.finish()
}

#[cfg(test)]
mod tests {
    /// WCAG relative luminance.
    fn lum(c: egui::Color32) -> f64 {
        let ch = |v: u8| {
            let v = v as f64 / 255.0;
            if v <= 0.03928 { v / 12.92 } else { ((v + 0.055) / 1.055).powf(2.4) }
        };
        0.2126 * ch(c.r()) + 0.7152 * ch(c.g()) + 0.0722 * ch(c.b())
    }

    /// The partner outline stands out (contrast >= 3:1) on every group colour, the red one
    /// included.
    #[test]
    fn partner_outline_shows_on_every_group_colour() {
        let okabe = crate::gui::paint::palette::OKABE_ITO.iter().map(|c| egui::Color32::from_rgb(c[0], c[1], c[2]));
        for (g, c) in (0..12).map(crate::gui::paint::palette::group).chain(okabe).enumerate() {
            let (a, b) = (lum(super::PARTNER_OUTLINE), lum(c));
            let contrast = (a.max(b) + 0.05) / (a.min(b) + 0.05);
            assert!(contrast >= 3.0, "colour {g}: contrast {contrast:.2}");
        }
    }
}
