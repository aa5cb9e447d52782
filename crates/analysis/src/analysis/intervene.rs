//! Interventions (issue 31, item 2): edit one layer's routing on a text and read what changes,
//! as TransformerLens users ablate and patch. At layer L, after the router has run:
//! - **ablate G**: the tokens whose top-k set holds G (its members) get an empty set: they
//!   attend locally only (window and sinks), and no distant query reaches them through a group.
//!   Soft mode: their membership rows become 0 (affinity 0 with every token, the gate of "no
//!   shared group").
//! - **force i:G**: token i's set gets G in place of its weakest group (it keeps k groups; G and
//!   its k-1 strongest others). Soft mode: its row becomes one-hot on G.
//! - **swap G1:G2**: every query's G1 and G2 are exchanged, the keys' sets kept: the members of
//!   G1 attend the distant members of G2 and the other way round. (Renaming both sides would
//!   change nothing: the mask only asks whether two sets meet.) Soft mode: the query
//!   memberships' columns G1 and G2 are exchanged.
//!
//! So an intervened layer attends under M(i, j) = [j <= i] and ([i - j <= w] or [j < s] or
//! [Q(i) meets K(j)]) with edited query sets Q and key sets K (`kept`); where Q = K (ablate,
//! force) the exact top-k kernel runs it, otherwise (swap) the explicit mask. Later layers route
//! their own (changed) inputs. `intervene` runs the text twice, as it is and intervened, and
//! returns a `compare::Comparison` (A: intervened, B: original), which the Compare view shows,
//! with the layer's pair counts. Groups are the router's own indices (`group_raw` in exports).

use crate::analysis::compare::{self, Comparison, Pruned};
use crate::analysis::partners::Heads;
use crate::attention::{soft, LayerPlan, Mode};
use crate::error::{Error, Result};
use crate::focus::adapter::{Adapter, AdapterConfig};
use crate::focus::mask::{self, topk_mask};
use crate::focus::router::LayerRouting;
use crate::model::block::AttentionInputs;
use crate::model::decoder::{Decoder, LayerHook, RunEnd};
use crate::model::{ForwardOptions, Model};
use candle_core::{Device, Tensor};
use serde::Serialize;
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;

/// What is done to the layer's routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Intervention {
    Ablate { group: usize },
    Force { token: usize, group: usize },
    Swap { a: usize, b: usize },
}

impl std::fmt::Display for Intervention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Intervention::Ablate { group } => write!(f, "ablate G{group}"),
            Intervention::Force { token, group } => write!(f, "force token {token} into G{group}"),
            Intervention::Swap { a, b } => write!(f, "swap G{a} and G{b} (queries)"),
        }
    }
}

impl Intervention {
    /// Checks the groups against the adapter's K and the token against the text's length.
    pub fn check(&self, groups: usize, tokens: usize) -> Result<()> {
        let group = |g: usize| if g < groups { Ok(()) } else { Err(Error::Invalid(format!("group {g} is out of range: the adapter has {groups} groups (0..={})", groups - 1))) };
        match *self {
            Intervention::Ablate { group: g } => group(g),
            Intervention::Force { token, group: g } => {
                group(g)?;
                if token >= tokens {
                    return Err(Error::Invalid(format!("token {token} is out of range: the text has {tokens} tokens (0..={})", tokens.saturating_sub(1))));
                }
                Ok(())
            }
            Intervention::Swap { a, b } => {
                group(a)?;
                group(b)?;
                if a == b {
                    return Err(Error::Invalid(format!("swapping G{a} with itself changes nothing; name two groups")));
                }
                Ok(())
            }
        }
    }

    /// The layer's query and key top-k sets after the intervention, from its routing and k.
    pub fn sets(&self, routing: &LayerRouting, k: usize) -> (Vec<u64>, Vec<u64>) {
        let sets = routing.topk_masks(k);
        match *self {
            Intervention::Ablate { group } => {
                let edited: Vec<u64> = sets.iter().map(|&m| if m >> group & 1 == 1 { 0 } else { m }).collect();
                (edited.clone(), edited)
            }
            Intervention::Force { token, group } => {
                let mut edited = sets;
                if edited[token] >> group & 1 == 0 {
                    // G and the k-1 strongest other groups.
                    let row: Vec<f32> = routing.row(token).iter().enumerate().map(|(g, &x)| if g == group { f32::INFINITY } else { x }).collect();
                    edited[token] = topk_mask(&row, k);
                }
                (edited.clone(), edited)
            }
            Intervention::Swap { a, b } => {
                let swapped = sets.iter().map(|&m| swap_bits(m, a, b)).collect();
                (swapped, sets)
            }
        }
    }

    /// The layer's query and key memberships (T x K each, row-major) after the intervention
    /// (soft mode); `k` says who the members of an ablated group are.
    pub fn memberships(&self, routing: &LayerRouting, k: usize) -> (Vec<f32>, Vec<f32>) {
        let kk = routing.groups;
        let mut m = routing.memberships.clone();
        match *self {
            Intervention::Ablate { group } => {
                for (i, set) in routing.topk_masks(k).into_iter().enumerate() {
                    if set >> group & 1 == 1 {
                        m[i * kk..(i + 1) * kk].fill(0.0);
                    }
                }
                (m.clone(), m)
            }
            Intervention::Force { token, group } => {
                let row = &mut m[token * kk..(token + 1) * kk];
                row.fill(0.0);
                row[group] = 1.0;
                (m.clone(), m)
            }
            Intervention::Swap { a, b } => {
                let mut q = m.clone();
                for row in q.chunks_mut(kk) {
                    row.swap(a, b);
                }
                (q, m)
            }
        }
    }

    /// The intervened layer's attention plan (`t` tokens, `mode` soft or top-k).
    pub fn plan(&self, mode: Mode, cfg: &AdapterConfig, routing: &LayerRouting, dev: &Device) -> Result<LayerPlan> {
        let t = routing.t;
        if mask::all_local(t, cfg.window) {
            // Every pair is local: no routing reaches the attention, as `attention::plan`.
            return Ok(LayerPlan::Dense);
        }
        match mode {
            Mode::Dense => Err(Error::Invalid("an intervention edits the routing: run it in soft or topk mode".into())),
            Mode::Soft => {
                let (q, k) = self.memberships(routing, cfg.top_k);
                let tensor = |v: Vec<f32>| Tensor::from_vec(v, (t, cfg.groups), dev);
                Ok(soft::soft_gate_pair(&tensor(q)?, &tensor(k)?, cfg))
            }
            Mode::TopK(k) => {
                let (q, kset) = self.sets(routing, k.of(cfg.groups)?);
                if q == kset {
                    return Ok(LayerPlan::TopK { masks: q, window: cfg.window, sink: cfg.sink });
                }
                let bias: Vec<f32> = (0..t * t).map(|n| if n % t > n / t || kept(&q, &kset, cfg.window, cfg.sink, n / t, n % t) { 0.0 } else { f32::NEG_INFINITY }).collect();
                Ok(LayerPlan::Masked(Tensor::from_vec(bias, (t, t), dev)?))
            }
        }
    }
}

fn swap_bits(m: u64, a: usize, b: usize) -> u64 {
    let (x, y) = (m >> a & 1, m >> b & 1);
    (m & !(1 << a) & !(1 << b)) | x << b | y << a
}

/// M(i, j) of an intervened layer: causal, and local, a sink, or query set Q(i) meeting key set
/// K(j). With Q = K it is `mask::kept`.
pub fn kept(q: &[u64], k: &[u64], window: usize, sink: usize, i: usize, j: usize) -> bool {
    j <= i && (mask::always(i, j, window, sink) || q[i] & k[j] != 0)
}

/// Pairs the intervened layer keeps, against the original's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LayerPairs {
    /// Causal pairs, T (T + 1) / 2.
    pub causal: u64,
    pub kept_before: u64,
    pub kept_after: u64,
    /// Queries whose set of kept keys changes.
    pub queries_changed: usize,
}

/// An intervention's outcome.
pub struct Intervened {
    pub intervention: Intervention,
    pub layer: usize,
    pub mode: Mode,
    /// k of the top-k sets (the mask's in top-k mode; the members' in soft mode).
    pub k: usize,
    /// A: the intervened run, B: the original; `delta(i)` = loss after - loss before (> 0 where
    /// the intervention hurts the prediction of token i + 1). `changed[l][i]`: token i's
    /// effective set at layer l differs (at L: its query set).
    pub comparison: Comparison,
    /// The tokens whose query or key set the intervention edits at the layer.
    pub edited: Vec<usize>,
    /// The layer's kept pairs before and after (top-k sets of k in soft mode too).
    pub pairs: LayerPairs,
}

/// Records the intervened run: its layer plan, the effective sets per layer and (top-k) the
/// pruned attention mass under the effective mask.
struct InterveneHook<'a, P: FnMut(usize) + Send> {
    intervention: Intervention,
    layer: usize,
    mode: Mode,
    k: usize,
    cfg: &'a AdapterConfig,
    dev: Device,
    sets: Vec<Vec<u64>>,
    /// (query sets, key sets) at the layer.
    at_layer: Option<(Vec<u64>, Vec<u64>)>,
    pruned: Vec<Vec<Vec<f32>>>,
    err: Option<Error>,
    progress: &'a mut P,
}

impl<P: FnMut(usize) + Send> LayerHook for InterveneHook<'_, P> {
    fn plan(&mut self, l: usize, routing: Option<&LayerRouting>) -> Result<Option<LayerPlan>> {
        match routing {
            Some(r) if l == self.layer => Ok(Some(self.intervention.plan(self.mode, self.cfg, r, &self.dev)?)),
            _ => Ok(None),
        }
    }
    fn inputs(&mut self, l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        let Some(r) = routing else { return ControlFlow::Continue(()) };
        let (q, k) = if l == self.layer { self.intervention.sets(r, self.k) } else { (r.topk_masks(self.k), r.topk_masks(self.k)) };
        if matches!(self.mode, Mode::TopK(_)) {
            let (w, s) = (self.cfg.window, self.cfg.sink);
            match pruned_mass(&inp.q, &inp.k, |i, j| kept(&q, &k, w, s, i, j)) {
                Ok(v) => self.pruned.push(v),
                Err(e) => {
                    self.err = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        if l == self.layer {
            self.at_layer = Some((q.clone(), k));
        }
        self.sets.push(q);
        ControlFlow::Continue(())
    }
    fn done(&mut self, l: usize) {
        (self.progress)(l);
    }
}

/// Per head and token: the dense softmax weight queries `q` give, over keys `k`, to the causal
/// pairs `keep` drops.
/// (`Heads::pruned_mass`: a layer at a time, the same figures as row by row.)
fn pruned_mass(q: &Tensor, k: &Tensor, keep: impl Fn(usize, usize) -> bool + Sync) -> Result<Vec<Vec<f32>>> {
    let heads = Heads::new(q, k)?;
    heads.pruned_mass(heads.tokens(), |i, j| !keep(i, j))
}

/// The loss of predicting token i + 1 at each position i (NaN at the last) from the last
/// block's output `x`.
fn losses(model: &Model, x: &Tensor, ids: &[u32]) -> Result<Vec<f32>> {
    let t = ids.len();
    let mut loss = vec![f32::NAN; t];
    if t > 1 {
        let logits = model.decoder.logits(&x.narrow(0, 0, t - 1)?)?;
        loss[..t - 1].copy_from_slice(&Decoder::nll(&logits, &ids[1..])?);
    }
    Ok(loss)
}

/// The intervened forward pass alone: its logits (T x vocab). What `intervene` runs, for tests
/// and callers that need the logits.
pub fn intervened_logits(model: &Model, adapter: &Adapter, ids: &[u32], mode: Mode, layer: usize, intervention: Intervention) -> Result<Tensor> {
    let cfg = &adapter.config;
    let opts = ForwardOptions::new(mode, Some(adapter));
    let dev = model.device().clone();
    let out = model.decoder.forward_with(ids, &opts, |l, r| match r {
        Some(r) if l == layer => Ok(Some(intervention.plan(mode, cfg, r, &dev)?)),
        _ => Ok(None),
    })?;
    Ok(out.logits)
}

/// Runs `ids` (with `texts`, their tokens' texts) as they are and with `intervention` at
/// `layer`, in `mode` (soft or top-k) with `adapter`. `progress(done, total)` in layers of both
/// runs.
#[allow(clippy::too_many_arguments)]
pub fn intervene(
    model: &Model,
    adapter: &Adapter,
    ids: &[u32],
    texts: Vec<String>,
    mode: Mode,
    layer: usize,
    intervention: Intervention,
    cancel: Option<&AtomicBool>,
    mut progress: impl FnMut(usize, usize) + Send,
) -> Result<Intervened> {
    let t0 = std::time::Instant::now();
    let cfg = &adapter.config;
    let layers = model.config().n_layers;
    if layer >= layers {
        return Err(Error::Invalid(format!("layer {layer} is out of range: the model has {layers} layers (0..={})", layers - 1)));
    }
    if !cfg.router_layers.routes(model.config().is_sliding(layer)) {
        return Err(Error::Invalid(format!("layer {layer} is not routed by this adapter (router_layers {:?}): it attends densely, so there is no group to edit", cfg.router_layers)));
    }
    intervention.check(cfg.groups, ids.len())?;
    let k = match mode {
        Mode::TopK(k) => k.of(cfg.groups)?,
        Mode::Soft => cfg.top_k,
        Mode::Dense => return Err(Error::Invalid("an intervention edits the routing: run it in soft or topk mode".into())),
    };
    let original = compare::Run { label: "original", mode, k, adapter };
    let before = compare::run(model, ids, &original, k, cancel, |l| progress(l + 1, 2 * layers))?;
    let mut opts = ForwardOptions::new(mode, Some(adapter));
    opts.record_routing = true;
    opts.cancel = cancel;
    let mut on_layer = |l: usize| progress(layers + l + 1, 2 * layers);
    let mut hook = InterveneHook { intervention, layer, mode, k, cfg, dev: model.device().clone(), sets: Vec::new(), at_layer: None, pruned: Vec::new(), err: None, progress: &mut on_layer };
    let end = model.decoder.run(&[ids], &opts, &mut hook)?;
    if let Some(e) = hook.err {
        return Err(Error::Invalid(format!("pruned attention mass: {e}")));
    }
    let RunEnd::Finished { x, .. } = end else { return Err(Error::Invalid("the pass stopped early".into())) };
    let loss = losses(model, &x, ids)?;
    let (q, kset) = hook.at_layer.take().ok_or_else(|| Error::Invalid(format!("layer {layer} was not routed")))?;
    let orig = &before.masks[layer];
    let (w, s) = (cfg.window, cfg.sink);
    let t = ids.len();
    let mut pairs = LayerPairs { causal: (t * (t + 1) / 2) as u64, kept_before: 0, kept_after: 0, queries_changed: 0 };
    for i in 0..t {
        let mut differs = false;
        for j in 0..=i {
            let (b, a) = (mask::kept(orig, w, s, i, j), kept(&q, &kset, w, s, i, j));
            pairs.kept_before += b as u64;
            pairs.kept_after += a as u64;
            differs |= a != b;
        }
        pairs.queries_changed += differs as usize;
    }
    let edited = (0..t).filter(|&i| q[i] != orig[i] || kset[i] != orig[i]).collect();
    // Every layer has routing when an adapter is attached (unrouted ones attend densely).
    let changed = hook.sets.iter().zip(&before.masks).map(|(a, b)| a.iter().zip(b).map(|(x, y)| x != y).collect()).collect();
    let pruned_after = matches!(mode, Mode::TopK(_)).then(|| Pruned { mass: std::mem::take(&mut hook.pruned) });
    let comparison = Comparison {
        a: format!("intervened: {intervention} at layer {layer}"),
        b: "original".into(),
        texts,
        loss_a: loss,
        loss_b: before.loss,
        pruned_a: pruned_after,
        pruned_b: before.pruned,
        k,
        changed,
        seconds: t0.elapsed().as_secs_f64(),
    };
    Ok(Intervened { intervention, layer, mode, k, comparison, edited, pairs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::compare::pruned_mass as compare_pruned_mass;
    use crate::analysis::partners::{split, Distant};

    /// The pruned mass a layer at a time (`Heads::pruned_mass`, issue 51: it was row by row,
    /// and `intervene` grew with the square of the length) gives the same f32 figures, bit for
    /// bit, as the straightforward definition: each query's dense row (`Heads::row`, f64) and
    /// the sum, in key order, of the weights the mask drops. Both masks: compare's top-k
    /// masks, and an intervention's edited query sets against the original key sets.
    #[test]
    fn pruned_mass_a_layer_at_a_time_is_the_row_by_row_definition() {
        let dev = candle_core::Device::Cpu;
        let (h, hkv, t, d) = (6usize, 2usize, 75usize, 24usize);
        let mut s = 11u64;
        let mut rnd = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let mut vals = |n: usize| (0..n).map(|_| (rnd() % 20001) as f32 / 10000.0 * 2.5 - 2.5).collect::<Vec<f32>>();
        let q = Tensor::from_vec(vals(h * t * d), (1, h, t, d), &dev).unwrap();
        let k = Tensor::from_vec(vals(hkv * t * d), (1, hkv, t, d), &dev).unwrap();
        let masks: Vec<u64> = (0..t).map(|_| 1u64 << (rnd() % 8) | 1u64 << (rnd() % 8)).collect();
        let edited: Vec<u64> = masks.iter().map(|&m| if m & 1 == 1 { 0 } else { m }).collect();
        let (w, sink) = (5usize, 2usize);
        let heads = Heads::new(&q, &k).unwrap();
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a == 0.0 && b == 0.0);
        // compare: every pair `split` puts in its pruned share.
        let fast = compare_pruned_mass(&q, &k, &masks, w, sink).unwrap();
        let mut pruned_some = 0;
        assert_eq!((fast.len(), fast[0].len()), (h, t));
        for (hh, fh) in fast.iter().enumerate() {
            for (i, &got) in fh.iter().enumerate() {
                let want = split(&heads.row(Distant::Attend, hh, i).unwrap(), &masks, w, sink, i)[2];
                assert!(same(got, want), "head {hh} query {i}: {got} vs {want}");
                pruned_some += (want > 0.0) as usize;
            }
        }
        assert!(pruned_some > h * t / 2, "the masks prune: {pruned_some}");
        // intervene: edited query sets, original key sets; the first n queries only.
        let n = 60;
        let fast = heads.pruned_mass(n, |i, j| !kept(&edited, &masks, w, sink, i, j)).unwrap();
        assert_eq!((fast.len(), fast[0].len()), (h, n));
        for (hh, fh) in fast.iter().enumerate() {
            for (i, &got) in fh.iter().enumerate() {
                let row = heads.row(Distant::Attend, hh, i).unwrap();
                let want: f32 = row.iter().enumerate().filter(|&(j, _)| !kept(&edited, &masks, w, sink, i, j)).map(|(_, &x)| x).sum();
                assert!(same(got, want), "head {hh} query {i}: {got} vs {want}");
            }
        }
        assert!(heads.pruned_mass(t + 1, |_, _| true).is_err());
    }
}
