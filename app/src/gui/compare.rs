//! Compare mode's computation: the researcher's question "what does Focus change?". Two runs
//! over the same tokens (the start of the analysed text): A, the analysis on screen, and B, what
//! the compare view sets (dense, soft, another k, another adapter, the other Sinkhorn variant).
//! One inference pass per run gives, per token, the next-token loss; per layer and token, the
//! top-k groups; and, for a top-k run, the attention mass its mask prunes per head: the weight
//! the dense softmax of the same layer's queries and keys gives the pairs that the mask drops.
//! B's groups are matched to A's (`align`) when the adapters differ.

use super::jobs::JobError;
use super::state::{AnalysisKey, AnalysisResult, CompareSpec};
use super::worker::Handle;
use candle_core::{DType, Tensor, D};
use focus_core::focus::mask::{classify, PairClass};
use focus_core::focus::router::LayerRouting;
use focus_core::model::block::AttentionInputs;
use focus_core::model::decoder::{Decoder, LayerHook, RunEnd};
use focus_core::model::ForwardOptions;
use focus_core::{Adapter, Mode, Model};
use std::ops::ControlFlow;
use std::sync::Arc;

/// One run of a comparison.
#[derive(Clone)]
pub struct Run {
    pub label: String,
    /// `None`: top-k with run B's own adapter, whose K is known once it has loaded.
    pub mode: Option<Mode>,
    /// k of the mask in top-k mode (and of the groups compared, with the other run's).
    pub k: usize,
    /// The adapter as run (window and Sinkhorn variant applied).
    pub adapter: Arc<Adapter>,
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
    /// The analysis compared (run A).
    pub key: AnalysisKey,
    pub spec: CompareSpec,
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

/// Computes each layer's pruned attention mass from the attention inputs the pass sees.
struct PrunedHook<'a> {
    /// Some(k, window): measure (top-k runs).
    measure: Option<(usize, usize)>,
    /// `out[layer][head][token]`.
    out: Vec<Vec<Vec<f32>>>,
    err: Option<String>,
    h: &'a Handle,
    base: usize,
    total: usize,
    what: String,
}

impl LayerHook for PrunedHook<'_> {
    fn inputs(&mut self, _l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        if let (Some((k, w)), Some(r)) = (self.measure, routing) {
            match pruned_mass(&inp.q, &inp.k, &r.topk_masks(k), w) {
                Ok(v) => self.out.push(v),
                Err(e) => {
                    self.err = Some(e.to_string());
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }
    fn done(&mut self, l: usize) {
        self.h.set_progress(self.base + l + 1, self.total, format!("{}: layer {}", self.what, l + 1));
    }
}

/// Per head and token (`[head][token]`): the dense softmax weight (queries `q` (1, H, T, D),
/// keys `k` (1, Hkv, T, D)) on the causal pairs that the top-k `masks` prune beyond `window`.
pub fn pruned_mass(q: &Tensor, k: &Tensor, masks: &[u64], window: usize) -> candle_core::Result<Vec<Vec<f32>>> {
    let q = q.squeeze(0)?.to_dtype(DType::F32)?;
    let k = k.squeeze(0)?.to_dtype(DType::F32)?;
    let (h, t, d) = q.dims3()?;
    let hkv = k.dim(0)?;
    let rep = h / hkv.max(1);
    // Head h reads KV head h / rep.
    let k = k.unsqueeze(1)?.expand((hkv, rep, t, d))?.reshape((h, t, d))?;
    let scores = (q.matmul(&k.t()?.contiguous()?)? * (1.0 / (d as f64).sqrt()))?;
    let dev = q.device();
    let mut bias = vec![0f32; t * t];
    let mut pruned = vec![0f32; t * t];
    for i in 0..t {
        for j in 0..t {
            if j > i {
                bias[i * t + j] = f32::NEG_INFINITY;
            } else if classify(i, j, masks[i], masks[j], window) == PairClass::Pruned {
                pruned[i * t + j] = 1.0;
            }
        }
    }
    let scores = scores.broadcast_add(&Tensor::from_vec(bias, (t, t), dev)?)?;
    let m = scores.max_keepdim(D::Minus1)?;
    let e = scores.broadcast_sub(&m)?.exp()?;
    let z = e.sum_keepdim(D::Minus1)?;
    let w = e.broadcast_div(&z)?;
    w.broadcast_mul(&Tensor::from_vec(pruned, (t, t), dev)?)?.sum(D::Minus1)?.to_vec2::<f32>() // (H, T)
}

/// One run over `ids`: loss per position, the top-`groups_k` groups per layer, and (top-k)
/// pruned mass.
pub fn run(model: &Model, ids: &[u32], r: &Run, groups_k: usize, h: &Handle, base: usize, total: usize) -> Result<RunOut, JobError> {
    let mode = r.mode.ok_or_else(|| JobError::Failed("run B: top-k needs adapter B's K, and it has not loaded".into()))?;
    let mut opts = ForwardOptions::new(mode, Some(r.adapter.as_ref()));
    opts.record_routing = true;
    opts.cancel = Some(&h.cancel);
    let measure = match mode {
        Mode::TopK(k) => Some((k.k(), r.adapter.config.window)),
        _ => None,
    };
    let mut hook = PrunedHook { measure, out: Vec::new(), err: None, h, base, total, what: r.label.clone() };
    let end = model.decoder.run(&[ids], &opts, &mut hook)?;
    if let Some(e) = hook.err {
        return Err(JobError::Failed(format!("pruned attention mass: {e}")));
    }
    let RunEnd::Finished { x, routing } = end else { return Err(JobError::Failed("the pass stopped early".into())) };
    let t = ids.len();
    let mut loss = vec![f32::NAN; t];
    if t > 1 {
        // The model's own logits (final norm, lm_head and Gemma 2's final soft-cap).
        let logits = model.decoder.logits(&x.narrow(0, 0, t - 1).map_err(err)?)?;
        let nll = Decoder::nll(&logits, &ids[1..])?;
        loss[..t - 1].copy_from_slice(&nll);
    }
    let masks = routing.iter().map(|l| l.topk_masks(groups_k)).collect();
    Ok(RunOut { loss, masks, pruned: measure.map(|_| Pruned { mass: hook.out }) })
}

fn err(e: candle_core::Error) -> JobError {
    JobError::Failed(e.to_string())
}

/// Everything a comparison needs, prepared on the UI thread.
pub struct CompareJob {
    pub res: Arc<AnalysisResult>,
    pub spec: CompareSpec,
    pub a: Run,
    /// Run B, or the path of its adapter still to load (with the rest of run B).
    pub b: Run,
    pub b_adapter_path: Option<std::path::PathBuf>,
}

impl CompareJob {
    pub fn run(mut self, h: &Handle) -> Result<Comparison, JobError> {
        let t0 = std::time::Instant::now();
        let model = self.res.model.clone();
        if let Some(p) = &self.b_adapter_path {
            h.set_progress(0, 0, "loading adapter B");
            let mut a = Adapter::load(p, &model.identity(), model.device())?;
            if let Some(c) = self.spec.causal {
                a.config.causal_sinkhorn = c;
            }
            if self.b.mode.is_none() {
                let k = a.config.topk(self.b.k).map_err(|e| JobError::Failed(format!("run B (adapter B): {e}")))?;
                self.b.mode = Some(Mode::TopK(k));
            }
            self.b.adapter = Arc::new(a);
        }
        let n = self.res.tokens().min(self.spec.max_tokens.max(2)).min(model.config().context);
        let ids: Vec<u32> = self.res.analysis.tokens[..n].iter().map(|t| t.id).collect();
        let layers = model.config().n_layers;
        let k = self.a.k.min(self.b.k);
        let a = run(&model, &ids, &self.a, k, h, 0, 2 * layers)?;
        let b = run(&model, &ids, &self.b, k, h, layers, 2 * layers)?;
        // Top-k groups of B, in A's numbering when the adapters differ.
        let same_adapter = self.b_adapter_path.is_none();
        let changed = (0..layers)
            .map(|l| {
                let (ma, mb) = (&a.masks[l], &b.masks[l]);
                let map: Vec<usize> = if same_adapter {
                    (0..self.b.adapter.config.groups).collect()
                } else {
                    let ident: Vec<usize> = (0..self.a.adapter.config.groups).collect();
                    super::align::match_layer(ma, &ident, mb, self.b.adapter.config.groups)
                };
                ma.iter()
                    .zip(mb)
                    .map(|(&x, &y)| {
                        let y: u64 = focus_core::focus::mask::groups(y).fold(0, |m, g| m | 1 << map[g]);
                        x != y
                    })
                    .collect()
            })
            .collect();
        Ok(Comparison {
            key: self.res.key.clone(),
            spec: self.spec,
            a: self.a.label,
            b: self.b.label,
            texts: self.res.analysis.tokens[..n].iter().map(|t| t.text.clone()).collect(),
            loss_a: a.loss,
            loss_b: b.loss,
            pruned_a: a.pruned,
            pruned_b: b.pruned,
            k,
            changed,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let m = pruned_mass(&q, &k, &masks, 1).unwrap();
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

/// One token's attention in every layer and head, split by what the top-k mask does with each
/// pair: for the attention view's head x layer grid.
pub struct AttnGrid {
    pub key: AnalysisKey,
    pub token: usize,
    /// `cells[layer][head]` = (local, shared-group, pruned) shares of the token's dense softmax
    /// attention (summing to 1).
    pub cells: Vec<Vec<[f32; 3]>>,
}

struct RowHook {
    query: usize,
    k: usize,
    window: usize,
    cells: Vec<Vec<[f32; 3]>>,
    err: Option<String>,
}

impl LayerHook for RowHook {
    fn inputs(&mut self, _l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        let Some(r) = routing else {
            self.err = Some("the run has no routing (no adapter)".into());
            return ControlFlow::Break(());
        };
        match row_split(&inp.q, &inp.k, &r.topk_masks(self.k), self.window, self.query) {
            Ok(c) => self.cells.push(c),
            Err(e) => {
                self.err = Some(e.to_string());
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

/// Per head: the dense softmax weights of query `i` split into (local, shared-group, pruned).
fn row_split(q: &Tensor, k: &Tensor, masks: &[u64], window: usize, i: usize) -> candle_core::Result<Vec<[f32; 3]>> {
    let q = q.squeeze(0)?.to_dtype(DType::F32)?;
    let k = k.squeeze(0)?.to_dtype(DType::F32)?;
    let (h, _t, d) = q.dims3()?;
    let hkv = k.dim(0)?;
    let rep = h / hkv.max(1);
    let qi = q.narrow(1, i, 1)?; // (H, 1, D)
    let kk = k.narrow(1, 0, i + 1)?.unsqueeze(1)?.expand((hkv, rep, i + 1, d))?.reshape((h, i + 1, d))?;
    let s = (qi.matmul(&kk.t()?.contiguous()?)? * (1.0 / (d as f64).sqrt()))?.squeeze(1)?; // (H, i+1)
    let m = s.max_keepdim(D::Minus1)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    let w = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?.to_vec2::<f32>()?;
    Ok(w.iter()
        .map(|row| {
            let mut c = [0f32; 3];
            for (j, &x) in row.iter().enumerate() {
                let slot = match classify(i, j, masks[i], masks[j], window) {
                    PairClass::Local => 0,
                    PairClass::SharedGroup(_) => 1,
                    _ => 2,
                };
                c[slot] += x;
            }
            c
        })
        .collect())
}

/// The head x layer grid of token `i` of `res` (its segment, run in `res`'s mode).
pub fn attention_grid(res: &AnalysisResult, i: usize, h: &Handle) -> Result<AttnGrid, JobError> {
    let an = &res.analysis;
    if i >= an.tokens.len() {
        return Err(JobError::Failed("token out of range".into()));
    }
    h.set_progress(0, 0, format!("token {i}, every layer and head"));
    let seg = an.segment_len.max(1);
    let start = i / seg * seg;
    let end = (start + seg).min(an.tokens.len());
    // Whole-sequence Sinkhorn: later tokens change earlier routing, so the whole segment runs.
    let end = if res.adapter.config.causal_sinkhorn { i + 1 } else { end };
    let ids: Vec<u32> = an.tokens[start..end].iter().map(|t| t.id).collect();
    let mut opts = ForwardOptions::new(res.mode, Some(res.adapter.as_ref()));
    opts.cancel = Some(&h.cancel);
    let mut hook = RowHook { query: i - start, k: res.key.params.k, window: res.window(), cells: Vec::new(), err: None };
    res.model.decoder.run(&[ids.as_slice()], &opts, &mut hook)?;
    if let Some(e) = hook.err {
        return Err(JobError::Failed(e));
    }
    Ok(AttnGrid { key: res.key.clone(), token: i, cells: hook.cells })
}
