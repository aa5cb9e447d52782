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
use crate::focus::adapter::{Adapter, AdapterConfig, Gate};
use crate::focus::mask::{self, PairClass};
use crate::focus::router::LayerRouting;
use crate::model::block::AttentionInputs;
use crate::model::decoder::{LayerHook, RunEnd};
use crate::model::{ForwardOptions, Model};
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;
use candle_core::Tensor;

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

/// The attention weights query `query` of head `head` gives keys `0..=query` in `mode`,
/// computed in f64: scaled dot products, the mode's mask or gate on distant pairs (as in
/// `attention::plan`), softmax. Pruned pairs get exactly 0. Sums to 1.
pub fn attention_row(inp: &LayerInputs, cfg: Option<&AdapterConfig>, mode: Mode, head: usize, query: usize) -> Result<Vec<f32>> {
    let (h, t, d) = inp.q.dims3()?;
    let hkv = inp.k.dim(0)?;
    if head >= h {
        return Err(Error::Invalid(format!("head {head} is out of range (the layer has {h} heads)")));
    }
    if query >= t {
        return Err(Error::Invalid(format!("query {query} is out of range ({t} tokens)")));
    }
    let kh = head / (h / hkv);
    let q = inp.q.get(head)?.get(query)?.to_vec1::<f32>()?;
    let k = inp.k.get(kh)?.narrow(0, 0, query + 1)?.to_vec2::<f32>()?;
    let scale = 1.0 / (d as f64).sqrt();
    // Distant-pair treatment, resolved like `attention::plan` (all-local sequences run dense).
    let gate: Option<(&AdapterConfig, &LayerRouting)> = match (mode, cfg, inp.routing.as_ref()) {
        (Mode::Dense, _, _) => None,
        (_, Some(c), Some(r)) if !mask::all_local(t, c.window) => Some((c, r)),
        (_, Some(_), Some(_)) => None,
        _ => return Err(Error::Invalid(format!("mode {mode} needs an adapter"))),
    };
    let masks = match (mode, gate) {
        (Mode::TopK(kk), Some((c, r))) => Some(r.topk_masks(kk.of(c.groups)?)),
        _ => None,
    };
    let scores: Vec<Option<f64>> = (0..=query)
        .map(|j| {
            let s = q.iter().zip(&k[j]).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * scale;
            let Some((c, r)) = gate else { return Some(s) };
            if mask::classify(query, j, 0, 0, c.window) == PairClass::Local {
                return Some(s);
            }
            match mode {
                Mode::TopK(_) => {
                    let m = masks.as_ref().expect("top-k masks");
                    mask::kept(m, c.window, query, j).then_some(s)
                }
                Mode::Soft => {
                    let a: f64 = r.row(query).iter().zip(r.row(j)).map(|(&x, &y)| x as f64 * y as f64).sum();
                    Some(match c.gate {
                        Gate::Paper => s / (1.0 + (-c.lambda * a).exp()),
                        Gate::Log => s + (a + c.log_eps).ln(),
                    })
                }
                Mode::Dense => Some(s),
            }
        })
        .collect();
    let m = scores.iter().flatten().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = scores.iter().map(|s| s.map_or(0.0, |s| (s - m).exp())).collect();
    let z: f64 = w.iter().sum();
    Ok(w.iter().map(|x| (x / z) as f32).collect())
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
