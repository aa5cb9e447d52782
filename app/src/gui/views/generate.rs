//! Generate: a prompt (typed, or the end of the loaded text), then tokens streaming in from a
//! background run (`gui::jobs::streaming::GenJob`, the CLI's loop), coloured by their group in the
//! selected layer with the app's palette and cross-layer numbering. The newest token's
//! attendable tokens (its window, and the tokens whose top-k sets meet its own) stay bright and
//! the rest fade, with the share of the context they are; the ones beyond the window carry the
//! partner outline of the token view. Sampling settings, Stop, and "Analyse this", which loads
//! prompt and generation as the app's text and analyses it with the settings it ran with.
//! Mode, k and window are the Run controls' (left panel); the Sinkhorn variant is the view's
//! choice, causal by default (see `GenSettings::causal`).

use super::tokens::{display_text, TokenLayout, FONT, PAD, PARTNER_OUTLINE, ROW_H};
use super::view::{Command, View, ViewCtx};
use crate::sampling::Stop;
use crate::gui::jobs::streaming::{GenJob, Generated};
use crate::gui::paint::palette;
use crate::gui::session::Session;
use crate::gui::state::{GenSettings, RunParams, Setting, mode_label};
use focus_core::ModeKind;
use crate::gui::worker::TaskKind;
use egui::{pos2, vec2, Color32, FontId, Rect, Sense, Stroke};
use focus_core::generate::{Generator, Strategy};

/// "Continue the loaded text" puts at most this many characters of its end in the prompt (about
/// 500 tokens of English: the whole-sequence variant reruns them all for every token).
pub const CONTINUE_CHARS: usize = 2000;

/// Colours of the marks.
const FADED: f32 = 0.3;
const GENERATED_BAR: Color32 = Color32::from_rgb(40, 40, 40);
const WARN: Color32 = Color32::from_rgb(170, 90, 0);

#[derive(Default)]
pub struct GenerateView {
    pub prompt: String,
    /// The run on screen: the last state its job sent.
    pub run: Option<Generated>,
    /// Counts the states received: the token layout's key.
    version: usize,
    layout: TokenLayout,
    /// The strategy the settings would run with (asked of `Generator::new`), and what it was
    /// asked for: (adapter generation, Run controls, causal choice).
    strategy: Option<((u64, RunParams, bool), Result<Strategy, String>)>,
}

/// The end of `text`: at most `max` characters, starting at a word when it is cut.
pub fn tail(text: &str, max: usize) -> &str {
    let n = text.chars().count();
    if n <= max {
        return text;
    }
    let (cut, _) = text.char_indices().nth(n - max).expect("n > max");
    let rest = &text[cut..];
    match rest.find(char::is_whitespace) {
        Some(p) => rest[p..].trim_start(),
        None => rest,
    }
}

/// Why a run ended, in words.
fn ended(stop: Stop) -> &'static str {
    match stop {
        Stop::MaxTokens => "max tokens reached",
        Stop::Context => "the model's context is full",
        Stop::Eos => "end-of-sequence token",
    }
}

impl GenerateView {
    /// A state of the running generation (its latest, or its last).
    pub fn receive(&mut self, g: Generated) {
        self.run = Some(g);
        self.version += 1;
    }

    /// The job the settings ask for (`Err`: why there is none).
    fn job(&self, cx: &ViewCtx, gs: &GenSettings) -> Result<GenJob, String> {
        let m = cx.session.model.as_ref().ok_or("the model is still loading")?;
        let a = cx.session.adapter.as_ref().filter(|a| a.model_gen == m.gen).ok_or("the adapter is still loading")?;
        let mut params = cx.settings.setup.params.clone();
        if gs.causal {
            params.causal = Some(true);
        }
        let adapter = Session::configured_adapter(&a.adapter, &params);
        params.causal = Some(adapter.config.causal_sinkhorn);
        let mode = params.mode(adapter.config.groups).map_err(|e| e.to_string())?;
        Ok(GenJob {
            model: m.model.clone(),
            adapter,
            params,
            mode,
            prompt: self.prompt.clone(),
            chat: gs.chat,
            sampling: gs.sampling,
            ids: cx.session.ids.clone(),
            adapter_sha256: a.sha256.clone(),
        })
    }

    /// How the settings would generate: asked of the generator itself (the one rule), once per
    /// change of the settings.
    fn strategy(&mut self, cx: &ViewCtx, gs: &GenSettings) -> Option<Result<Strategy, String>> {
        let a = cx.session.adapter.as_ref()?;
        let key = (a.gen, cx.settings.setup.params.clone(), gs.causal);
        if self.strategy.as_ref().is_none_or(|(k, _)| *k != key) {
            let s = self.job(cx, gs).and_then(|j| Generator::new(&j.model.decoder, Some(j.adapter.as_ref()), j.mode).map(|g| g.strategy()).map_err(|e| e.to_string()));
            self.strategy = Some((key, s));
        }
        self.strategy.as_ref().map(|(_, s)| s.clone())
    }

    /// The Sinkhorn variant and what it costs.
    fn routing_choice(&mut self, cx: &ViewCtx, gs: &mut GenSettings, ui: &mut egui::Ui) {
        let p = &cx.settings.setup.params;
        let adapter = cx.session.adapter.as_ref().map(|a| &a.adapter.config);
        let analysis_causal = p.causal.or(adapter.map(|c| c.causal_sinkhorn)).unwrap_or(false);
        ui.horizontal_wrapped(|ui| {
            let window = p.window.or(adapter.map(|c| c.window)).unwrap_or(0);
            ui.label(format!("mode {}, w = {window} (the Run controls) · Sinkhorn:", p.mode_label()));
            ui.radio_value(&mut gs.causal, true, "causal").on_hover_text("each token routed over its prefix only: the KV cache is exact, one step per token");
            let variant = if analysis_causal { "causal" } else { "whole-sequence" };
            ui.radio_value(&mut gs.causal, false, format!("the analysis' ({variant})"));
        });
        match self.strategy(cx, gs) {
            Some(Ok(Strategy::Recompute)) => {
                ui.colored_label(
                    WARN,
                    format!("Whole-sequence Sinkhorn in {} mode: every new token changes every earlier token's routing, so no KV cache is exact and every token reruns the whole sequence (exact, O(T²) per token: slow).", p.mode_label()),
                );
            }
            Some(Ok(Strategy::KvCache)) if gs.causal && adapter.is_some_and(|c| !c.causal_sinkhorn) && p.mode != ModeKind::Dense => {
                ui.weak("KV cache, one step per token. The adapter was trained with whole-sequence Sinkhorn: causally it routes many tokens differently (focus-lens bench routing measures how many).");
            }
            Some(Ok(Strategy::KvCache)) => {
                ui.weak("KV cache, one step per token.");
            }
            Some(Err(e)) => {
                ui.colored_label(WARN, e);
            }
            None => {}
        }
    }

    fn status_line(&self, cx: &ViewCtx, running: bool, ui: &mut egui::Ui) {
        let Some(r) = &self.run else {
            if running {
                crate::gui::paint::busy::busy(ui);
                let what = cx.worker.progress().into_iter().find(|p| p.0 == TaskKind::Generate).map(|p| p.3).unwrap_or_default();
                ui.label(what);
            }
            return;
        };
        let how = match r.strategy {
            Strategy::KvCache => "KV cache",
            Strategy::Recompute => "recomputing",
        };
        let reads = if r.read.dense > 0 && r.params.mode != ModeKind::Dense { format!("; attention read {:.1}% of dense's bytes", 100.0 * r.read.fraction()) } else { String::new() };
        let speed = format!("{:.1} tok/s, {how}", r.tokens_per_second());
        if running {
            crate::gui::paint::busy::busy(ui);
            ui.label(format!("generating: {} of {} tokens, {speed}", r.drawn, cx.settings.prefs.generate.sampling.max_tokens));
        } else {
            let end = r.stop.map_or("stopped", ended);
            ui.label(format!("{} tokens ({end}) in {:.2} s, {speed}; prompt of {} tokens in {:.2} s; {}{reads}", r.drawn, r.seconds, r.prompt_tokens, r.prefill_seconds, r.params.mode_label()));
        }
    }

    /// The prompt's and the generated tokens, coloured by group in `layer`, following the newest.
    fn tokens(&mut self, cx: &ViewCtx, layer: usize, ui: &mut egui::Ui) {
        let Some(run) = &self.run else { return };
        let width = ui.available_width() - 16.0;
        self.layout.ensure_texts(ui, self.version, || run.texts.iter().map(String::as_str), width);
        let lay = &self.layout;
        let l = &run.layers[layer];
        let raw = cx.settings.setup.raw_groups;
        let newest = run.tokens() - 1;
        let font = FontId::monospace(FONT);
        egui::ScrollArea::vertical().id_salt("generated").auto_shrink(false).stick_to_bottom(true).show_viewport(ui, |ui, viewport| {
            let (rect, resp) = ui.allocate_exact_size(vec2(width, lay.lines.len() as f32 * ROW_H), Sense::hover());
            let pointer = resp.hover_pos();
            let painter = ui.painter_at(rect);
            let first = (viewport.min.y / ROW_H).floor().max(0.0) as usize;
            let last = ((viewport.max.y / ROW_H).ceil() as usize + 1).min(lay.lines.len());
            let mut hovered = None;
            for line in first..last {
                let (s, e) = lay.lines[line];
                let origin = rect.min + vec2(0.0, line as f32 * ROW_H);
                for i in s..e {
                    let r = Rect::from_min_size(origin + vec2(lay.xs[i], 0.0), vec2(lay.widths[i], ROW_H - 2.0));
                    let attended = l.attended.binary_search(&(i as u32)).is_ok();
                    let colour = match l.argmax.get(i) {
                        Some(&g) => palette::group(run.shown_group(layer, g as usize, raw)),
                        None => Color32::LIGHT_GRAY,
                    };
                    let (fill, ink) = if attended { (colour, Color32::BLACK) } else { (palette::mix(&[(colour, FADED), (Color32::WHITE, 1.0 - FADED)]), Color32::from_gray(130)) };
                    painter.rect_filled(r, 2.0, fill);
                    painter.text(pos2(r.min.x + PAD, r.center().y), egui::Align2::LEFT_CENTER, &lay.texts[i], font.clone(), ink);
                    if attended && newest - i > run.window {
                        // Beyond the window, sharing a group: the token view's partner mark.
                        painter.rect_stroke(r, 2.0, Stroke::new(2.0, PARTNER_OUTLINE), egui::StrokeKind::Inside);
                        painter.rect_stroke(r.shrink(2.0), 1.0, Stroke::new(1.0, Color32::WHITE), egui::StrokeKind::Inside);
                    }
                    if i >= run.prompt_tokens {
                        painter.rect_filled(Rect::from_min_max(pos2(r.min.x, r.max.y - 2.0), r.max), 0.0, GENERATED_BAR);
                    }
                    if i == newest {
                        painter.rect_stroke(r, 2.0, Stroke::new(2.5, Color32::BLACK), egui::StrokeKind::Outside);
                    }
                    if pointer.is_some_and(|p| r.contains(p)) {
                        hovered = Some((i, attended));
                    }
                }
            }
            if let Some((i, attended)) = hovered {
                let groups = match l.masks.get(i) {
                    Some(&m) => focus_core::focus::mask::groups(m).map(|g| run.group_name(layer, g, raw)).collect::<Vec<_>>().join(", "),
                    None => "not routed".into(),
                };
                let part = if i < run.prompt_tokens { "prompt" } else { "generated" };
                let reach = if i == newest {
                    "the newest token"
                } else if !attended {
                    "outside the newest token's window and groups"
                } else if newest - i > run.window {
                    "shares a group with the newest token"
                } else {
                    "in the newest token's window"
                };
                let text = if run.texts[i] == super::tokens::CONTINUES { "(the character before, continued)".to_string() } else { format!("{:?}", run.texts[i]) };
                resp.on_hover_text_at_pointer(format!("#{i} {text} ({part}): layer {layer} groups {groups}; {reach}"));
            }
        });
    }
}

impl View for GenerateView {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        let mut gs = cx.settings.prefs.generate;
        let running = cx.worker.is_running(TaskKind::Generate);
        let l = ui.label("Prompt:");
        // A long prompt scrolls in its box (of one height, so that nothing below it moves)
        // rather than pushing the controls off the window.
        egui::ScrollArea::vertical().id_salt("prompt").max_height(110.0).auto_shrink(false).show(ui, |ui| {
            let edit = egui::TextEdit::multiline(&mut self.prompt).min_size(vec2(0.0, 110.0)).desired_width(f32::INFINITY).hint_text("type a prompt, or continue the loaded text");
            ui.add(edit).labelled_by(l.id);
        });
        ui.horizontal(|ui| {
            let text = cx.session.text.as_ref();
            let b = ui.add_enabled(text.is_some(), egui::Button::new("Continue the loaded text"));
            if b.on_hover_text(format!("the end of the loaded text (at most its last {CONTINUE_CHARS} characters) as the prompt")).clicked() {
                if let Some(t) = text {
                    self.prompt = tail(&t.text, CONTINUE_CHARS).to_string();
                }
            }
            ui.checkbox(&mut gs.chat, "chat template").on_hover_text("wrap the prompt as a user turn in the model's chat template (tokenizer.chat_template)");
        });
        let context = cx.session.model.as_ref().map_or(1 << 20, |m| m.model.config().context);
        ui.horizontal_wrapped(|ui| {
            let s = &mut gs.sampling;
            ui.add(egui::DragValue::new(&mut s.temperature).range(0.0..=100.0).speed(0.01).prefix("temperature ")).on_hover_text("0 is greedy");
            ui.add(egui::DragValue::new(&mut s.top_p).range(0.01..=1.0).speed(0.005).prefix("top-p ")).on_hover_text("draw from the likeliest tokens holding this share of the probability");
            ui.add(egui::DragValue::new(&mut s.seed).prefix("seed ")).on_hover_text("the same seed, prompt and settings give the same tokens");
            ui.add(egui::DragValue::new(&mut s.max_tokens).range(1..=context).prefix("max tokens "));
        });
        self.routing_choice(cx, &mut gs, ui);
        // Wrapped: the line after the buttons says how the run went, at length.
        ui.horizontal_wrapped(|ui| {
            if running {
                if ui.button("Stop").on_hover_text("stops before the next token").clicked() {
                    out.push(Command::Cancel(TaskKind::Generate));
                }
            } else if ui.button("Start generating").clicked() {
                match self.job(cx, &gs) {
                    Ok(job) => {
                        self.run = None;
                        out.push(Command::StartGenerate(job));
                    }
                    Err(e) => out.push(Command::Error(format!("cannot generate: {e}"))),
                }
            }
            let done = self.run.as_ref().filter(|r| !running && r.tokens() > r.prompt_tokens);
            let analyse = ui.add_enabled(done.is_some(), egui::Button::new("Analyse this"));
            if analyse.on_hover_text("load the prompt and the generation as the text and analyse it with the settings it was generated with").clicked() {
                if let Some(r) = done {
                    out.push(Command::AnalyseGenerated { text: r.text.clone(), params: r.params.clone(), tokens: r.tokens() });
                }
            }
            self.status_line(cx, running, ui);
        });
        if gs != cx.settings.prefs.generate {
            out.push(Command::Set(Setting::Generate(gs)));
        }
        ui.separator();
        let shown = self.run.as_ref().map(|run| {
            let layer = cx.settings.setup.layer.min(run.layers.len().saturating_sub(1));
            newest_line(run, layer, ui);
            legend(run, layer, cx.settings.setup.raw_groups, ui);
            layer
        });
        match shown {
            Some(layer) => self.tokens(cx, layer, ui),
            None if !running => {
                ui.weak("Nothing generated yet.");
            }
            None => {}
        }
        out
    }
}

/// What the newest token may attend in `layer`, and the share of the context that is.
fn newest_line(run: &Generated, layer: usize, ui: &mut egui::Ui) {
    let l = &run.layers[layer];
    let n = run.tokens();
    let newest = n - 1;
    let text = display_text(&run.texts[newest]);
    if !l.routed {
        ui.label(format!("newest token #{newest} {text:?}: layer {layer} is not routed: it attends to all {n} tokens"));
        return;
    }
    let k = l.attended.len();
    let local = l.attended.iter().filter(|&&j| newest - j as usize <= run.window).count();
    let share = 100.0 * k as f64 / n as f64;
    let dense = match run.params.mode {
        ModeKind::TopK => String::new(),
        m => format!(" ({} attention reads all {n}; this is what the top-k mask keeps)", mode_label(m)),
    };
    ui.label(format!(
        "newest token #{newest} {text:?}, layer {layer}: may attend to {k} of {n} tokens ({share:.1}%): {local} in its window, {} beyond it sharing a group{dense}",
        k - local
    ));
}

/// Per group of `layer` (in shown order): its colour and its tokens in the generation.
fn legend(run: &Generated, layer: usize, raw: bool, ui: &mut egui::Ui) {
    let l = &run.layers[layer];
    if !l.routed {
        return;
    }
    let mut counts = vec![0usize; run.groups];
    for &g in &l.argmax {
        counts[g as usize] += 1;
    }
    let mut order: Vec<usize> = (0..run.groups).collect();
    order.sort_by_key(|&g| run.shown_group(layer, g, raw));
    ui.horizontal_wrapped(|ui| {
        ui.label(format!("layer {layer}:"));
        for g in order {
            let shown = run.shown_group(layer, g, raw);
            let (rect, _) = ui.allocate_exact_size(vec2(14.0, 14.0), Sense::hover());
            ui.painter().rect_filled(rect, 2.0, palette::group(shown));
            ui.label(format!("{} · {}", run.group_name(layer, g, raw), counts[g]));
        }
        ui.weak("· bright: what the newest token (black outline) may attend; outlined: beyond its window; underlined: generated");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_starts_at_a_word() {
        assert_eq!(tail("short text", CONTINUE_CHARS), "short text");
        let long = "word ".repeat(2000);
        let t = tail(&long, CONTINUE_CHARS);
        assert!(t.chars().count() <= CONTINUE_CHARS && t.starts_with("word"), "{:?}", &t[..20]);
    }
}
