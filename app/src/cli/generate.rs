//! `generate`: text from a prompt, streamed to stdout token by token (or, with `--json`, one
//! JSON record per token), dense or with a Focus adapter, until EOS, `--max-tokens` or the
//! model's context. `--chat` wraps the prompt in the model's own chat template.

use super::common::{count, load_adapter, sampling_temperature, share, ModeArgs, ModelArgs};
use anyhow::{Context, Result};
use focus_core::generate::decode::ReadBytes;
use focus_core::generate::sampler::{log_prob, Sampler};
use focus_core::generate::{chat, Generator, Strategy};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["prompt", "file"])))]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A Focus adapter directory (needed for soft and topk). With whole-sequence Sinkhorn
    /// (adapter_config causal_sinkhorn = false) no KV cache is exact in soft or topk mode: every
    /// new token then reruns the whole sequence (exact, but O(T^2) per token); causal-Sinkhorn
    /// adapters decode incrementally.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    #[command(flatten)]
    pub mode: ModeArgs,
    /// The prompt text.
    #[arg(long)]
    pub prompt: Option<String>,
    /// A file holding the prompt.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Most tokens to generate, 1..=1048576 (generation also stops at EOS and at the model's
    /// context).
    #[arg(long, default_value_t = 256, value_parser = count::<1, 1048576>)]
    pub max_tokens: usize,
    /// Sampling temperature, [0, 100]; 0 is greedy.
    #[arg(long, default_value_t = 0.8, value_parser = sampling_temperature)]
    pub temperature: f64,
    /// Nucleus sampling: draw from the likeliest tokens holding this share of the
    /// probability, (0, 1].
    #[arg(long, default_value_t = 0.95, value_parser = share)]
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
    let model = a.model.load()?;
    let adapter = load_adapter(a.adapter.as_deref(), &model)?;
    let mode = a.mode.resolve(adapter.as_ref())?;
    if mode != focus_core::Mode::Dense && adapter.is_none() {
        anyhow::bail!("--mode {} needs --adapter", mode.name());
    }
    let tok = model.tokenizer()?;
    let prompt = if a.chat {
        let template = chat::chat_template(&model)?.with_context(|| format!("--chat: {} has no chat template (tokenizer.chat_template)", model.path.display()))?;
        let name = |id: Option<u32>| id.map(|i| tok.token_text(i)).unwrap_or_default();
        let bos = name(tok.bos_id());
        let rendered = chat::render_user_turn(&template, &text, &bos, &name(tok.eos_id()))?;
        // The tokenizer puts BOS in front itself when the model asks for it.
        let rendered = match rendered.strip_prefix(bos.as_str()) {
            Some(rest) if tok.add_bos() && !bos.is_empty() => rest.to_string(),
            _ => rendered,
        };
        tok.encode(&rendered, true)?.ids
    } else {
        tok.encode(&text, false)?.ids
    };
    let ctx = model.config().context;
    anyhow::ensure!(!prompt.is_empty(), "the prompt has no tokens");
    anyhow::ensure!(prompt.len() < ctx, "the prompt's {} tokens leave no room in the model's context of {ctx} tokens", prompt.len());
    let stops = chat::stop_ids(&model)?;
    let mut generator = Generator::new(&model.decoder, adapter.as_ref(), mode)?;
    if generator.strategy() == Strategy::Recompute {
        eprintln!("note: this adapter uses whole-sequence Sinkhorn (causal_sinkhorn = false): each new token changes every earlier token's routing, so no KV cache is exact in {} mode; every token reruns the whole sequence (exact, O(T^2) per token)", mode.name());
    }
    let mut sampler = Sampler::new(a.temperature, a.top_p, a.seed);
    let t0 = Instant::now();
    let mut step = generator.feed(&prompt)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut out = std::io::stdout().lock();
    let (mut ids, mut shown) = (Vec::new(), String::new());
    let mut read = ReadBytes::default();
    let reason = loop {
        if ids.len() == a.max_tokens {
            break "max_tokens";
        }
        if generator.ids().len() == ctx {
            break "context";
        }
        let id = sampler.sample(&step.logits);
        let logprob = log_prob(&step.logits, id);
        ids.push(id);
        let eos = stops.contains(&id);
        // The token's own routing and reads come from feeding it (not needed after EOS).
        if !eos {
            step = generator.feed(&[id])?;
            read.add(step.read);
        }
        if a.json {
            let rec = serde_json::json!({
                "index": ids.len() - 1, "id": id, "text": tok.token_text(id), "logprob": logprob,
                "groups": if eos { None } else { Some(&step.groups) },
                "bytes_read": if eos { None } else { Some(step.read) },
            });
            writeln!(out, "{rec}")?;
        } else if !eos {
            // Print what is new once it is whole text (a character may span tokens).
            let full = tok.decode(&ids)?;
            if !full.ends_with('\u{FFFD}') {
                if let Some(new) = full.strip_prefix(shown.as_str()) {
                    write!(out, "{new}")?;
                }
                shown = full;
            }
        }
        out.flush()?;
        if eos {
            break "eos";
        }
    };
    let gen_s = t1.elapsed().as_secs_f64();
    let n = ids.len();
    let tps = if gen_s > 0.0 { n as f64 / gen_s } else { 0.0 };
    if a.json {
        let rec = serde_json::json!({
            "done": true, "reason": reason, "prompt_tokens": prompt.len(), "generated_tokens": n,
            "prefill_s": prefill_s, "generate_s": gen_s, "tokens_per_s": tps, "mode": mode.name(), "k": mode.k(),
            "strategy": format!("{:?}", generator.strategy()), "bytes_read": read, "read_fraction_of_dense": read.fraction(),
        });
        writeln!(out, "{rec}")?;
    } else {
        writeln!(out)?;
        let reads = if read.dense > 0 && mode != focus_core::Mode::Dense { format!("; attention read {:.1}% of dense's bytes", 100.0 * read.fraction()) } else { String::new() };
        eprintln!("[{n} tokens ({reason}) in {gen_s:.2} s, {tps:.1} tok/s; prompt of {} tokens in {prefill_s:.2} s; mode {mode}{reads}]", prompt.len());
    }
    Ok(())
}
