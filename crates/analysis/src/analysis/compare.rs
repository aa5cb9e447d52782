//! Compare mode's computation: the researcher's question "what does Focus change?". Two runs
//! over the same tokens: A and B (dense, soft, another k, another adapter, the other Sinkhorn
//! variant). One inference pass per run gives, per token, the next-token loss (the model's own
//! logits, `Decoder::logits`, and `Decoder::nll`); per layer and token, the top-k groups; and,
//! for a top-k run, the attention mass its mask prunes per head: the weight the dense softmax
//! of the same layer's queries and keys (`partners::Heads::row`) gives the pairs that the mask
//! drops. B's groups are matched to A's (`align`) when the adapters differ.
//!
//! Also the attention grid: one token's dense attention in every layer and head, split by what
//! the top-k mask does with each pair.

use crate::analysis::kept::KeptPass;
use crate::analysis::partners::{split, Distant, Heads};
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::mask::{self, PairClass};
use crate::focus::router::LayerRouting;
use crate::model::block::AttentionInputs;
use crate::model::decoder::{Decoder, LayerHook, RunEnd};
use crate::model::{ForwardOptions, Model};
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;

/// One run of a comparison.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pub label: &'a str,
    pub mode: Mode,
    /// k of the run's groups (of the mask, in top-k mode).
    pub k: usize,
    /// The adapter as run (window and Sinkhorn variant applied).
    pub adapter: &'a Adapter,
}

/// What one run gives.
pub struct RunOut {
    /// `loss[i]`: the loss of predicting token i + 1 at position i (NaN at the last position).
    pub loss: Vec<f32>,
    /// `masks[layer][token]`: top-k groups.
    pub masks: Vec<Vec<u64>>,
    /// The attention mass the top-k mask prunes (top-k runs only).
    pub pruned: Option<Pruned>,
}

/// What the table's pruned mass is taken over (the selected layer and head are the left
/// panel's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Mean over layers and heads.
    All,
    /// The selected layer, mean over its heads.
    Layer,
    /// The selected layer and head.
    Head,
}

/// The attention mass a top-k run's mask prunes: `mass[layer][head][token]`.
pub struct Pruned {
    pub mass: Vec<Vec<Vec<f32>>>,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

impl Pruned {
    pub fn heads(&self) -> usize {
        self.mass.first().map_or(0, Vec::len)
    }
    /// Token `i`'s pruned mass over `scope` (`layer` and `head`: the selected ones, clamped).
    pub fn at(&self, i: usize, scope: Scope, layer: usize, head: usize) -> f32 {
        let l = &self.mass[layer.min(self.mass.len() - 1)];
        (match scope {
            Scope::All => mean(self.mass.iter().flatten().map(|h| h[i] as f64)),
            Scope::Layer => mean(l.iter().map(|h| h[i] as f64)),
            Scope::Head => l[head.min(l.len() - 1)][i] as f64,
        }) as f32
    }
    /// Per layer: the mean over tokens of the mass, averaged over heads (`None`) or of `head`.
    pub fn per_layer(&self, head: Option<usize>) -> Vec<f64> {
        self.mass
            .iter()
            .map(|l| match head {
                None => mean(l.iter().flatten().map(|&x| x as f64)),
                Some(h) => mean(l[h.min(l.len() - 1)].iter().map(|&x| x as f64)),
            })
            .collect()
    }
}

/// One layer's compare figures (the per-layer curves, their CSV and JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRow {
    pub layer: usize,
    /// Tokens whose top-k groups change in this layer, and their share of all tokens.
    pub changed: usize,
    pub changed_share: f64,
    /// Mean pruned mass over tokens and heads, and over tokens for the selected head.
    pub pruned_a: Option<f64>,
    pub pruned_b: Option<f64>,
    pub pruned_a_head: Option<f64>,
    pub pruned_b_head: Option<f64>,
    /// Loss is the whole model's, so a layer has none: these are the mean Δ loss of the tokens
    /// whose groups change in this layer and of those whose groups stay (NaN: no such token).
    pub delta_changed: f64,
    pub delta_unchanged: f64,
}

pub struct Comparison {
    pub a: String,
    pub b: String,
    pub texts: Vec<String>,
    pub loss_a: Vec<f32>,
    pub loss_b: Vec<f32>,
    pub pruned_a: Option<Pruned>,
    pub pruned_b: Option<Pruned>,
    /// k of the groups compared: the smaller of the runs' k (so that k = 2 against k = 3 asks
    /// whether the top 2 change, not whether a 2-set equals a 3-set).
    pub k: usize,
    /// `changed[layer][token]`: the token's top-k groups differ between the runs.
    pub changed: Vec<Vec<bool>>,
    pub seconds: f64,
}

impl Comparison {
    pub fn tokens(&self) -> usize {
        self.texts.len()
    }
    pub fn layers(&self) -> usize {
        self.changed.len()
    }
    /// loss(A) - loss(B) at token i (NaN at the last position).
    pub fn delta(&self, i: usize) -> f32 {
        self.loss_a[i] - self.loss_b[i]
    }
    /// Run A's and B's pruned mass at token i over `scope` (None: the run prunes nothing).
    pub fn pruned_at(&self, i: usize, scope: Scope, layer: usize, head: usize) -> (Option<f32>, Option<f32>) {
        let f = |p: &Option<Pruned>| p.as_ref().map(|p| p.at(i, scope, layer, head));
        (f(&self.pruned_a), f(&self.pruned_b))
    }
    /// In how many layers the token's top-k groups change.
    pub fn changed_layers(&self, i: usize) -> usize {
        self.changed.iter().filter(|l| l[i]).count()
    }
    /// The per-layer figures (`head`: the selected head's pruned mass too).
    pub fn layer_rows(&self, head: usize) -> Vec<LayerRow> {
        let n = self.tokens().max(1) as f64;
        let pa = self.pruned_a.as_ref().map(|p| (p.per_layer(None), p.per_layer(Some(head))));
        let pb = self.pruned_b.as_ref().map(|p| (p.per_layer(None), p.per_layer(Some(head))));
        self.changed
            .iter()
            .enumerate()
            .map(|(l, ch)| {
                let changed = ch.iter().filter(|&&c| c).count();
                let d = |want: bool| mean((0..self.tokens()).filter(|&i| ch[i] == want).map(|i| self.delta(i) as f64).filter(|x| x.is_finite()));
                LayerRow {
                    layer: l,
                    changed,
                    changed_share: changed as f64 / n,
                    pruned_a: pa.as_ref().map(|p| p.0[l]),
                    pruned_b: pb.as_ref().map(|p| p.0[l]),
                    pruned_a_head: pa.as_ref().map(|p| p.1[l]),
                    pruned_b_head: pb.as_ref().map(|p| p.1[l]),
                    delta_changed: d(true),
                    delta_unchanged: d(false),
                }
            })
            .collect()
    }
    /// Mean loss of a run over the scored positions.
    pub fn mean_loss(v: &[f32]) -> f64 {
        mean(v.iter().filter(|x| x.is_finite()).map(|&x| x as f64))
    }

    /// The per-token table as CSV: the pruned mass over layers and heads, in the selected
    /// layer (mean over heads) and in its selected head.
    pub fn csv(&self, layer: usize, head: usize) -> String {
        let mut s = format!("# A: {}\n# B: {}\n# groups compared: top-{}; selected layer {layer}, head {head}\n", self.a, self.b, self.k);
        s += &format!("index,token,loss_a,loss_b,delta_loss,pruned_mass_a,pruned_mass_b,pruned_mass_a_layer{layer},pruned_mass_b_layer{layer},pruned_mass_a_layer{layer}_head{head},pruned_mass_b_layer{layer}_head{head},groups_changed_layers,groups_changed_layer{layer}\n");
        for i in 0..self.tokens() {
            let t = self.texts[i].replace('"', "\"\"");
            let mut row = format!("{i},\"{t}\",{},{},{}", num(self.loss_a[i]), num(self.loss_b[i]), num(self.delta(i)));
            for scope in [Scope::All, Scope::Layer, Scope::Head] {
                let (a, b) = self.pruned_at(i, scope, layer, head);
                row += &format!(",{},{}", a.map(num).unwrap_or_default(), b.map(num).unwrap_or_default());
            }
            s += &format!("{row},{},{}\n", self.changed_layers(i), self.changed[layer.min(self.layers() - 1)][i] as u8);
        }
        s
    }

    /// The per-layer figures as CSV.
    pub fn layers_csv(&self, head: usize) -> String {
        let mut s = format!("# A: {}\n# B: {}\n# delta_loss_*: the mean delta loss (whole model) of the tokens whose top-{} groups change (stay) in the layer\n", self.a, self.b, self.k);
        s += &format!("layer,tokens_changed,changed_share,pruned_mass_a,pruned_mass_b,pruned_mass_a_head{head},pruned_mass_b_head{head},delta_loss_changed,delta_loss_unchanged\n");
        let o = |x: Option<f64>| x.map(|v| num(v as f32)).unwrap_or_default();
        for r in self.layer_rows(head) {
            s += &format!(
                "{},{},{},{},{},{},{},{},{}\n",
                r.layer,
                r.changed,
                num(r.changed_share as f32),
                o(r.pruned_a),
                o(r.pruned_b),
                o(r.pruned_a_head),
                o(r.pruned_b_head),
                num(r.delta_changed as f32),
                num(r.delta_unchanged as f32)
            );
        }
        s
    }

    /// Everything as JSON: both runs, per token (the pruned mass per layer and head of each
    /// top-k run included) and per layer.
    pub fn json(&self, layer: usize, head: usize) -> String {
        let f = |x: f64| x.is_finite().then_some(x);
        let tokens: Vec<_> = (0..self.tokens())
            .map(|i| {
                serde_json::json!({
                    "index": i,
                    "token": self.texts[i],
                    "loss_a": f(self.loss_a[i] as f64),
                    "loss_b": f(self.loss_b[i] as f64),
                    "delta_loss": f(self.delta(i) as f64),
                    "groups_changed_layers": self.changed_layers(i),
                })
            })
            .collect();
        let layers: Vec<_> = self
            .layer_rows(head)
            .iter()
            .map(|r| {
                serde_json::json!({
                    "layer": r.layer,
                    "tokens_changed": r.changed,
                    "changed_share": r.changed_share,
                    "pruned_mass_a": r.pruned_a,
                    "pruned_mass_b": r.pruned_b,
                    "pruned_mass_a_selected_head": r.pruned_a_head,
                    "pruned_mass_b_selected_head": r.pruned_b_head,
                    "delta_loss_changed": f(r.delta_changed),
                    "delta_loss_unchanged": f(r.delta_unchanged),
                })
            })
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({
            "a": self.a,
            "b": self.b,
            "tokens": self.tokens(),
            "groups_compared_k": self.k,
            "selected": { "layer": layer, "head": head },
            "mean_loss_a": f(Self::mean_loss(&self.loss_a)),
            "mean_loss_b": f(Self::mean_loss(&self.loss_b)),
            "delta_loss": "loss(A) - loss(B), next-token NLL in nats; > 0 where A predicts worse",
            "per_token": tokens,
            "per_layer": layers,
            "per_layer_note": "loss is the whole model's: delta_loss_changed (unchanged) is the mean delta loss of the tokens whose top-k groups change (stay) in the layer",
            "pruned_mass_a_layer_head_token": self.pruned_a.as_ref().map(|p| &p.mass),
            "pruned_mass_b_layer_head_token": self.pruned_b.as_ref().map(|p| &p.mass),
        }))
        .expect("JSON of numbers and strings")
    }
}

/// A figure for the CSV: empty where there is none (NaN: the last position, no such token).
fn num(x: f32) -> String {
    if x.is_finite() {
        format!("{x:.6}")
    } else {
        String::new()
    }
}

/// Per head and token (`[head][token]`): the dense softmax weight that queries `q` (H, T, D)
/// give, over keys `k` (Hkv, T, D), to the causal pairs that the top-k `masks` prune beyond
/// `window` and the sinks [ours] (with or without a leading batch of 1).
pub fn pruned_mass(q: &candle_core::Tensor, k: &candle_core::Tensor, masks: &[u64], window: usize, sink: usize) -> Result<Vec<Vec<f32>>> {
    let heads = Heads::new(q, k)?;
    heads.pruned_mass(heads.tokens(), |i, j| pruned(masks, window, sink, i, j))
}

/// Whether the top-k `masks` prune pair (i, j): neither local (window, sinks [ours]) nor
/// sharing a group (`split`'s third share).
fn pruned(masks: &[u64], window: usize, sink: usize, i: usize, j: usize) -> bool {
    !matches!(mask::classify(i, j, masks[i], masks[j], window, sink), PairClass::Local | PairClass::SharedGroup(_))
}

/// Computes each layer's pruned attention mass from the attention inputs the pass sees.
struct PrunedHook<'a, P: FnMut(usize) + Send> {
    /// Some(k, window, sink): measure (top-k runs).
    measure: Option<(usize, usize, usize)>,
    /// `out[layer][head][token]`.
    out: Vec<Vec<Vec<f32>>>,
    err: Option<Error>,
    progress: &'a mut P,
}

impl<P: FnMut(usize) + Send> LayerHook for PrunedHook<'_, P> {
    fn inputs(&mut self, _l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        if let (Some((k, w, s)), Some(r)) = (self.measure, routing) {
            match pruned_mass(&inp.q, &inp.k, &r.topk_masks(k), w, s) {
                Ok(v) => self.out.push(v),
                Err(e) => {
                    self.err = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }
    fn done(&mut self, l: usize) {
        (self.progress)(l);
    }
}

/// One run over `ids`: loss per position, the top-`groups_k` groups per layer, and (top-k)
/// pruned mass. `progress(layer)` as each layer finishes.
pub fn run(model: &Model, ids: &[u32], r: &Run, groups_k: usize, cancel: Option<&AtomicBool>, mut progress: impl FnMut(usize) + Send) -> Result<RunOut> {
    let mut opts = ForwardOptions::new(r.mode, Some(r.adapter));
    opts.record_routing = true;
    opts.cancel = cancel;
    let measure = match r.mode {
        Mode::TopK(k) => Some((k.k(), r.adapter.config.window, r.adapter.config.sink)),
        _ => None,
    };
    let mut hook = PrunedHook { measure, out: Vec::new(), err: None, progress: &mut progress };
    let end = model.decoder.run(&[ids], &opts, &mut hook)?;
    if let Some(e) = hook.err {
        return Err(Error::Invalid(format!("pruned attention mass: {e}")));
    }
    let RunEnd::Finished { x, routing } = end else { return Err(Error::Invalid("the pass stopped early".into())) };
    let t = ids.len();
    let mut loss = vec![f32::NAN; t];
    if t > 1 {
        // The model's own logits (final norm, lm_head and Gemma 2's final soft-cap).
        let logits = model.decoder.logits(&x.narrow(0, 0, t - 1)?)?;
        let nll = Decoder::nll(&logits, &ids[1..])?;
        loss[..t - 1].copy_from_slice(&nll);
    }
    let masks = routing.iter().map(|l| l.topk_masks(groups_k)).collect();
    Ok(RunOut { loss, masks, pruned: measure.map(|_| Pruned { mass: hook.out }) })
}

/// Run `r` over the first `n` tokens `ids` of a kept pass (`kept`: an analysis' own pass, which
/// must `serve` the run; `r.adapter` must be the one it ran), with no model pass: the same loss,
/// groups and pruned mass as `run` (the rows from the kept queries and keys, the losses from
/// the kept last residual).
pub fn run_from_kept(model: &Model, kept: &KeptPass, ids: &[u32], r: &Run, groups_k: usize, cancel: Option<&AtomicBool>) -> Result<RunOut> {
    let n = ids.len();
    if !kept.serves(r.mode, n) {
        return Err(Error::Invalid(format!("the kept pass ({} tokens, {}) cannot stand for a {} run over {n} tokens", kept.tokens(), kept.mode, r.mode)));
    }
    let mut loss = vec![f32::NAN; n];
    if n > 1 {
        let logits = model.decoder.logits(&kept.last.narrow(0, 0, n - 1)?)?;
        loss[..n - 1].copy_from_slice(&Decoder::nll(&logits, &ids[1..])?);
    }
    let routing = |l: usize| kept.heads.layers[l].1.as_ref();
    let layers = kept.heads.layers.len();
    let masks = (0..layers).map(|l| routing(l).map(|r| r.topk_masks(groups_k)[..n].to_vec()).unwrap_or_default()).collect();
    let pruned = match r.mode {
        Mode::TopK(k) => {
            let (w, s) = (r.adapter.config.window, r.adapter.config.sink);
            let mass = (0..layers)
                .filter_map(|l| routing(l).map(|rt| (l, rt.topk_masks(k.k()))))
                .map(|(l, masks)| {
                    if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                        return Err(Error::Cancelled);
                    }
                    kept.heads.layers[l].0.pruned_mass(n, |i, j| pruned(&masks, w, s, i, j))
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Pruned { mass })
        }
        _ => None,
    };
    Ok(RunOut { loss, masks, pruned })
}

/// Compares runs `a` and `b` over `ids` (`texts`: the tokens' texts). `same_adapter`: B runs
/// A's adapter (else B's groups are matched to A's, layer by layer). `progress(done, total)` in
/// layers of both runs.
#[allow(clippy::too_many_arguments)]
pub fn compare(
    model: &Model,
    ids: &[u32],
    texts: Vec<String>,
    a: &Run,
    b: &Run,
    same_adapter: bool,
    cancel: Option<&AtomicBool>,
    progress: impl FnMut(usize, usize, &str) + Send,
) -> Result<Comparison> {
    compare_reusing(model, ids, texts, a, None, b, same_adapter, cancel, progress)
}

/// `compare`, with run A read from `kept_a` (the analysis' own pass, `run_from_kept`) when
/// given: then only run B runs the model.
#[allow(clippy::too_many_arguments)]
pub fn compare_reusing(
    model: &Model,
    ids: &[u32],
    texts: Vec<String>,
    a: &Run,
    kept_a: Option<&KeptPass>,
    b: &Run,
    same_adapter: bool,
    cancel: Option<&AtomicBool>,
    mut progress: impl FnMut(usize, usize, &str) + Send,
) -> Result<Comparison> {
    let t0 = std::time::Instant::now();
    let layers = model.config().n_layers;
    let k = a.k.min(b.k);
    let ra = match kept_a {
        Some(kept) => {
            progress(0, layers, &format!("{}: from the analysis (no model pass)", a.label));
            run_from_kept(model, kept, ids, a, k, cancel)?
        }
        None => run(model, ids, a, k, cancel, |l| progress(l + 1, 2 * layers, &format!("{}: layer {}", a.label, l + 1)))?,
    };
    let rb = match kept_a {
        Some(_) => run(model, ids, b, k, cancel, |l| progress(l + 1, layers, &format!("{}: layer {}", b.label, l + 1)))?,
        None => run(model, ids, b, k, cancel, |l| progress(layers + l + 1, 2 * layers, &format!("{}: layer {}", b.label, l + 1)))?,
    };
    // Top-k groups of B, in A's numbering when the adapters differ.
    let changed = (0..layers)
        .map(|l| {
            let (ma, mb) = (&ra.masks[l], &rb.masks[l]);
            let map: Vec<usize> = if same_adapter {
                (0..b.adapter.config.groups).collect()
            } else {
                let ident: Vec<usize> = (0..a.adapter.config.groups).collect();
                crate::analysis::align::match_layer(ma, &ident, mb, b.adapter.config.groups)
            };
            ma.iter()
                .zip(mb)
                .map(|(&x, &y)| {
                    let y: u64 = crate::focus::mask::groups(y).fold(0, |m, g| m | 1 << map[g]);
                    x != y
                })
                .collect()
        })
        .collect();
    Ok(Comparison {
        a: a.label.to_string(),
        b: b.label.to_string(),
        texts,
        loss_a: ra.loss,
        loss_b: rb.loss,
        pruned_a: ra.pruned,
        pruned_b: rb.pruned,
        k,
        changed,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// `[layer][head]`: the (local, shared-group, pruned) shares of one token's dense softmax
/// attention (summing to 1), by what the top-k mask does with each pair.
pub type Grid = Vec<Vec<[f32; 3]>>;

struct RowHook {
    query: usize,
    k: usize,
    window: usize,
    sink: usize,
    cells: Grid,
    err: Option<Error>,
}

impl LayerHook for RowHook {
    fn inputs(&mut self, _l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        let Some(r) = routing else {
            self.err = Some(Error::Invalid("the run has no routing (no adapter)".into()));
            return ControlFlow::Break(());
        };
        let masks = r.topk_masks(self.k);
        let cells = Heads::new(&inp.q, &inp.k).and_then(|heads| {
            (0..heads.heads()).map(|h| Ok(split(&heads.row(Distant::Attend, h, self.query)?, &masks, self.window, self.sink, self.query))).collect::<Result<Vec<_>>>()
        });
        match cells {
            Ok(c) => self.cells.push(c),
            Err(e) => {
                self.err = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

/// Query `query`'s grid over the sequence `ids` (run from position 0 in `mode`; top-`k`
/// groups). With causal Sinkhorn only the prefix up to the query runs.
pub fn attention_grid(model: &Model, adapter: &Adapter, ids: &[u32], mode: Mode, k: usize, query: usize, cancel: Option<&AtomicBool>) -> Result<Grid> {
    if query >= ids.len() {
        return Err(Error::Invalid("token out of range".into()));
    }
    // Whole-sequence Sinkhorn: later tokens change earlier routing, so the whole segment runs.
    let ids = if adapter.config.causal_sinkhorn { &ids[..=query] } else { ids };
    let mut opts = ForwardOptions::new(mode, Some(adapter));
    opts.cancel = cancel;
    let mut hook = RowHook { query, k, window: adapter.config.window, sink: adapter.config.sink, cells: Vec::new(), err: None };
    model.decoder.run(&[ids], &opts, &mut hook)?;
    match hook.err {
        Some(e) => Err(e),
        None => Ok(hook.cells),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    /// The pruned mass equals the softmax weight on the pruned pairs, computed by hand, per
    /// head; query heads share KV heads as in the model (grouped-query attention).
    #[test]
    fn pruned_mass_by_hand() {
        let dev = candle_core::Device::Cpu;
        let (t, d) = (4usize, 2usize);
        // Two query heads on one KV head: head 1's queries are head 0's reversed per row.
        let q0: Vec<f32> = vec![1.0, 0.0, 0.5, 0.5, 0.0, 1.0, 1.0, 1.0];
        let q1: Vec<f32> = q0.chunks(2).flat_map(|r| [r[1], r[0] * 2.0]).collect();
        let kv: Vec<f32> = vec![0.2, 0.1, 1.0, 0.0, 0.0, 1.0, 0.3, 0.3];
        let q = Tensor::from_vec([q0.clone(), q1.clone()].concat(), (1, 2, t, d), &dev).unwrap();
        let k = Tensor::from_vec(kv.clone(), (1, 1, t, d), &dev).unwrap();
        // Token 3 shares no group with token 0 or 1; window 1: pairs (3,0) and (3,1) are pruned.
        let masks = [1u64, 1, 2, 2];
        let m = pruned_mass(&q, &k, &masks, 1, 0).unwrap();
        assert_eq!((m.len(), m[0].len()), (2, 4));
        for (h, qv) in [&q0, &q1].into_iter().enumerate() {
            let s: Vec<f64> = (0..4).map(|j| (qv[6] * kv[2 * j] + qv[7] * kv[2 * j + 1]) as f64 / (d as f64).sqrt()).collect();
            let e: Vec<f64> = s.iter().map(|x| x.exp()).collect();
            let want = (e[0] + e[1]) / e.iter().sum::<f64>();
            assert!((m[h][3] as f64 - want).abs() < 1e-5, "head {h}: {} vs {want}", m[h][3]);
            assert_eq!((m[h][0], m[h][1]), (0.0, 0.0));
            // Token 2 vs token 0: distance 2 > w, groups disjoint: pruned.
            assert!(m[h][2] > 0.0);
        }
        assert!((m[0][3] - m[1][3]).abs() > 1e-3, "the heads differ");
        // The scopes: a head, the layer's mean over heads, the mean over layers and heads.
        let p = Pruned { mass: vec![m.clone(), vec![vec![0.0; 4]; 2]] };
        assert_eq!(p.at(3, Scope::Head, 0, 1), m[1][3]);
        assert!((p.at(3, Scope::Layer, 0, 1) - (m[0][3] + m[1][3]) / 2.0).abs() < 1e-6);
        assert!((p.at(3, Scope::All, 0, 1) - (m[0][3] + m[1][3]) / 4.0).abs() < 1e-6);
        let per = p.per_layer(Some(0));
        assert!((per[0] - m[0].iter().map(|&x| x as f64).sum::<f64>() / 4.0).abs() < 1e-6 && per[1] == 0.0);
    }
}

