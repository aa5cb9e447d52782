//! The Generate view's background job: a `sampling::Run` (the CLI's loop) on the worker, whose
//! state goes to the view as it grows (`Generated`, at most every `SEND_EVERY` and at the end),
//! with what the view draws already derived off the UI thread: per layer every token's top group
//! and top-k set, the groups' numbers (the app's one numbering, `analysis::identity`, so that a
//! group has the number and colour the other views give it), and the keys the newest token may attend under the top-k mask
//! (`decode::selected_keys`, the mask rule's own keys).

use super::error::JobError;
use crate::gui::state::RunParams;
use crate::gui::worker::Handle;
use crate::sampling::{self, Run, Sampling, Stop};
use focus_core::focus::mask;
use focus_core::attention::decode::{self, DecodeAttention, ReadBytes};
use focus_core::generate::Strategy;
use focus_core::{Adapter, Model};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The view is sent the run's state at most this often (and once more when it ends): a frame
/// per token would cost the generation CPU time it needs.
pub const SEND_EVERY: Duration = Duration::from_millis(100);

pub struct GenJob {
    pub model: Arc<Model>,
    /// As configured: the Run controls' window, the Sinkhorn variant the view chose.
    pub adapter: Arc<Adapter>,
    /// Mode, k and window as run; `causal` says the Sinkhorn variant (always `Some`).
    pub params: RunParams,
    /// `params`' mode, k checked against the adapter's K.
    pub mode: focus_core::Mode,
    pub prompt: String,
    pub chat: bool,
    pub sampling: Sampling,
    /// The app's numbering of groups (`analysis::identity`): the generation's groups are
    /// numbered by it (its own adapter's numbers, as every view shows them), else by their own
    /// chain across layers.
    pub ids: Option<focus_core::analysis::identity::GroupIds>,
    /// The adapter's fingerprint, as `ids` names adapters.
    pub adapter_sha256: String,
}

/// One layer of a generation's state.
#[derive(Debug, Clone)]
pub struct GenLayer {
    /// False where the adapter leaves the layer unrouted: it attends densely, with no groups.
    pub routed: bool,
    /// Per token, its top group (empty when not routed).
    pub argmax: Vec<u8>,
    /// Per token, its top-k set (bitmask; empty when not routed).
    pub masks: Vec<u64>,
    /// Per group, its number: the app's (`analysis::identity`), else matched across layers
    /// (`align::chain`).
    pub aligned: Vec<usize>,
    /// The positions the newest token may attend, ascending: its window and the tokens whose
    /// top-k sets meet its own (the layer's own sliding window applied).
    pub attended: Vec<u32>,
}

/// A generation as far as it has got.
#[derive(Debug, Clone)]
pub struct Generated {
    pub params: RunParams,
    pub strategy: Strategy,
    /// The text the prompt's tokens encode (the rendered chat turn with the chat template).
    pub prompt_text: String,
    pub prompt_tokens: usize,
    /// Every token fed: the prompt's, then the generated ones (a final stop token is not fed).
    pub ids: Vec<u32>,
    /// Each fed token's text.
    pub texts: Vec<String>,
    /// The prompt's text and the generated text: what "Analyse this" loads.
    pub text: String,
    pub groups: usize,
    pub window: usize,
    pub layers: Vec<GenLayer>,
    /// Tokens drawn (a final stop token included).
    pub drawn: usize,
    pub stop: Option<Stop>,
    pub prefill_seconds: f64,
    /// Since the prefill ended.
    pub seconds: f64,
    pub read: ReadBytes,
}

impl Generated {
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }
    /// The number (and colour) group `g` of `layer` is shown by: matched across layers, or raw.
    pub fn shown_group(&self, layer: usize, g: usize, raw: bool) -> usize {
        if raw {
            return g;
        }
        self.layers.get(layer).and_then(|l| l.aligned.get(g)).copied().unwrap_or(g)
    }
    /// Its name: "g3", or raw "c5" (`analysis::identity::group_name`).
    pub fn group_name(&self, layer: usize, g: usize, raw: bool) -> String {
        focus_core::analysis::identity::group_name(self.shown_group(layer, g, raw), focus_core::analysis::shown::Numbering::raw_if(raw))
    }
    /// Generated tokens per second, after the prefill.
    pub fn tokens_per_second(&self) -> f64 {
        if self.seconds > 0.0 { self.drawn as f64 / self.seconds } else { 0.0 }
    }
}

/// Appends token `id`'s text as the view shows it (`texts`, one per token of `ids`): a character
/// split over byte tokens is shown once, whole, by the token that starts it, and the tokens that
/// continue it show nothing (`paint::token_text::CONTINUES`), as in the token view; each piece
/// decoded alone was U+FFFD, which drew CJK text as rows of replacement marks. `open`: the first
/// token of the character still incomplete (`ids.len()` when none); returns the new one. A
/// sequence that never completes (more than 4 tokens: no UTF-8 character is longer) is shown
/// as decoded, lossily.
fn push_piece(tok: &focus_core::model::tokenizer::Tokenizer, ids: &mut Vec<u32>, texts: &mut Vec<String>, open: usize, id: u32) -> usize {
    ids.push(id);
    texts.push(crate::gui::paint::token_text::CONTINUES.to_string());
    let n = ids.len();
    let text = tok.decode(&ids[open..]).unwrap_or_default();
    if text.ends_with('\u{FFFD}') && n - open < 4 {
        // The character goes on in the next token: nothing shown yet.
        return open;
    }
    if text.ends_with('\u{FFFD}') {
        for i in open..n {
            texts[i] = tok.token_text(ids[i]);
        }
    } else {
        texts[open] = text;
    }
    n
}

impl GenJob {
    /// Runs to the end (or a stop on `h`), sending the state through `interim` as it grows.
    pub fn run(self, h: &Handle, interim: &dyn Fn(Generated)) -> Result<Generated, JobError> {
        h.set_progress(0, 0, "tokenising the prompt");
        let (prompt_text, prompt) = sampling::prompt(&self.model, &self.prompt, self.chat)?;
        h.set_progress(0, 0, format!("prefill of {} tokens", prompt.len()));
        let t0 = Instant::now();
        let mut run = Run::start(&self.model, Some(self.adapter.as_ref()), self.mode, &prompt, &self.sampling, Some(&h.cancel))?;
        let prefill_seconds = t0.elapsed().as_secs_f64();
        let tok = self.model.tokenizer()?;
        let mut ids: Vec<u32> = Vec::with_capacity(prompt.len() + self.sampling.max_tokens);
        let mut texts: Vec<String> = Vec::with_capacity(ids.capacity());
        let mut open = 0;
        for &id in &prompt {
            open = push_piece(tok, &mut ids, &mut texts, open, id);
        }
        let t1 = Instant::now();
        let state = |run: &Run, texts: &[String]| self.state(run, texts, &prompt_text, prompt.len(), prefill_seconds, t1.elapsed().as_secs_f64());
        interim(state(&run, &texts)?);
        let mut sent = Instant::now();
        let max = self.sampling.max_tokens;
        while let Some(t) = run.next()? {
            if !t.stop {
                open = push_piece(tok, &mut ids, &mut texts, open, t.id);
            }
            h.set_progress(run.generated.len(), max, format!("{} of {max} tokens", run.generated.len()));
            if sent.elapsed() >= SEND_EVERY && run.stop.is_none() {
                interim(state(&run, &texts)?);
                sent = Instant::now();
            }
        }
        state(&run, &texts)
    }

    fn state(&self, run: &Run, texts: &[String], prompt_text: &str, prompt_tokens: usize, prefill_seconds: f64, seconds: f64) -> Result<Generated, JobError> {
        let cfg = &self.adapter.config;
        let ids = run.generator.ids().to_vec();
        let mut layers = Vec::new();
        for (l, cache) in run.generator.layers().iter().enumerate() {
            let n = cache.len();
            let layer = match &cache.routing {
                Some(r) => {
                    let (mut keys, _) = decode::selected_keys(cache, DecodeAttention::TopK { window: cfg.window, sink: cfg.sink })?;
                    // The layer's own sliding window drops keys in every mode, as `decode::attend` does.
                    if let Some(w) = self.model.decoder.blocks[l].attn.window {
                        keys.retain(|&j| n - 1 - (j as usize) < w);
                    }
                    keys.sort_unstable();
                    let argmax = (0..r.masks.len()).map(|i| mask::top_k_indices(r.row(i), 1)[0] as u8).collect();
                    GenLayer { routed: true, argmax, masks: r.masks.clone(), aligned: Vec::new(), attended: keys }
                }
                None => GenLayer { routed: false, argmax: Vec::new(), masks: Vec::new(), aligned: Vec::new(), attended: (0..n as u32).collect() },
            };
            layers.push(layer);
        }
        let masks: Vec<Vec<u64>> = layers.iter().map(|l| l.masks.clone()).collect();
        let numbers = match self.ids.as_ref().and_then(|i| i.numbers_for(&self.adapter_sha256, cfg.groups, &ids, &masks)) {
            Some((maps, _)) => maps,
            None => focus_core::analysis::align::chain(&masks, cfg.groups),
        };
        for (l, a) in layers.iter_mut().zip(numbers) {
            l.aligned = a;
        }
        let tok = self.model.tokenizer()?;
        let fed = &ids[prompt_tokens..];
        let text = format!("{prompt_text}{}", tok.decode(fed)?);
        Ok(Generated {
            params: self.params.clone(),
            strategy: run.generator.strategy(),
            prompt_text: prompt_text.to_string(),
            prompt_tokens,
            ids,
            texts: texts.to_vec(),
            text,
            groups: cfg.groups,
            window: cfg.window,
            layers,
            drawn: run.generated.len(),
            stop: run.stop,
            prefill_seconds,
            seconds,
            read: run.read,
        })
    }
}
