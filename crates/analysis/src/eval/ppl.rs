//! Perplexity with llama.cpp's convention (llama-perplexity's default), so that figures are
//! comparable: tokenize once, cut into non-overlapping chunks of exactly `ctx` tokens (the
//! remainder is dropped), run each chunk from position 0, and score only the second half: the
//! logits at positions ctx/2 ..= ctx-2 predict tokens ctx/2+1 ..= ctx-1. For a model whose
//! tokenizer adds BOS (Gemma), the first token of every chunk is replaced by BOS, as
//! llama-perplexity does (the whole text was tokenized with one BOS in front).
//!
//! `length_table` runs the same chunks at several lengths in several modes (issue 52: quality
//! and speed against length), with the prefill time of each run beside its perplexity: one
//! scoring function (`score_chunk`) serves both, so the table's dense figure at a length is
//! `perplexity`'s at that length.

use crate::focus::adapter::Adapter;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::model::decoder::{Decoder, NoHook, RunEnd};
use crate::model::memory::SCORE_ROWS;
use crate::model::{ForwardOptions, Model};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct PplResult {
    pub ppl: f64,
    pub mean_nll: f64,
    pub ctx: usize,
    pub chunks: usize,
    pub scored_tokens: usize,
    pub per_chunk_nll: Vec<f64>,
}

/// The chunk length must lie in 4..=the model's context.
fn check_ctx(model: &Model, ctx: usize) -> Result<()> {
    let max = model.config().context;
    if ctx < 4 || ctx > max {
        return Err(Error::Invalid(format!("ctx {ctx} must be in 4..={max} (the model's context)")));
    }
    Ok(())
}

/// Chunk `c` of length `ctx`, its first token BOS where the tokenizer adds one.
fn chunk_ids(model: &Model, ids: &[u32], ctx: usize, c: usize) -> Vec<u32> {
    let mut chunk = ids[c * ctx..(c + 1) * ctx].to_vec();
    if let Some(b) = model.tokenizer.as_ref().filter(|t| t.add_bos()).and_then(|t| t.bos_id()) {
        chunk[0] = b;
    }
    chunk
}

/// One chunk scored: the summed NLL of its second half, how many tokens that is, and the
/// seconds of its prefill (the layers over every token, waited for on a GPU; the scored rows'
/// logits come after and are not counted, so that the figure is prefill's, as `bench forward`
/// times it).
fn score_chunk(model: &Model, chunk: &[u32], mode: Mode, adapter: Option<&Adapter>, cancel: Option<&AtomicBool>) -> Result<(f64, usize, f64)> {
    let ctx = chunk.len();
    let first = ctx / 2;
    // Dense runs without the adapter: with it every layer would still route (to no use) and
    // the GPU would wait for each layer's Sinkhorn on the host, charging dense for the router.
    let mut opts = ForwardOptions::new(mode, adapter.filter(|_| mode != Mode::Dense));
    opts.logits_from = first;
    opts.cancel = cancel;
    opts.routing_unused = true;
    let dec = &model.decoder;
    let t0 = Instant::now();
    let RunEnd::Finished { x, .. } = dec.run(&[chunk], &opts, &mut NoHook)? else {
        return Err(Error::Invalid("the pass was stopped before the last layer".into()));
    };
    dec.device.synchronize()?;
    let prefill = t0.elapsed().as_secs_f64();
    // Rows are positions first..ctx-1 (as `Decoder::forward` makes them); the last row
    // predicts nothing inside the chunk. Scored `SCORE_ROWS` rows at a time: the logits of a
    // whole half at once held 2 x 16,384 x 151,936 f32 (19.9 GB) at ctx 32K on Qwen2.5, more than
    // the pass; a half of at most `SCORE_ROWS` rows is one slice, as before.
    let (mut sum, mut n) = (0f64, 0usize);
    let mut r = first;
    while r < ctx - 1 {
        let rows = SCORE_ROWS.min(ctx - 1 - r);
        // One row more than scored where the half ends, as the whole half was run before.
        let run = if r + rows == ctx - 1 { rows + 1 } else { rows };
        let logits = dec.logits(&x.narrow(0, r, run)?)?.narrow(0, 0, rows)?;
        let nll = Decoder::nll(&logits, &chunk[r + 1..r + 1 + rows])?;
        sum += nll.iter().map(|&x| x as f64).sum::<f64>();
        n += nll.len();
        r += rows;
    }
    Ok((sum, n, prefill))
}

/// `progress(done, total)` is called after each chunk.
pub fn perplexity(
    model: &Model,
    ids: &[u32],
    ctx: usize,
    mode: Mode,
    adapter: Option<&Adapter>,
    cancel: Option<&AtomicBool>,
    progress: impl FnMut(usize, usize),
) -> Result<PplResult> {
    perplexity_chunks(model, ids, ctx, None, mode, adapter, cancel, progress)
}

/// `perplexity` over the first `max_chunks` chunks at most (`None`: all of them).
#[allow(clippy::too_many_arguments)]
pub fn perplexity_chunks(
    model: &Model,
    ids: &[u32],
    ctx: usize,
    max_chunks: Option<usize>,
    mode: Mode,
    adapter: Option<&Adapter>,
    cancel: Option<&AtomicBool>,
    mut progress: impl FnMut(usize, usize),
) -> Result<PplResult> {
    check_ctx(model, ctx)?;
    let chunks = (ids.len() / ctx).min(max_chunks.unwrap_or(usize::MAX));
    if chunks == 0 {
        return Err(Error::BadText(format!("the text has {} tokens; perplexity at ctx {ctx} needs at least {ctx}", ids.len())));
    }
    let mut per_chunk = Vec::with_capacity(chunks);
    let mut total = 0f64;
    let mut n = 0usize;
    for c in 0..chunks {
        let (s, m, _) = score_chunk(model, &chunk_ids(model, ids, ctx, c), mode, adapter, cancel)?;
        per_chunk.push(s / m as f64);
        total += s;
        n += m;
        progress(c + 1, chunks);
    }
    let mean = total / n as f64;
    Ok(PplResult { ppl: mean.exp(), mean_nll: mean, ctx, chunks, scored_tokens: n, per_chunk_nll: per_chunk })
}

/// A mode's name in the length table: "dense", "soft", "top-2".
pub fn mode_label(mode: Mode) -> String {
    match mode {
        Mode::TopK(k) => format!("top-{}", k.k()),
        m => m.name().to_string(),
    }
}

/// One mode at one length: its perplexity against dense and its prefill speed against dense.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeAtLength {
    /// "dense", "soft", "top-2" (`mode_label`).
    pub mode: String,
    /// k of a top-k mode.
    pub k: Option<usize>,
    /// Why it was not run (its memory need beside what is available), else `None`.
    pub skipped: Option<String>,
    pub ppl: Option<f64>,
    pub mean_nll: Option<f64>,
    /// 100 * (ppl / dense ppl - 1): + is worse than dense.
    pub vs_dense_pct: Option<f64>,
    /// Seconds of prefill over all chunks (`score_chunk`: the layers, not the scored logits).
    pub prefill_s: Option<f64>,
    /// Tokens prefilled per second (chunks x ctx / prefill_s).
    pub tokens_per_s: Option<f64>,
    /// tokens_per_s / dense's: > 1 is faster than dense.
    pub speed_vs_dense: Option<f64>,
    pub per_chunk_nll: Vec<f64>,
}

/// One length of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthRow {
    pub ctx: usize,
    /// Chunks run at this length (each mode runs the same ones), and the tokens each mode scored.
    pub chunks: usize,
    pub scored_tokens: usize,
    /// Why this length was not run (above the model's context, a text too short), else `None`.
    pub skipped: Option<String>,
    /// The modes in the order asked for, dense first.
    pub modes: Vec<ModeAtLength>,
}

impl LengthRow {
    /// The figures of the mode labelled `label` ("dense", "top-2").
    pub fn mode(&self, label: &str) -> Option<&ModeAtLength> {
        self.modes.iter().find(|m| m.mode == label)
    }
}

/// Quality and speed against length: what `focus-lens ppl --ctx A,B --modes ...` prints and
/// the Speed view plots. The caller fills in what was run (model, adapter, text, device).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthTable {
    /// "ppl_lengths": what this JSON is.
    pub table: String,
    pub model: String,
    pub adapter: Option<String>,
    pub text: String,
    /// Tokens of the whole text.
    pub tokens: usize,
    pub device: String,
    pub threads: usize,
    /// The model's context: lengths above it are skipped.
    pub context: usize,
    /// At most this many chunks per length (`None`: every whole chunk of the text).
    pub max_chunks: Option<usize>,
    pub rows: Vec<LengthRow>,
}

/// What `length_table` runs: lengths, modes (dense is added first when missing: every figure is
/// against it) and at most how many chunks per length.
pub struct LengthOptions<'a> {
    pub ctxs: Vec<usize>,
    pub modes: Vec<Mode>,
    pub max_chunks: Option<usize>,
    pub cancel: Option<&'a AtomicBool>,
}

/// The modes of a table: dense first, then the others in the order given, each once.
pub fn table_modes(modes: &[Mode]) -> Vec<Mode> {
    let mut out = vec![Mode::Dense];
    for &m in modes {
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

/// Perplexity and prefill speed of every mode at every length, on the same chunks: at each
/// length the modes run one after the other on each chunk (dense, then the others), so that a
/// load that drifts meets them alike; one warm-up pass per mode (256 tokens) comes first, so that
/// the first timed run does not pay for the weights' first reads. `fits(ctx, mode)` says why a
/// run would not fit in memory (the CLI and the app check the estimate before spending it), and
/// such a run is skipped and said; so is a length above the model's context or beyond the text
/// (no whole chunk). `progress(done, total, what)` after each run; `row` as each length ends.
pub fn length_table(
    model: &Model,
    ids: &[u32],
    adapter: Option<&Adapter>,
    opts: &LengthOptions,
    fits: impl Fn(usize, Mode) -> Option<String>,
    mut progress: impl FnMut(usize, usize, String),
    mut row: impl FnMut(&LengthRow),
) -> Result<Vec<LengthRow>> {
    let modes = table_modes(&opts.modes);
    if modes.iter().any(|m| *m != Mode::Dense) && adapter.is_none() {
        return Err(Error::Invalid("soft and top-k modes need an adapter".into()));
    }
    if opts.ctxs.is_empty() {
        return Err(Error::Invalid("no lengths to run".into()));
    }
    let context = model.config().context;
    // What each length runs: its chunks, and per mode why not (None: it runs).
    let plan: Vec<(usize, usize, Option<String>, Vec<Option<String>>)> = opts
        .ctxs
        .iter()
        .map(|&ctx| {
            let chunks = (ids.len() / ctx.max(1)).min(opts.max_chunks.unwrap_or(usize::MAX));
            let skipped = if ctx < 4 {
                Some(format!("ctx {ctx} is below 4 tokens"))
            } else if ctx > context {
                Some(format!("above the model's context ({context} tokens)"))
            } else if chunks == 0 {
                Some(format!("the text has {} tokens, fewer than one chunk of {ctx}", ids.len()))
            } else {
                None
            };
            let per_mode = modes.iter().map(|&m| if skipped.is_some() { None } else { fits(ctx, m) }).collect();
            (ctx, chunks, skipped, per_mode)
        })
        .collect();
    let total: usize = plan.iter().filter(|p| p.2.is_none()).map(|p| p.1 * p.3.iter().filter(|s| s.is_none()).count()).sum();
    if let Some(&(ctx, ..)) = plan.iter().find(|p| p.2.is_none() && p.3.iter().all(|s| s.is_none())).or_else(|| plan.iter().find(|p| p.2.is_none())) {
        // Warm-up: each mode that runs anywhere, once, untimed.
        let n = ctx.min(256);
        let warm = &chunk_ids(model, ids, n, 0);
        for (m, &mode) in modes.iter().enumerate() {
            if plan.iter().any(|p| p.2.is_none() && p.3[m].is_none()) {
                progress(0, total, format!("warming up ({})", mode_label(mode)));
                score_chunk(model, warm, mode, adapter, opts.cancel)?;
            }
        }
    }
    let mut done = 0;
    let mut rows = Vec::new();
    for (ctx, chunks, skipped, per_mode) in plan {
        let mut figs: Vec<ModeAtLength> = modes
            .iter()
            .zip(&per_mode)
            .map(|(&m, why)| ModeAtLength {
                mode: mode_label(m),
                k: m.k(),
                skipped: skipped.as_ref().map(|_| "the length is skipped".to_string()).or_else(|| why.clone()),
                ppl: None,
                mean_nll: None,
                vs_dense_pct: None,
                prefill_s: None,
                tokens_per_s: None,
                speed_vs_dense: None,
                per_chunk_nll: Vec::new(),
            })
            .collect();
        let mut scored = 0;
        if skipped.is_none() {
            let mut sums = vec![(0f64, 0usize, 0f64); modes.len()];
            for c in 0..chunks {
                let chunk = chunk_ids(model, ids, ctx, c);
                for (m, &mode) in modes.iter().enumerate() {
                    if per_mode[m].is_some() {
                        continue;
                    }
                    let (s, n, t) = score_chunk(model, &chunk, mode, adapter, opts.cancel)?;
                    figs[m].per_chunk_nll.push(s / n as f64);
                    let acc = &mut sums[m];
                    acc.0 += s;
                    acc.1 += n;
                    acc.2 += t;
                    scored = acc.1;
                    done += 1;
                    progress(done, total, format!("ctx {ctx}, chunk {} of {chunks}, {}", c + 1, mode_label(mode)));
                }
            }
            for (f, &(s, n, t)) in figs.iter_mut().zip(&sums) {
                if n > 0 {
                    let mean = s / n as f64;
                    f.mean_nll = Some(mean);
                    f.ppl = Some(mean.exp());
                    f.prefill_s = Some(t);
                    f.tokens_per_s = Some((chunks * ctx) as f64 / t.max(1e-12));
                }
            }
            let (dense_ppl, dense_speed) = (figs[0].ppl, figs[0].tokens_per_s);
            for f in &mut figs {
                f.vs_dense_pct = f.ppl.zip(dense_ppl).map(|(p, d)| 100.0 * (p / d - 1.0));
                f.speed_vs_dense = f.tokens_per_s.zip(dense_speed).map(|(s, d)| s / d);
            }
        }
        let r = LengthRow { ctx, chunks: if skipped.is_some() { 0 } else { chunks }, scored_tokens: scored, skipped, modes: figs };
        row(&r);
        rows.push(r);
    }
    Ok(rows)
}
