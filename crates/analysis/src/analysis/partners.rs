//! Looking inside one layer: the exact attention weights one query row gives its keys, for the
//! GUI's "long-range partners" view. The decoder runs every layer's attention through fused
//! kernels that never materialise weights, so this runs the same inference pass
//! (`Decoder::run`) up to the chosen layer, keeps that layer's Q, K, V and routing (a
//! `LayerHook` that stops the pass there), and computes one softmax row exactly.
//!
//! Cost: the layers below the chosen one, for the segment holding the query (at most one
//! forward pass).

use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::adapter::{Adapter, AdapterConfig};
use crate::focus::gate::GateFn;
use crate::focus::mask::{self, PairClass};
use crate::focus::router::LayerRouting;
use crate::model::block::AttentionInputs;
use crate::model::decoder::{LayerHook, RunEnd};
use crate::model::{ForwardOptions, Model};
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;
use candle_core::{DType, Tensor};

/// What layer `layer` sees: its heads (after RoPE) and its routing.
#[derive(Debug)]
pub struct LayerInputs {
    pub layer: usize,
    /// (H, T, D)
    pub q: Tensor,
    /// (Hkv, T, D)
    pub k: Tensor,
    /// (Hkv, T, D)
    pub v: Tensor,
    /// The layer's routing (when an adapter is given).
    pub routing: Option<LayerRouting>,
}

/// Stops the pass at one layer and keeps what that layer sees.
struct Capture {
    layer: usize,
    got: Option<LayerInputs>,
}

impl LayerHook for Capture {
    fn inputs(&mut self, l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        if l < self.layer {
            return ControlFlow::Continue(());
        }
        let heads = |x: &Tensor| x.squeeze(0);
        self.got = match (heads(&inp.q), heads(&inp.k), heads(&inp.v)) {
            (Ok(q), Ok(k), Ok(v)) => Some(LayerInputs { layer: l, q, k, v, routing: routing.cloned() }),
            _ => None,
        };
        ControlFlow::Break(())
    }
}

/// Q, K, V and routing of layer `layer` for the sequence `ids` (run from position 0).
pub fn layer_inputs(
    model: &Model,
    adapter: Option<&Adapter>,
    ids: &[u32],
    mode: Mode,
    layer: usize,
    cancel: Option<&AtomicBool>,
) -> Result<LayerInputs> {
    let n = model.config().n_layers;
    if layer >= n {
        return Err(Error::Invalid(format!("layer {layer} is out of range (the model has {n} layers)")));
    }
    let opts = ForwardOptions { record_routing: true, cancel, ..ForwardOptions::new(mode, adapter) };
    let mut capture = Capture { layer, got: None };
    match model.decoder.run(&[ids], &opts, &mut capture)? {
        RunEnd::Stopped => capture.got.ok_or_else(|| Error::Invalid(format!("layer {layer}: its attention inputs have an unexpected shape"))),
        RunEnd::Finished { .. } => unreachable!("the capture stops at layer {layer} < {n}"),
    }
}

/// How a row treats distant pairs (i - j > window, and not a sink j < sink [ours]); local and
/// sink pairs always attend.
#[derive(Debug, Clone, Copy)]
pub enum Distant<'a> {
    /// Every causal pair attends (dense).
    Attend,
    /// Only distant pairs that share one of their top-k groups (`masks`: per token) attend.
    TopK { masks: &'a [u64], window: usize, sink: usize },
    /// Every pair attends, a distant pair's score gated by its memberships' affinity.
    Gate { gate: GateFn, routing: &'a LayerRouting, window: usize, sink: usize },
}

/// One layer's queries and keys, read out of their tensors once for many rows.
pub struct Heads {
    h: usize,
    hkv: usize,
    t: usize,
    d: usize,
    q: Vec<f32>,
    k: Vec<f32>,
}

impl Heads {
    /// From queries (H, T, D) and keys (Hkv, T, D), with or without a leading batch of 1.
    pub fn new(q: &Tensor, k: &Tensor) -> Result<Heads> {
        let flat = |x: &Tensor| -> Result<Tensor> { Ok(if x.rank() == 4 { x.squeeze(0)? } else { x.clone() }.to_dtype(DType::F32)?) };
        let (q, k) = (flat(q)?, flat(k)?);
        let (h, t, d) = q.dims3()?;
        let hkv = k.dim(0)?;
        if hkv == 0 || h % hkv != 0 {
            return Err(Error::Invalid(format!("{h} query heads do not share {hkv} KV heads evenly")));
        }
        Ok(Heads { h, hkv, t, d, q: q.flatten_all()?.to_vec1()?, k: k.flatten_all()?.to_vec1()? })
    }

    pub fn heads(&self) -> usize {
        self.h
    }

    pub fn tokens(&self) -> usize {
        self.t
    }

    /// The bytes its queries and keys hold.
    pub fn bytes(&self) -> usize {
        4 * (self.q.len() + self.k.len())
    }

    /// Its shape (H, Hkv, T, D), queries and keys, as `kept::Scratch` writes them.
    pub(crate) fn raw(&self) -> ([usize; 4], &[f32], &[f32]) {
        ([self.h, self.hkv, self.t, self.d], &self.q, &self.k)
    }

    /// Back from `raw`'s parts (read back by `kept::SpilledPass::load`).
    pub(crate) fn from_raw([h, hkv, t, d]: [usize; 4], q: Vec<f32>, k: Vec<f32>) -> Result<Heads> {
        if hkv == 0 || h % hkv != 0 || q.len() != h * t * d || k.len() != hkv * t * d {
            return Err(Error::Invalid(format!("kept heads of shape {h}/{hkv} x {t} x {d} hold {} and {} values", q.len(), k.len())));
        }
        Ok(Heads { h, hkv, t, d, q, k })
    }

    /// The attention weights query `query` of head `head` gives keys `0..=query`, computed in
    /// f64: scaled dot products, `distant`'s mask or gate on distant pairs (as in
    /// `attention::plan`; a gate's score through `GateFn::score`), softmax. Pruned pairs get
    /// exactly 0. Sums to 1. Every attention row the app shows is this function's.
    pub fn row(&self, distant: Distant, head: usize, query: usize) -> Result<Vec<f32>> {
        let (h, t, d) = (self.h, self.t, self.d);
        if head >= h {
            return Err(Error::Invalid(format!("head {head} is out of range (the layer has {h} heads)")));
        }
        if query >= t {
            return Err(Error::Invalid(format!("query {query} is out of range ({t} tokens)")));
        }
        let kh = head / (h / self.hkv);
        let q = &self.q[(head * t + query) * d..][..d];
        let key = |j: usize| &self.k[(kh * t + j) * d..][..d];
        let scale = 1.0 / (d as f64).sqrt();
        let scores: Vec<Option<f64>> = (0..=query)
            .map(|j| {
                let s = q.iter().zip(key(j)).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * scale;
                match distant {
                    Distant::Attend => Some(s),
                    Distant::TopK { window, sink, .. } | Distant::Gate { window, sink, .. } if mask::classify(query, j, 0, 0, window, sink) == PairClass::Local => Some(s),
                    Distant::TopK { masks, window, sink } => mask::kept(masks, window, sink, query, j).then_some(s),
                    Distant::Gate { gate, routing, .. } => {
                        let a: f64 = routing.row(query).iter().zip(routing.row(j)).map(|(&x, &y)| x as f64 * y as f64).sum();
                        Some(gate.score(s as f32, a as f32, true).0 as f64)
                    }
                }
            })
            .collect();
        let m = scores.iter().flatten().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| s.map_or(0.0, |s| (s - m).exp())).collect();
        let z: f64 = w.iter().sum();
        Ok(w.iter().map(|x| (x / z) as f32).collect())
    }

    /// Per head and query `i < n` (`[head][query]`): the sum, in key order, of the dense
    /// weights (`row(Distant::Attend, head, i)`'s) of the keys `j <= i` that `pruned(i, j)` says
    /// the mask drops: the pruned attention mass that `compare` and `intervene` measure at every
    /// layer. The same f64 arithmetic in the same order as `row`, so the same f32 values (tested
    /// against it), but a layer at a time: the keys transposed once per KV head and each
    /// query's dot products swept over keys (`dots_f64_columns`, vectorised without
    /// reassociating a sum), and no allocation per row. Row by row, each score's f64 sum was a
    /// chain of dependent adds, and the measure of every layer took longer than the forward
    /// pass itself (issue 51: `intervene` over 800 tokens took 26 s on one thread).
    pub fn pruned_mass(&self, n: usize, pruned: impl Fn(usize, usize) -> bool + Sync) -> Result<Vec<Vec<f32>>> {
        use rayon::prelude::*;
        let (h, t, d) = (self.h, self.t, self.d);
        if n > t {
            return Err(Error::Invalid(format!("query {} is out of range ({t} tokens)", n - 1)));
        }
        let group = h / self.hkv;
        // Each KV head's keys transposed, component-major, the rows padded to whole blocks of
        // `DOTS_LANES` keys (zeros) so that every query's last keys are one block too.
        use crate::attention::cpu::simd::{dots_f64_columns, DOTS_LANES};
        let stride = t.next_multiple_of(DOTS_LANES);
        let kt: Vec<Vec<f64>> = (0..self.hkv)
            .into_par_iter()
            .map(|kh| {
                let mut v = vec![0f64; d * stride];
                for (j, key) in self.k[kh * t * d..][..t * d].chunks_exact(d.max(1)).enumerate() {
                    for (c, &x) in key.iter().enumerate() {
                        v[c * stride + j] = x as f64;
                    }
                }
                v
            })
            .collect();
        let scale = 1.0 / (d as f64).sqrt();
        Ok((0..h)
            .into_par_iter()
            .map(|head| {
                let kt = &kt[head / group];
                let mut q = vec![0f64; d];
                let mut s = vec![0f64; t];
                (0..n)
                    .map(|i| {
                        q.iter_mut().zip(&self.q[(head * t + i) * d..][..d]).for_each(|(a, &b)| *a = b as f64);
                        let s = &mut s[..=i];
                        dots_f64_columns(&q, kt, stride, s);
                        s.iter_mut().for_each(|x| *x *= scale);
                        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        s.iter_mut().for_each(|x| *x = (*x - m).exp());
                        let z: f64 = s.iter().sum();
                        let mut mass = 0f32;
                        for (j, &w) in s.iter().enumerate() {
                            if pruned(i, j) {
                                mass += (w / z) as f32;
                            }
                        }
                        mass
                    })
                    .collect()
            })
            .collect())
    }
}

/// How `mode` treats the distant pairs of a layer of `t` tokens (resolved like
/// `attention::plan`: all-local sequences run dense); `masks`: the top-k masks, for top-k.
pub fn distant<'a>(mode: Mode, cfg: Option<&AdapterConfig>, routing: Option<&'a LayerRouting>, masks: Option<&'a [u64]>, t: usize) -> Result<Distant<'a>> {
    Ok(match (mode, cfg, routing) {
        (Mode::Dense, _, _) => Distant::Attend,
        (_, Some(c), Some(_)) if mask::all_local(t, c.window) => Distant::Attend,
        (Mode::TopK(_), Some(c), Some(_)) => Distant::TopK { masks: masks.ok_or_else(|| Error::Invalid("top-k needs its masks".into()))?, window: c.window, sink: c.sink },
        (Mode::Soft, Some(c), Some(r)) => Distant::Gate { gate: GateFn::of(c), routing: r, window: c.window, sink: c.sink },
        _ => return Err(Error::Invalid(format!("mode {mode} needs an adapter"))),
    })
}

/// A row's weight split by what the top-k `masks` do with each pair: (local, shared-group,
/// pruned), `masks` indexed like the row (from the sequence start); sink pairs [ours] count as
/// local.
pub fn split(row: &[f32], masks: &[u64], window: usize, sink: usize, query: usize) -> [f32; 3] {
    let mut c = [0f32; 3];
    for (j, &x) in row.iter().enumerate() {
        let slot = match mask::classify(query, j, masks[query], masks[j], window, sink) {
            PairClass::Local => 0,
            PairClass::SharedGroup(_) => 1,
            _ => 2,
        };
        c[slot] += x;
    }
    c
}

/// The attention weights query `query` of head `head` gives keys `0..=query` in `mode`
/// (`Heads::row`).
pub fn attention_row(inp: &LayerInputs, cfg: Option<&AdapterConfig>, mode: Mode, head: usize, query: usize) -> Result<Vec<f32>> {
    let heads = Heads::new(&inp.q, &inp.k)?;
    let masks = match (mode, cfg, inp.routing.as_ref()) {
        (Mode::TopK(kk), Some(c), Some(r)) => Some(r.topk_masks(kk.of(c.groups)?)),
        _ => None,
    };
    let distant = distant(mode, cfg, inp.routing.as_ref(), masks.as_deref(), heads.tokens())?;
    heads.row(distant, head, query)
}

/// The long-range partners of a range of queries.
#[derive(Debug, Clone)]
pub struct PartnerRows {
    /// (key token, weight), sorted by weight, largest first: same-group tokens beyond the window.
    pub partners: Vec<(usize, f32)>,
    /// Attention mass on all partners, and on the local window (means over the queries).
    pub partner_mass: f32,
    pub local_mass: f32,
}

/// The long-range partners of queries `a..=b` of the sequence `ids` in `layer`/`head`: each
/// query's attention row (`mode`), and a key's weight is the mean, over the queries, of the
/// weight it receives where it is that query's partner (beyond the window, sharing a top-k
/// group of `masks`). With `prefix`, a single query runs only the prefix it needs
/// (`query_attention`); else the whole of `ids` runs.
#[allow(clippy::too_many_arguments)]
pub fn partners(
    model: &Model,
    adapter: &Adapter,
    ids: &[u32],
    mode: Mode,
    masks: &[u64],
    layer: usize,
    head: usize,
    (a, b): (usize, usize),
    prefix: bool,
    cancel: Option<&AtomicBool>,
) -> Result<PartnerRows> {
    let (window, sink) = (adapter.config.window, adapter.config.sink);
    let rows: Vec<Vec<f32>> = if prefix && a == b {
        vec![query_attention(model, Some(adapter), ids, mode, layer, head, a, cancel)?]
    } else {
        let inp = layer_inputs(model, Some(adapter), ids, mode, layer, cancel)?;
        (a..=b)
            .map(|i| {
                if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                    return Err(Error::Cancelled);
                }
                attention_row(&inp, Some(&adapter.config), mode, head, i)
            })
            .collect::<Result<_>>()?
    };
    Ok(aggregate(&rows, masks, (a, b), window, sink))
}

/// The partners of queries `a..=b` from their attention rows (`rows[i - a]`): a key's weight is
/// the mean over the queries of what it receives where it is that query's partner.
fn aggregate(rows: &[Vec<f32>], masks: &[u64], (a, b): (usize, usize), window: usize, sink: usize) -> PartnerRows {
    let mut weight: std::collections::HashMap<usize, f64> = Default::default();
    let (mut partner_mass, mut local_mass) = (0f64, 0f64);
    for (i, w) in (a..=b).zip(rows) {
        for (j, &wt) in w.iter().enumerate() {
            match mask::classify(i, j, masks[i], masks[j], window, sink) {
                PairClass::Local => local_mass += wt as f64,
                PairClass::SharedGroup(_) => {
                    *weight.entry(j).or_default() += wt as f64;
                    partner_mass += wt as f64;
                }
                PairClass::Pruned | PairClass::Future => {}
            }
        }
    }
    let n = rows.len() as f64;
    let mut partners: Vec<(usize, f32)> = weight.into_iter().map(|(j, w)| (j, (w / n) as f32)).collect();
    partners.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    PartnerRows { partners, partner_mass: (partner_mass / n) as f32, local_mass: (local_mass / n) as f32 }
}

/// Every layer's queries, keys and routing for one sequence, read out in one pass, so that the
/// partners and attention grids of any of its tokens, in any layer and head, need no further
/// model run (the GUI keeps one per segment it looks into). Memory: (H + Hkv) x T x D f32 per
/// layer, about 190 MB for SmolLM2-135M at 2048 tokens.
pub struct SequenceHeads {
    pub layers: Vec<(Heads, Option<LayerRouting>)>,
}

struct CaptureAll<'a> {
    layers: Vec<(Heads, Option<LayerRouting>)>,
    progress: &'a (dyn Fn(usize) + Sync),
    err: Option<Error>,
}

impl LayerHook for CaptureAll<'_> {
    fn inputs(&mut self, l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        match Heads::new(&inp.q, &inp.k) {
            Ok(h) => self.layers.push((h, routing.cloned())),
            Err(e) => {
                self.err = Some(e);
                return ControlFlow::Break(());
            }
        }
        (self.progress)(l + 1);
        ControlFlow::Continue(())
    }
}

/// The queries, keys and routing of every layer for the sequence `ids` (one full pass; the
/// whole sequence runs: with causal routing a prefix's rows are the same, with whole-sequence
/// Sinkhorn they need it). `progress(l)`: layers done.
pub fn sequence_heads(model: &Model, adapter: Option<&Adapter>, ids: &[u32], mode: Mode, cancel: Option<&AtomicBool>, progress: &(dyn Fn(usize) + Sync)) -> Result<SequenceHeads> {
    let opts = ForwardOptions { record_routing: true, cancel, ..ForwardOptions::new(mode, adapter) };
    let mut hook = CaptureAll { layers: Vec::new(), progress, err: None };
    model.decoder.run(&[ids], &opts, &mut hook)?;
    match hook.err {
        Some(e) => Err(e),
        None => Ok(SequenceHeads { layers: hook.layers }),
    }
}

impl SequenceHeads {
    pub fn tokens(&self) -> usize {
        self.layers.first().map_or(0, |l| l.0.tokens())
    }

    /// `partners` from the captured layers: the same rows, with no model run.
    #[allow(clippy::too_many_arguments)]
    pub fn partners(&self, cfg: &AdapterConfig, mode: Mode, masks: &[u64], layer: usize, head: usize, (a, b): (usize, usize), cancel: Option<&AtomicBool>) -> Result<PartnerRows> {
        let (heads, routing) = self.layers.get(layer).ok_or_else(|| Error::Invalid(format!("layer {layer} is out of range")))?;
        if b >= heads.tokens() || head >= heads.heads() {
            return Err(Error::Invalid(format!("queries {a}-{b} or head {head} out of range")));
        }
        let topk = match (mode, routing.as_ref()) {
            (Mode::TopK(kk), Some(r)) => Some(r.topk_masks(kk.of(cfg.groups)?)),
            _ => None,
        };
        let distant = distant(mode, Some(cfg), routing.as_ref(), topk.as_deref(), heads.tokens())?;
        let rows = (a..=b)
            .map(|i| {
                if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                    return Err(Error::Cancelled);
                }
                heads.row(distant, head, i)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(aggregate(&rows, masks, (a, b), cfg.window, cfg.sink))
    }

    /// `compare::attention_grid` from the captured layers: per layer and head, the (local,
    /// shared-group, pruned) shares of query `query`'s dense softmax row under top-`k` groups.
    pub fn grid(&self, k: usize, window: usize, sink: usize, query: usize) -> Result<Vec<Vec<[f32; 3]>>> {
        self.layers
            .iter()
            .map(|(heads, routing)| {
                let r = routing.as_ref().ok_or_else(|| Error::Invalid("the run has no routing (no adapter)".into()))?;
                let masks = r.topk_masks(k);
                (0..heads.heads()).map(|h| Ok(split(&heads.row(Distant::Attend, h, query)?, &masks, window, sink, query))).collect::<Result<Vec<_>>>()
            })
            .collect()
    }
}

/// Convenience: the row for one query of a sequence, running the layers below `layer`.
#[allow(clippy::too_many_arguments)]
pub fn query_attention(
    model: &Model,
    adapter: Option<&Adapter>,
    ids: &[u32],
    mode: Mode,
    layer: usize,
    head: usize,
    query: usize,
    cancel: Option<&AtomicBool>,
) -> Result<Vec<f32>> {
    if query >= ids.len() {
        return Err(Error::Invalid(format!("query {query} is out of range ({} tokens)", ids.len())));
    }
    // Causal model: keys after the query never matter, so run only the prefix (cheaper). With
    // whole-sequence Sinkhorn the routing of earlier tokens depends on later ones, so then the
    // whole sequence runs.
    let whole = adapter.is_some_and(|a| !a.config.causal_sinkhorn) && mode != Mode::Dense;
    let ids = if whole { ids } else { &ids[..=query] };
    let inp = layer_inputs(model, adapter, ids, mode, layer, cancel)?;
    attention_row(&inp, adapter.map(|a| &a.config), mode, head, query)
}
