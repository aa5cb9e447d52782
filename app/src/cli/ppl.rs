//! `ppl`: perplexity of a text in llama.cpp's convention (non-overlapping chunks, second half
//! scored), dense or with an adapter in soft or hard top-k mode.

use super::common::{print_json, progress, FocusArgs, ModelArgs};
use anyhow::Result;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub focus: FocusArgs,
    /// Chunk length in tokens (llama-perplexity's -c).
    #[arg(long, default_value_t = 512, value_parser = super::common::count::<2, 1048576>)]
    pub ctx: usize,
    #[arg(long)]
    pub json: bool,
    pub file: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let mut text = focus_core::io::text::read_text(&a.file)?;
    // llama-perplexity strips one trailing newline before tokenizing.
    if text.ends_with('\n') {
        text.pop();
    }
    let soft = a.focus.mode == focus_core::ModeKind::Soft;
    a.model.check_memory(&format!("ppl in chunks of {} tokens", a.ctx), |_| Ok(focus_core::model::memory::Workload::perplexity(a.ctx, soft)))?;
    let model = a.model.load()?;
    let (adapter, mode) = a.focus.load(&model)?;
    let ids = model.tokenizer()?.encode(&text, false)?.ids;
    let pb = progress((ids.len() / a.ctx.max(1)) as u64, &format!("ppl {mode}"), a.json);
    let t0 = Instant::now();
    let r = focus_core::eval::ppl::perplexity(&model, &ids, a.ctx, mode, adapter.as_ref(), None, |d, _| pb.set_position(d as u64))?;
    pb.finish_and_clear();
    let seconds = t0.elapsed().as_secs_f64();
    if a.json {
        return print_json(&serde_json::json!({
            "ppl": r.ppl, "mean_nll": r.mean_nll, "tokens": ids.len(), "scored_tokens": r.scored_tokens,
            "chunks": r.chunks, "mode": mode.name(), "k": mode.k(), "ctx": r.ctx, "seconds": seconds,
            "per_chunk_nll": r.per_chunk_nll, "model": model.path, "adapter": a.focus.adapter,
        }));
    }
    crate::outln!(
        "PPL {:.4} (mode {mode}, ctx {}, {} chunks, {} scored of {} tokens, {:.1} s)",
        r.ppl, r.ctx, r.chunks, r.scored_tokens, ids.len(), seconds
    )?;
    Ok(())
}
