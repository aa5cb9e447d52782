//! Generation as the CLI (`focus-lens generate`) and the GUI's Generate view drive it, shared by
//! both: the prompt's tokens (optionally wrapped in the model's chat template) and `Run`, which
//! prefills the prompt, then samples and feeds token after token until a stop token (EOS, or the
//! end-of-turn token the GGUF names), the token budget or the model's context.

use focus_core::attention::decode::ReadBytes;
use focus_core::generate::sampler::{log_prob, Sampler};
use focus_core::generate::{chat, chat_process, Generator, Step};
use focus_core::{Adapter, Error, Mode, Model, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

/// How tokens are drawn, and how many at most.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    pub max_tokens: usize,
    /// >= 0; 0 is greedy.
    pub temperature: f64,
    /// (0, 1]: draw from the likeliest tokens holding this share of the probability.
    pub top_p: f64,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { max_tokens: 256, temperature: 0.8, top_p: 0.95, seed: 0 }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    MaxTokens,
    Context,
    /// A stop token was drawn.
    Eos,
}

impl Stop {
    /// The name the CLI's JSON summary gives it.
    pub fn name(self) -> &'static str {
        match self {
            Stop::MaxTokens => "max_tokens",
            Stop::Context => "context",
            Stop::Eos => "eos",
        }
    }
}

/// The executable that renders chat templates in a child process (it serves
/// `chat_process::RENDER_ARG`): set by `set_renderer`, else this one (focus-lens).
static RENDERER: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Renders chat templates with `exe` (a focus-lens binary) instead of the running executable:
/// for tests, whose executable is the test harness. The first call wins.
pub fn set_renderer(exe: std::path::PathBuf) {
    let _ = RENDERER.set(exe);
}

fn renderer() -> Result<std::path::PathBuf> {
    match RENDERER.get() {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().map_err(|e| Error::Invalid(format!("cannot find this executable to render the chat template: {e}"))),
    }
}

/// The prompt as the model reads it: `text`, or with `chat` the text as a user turn in the
/// model's chat template. Returns the text that was encoded (the rendered turn with `chat`, less
/// the BOS the tokenizer adds itself) and its ids.
pub fn prompt(model: &Model, text: &str, chat: bool) -> Result<(String, Vec<u32>)> {
    let tok = model.tokenizer()?;
    let (text, ids) = if chat {
        let template = chat::chat_template(model)?.ok_or_else(|| Error::Invalid(format!("{} has no chat template (tokenizer.chat_template)", model.path.display())))?;
        let name = |id: Option<u32>| id.map(|i| tok.token_text(i)).unwrap_or_default();
        let bos = name(tok.bos_id());
        // In a child process, killed past its time limit: a hostile template leaves no thread
        // spinning in the GUI (or the CLI: one way for both).
        let rendered = chat_process::render_user_turn_in_child(&renderer()?, &template, text, &bos, &name(tok.eos_id()), chat::LIMITS)?;
        // The tokenizer puts BOS in front itself when the model asks for it.
        let rendered = match rendered.strip_prefix(bos.as_str()) {
            Some(rest) if tok.add_bos() && !bos.is_empty() => rest.to_string(),
            _ => rendered,
        };
        let ids = tok.encode(&rendered, true)?.ids;
        (rendered, ids)
    } else {
        (text.to_string(), tok.encode(text, false)?.ids)
    };
    let ctx = model.config().context;
    if ids.is_empty() {
        return Err(Error::Invalid("the prompt has no tokens".into()));
    }
    if ids.len() >= ctx {
        return Err(Error::Invalid(format!("the prompt's {} tokens leave no room in the model's context of {ctx} tokens", ids.len())));
    }
    Ok((text, ids))
}

/// One drawn token.
#[derive(Debug, Clone, Copy)]
pub struct Sampled {
    pub id: u32,
    /// Its log-probability under the model (temperature 1, before top-p).
    pub logprob: f64,
    /// A stop token: it ends the run and is not fed (it has no routing and read nothing).
    pub stop: bool,
}

/// A generation in progress.
pub struct Run<'a> {
    pub generator: Generator<'a>,
    sampler: Sampler,
    stops: Vec<u32>,
    /// The tokenizer's ids: an embedding padded past them (512 rows for 260 ids, as many
    /// checkpoints are) has logits for ids no text has, which are never drawn.
    n_ids: usize,
    max_tokens: usize,
    context: usize,
    /// The step of the newest token fed: its logits choose the next token.
    step: Step,
    /// The tokens drawn so far (a final stop token included).
    pub generated: Vec<u32>,
    pub stop: Option<Stop>,
    /// Bytes the generated tokens' attention read from the caches.
    pub read: ReadBytes,
}

impl<'a> Run<'a> {
    /// Prefills `prompt` (non-empty, shorter than the context). `cancel` stops the prefill
    /// between layers and any later step (`Error::Cancelled`).
    pub fn start(model: &'a Model, adapter: Option<&'a Adapter>, mode: Mode, prompt: &[u32], s: &Sampling, cancel: Option<&'a AtomicBool>) -> Result<Run<'a>> {
        let stops = chat::stop_ids(model)?;
        let mut generator = Generator::new(&model.decoder, adapter, mode)?;
        if let Some(c) = cancel {
            generator.set_cancel(c);
        }
        let step = generator.feed(prompt)?;
        let sampler = Sampler::new(s.temperature, s.top_p, s.seed);
        let n_ids = model.tokenizer()?.vocab_size().clamp(1, step.logits.len().max(1));
        Ok(Run { generator, sampler, stops, n_ids, max_tokens: s.max_tokens, context: model.config().context, step, generated: Vec::new(), stop: None, read: ReadBytes::default() })
    }

    /// The step of the newest token fed (the prompt's last, then each generated one's).
    pub fn step(&self) -> &Step {
        &self.step
    }

    /// Draws the next token and feeds it (a stop token is not fed); `None` once the run has
    /// ended (`stop` says why).
    pub fn next(&mut self) -> Result<Option<Sampled>> {
        if self.stop.is_some() {
            return Ok(None);
        }
        if self.generated.len() >= self.max_tokens {
            self.stop = Some(Stop::MaxTokens);
            return Ok(None);
        }
        if self.generator.ids().len() >= self.context {
            self.stop = Some(Stop::Context);
            return Ok(None);
        }
        // Logits past the tokenizer's ids are masked out (drawn from and normalised over the
        // tokenizer's ids only).
        let logits = &self.step.logits[..self.n_ids.min(self.step.logits.len())];
        let id = self.sampler.sample(logits);
        let logprob = log_prob(logits, id);
        let stop = self.stops.contains(&id);
        if stop {
            self.stop = Some(Stop::Eos);
        } else {
            self.step = self.generator.feed(&[id])?;
            self.read.add(self.step.read);
        }
        self.generated.push(id);
        Ok(Some(Sampled { id, logprob, stop }))
    }
}
