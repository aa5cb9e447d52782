//! `generate`: text from a prompt, streamed to stdout token by token (or, with `--json`, one
//! JSON record per token), dense or with a Focus adapter, until EOS, `--max-tokens` or the
//! model's context. `--chat` wraps the prompt in the model's own chat template.

use super::common::{count, sampling_temperature, share, FocusArgs, ModelArgs};
use crate::sampling::{self, Run, Sampling, Stop};
use anyhow::{Context, Result};
use focus_core::generate::Strategy;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["prompt", "file"])))]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub focus: FocusArgs,
    /// The prompt text.
    #[arg(long)]
    pub prompt: Option<String>,
    /// A file holding the prompt.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Most tokens to generate, 1..=1048576 (generation also stops at EOS and at the model's
    /// context).
    #[arg(long, default_value_t = Sampling::default().max_tokens, value_parser = count::<1, 1048576>)]
    pub max_tokens: usize,
    /// Sampling temperature, [0, 100]; 0 is greedy.
    #[arg(long, default_value_t = Sampling::default().temperature, value_parser = sampling_temperature)]
    pub temperature: f64,
    /// Nucleus sampling: draw from the likeliest tokens holding this share of the
    /// probability, (0, 1].
    #[arg(long, default_value_t = Sampling::default().top_p, value_parser = share)]
    pub top_p: f64,
    /// Seed of the sampler: the same seed, model, prompt and flags give the same tokens.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Wrap the prompt as a user turn in the model's chat template (tokenizer.chat_template).
    #[arg(long)]
    pub chat: bool,
    /// One JSON record per line for each token (id, text, logprob, top-k groups per layer,
    /// bytes read), then a summary record.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let text = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => focus_core::io::text::read_text(f)?,
        (None, None) => unreachable!("clap requires --prompt or --file"),
    };
    // The prompt's tokens are at most its bytes, plus a chat template's few.
    let soft = a.focus.mode == focus_core::ModeKind::Soft;
    let prompt_bound = text.len() + if a.chat { 256 } else { 1 };
    a.model.check_memory(&format!("generate {} tokens", a.max_tokens), |_| Ok(focus_core::model::memory::Workload::generation(prompt_bound, a.max_tokens, soft)))?;
    let model = a.model.load()?;
    let (adapter, mode) = a.focus.load(&model)?;
    if mode != focus_core::Mode::Dense && adapter.is_none() {
        anyhow::bail!("--mode {} needs --adapter", mode.name());
    }
    let tok = model.tokenizer()?;
    let prompt = sampling::prompt(&model, &text, a.chat);
    let (_, prompt) = if a.chat { prompt.context("--chat")? } else { prompt? };
    let sampling = Sampling { max_tokens: a.max_tokens, temperature: a.temperature, top_p: a.top_p, seed: a.seed };
    let t0 = Instant::now();
    let mut run = Run::start(&model, adapter.as_ref(), mode, &prompt, &sampling, None)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    if run.generator.strategy() == Strategy::Recompute {
        eprintln!("note: this adapter uses whole-sequence Sinkhorn (causal_sinkhorn = false): each new token changes every earlier token's routing, so no KV cache is exact in {} mode; every token reruns the whole sequence (exact, O(T^2) per token)", mode.name());
    }
    let t1 = Instant::now();
    let mut shown = String::new();
    while let Some(t) = run.next()? {
        let step = run.step();
        if a.json {
            let rec = serde_json::json!({
                "index": run.generated.len() - 1, "id": t.id, "text": tok.token_text(t.id), "logprob": t.logprob,
                "groups": if t.stop { None } else { Some(&step.groups) },
                "bytes_read": if t.stop { None } else { Some(step.read) },
            });
            crate::outln!("{rec}")?;
        } else if !t.stop {
            // Print what is new once it is whole text (a character may span tokens).
            let full = tok.decode(&run.generated)?;
            if !full.ends_with('\u{FFFD}') {
                if let Some(new) = full.strip_prefix(shown.as_str()) {
                    crate::out!("{new}")?;
                }
                shown = full;
            }
        }
    }
    let gen_s = t1.elapsed().as_secs_f64();
    let (n, reason, read) = (run.generated.len(), run.stop.map_or("", Stop::name), run.read);
    let tps = if gen_s > 0.0 { n as f64 / gen_s } else { 0.0 };
    if a.json {
        let rec = serde_json::json!({
            "done": true, "reason": reason, "prompt_tokens": prompt.len(), "generated_tokens": n,
            "prefill_s": prefill_s, "generate_s": gen_s, "tokens_per_s": tps, "mode": mode.name(), "k": mode.k(),
            "strategy": format!("{:?}", run.generator.strategy()), "bytes_read": read, "read_fraction_of_dense": read.fraction(),
        });
        crate::outln!("{rec}")?;
    } else {
        crate::outln!()?;
        let reads = if read.dense > 0 && mode != focus_core::Mode::Dense { format!("; attention read {:.1}% of dense's bytes", 100.0 * read.fraction()) } else { String::new() };
        eprintln!("[{n} tokens ({reason}) in {gen_s:.2} s, {tps:.1} tok/s; prompt of {} tokens in {prefill_s:.2} s; mode {mode}{reads}]", prompt.len());
    }
    Ok(())
}
