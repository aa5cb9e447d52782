//! Looking inside one layer: the exact attention weights one query row gives its keys, for the
//! GUI's "long-range partners" view. The decoder runs every layer's attention through fused
//! kernels that never materialise weights, so this re-runs the inference path (the same blocks,
//! plans and kernels as `Decoder::forward`) up to the chosen layer, keeps that layer's
//! normalised input, Q, K, V and routing, and computes one softmax row exactly.
//!
//! Cost: the layers below the chosen one, for the segment holding the query (at most one
//! forward pass). Tested to reproduce the decoder's logits when run through every layer.

use crate::adapter::{Adapter, AdapterConfig, Gate};
use crate::attention::{self, Mode};
use crate::error::{Error, Result};
use crate::model::config::Positions;
use crate::model::decoder::{rope_tables, Linear};
use crate::model::Model;
use crate::router::LayerRouting;
use candle_core::Tensor;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Runs blocks `0..layer` exactly like `Decoder::forward` (inference path) and returns the
/// residual stream entering block `layer` (T x d_model). `layer == n_layers` gives the stream
/// after the last block.
pub fn residual_before(
    model: &Model,
    adapter: Option<&Adapter>,
    ids: &[u32],
    mode: Mode,
    layer: usize,
    cancel: Option<&AtomicBool>,
) -> Result<Tensor> {
    let d = &model.decoder;
    let cfg = &d.config;
    check(model, adapter, ids, mode, layer, cfg.n_layers)?;
    let t = ids.len();
    let dev = &d.device;
    let ids_t = Tensor::from_slice(ids, t, dev)?;
    let mut x = d.embed.index_select(&ids_t, 0)?;
    if let Some(pe) = &d.pos_embed {
        x = x.add(&pe.narrow(0, 0, t)?)?;
    }
    let causal = if dev.is_cpu() { None } else { Some(attention::causal_bias(t, dev)?) };
    for l in 0..layer {
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(Error::Cancelled);
        }
        let b = &d.blocks[l];
        let (q, k, v, r) = heads(model, adapter, l, &x, t)?;
        let plan = attention::plan(mode, adapter.map(|a| &a.config), r.as_ref(), t, dev)?;
        let o = attention::attend(&q, &k, &v, &plan, causal.as_ref())?;
        let o = o.transpose(0, 1)?.reshape((t, cfg.n_heads * cfg.head_dim))?;
        x = (x + b.o.forward(&o)?)?;
        x = (&x + b.mlp.forward(&b.mlp_norm.forward(&x, false)?)?)?;
    }
    Ok(x)
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
    let x = residual_before(model, adapter, ids, mode, layer, cancel)?;
    let (q, k, v, routing) = heads(model, adapter, layer, &x, ids.len())?;
    Ok(LayerInputs { layer, q, k, v, routing })
}

fn check(model: &Model, adapter: Option<&Adapter>, ids: &[u32], mode: Mode, layer: usize, n_layers: usize) -> Result<()> {
    let cfg = model.config();
    if ids.is_empty() {
        return Err(Error::Invalid("cannot inspect zero tokens".into()));
    }
    if ids.len() > cfg.context {
        return Err(Error::Invalid(format!("{} tokens exceed the model's context of {}", ids.len(), cfg.context)));
    }
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= cfg.vocab) {
        return Err(Error::Invalid(format!("token id {bad} is outside the vocabulary ({})", cfg.vocab)));
    }
    if layer > n_layers {
        return Err(Error::Invalid(format!("layer {layer} is out of range (the model has {n_layers} layers)")));
    }
    if mode != Mode::Dense && adapter.is_none() {
        return Err(Error::Invalid(format!("mode {mode} needs an adapter")));
    }
    Ok(())
}

/// The attention inputs of block `l` from the residual `x`: (q, k, v, routing).
fn heads(model: &Model, adapter: Option<&Adapter>, l: usize, x: &Tensor, t: usize) -> Result<(Tensor, Tensor, Tensor, Option<LayerRouting>)> {
    let d = &model.decoder;
    let cfg = &d.config;
    let b = &d.blocks[l];
    let h = b.attn_norm.forward(x, false)?;
    let split = |lin: &Linear, n: usize| -> Result<Tensor> {
        Ok(lin.forward(&h)?.reshape((t, n, cfg.head_dim))?.transpose(0, 1)?.contiguous()?)
    };
    let mut q = split(&b.q, cfg.n_heads)?;
    let mut k = split(&b.k, cfg.n_kv_heads)?;
    let v = split(&b.v, cfg.n_kv_heads)?;
    if let Positions::Rope { theta, interleaved } = cfg.positions {
        let (cos, sin) = rope_tables(t, cfg.head_dim, theta, &d.device)?;
        let rot = |x: &Tensor| -> Result<Tensor> {
            let x4 = x.unsqueeze(0)?;
            let y = if interleaved {
                candle_nn::rotary_emb::rope_i(&x4, &cos, &sin)?
            } else {
                candle_nn::rotary_emb::rope(&x4, &cos, &sin)?
            };
            Ok(y.squeeze(0)?)
        };
        q = rot(&q)?;
        k = rot(&k)?;
    }
    let r = match adapter {
        Some(a) => Some(a.route(l, &h, true)?),
        None => None,
    };
    Ok((q, k, v, r))
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
        (_, Some(c), Some(r)) if !attention::all_local(t, c.window) => Some((c, r)),
        (_, Some(_), Some(_)) => None,
        _ => return Err(Error::Invalid(format!("mode {mode} needs an adapter"))),
    };
    let masks = match (mode, gate) {
        (Mode::TopK(kk), Some((c, r))) => {
            if kk == 0 || kk > c.groups {
                return Err(Error::Invalid(format!("top-k k = {kk} must be in 1..={}", c.groups)));
            }
            Some(r.topk_masks(kk))
        }
        _ => None,
    };
    let scores: Vec<Option<f64>> = (0..=query)
        .map(|j| {
            let s = q.iter().zip(&k[j]).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * scale;
            let Some((c, r)) = gate else { return Some(s) };
            if query - j <= c.window {
                return Some(s);
            }
            match mode {
                Mode::TopK(_) => {
                    let m = masks.as_ref().expect("top-k masks");
                    (m[query] & m[j] != 0).then_some(s)
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
