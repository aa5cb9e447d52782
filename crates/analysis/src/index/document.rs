//! One document's routing, as the corpus index keeps it: the text is cut into consecutive
//! segments (as `analysis::analyze` cuts it, each segment from position 0), run through the model
//! once, and per token and layer only the top-k groups and their memberships are kept.

use crate::analysis::categories::{categorize_tokens, Category};
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::mask::top_k_indices;
use crate::model::{ForwardOptions, Model};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

/// What an index was built with, besides the model and the adapter; a change starts a new index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexSettings {
    /// The attention mode of the forward pass ("dense", "soft", "topk(k=2)" as `Mode` prints it).
    pub mode: String,
    /// Groups kept per token and layer (the top-k of the mask).
    pub k: usize,
    /// Tokens per segment (capped at the model's context).
    pub segment_len: usize,
}

/// One layer's top-k groups of every token, `t x k` row-major, in descending membership (ties to
/// the lower group, as the mask breaks them), and the memberships of those groups.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTopK {
    pub groups: Vec<u8>,
    pub memberships: Vec<f32>,
}

/// A document's tokens and routing.
#[derive(Debug, Clone, PartialEq)]
pub struct DocRouting {
    pub ids: Vec<u32>,
    /// Byte range of each token in the document's text.
    pub offsets: Vec<(u32, u32)>,
    pub categories: Vec<Category>,
    pub k: usize,
    /// One per layer of the model.
    pub layers: Vec<LayerTopK>,
}

impl DocRouting {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The largest-membership group of token `i` at `layer`.
    pub fn top(&self, layer: usize, i: usize) -> usize {
        self.layers[layer].groups[i * self.k] as usize
    }

    /// Checks that every per-token vector has one entry per token (per token and slot for the
    /// layers), so that a document read back from a damaged store fails here, once.
    pub fn check(&self, groups: usize) -> Result<()> {
        let t = self.ids.len();
        let bad = |what: String| Err(Error::Invalid(format!("document routing: {what}")));
        if self.offsets.len() != t || self.categories.len() != t {
            return bad(format!("{t} ids but {} offsets and {} categories", self.offsets.len(), self.categories.len()));
        }
        if self.k == 0 || self.k > groups {
            return bad(format!("k = {} outside 1..={groups}", self.k));
        }
        for (l, layer) in self.layers.iter().enumerate() {
            if layer.groups.len() != t * self.k || layer.memberships.len() != t * self.k {
                return bad(format!("layer {l} has {} groups and {} memberships for {t} tokens x k = {}", layer.groups.len(), layer.memberships.len(), self.k));
            }
            if let Some(g) = layer.groups.iter().find(|&&g| g as usize >= groups) {
                return bad(format!("layer {l} names group {g} of {groups}"));
            }
        }
        Ok(())
    }

    /// Token ids as little-endian u32.
    pub fn ids_bytes(&self) -> Vec<u8> {
        self.ids.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    /// Byte ranges as little-endian (start, end) u32 pairs.
    pub fn offsets_bytes(&self) -> Vec<u8> {
        self.offsets.iter().flat_map(|&(s, e)| s.to_le_bytes().into_iter().chain(e.to_le_bytes())).collect()
    }

    /// Categories as their index in `Category::ALL`, one byte each.
    pub fn categories_bytes(&self) -> Vec<u8> {
        self.categories.iter().map(|c| c.index() as u8).collect()
    }

    /// The inverse of the `*_bytes` forms; `layers` holds each layer's (groups, memberships as
    /// little-endian f32) bytes. Any length or value out of place is an error, never a panic.
    pub fn from_bytes(ids: &[u8], offsets: &[u8], categories: &[u8], k: usize, layers: &[(Vec<u8>, Vec<u8>)]) -> Result<DocRouting> {
        let bad = |what: &str| Error::Invalid(format!("document routing: {what}"));
        if !ids.len().is_multiple_of(4) || !offsets.len().is_multiple_of(8) {
            return Err(bad("token ids or offsets are not whole u32 values"));
        }
        let u32s = |b: &[u8]| b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
        let ids = u32s(ids);
        let flat = u32s(offsets);
        let offsets: Vec<(u32, u32)> = flat.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        let categories = categories
            .iter()
            .map(|&c| Category::ALL.get(c as usize).copied().ok_or_else(|| bad(&format!("category {c} out of range"))))
            .collect::<Result<Vec<_>>>()?;
        let layers = layers
            .iter()
            .map(|(g, m)| {
                if !m.len().is_multiple_of(4) {
                    return Err(bad("memberships are not whole f32 values"));
                }
                let memberships = m.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                Ok(LayerTopK { groups: g.clone(), memberships })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DocRouting { ids, offsets, categories, k, layers })
    }
}

impl LayerTopK {
    pub fn memberships_bytes(&self) -> Vec<u8> {
        self.memberships.iter().flat_map(|m| m.to_le_bytes()).collect()
    }
}

/// How a document is routed: the attention mode, the groups kept per token, tokens per segment,
/// and a flag that stops the pass (checked between layers).
#[derive(Clone, Copy)]
pub struct RouteOptions<'a> {
    pub mode: Mode,
    pub k: usize,
    pub segment_len: usize,
    pub cancel: Option<&'a AtomicBool>,
}

/// Runs `text` through `model` with `adapter` once and keeps its routing. `progress(done,
/// total)` counts tokens as each segment finishes.
pub fn route_document(model: &Model, adapter: &Adapter, text: &str, opts: &RouteOptions, mut progress: impl FnMut(usize, usize)) -> Result<DocRouting> {
    let RouteOptions { mode, k, segment_len, cancel } = *opts;
    let tok = model.tokenizer()?;
    let enc = tok.encode(text, false)?;
    if enc.ids.is_empty() {
        return Err(Error::BadText("the text produced no tokens".into()));
    }
    let groups = adapter.config.groups;
    if k == 0 || k > groups || groups > u8::MAX as usize + 1 {
        return Err(Error::Invalid(format!("k = {k} must be in 1..={groups} (and K <= 256)")));
    }
    if text.len() > u32::MAX as usize {
        return Err(Error::BadText(format!("a text of {} bytes is over the index's 4 GiB limit", text.len())));
    }
    let seg = segment_len.min(model.config().context);
    if seg == 0 {
        return Err(Error::Invalid("segment length must be positive".into()));
    }
    let n_layers = model.config().n_layers;
    let t = enc.ids.len();
    let mut layers = vec![LayerTopK { groups: Vec::with_capacity(t * k), memberships: Vec::with_capacity(t * k) }; n_layers];
    let mut done = 0;
    for ids in enc.ids.chunks(seg) {
        let mut fo = ForwardOptions::new(mode, Some(adapter));
        // Only the routing is wanted: the logits of the last position are the least the pass makes.
        fo.logits_from = ids.len() - 1;
        fo.cancel = cancel;
        let out = model.decoder.forward_with(ids, &fo, |_, _| Ok(None))?;
        if out.routing.len() != n_layers {
            return Err(Error::Invalid(format!("the forward pass routed {} of {n_layers} layers", out.routing.len())));
        }
        for (l, r) in out.routing.iter().enumerate() {
            let dst = &mut layers[l];
            for i in 0..r.t {
                let row = r.row(i);
                for g in top_k_indices(row, k) {
                    dst.groups.push(g as u8);
                    dst.memberships.push(row[g]);
                }
            }
        }
        done += ids.len();
        progress(done, t);
    }
    let special_ids = tok.special_ids();
    let special: Vec<bool> = enc.ids.iter().map(|id| special_ids.contains(id)).collect();
    let categories = categorize_tokens(text, &enc.offsets, &special).into_iter().map(|c| c.category).collect();
    let offsets = enc.offsets.iter().map(|&(s, e)| (s as u32, e as u32)).collect();
    Ok(DocRouting { ids: enc.ids, offsets, categories, k, layers })
}
