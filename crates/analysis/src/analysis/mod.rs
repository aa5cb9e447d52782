//! Analysing a text: run the model with the adapter, record every layer's routing, and reduce it
//! to `LayerStats`. Texts longer than one segment are cut into consecutive, non-overlapping
//! segments of `segment_len` tokens (the last may be shorter); each runs from position 0 as its
//! own sequence, so pairs never cross a segment boundary. Per-token results are concatenated and
//! pair counts summed over segments. What the app shows of an analysis (top groups, masks,
//! labels, the numbering across layers) is `shown`; one numbering for every surface, `identity`;
//! the statistics files, `export`.

pub mod align;
pub mod categories;
pub mod compare;
pub mod export;
pub mod head_pattern;
pub mod identity;
pub mod intervene;
pub mod kept;
pub mod partners;
pub mod projection;
pub mod shown;
pub mod stats;
pub mod structure;

use crate::focus::adapter::Adapter;
use crate::attention::ModeKind;
use crate::analysis::categories::{categorize_tokens, layer_profile, Category, LayerProfile, Piece};
use crate::error::{Error, Result};
use crate::model::{ForwardOptions, Model};
use crate::analysis::projection::{layer_projection, Projection};
use crate::focus::router::LayerRouting;
use crate::analysis::stats::{layer_stats, LayerStats};
use crate::focus::mask::{pair_stats_within, PairStats, TopK};
use crate::io::csv::csv_field;
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: u32,
    /// The token's text as it appears in the input.
    pub text: String,
    /// Byte offsets in the input text.
    pub start: usize,
    pub end: usize,
    /// Index of the segment the token was analysed in.
    pub segment: usize,
    /// Linguistic category of the word the token belongs to (`categories`); `other` when reading
    /// an export written before categories existed.
    #[serde(default)]
    pub category: Category,
    /// Whether the token is its word's whole, first piece or a continuation.
    #[serde(default)]
    pub piece: Piece,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Analysis {
    pub model: String,
    pub adapter: String,
    pub groups: usize,
    pub window: usize,
    /// The adapter's attention sinks [ours] (0 in exports written before they existed).
    #[serde(default)]
    pub sink: usize,
    pub mode: String,
    /// k used for top-k groups and pair statistics.
    pub k: usize,
    pub segment_len: usize,
    pub tokens: Vec<TokenInfo>,
    pub layers: Vec<LayerStats>,
    /// Per layer: what each centroid's group holds, by linguistic category (empty when reading an
    /// export written before categories existed).
    #[serde(default)]
    pub profiles: Vec<LayerProfile>,
    /// Raw routing per layer (all segments concatenated), kept for views that need it.
    #[serde(skip)]
    pub routing: Vec<LayerRouting>,
}

/// The segment length an analysis runs in unless told otherwise (capped at the model's context).
pub const DEFAULT_SEGMENT: usize = 2048;

pub struct AnalyzeOptions<'a> {
    /// Dense, soft or hard top-k; top-k runs at `k`.
    pub mode: ModeKind,
    /// k of hard top-k, and of the top-k groups and pair statistics reported in every mode
    /// (checked against the adapter's K when it was made).
    pub k: TopK,
    pub segment_len: usize,
    pub keep_tokens: bool,
    pub cancel: Option<&'a AtomicBool>,
}

/// `progress(done, total)` as the model runs, in steps of one layer of one segment (total =
/// layers x segments), so that a single long segment still shows movement.
pub fn analyze(
    model: &Model,
    adapter: &Adapter,
    adapter_name: &str,
    text: &str,
    opts: &AnalyzeOptions,
    progress: impl FnMut(usize, usize) + Send,
) -> Result<Analysis> {
    let enc = model.tokenizer()?.encode(text, false)?;
    analyze_tokens(model, adapter, adapter_name, text, &Tokens { ids: &enc.ids, offsets: &enc.offsets }, opts, progress)
}

/// A text's tokens, as the model's tokenizer cut it: ids and byte offsets in the text.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    pub ids: &'a [u32],
    pub offsets: &'a [(usize, usize)],
}

/// `analyze` on tokens already cut (`tokens`, whose offsets point into `text`; a prefix of a
/// text's tokens analyses that prefix), so that a caller tokenises a text once.
pub fn analyze_tokens(
    model: &Model,
    adapter: &Adapter,
    adapter_name: &str,
    text: &str,
    enc: &Tokens,
    opts: &AnalyzeOptions,
    progress: impl FnMut(usize, usize) + Send,
) -> Result<Analysis> {
    Ok(analyze_tokens_keeping(model, adapter, adapter_name, text, enc, opts, 0, progress)?.0)
}

/// `analyze_tokens`, also keeping each segment's layers (`kept::KeptPass`) while they fit in
/// `keep_bytes` (segments in order; 0 keeps none), so that partners, grids and compares of the
/// text need no new model pass.
#[allow(clippy::too_many_arguments)]
pub fn analyze_tokens_keeping(
    model: &Model,
    adapter: &Adapter,
    adapter_name: &str,
    text: &str,
    enc: &Tokens,
    opts: &AnalyzeOptions,
    keep_bytes: usize,
    progress: impl FnMut(usize, usize) + Send,
) -> Result<(Analysis, Vec<kept::KeptPass>)> {
    let (analysis, kept, _) = analyze_tokens_spilling(model, adapter, adapter_name, text, enc, opts, keep_bytes, None, progress)?;
    Ok((analysis, kept))
}

/// `analyze_tokens_keeping`, with the segments beyond `keep_bytes` written to `scratch`
/// (`kept::Scratch`, within its own budget) instead of dropped: what is kept in memory, and
/// what went to the scratch file.
#[allow(clippy::too_many_arguments)]
pub fn analyze_tokens_spilling(
    model: &Model,
    adapter: &Adapter,
    adapter_name: &str,
    text: &str,
    enc: &Tokens,
    opts: &AnalyzeOptions,
    keep_bytes: usize,
    scratch: Option<&std::sync::Arc<kept::Scratch>>,
    mut progress: impl FnMut(usize, usize) + Send,
) -> Result<(Analysis, Vec<kept::KeptPass>, Vec<kept::SpilledPass>)> {
    let tok = model.tokenizer()?;
    if enc.ids.len() != enc.offsets.len() {
        return Err(Error::Invalid(format!("{} token ids but {} offsets", enc.ids.len(), enc.offsets.len())));
    }
    if enc.ids.is_empty() {
        return Err(Error::BadText("the text produced no tokens".into()));
    }
    let seg = opts.segment_len.min(model.config().context);
    if seg == 0 {
        return Err(Error::Invalid("segment length must be positive".into()));
    }
    let cfg = &adapter.config;
    let k = opts.k.of(cfg.groups)?;
    let mode = opts.mode.with(opts.k);
    let n_layers = model.config().n_layers;
    let mut merged: Vec<Option<LayerRouting>> = vec![None; n_layers];
    let mut pairs = vec![PairStats::default(); n_layers];
    let segments: Vec<&[u32]> = enc.ids.chunks(seg).collect();
    let mut kept_passes = Vec::new();
    let mut spilled = Vec::new();
    let mut kept_bytes = 0usize;
    for (s, ids) in segments.iter().enumerate() {
        let mut fo = ForwardOptions::new(mode, Some(adapter));
        fo.record_routing = true;
        fo.cancel = opts.cancel;
        let base = s * n_layers;
        let total = segments.len() * n_layers;
        // Segments are kept in order while they fit the budget.
        let bytes = kept::pass_bytes(model.config(), cfg.groups, ids.len());
        let keep = kept_passes.len() == s && kept_bytes + bytes <= keep_bytes;
        // The others go to the scratch file, when there is one.
        let spill = !keep && scratch.is_some();
        // The hook sees each layer as it starts: the one place a pass reports where it is.
        let mut report = |l: usize| progress(base + l, total);
        let mut hook = kept::Keeper { keep: keep || spill, layers: Vec::new(), err: None, progress: &mut report };
        let crate::model::decoder::RunEnd::Finished { x, routing } = model.decoder.run(&[ids], &fo, &mut hook)? else {
            return Err(Error::Invalid("the analysis pass stopped before the last layer".into()));
        };
        // The last position's logits, as a forward pass checks them (broken weights are an error).
        model.decoder.logits(&x.narrow(0, ids.len() - 1, 1)?)?;
        match (hook.finish(s * seg, mode, cfg.causal_sinkhorn, x)?, scratch) {
            (Some(k), Some(sc)) if spill => spilled.extend(sc.spill(&k)),
            (Some(k), _) => {
                kept_bytes += bytes;
                kept_passes.push(k);
            }
            (None, _) => {}
        }
        for (l, r) in routing.into_iter().enumerate() {
            // A sliding layer counts the pairs of its own window (and keeps them all when the
            // adapter routes only the global layers).
            let own = model.config().layer_attention(l).span(ids.len());
            let routed = cfg.router_layers.routes(model.config().is_sliding(l));
            let p = pair_stats_within(&r.topk_masks(k), cfg.window, cfg.sink, own, routed);
            let acc = &mut pairs[l];
            acc.causal += p.causal;
            acc.local += p.local;
            acc.same_group_distant += p.same_group_distant;
            merged[l] = Some(match merged[l].take() {
                None => r,
                Some(mut m) => {
                    m.t += r.t;
                    m.scores.extend(r.scores);
                    m.memberships.extend(r.memberships);
                    if let (Some(a), Some(b)) = (m.vectors.as_mut(), r.vectors) {
                        a.extend(b);
                    }
                    m
                }
            });
        }
        progress(base + n_layers, total);
    }
    let routing: Vec<LayerRouting> = merged.into_iter().map(|r| r.expect("every layer routes")).collect();
    let layers = routing
        .iter()
        .enumerate()
        .map(|(l, r)| {
            let mut st = layer_stats(l, r, cfg.tau, k, (cfg.window, cfg.sink), opts.keep_tokens);
            let p = &pairs[l];
            st.pairs = PairStats { retained: (p.local + p.same_group_distant) as f64 / p.causal.max(1) as f64, ..p.clone() };
            st.routed = cfg.router_layers.routes(model.config().is_sliding(l));
            st
        })
        .collect();
    let special_ids = tok.special_ids();
    let special: Vec<bool> = enc.ids.iter().map(|id| special_ids.contains(id)).collect();
    let cats = categorize_tokens(text, enc.offsets, &special);
    let tokens: Vec<TokenInfo> = enc
        .ids
        .iter()
        .zip(enc.offsets)
        .zip(&cats)
        .enumerate()
        .map(|(i, ((&id, &(start, end)), c))| TokenInfo {
            id,
            text: text.get(start..end).map(str::to_string).unwrap_or_else(|| tok.token_text(id)),
            start,
            end,
            segment: i / seg,
            category: c.category,
            piece: c.piece,
        })
        .collect();
    let texts: Vec<String> = tokens.iter().map(|t| t.text.clone()).collect();
    let categories: Vec<Category> = tokens.iter().map(|t| t.category).collect();
    let profiles = routing
        .iter()
        .enumerate()
        .map(|(l, r)| layer_profile(l, r, enc.ids, &texts, &categories))
        .collect::<Result<Vec<_>>>()?;
    let analysis = Analysis {
        model: model.config().name.clone(),
        adapter: adapter_name.to_string(),
        groups: cfg.groups,
        window: cfg.window,
        sink: cfg.sink,
        mode: mode.to_string(),
        k,
        segment_len: seg,
        tokens,
        layers,
        profiles,
        routing,
    };
    Ok((analysis, kept_passes, spilled))
}

impl Analysis {
    /// Per layer, whether the adapter routes it (`LayerStats::routed`).
    pub fn routed_layers(&self) -> Vec<bool> {
        self.layers.iter().map(|l| l.routed).collect()
    }

    /// The category profiles of the layers the adapter routes (what `best_layer` picks from: an
    /// unrouted layer's groups shape nothing).
    pub fn routed_profiles(&self) -> impl Iterator<Item = &LayerProfile> {
        self.profiles.iter().filter(|p| self.layers.get(p.layer).is_none_or(|l| l.routed))
    }

    /// One row per token: index, id, byte range, segment, category, piece and the token's text.
    pub fn tokens_csv(&self) -> String {
        let mut s = String::from("index,id,start,end,segment,category,piece,text\n");
        for (i, t) in self.tokens.iter().enumerate() {
            let piece = match t.piece {
                Piece::Whole => "whole",
                Piece::First => "first",
                Piece::Continuation => "continuation",
            };
            s += &format!("{i},{},{},{},{},{},{piece},{}\n", t.id, t.start, t.end, t.segment, t.category, csv_field(&t.text));
        }
        s
    }

    /// The routing space of one layer (PCA of its routing vectors, with the adapter's centroids).
    pub fn projection(&self, adapter: &Adapter, layer: usize) -> Result<Projection> {
        let r = self
            .routing
            .get(layer)
            .ok_or_else(|| Error::Invalid(format!("layer {layer} out of range (the analysis has {})", self.routing.len())))?;
        layer_projection(r, adapter, layer)
    }
}
