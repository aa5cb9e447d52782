//! Perplexity with llama.cpp's convention (llama-perplexity's default), so that figures are
//! comparable: tokenize once, cut into non-overlapping chunks of exactly `ctx` tokens (the
//! remainder is dropped), run each chunk from position 0, and score only the second half: the
//! logits at positions ctx/2 ..= ctx-2 predict tokens ctx/2+1 ..= ctx-1. For a model whose
//! tokenizer adds BOS (Gemma), the first token of every chunk is replaced by BOS, as
//! llama-perplexity does (the whole text was tokenized with one BOS in front).

use crate::focus::adapter::Adapter;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::model::{decoder::Decoder, ForwardOptions, Model};
use serde::Serialize;
use std::sync::atomic::AtomicBool;

#[derive(Debug, Clone, Serialize)]
pub struct PplResult {
    pub ppl: f64,
    pub mean_nll: f64,
    pub ctx: usize,
    pub chunks: usize,
    pub scored_tokens: usize,
    pub per_chunk_nll: Vec<f64>,
}

/// `progress(done, total)` is called after each chunk.
pub fn perplexity(
    model: &Model,
    ids: &[u32],
    ctx: usize,
    mode: Mode,
    adapter: Option<&Adapter>,
    cancel: Option<&AtomicBool>,
    mut progress: impl FnMut(usize, usize),
) -> Result<PplResult> {
    let max = model.config().context;
    if ctx < 4 || ctx > max {
        return Err(Error::Invalid(format!("ctx {ctx} must be in 4..={max} (the model's context)")));
    }
    let chunks = ids.len() / ctx;
    if chunks == 0 {
        return Err(Error::BadText(format!("the text has {} tokens; perplexity at ctx {ctx} needs at least {ctx}", ids.len())));
    }
    let first = ctx / 2;
    let bos = model.tokenizer.as_ref().filter(|t| t.add_bos()).and_then(|t| t.bos_id());
    let mut per_chunk = Vec::with_capacity(chunks);
    let mut total = 0f64;
    let mut n = 0usize;
    for c in 0..chunks {
        let mut chunk = ids[c * ctx..(c + 1) * ctx].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let chunk = &chunk[..];
        let mut opts = ForwardOptions::new(mode, adapter);
        opts.logits_from = first;
        opts.cancel = cancel;
        let out = model.decoder.forward(chunk, &opts)?;
        // Rows are positions first..ctx-1; the last row predicts nothing inside the chunk.
        let logits = out.logits.narrow(0, 0, ctx - 1 - first)?;
        let nll = Decoder::nll(&logits, &chunk[first + 1..])?;
        let s: f64 = nll.iter().map(|&x| x as f64).sum();
        per_chunk.push(s / nll.len() as f64);
        total += s;
        n += nll.len();
        progress(c + 1, chunks);
    }
    let mean = total / n as f64;
    Ok(PplResult { ppl: mean.exp(), mean_nll: mean, ctx, chunks, scored_tokens: n, per_chunk_nll: per_chunk })
}
