//! Interventions (`focus_core::analysis::intervene`, `focus-lens intervene`): the intervened
//! forward against a reference pass whose intervened layer is attended by
//! `attention::reference::masked_dense_reference` (f64) under a mask built here by hand from the
//! router's memberships; and on SmolLM2 with the shipped adapter, what an ablation may and may
//! not change.

mod common;

use common::inputs::assert_has;
use focus_core::analysis::intervene::{intervene, intervened_logits, Intervention};
use focus_core::attention::cpu::Shape;
use focus_core::attention::reference::masked_dense_reference;
use focus_core::attention::{LayerAttention, Mode};
use focus_core::focus::mask::TopK;
use focus_core::model::block::AttentionInputs;
use focus_core::model::decoder::{LayerHook, RunEnd};
use focus_core::model::ForwardOptions;
use focus_core::{Adapter, AdapterSpec, Model, Result};
use candle_core::{Device, Tensor};
use std::process::Command;

/// The k groups of largest membership, ties to the lower index: written out, not
/// `mask::topk_mask`.
fn top_set(row: &[f32], k: usize) -> u64 {
    let mut order: Vec<usize> = (0..row.len()).collect();
    for a in 0..order.len() {
        for b in a + 1..order.len() {
            let (x, y) = (order[a], order[b]);
            if row[y] > row[x] || (row[y] == row[x] && y < x) {
                order.swap(a, b);
            }
        }
    }
    order[..k].iter().fold(0, |m, &g| m | 1 << g)
}

/// Query and key sets of the intervened layer, by the definitions in the module's comment.
fn edited_sets(what: Intervention, rows: &[Vec<f32>], k: usize) -> (Vec<u64>, Vec<u64>) {
    let sets: Vec<u64> = rows.iter().map(|r| top_set(r, k)).collect();
    match what {
        Intervention::Ablate { group } => {
            let e: Vec<u64> = sets.iter().map(|&s| if s & (1 << group) != 0 { 0 } else { s }).collect();
            (e.clone(), e)
        }
        Intervention::Force { token, group } => {
            let mut e = sets.clone();
            if e[token] & (1 << group) == 0 {
                let others: Vec<f32> = rows[token].iter().enumerate().map(|(g, &x)| if g == group { f32::MIN } else { x }).collect();
                e[token] = 1 << group | top_set(&others, k - 1);
            }
            (e.clone(), e)
        }
        Intervention::Swap { a, b } => {
            let q = sets
                .iter()
                .map(|&s| {
                    let has = |g: usize| s & (1 << g) != 0;
                    let mut x = s & !(1 << a) & !(1 << b);
                    if has(a) {
                        x |= 1 << b;
                    }
                    if has(b) {
                        x |= 1 << a;
                    }
                    x
                })
                .collect();
            (q, sets)
        }
    }
}

/// Query and key memberships (rows) of the intervened layer in soft mode, by the module's
/// definitions; `k` names an ablated group's members.
fn edited_rows(what: Intervention, rows: &[Vec<f32>], k: usize) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut m = rows.to_vec();
    match what {
        Intervention::Ablate { group } => {
            for r in m.iter_mut().filter(|r| top_set(r, k) & (1 << group) != 0) {
                r.iter_mut().for_each(|x| *x = 0.0);
            }
            (m.clone(), m)
        }
        Intervention::Force { token, group } => {
            m[token] = (0..m[token].len()).map(|g| (g == group) as u8 as f32).collect();
            (m.clone(), m)
        }
        Intervention::Swap { a, b } => {
            let q = m.iter().map(|r| r.iter().enumerate().map(|(g, _)| r[if g == a { b } else if g == b { a } else { g }]).collect()).collect();
            (q, m)
        }
    }
}

/// Causal attention in f64 with each pair's score from `score(i, j, u)`, u = q.k / sqrt(d).
fn scored_reference(q: &[f32], k: &[f32], v: &[f32], s: Shape, score: impl Fn(usize, usize, f64) -> f64) -> Vec<f32> {
    let Shape { heads, kv_heads, t, d } = s;
    let mut out = vec![0f32; heads * t * d];
    for h in 0..heads {
        let kh = h / (heads / kv_heads);
        for i in 0..t {
            let qi = &q[(h * t + i) * d..(h * t + i + 1) * d];
            let sc: Vec<f64> = (0..=i).map(|j| score(i, j, qi.iter().zip(&k[(kh * t + j) * d..(kh * t + j + 1) * d]).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() / (d as f64).sqrt())).collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = w.iter().sum();
            for c in 0..d {
                out[(h * t + i) * d + c] = ((0..=i).map(|j| w[j] * v[(kh * t + j) * d + c] as f64).sum::<f64>() / z) as f32;
            }
        }
    }
    out
}

/// Attends layer `layer` itself: the router's memberships, the edited sets and the mask by
/// hand, and the f64 masked dense reference.
struct Reference<'a> {
    adapter: &'a Adapter,
    layer: usize,
    what: Option<Intervention>,
    k: usize,
    /// Soft mode (the gate by hand), else top-k (the mask by hand).
    soft: bool,
}

impl LayerHook for Reference<'_> {
    fn attend(&mut self, l: usize, inp: &AttentionInputs, own: &LayerAttention) -> Result<Option<Tensor>> {
        if l != self.layer {
            return Ok(None);
        }
        assert!(own.window.is_none() && own.softcap.is_none() && own.scale.is_none(), "the reference is plain causal attention");
        let routing = self.adapter.route(l, &inp.h, false)?;
        let rows: Vec<Vec<f32>> = (0..routing.t).map(|i| routing.row(i).to_vec()).collect();
        let (qt, kt, vt) = (inp.q.squeeze(0)?, inp.k.squeeze(0)?, inp.v.squeeze(0)?);
        let (h, t, d) = qt.dims3()?;
        let shape = Shape { heads: h, kv_heads: kt.dim(0)?, t, d };
        let flat = |x: &Tensor| x.flatten_all().and_then(|x| x.to_vec1::<f32>());
        let cfg = &self.adapter.config;
        if self.soft {
            // The gate by hand: log, u + ln(a + eps); paper, u * sigmoid(lambda a); local and
            // sink pairs ungated.
            let (gq, gk) = match self.what {
                Some(w) => edited_rows(w, &rows, self.k),
                None => (rows.clone(), rows.clone()),
            };
            let (w, sink, eps, lambda) = (cfg.window, cfg.sink, cfg.log_eps, cfg.lambda);
            let paper = cfg.gate == focus_core::Gate::Paper;
            let score = |i: usize, j: usize, u: f64| {
                if i - j <= w || j < sink {
                    return u;
                }
                let a: f64 = gq[i].iter().zip(&gk[j]).map(|(&x, &y)| x as f64 * y as f64).sum();
                if paper { u / (1.0 + (-lambda * a).exp()) } else { u + (a + eps).ln() }
            };
            let out = scored_reference(&flat(&qt)?, &flat(&kt)?, &flat(&vt)?, shape, score);
            return Ok(Some(Tensor::from_vec(out, (1, h, t, d), qt.device())?));
        }
        let (q, kset) = match self.what {
            Some(w) => edited_sets(w, &rows, self.k),
            None => {
                let s: Vec<u64> = rows.iter().map(|r| top_set(r, self.k)).collect();
                (s.clone(), s)
            }
        };
        let (w, sink) = (cfg.window, cfg.sink);
        let keep = |i: usize, j: usize| i - j <= w || j < sink || q[i] & kset[j] != 0;
        let out = masked_dense_reference(&flat(&qt)?, &flat(&kt)?, &flat(&vt)?, shape, keep);
        Ok(Some(Tensor::from_vec(out, (1, h, t, d), qt.device())?))
    }
}

fn reference_logits(model: &Model, adapter: &Adapter, ids: &[u32], mode: Mode, layer: usize, what: Option<Intervention>, k: usize) -> Tensor {
    let opts = ForwardOptions::new(mode, Some(adapter));
    let mut hook = Reference { adapter, layer, what, k, soft: mode == Mode::Soft };
    let RunEnd::Finished { x, .. } = model.decoder.run(&[ids], &opts, &mut hook).unwrap() else { panic!("stopped") };
    model.decoder.logits(&x).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

/// Every intervention, at each layer of the tiny Llama, in top-k mode for k = 1 and 2 (the
/// exact kernel for ablate and force, the explicit mask for swap): the logits equal those of
/// the reference pass to float tolerance, and differ from the plain pass's.
#[test]
fn the_intervened_forward_equals_the_masked_dense_reference() {
    let model = Model::load(&common::fixture("hf_tiny/llama"), &Device::Cpu).unwrap();
    let adapter = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window: 3, sink: 1, ..Default::default() }, 3).unwrap();
    let ids: Vec<u32> = (0..48u32).map(|i| (i * 37 + 11) % 200).collect();
    let layers = model.config().n_layers;
    let mut changed = 0;
    for k in [1, 2] {
        let mode = Mode::TopK(TopK::new(k, 4).unwrap());
        let plain = model.decoder.forward(&ids, &ForwardOptions::new(mode, Some(&adapter))).unwrap().logits;
        // The reference hook itself, with no intervention, is the plain pass.
        let d = max_diff(&plain, &reference_logits(&model, &adapter, &ids, mode, 0, None, k));
        assert!(d < 1e-3, "reference without intervention: {d}");
        for layer in 0..layers {
            for what in [Intervention::Ablate { group: 1 }, Intervention::Force { token: 30, group: 2 }, Intervention::Swap { a: 0, b: 3 }] {
                let got = intervened_logits(&model, &adapter, &ids, mode, layer, what).unwrap();
                let want = reference_logits(&model, &adapter, &ids, mode, layer, Some(what), k);
                let d = max_diff(&got, &want);
                assert!(d < 1e-3, "{what} at layer {layer}, k {k}: max |logit difference| {d}");
                changed += (max_diff(&got, &plain) > 1e-3) as usize;
            }
        }
    }
    assert!(changed >= 8, "most interventions change the logits ({changed} of 12)");
}

/// Soft mode, both gates: the intervened forward equals a reference pass whose layer is
/// attended in f64 with the gate applied by hand to the edited memberships.
#[test]
fn the_soft_intervened_forward_equals_the_gated_reference() {
    let model = Model::load(&common::fixture("hf_tiny/llama"), &Device::Cpu).unwrap();
    let ids: Vec<u32> = (0..40u32).map(|i| (i * 53 + 7) % 200).collect();
    let mut changed = 0;
    for gate in [focus_core::Gate::Log, focus_core::Gate::Paper] {
        let spec = AdapterSpec { groups: 4, window: 3, sink: 1, gate, lambda: 4.0, top_k: 2, ..Default::default() };
        let adapter = Adapter::random(&model.identity(), model.device(), &spec, 5).unwrap();
        let plain = model.decoder.forward(&ids, &ForwardOptions::new(Mode::Soft, Some(&adapter))).unwrap().logits;
        let d = max_diff(&plain, &reference_logits(&model, &adapter, &ids, Mode::Soft, 1, None, 2));
        assert!(d < 1e-3, "{gate:?} reference without intervention: {d}");
        for layer in 0..model.config().n_layers {
            for what in [Intervention::Ablate { group: 2 }, Intervention::Force { token: 25, group: 0 }, Intervention::Swap { a: 1, b: 3 }] {
                let got = intervened_logits(&model, &adapter, &ids, Mode::Soft, layer, what).unwrap();
                let want = reference_logits(&model, &adapter, &ids, Mode::Soft, layer, Some(what), 2);
                let d = max_diff(&got, &want);
                assert!(d < 1e-3, "{gate:?}: {what} at layer {layer}: max |logit difference| {d}");
                changed += (max_diff(&got, &plain) > 1e-3) as usize;
            }
        }
    }
    assert!(changed >= 8, "most interventions change the logits ({changed} of 12)");
}

/// On SmolLM2 with the shipped K = 8 adapter, ablating a group at layer 9 of a 300-token text:
/// layers before 9 see nothing change (same sets, same pruned mass); at layer 9 exactly the
/// group's members are edited, and pairs are only removed; tokens within the window (which
/// attend all their keys in every layer) keep their loss; later tokens' losses move.
/// Forcing a token into a group it is already in changes nothing at all.
#[test]
fn ablating_a_centroid_of_the_shipped_adapter_changes_only_what_it_should() {
    let model = common::default_model();
    let adapter = Adapter::load(&common::root().join("sample_adapters/smollm2-135m-k8"), &model.identity(), model.device()).unwrap();
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let tok = model.tokenizer().unwrap();
    let mut ids = tok.encode(&text[..4000], false).unwrap().ids;
    // 172 tokens beyond the adapter's window (300 at a window of 128).
    let window = adapter.config.window;
    ids.truncate(window + 172);
    let texts: Vec<String> = ids.iter().map(|&i| tok.token_text(i)).collect();
    let (layer, k) = (9, adapter.config.top_k);
    let mode = Mode::TopK(adapter.config.topk(k).unwrap());
    assert!(ids.len() > window + 50);
    // The layer's routing, to pick a group with members beyond the window.
    let out = model.decoder.forward(&ids, &ForwardOptions { record_routing: true, ..ForwardOptions::new(mode, Some(&adapter)) }).unwrap();
    let sets = out.routing[layer].topk_masks(k);
    let group = (0..8).max_by_key(|&g| sets.iter().skip(window + 1).filter(|&&s| s >> g & 1 == 1).count()).unwrap();
    let members: Vec<usize> = (0..ids.len()).filter(|&i| sets[i] >> group & 1 == 1).collect();
    let r = intervene(model, &adapter, &ids, texts.clone(), mode, layer, Intervention::Ablate { group }, None, |_, _| {}).unwrap();
    let c = &r.comparison;
    assert_eq!(r.edited, members, "the edited tokens are the group's members");
    for l in 0..layer {
        assert!(c.changed[l].iter().all(|&x| !x), "layer {l} changed");
        let (a, b) = (c.pruned_a.as_ref().unwrap(), c.pruned_b.as_ref().unwrap());
        assert_eq!(a.mass[l], b.mass[l], "pruned mass at layer {l}");
    }
    let changed_at: Vec<usize> = (0..ids.len()).filter(|&i| c.changed[layer][i]).collect();
    assert_eq!(changed_at, members);
    assert!(r.pairs.kept_after < r.pairs.kept_before && r.pairs.kept_after >= r.pairs.causal / 4, "{:?}", r.pairs);
    // (To float tolerance: the exact kernel splits a query's keys by set, and the sums of the
    // split change with the sets.)
    for i in 0..=window {
        assert!((c.loss_a[i] - c.loss_b[i]).abs() < 1e-4, "token {i} attends only local keys: {} vs {}", c.loss_a[i], c.loss_b[i]);
    }
    let moved = (window + 1..ids.len() - 1).filter(|&i| (c.loss_a[i] - c.loss_b[i]).abs() > 1e-4).count();
    assert!(moved > 10, "{moved} later tokens' losses move");
    // A no-op: a token forced into a group of its own set.
    let token = ids.len() - 2;
    let own = sets[token].trailing_zeros() as usize;
    let same = intervene(model, &adapter, &ids, texts, mode, layer, Intervention::Force { token, group: own }, None, |_, _| {}).unwrap();
    assert!(same.edited.is_empty());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&same.comparison.loss_a), bits(&same.comparison.loss_b), "bit for bit (the last position is NaN in both)");
}

fn focus_lens(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(args).output().unwrap()
}

/// `focus-lens intervene --json`: per-token loss before and after, the mean delta, the layer's
/// pairs and per-layer figures; bad groups and tokens are one error naming the range.
#[test]
fn the_cli_prints_the_change_and_refuses_bad_groups() {
    let model = common::model_path();
    let m = model.to_str().unwrap();
    let adapter = common::root().join("sample_adapters/smollm2-135m-k8");
    let a = adapter.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("t.txt");
    let full = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    std::fs::write(&text, &full[..2000]).unwrap();
    let t = text.to_str().unwrap();
    let o = focus_lens(&["intervene", "--model", m, "--adapter", a, "--layer", "5", "--swap", "1:2", "--max-tokens", "200", "--json", t]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["intervention"], serde_json::json!({"kind": "swap", "a": 1, "b": 2}));
    assert_eq!((v["layer"].as_u64(), v["tokens"].as_u64(), v["mode"].as_str()), (Some(5), Some(200), Some("topk")));
    let per_token = v["per_token"].as_array().unwrap();
    assert_eq!(per_token.len(), 200);
    let deltas: Vec<f64> = per_token.iter().filter_map(|t| Some(t["loss_after"].as_f64()? - t["loss_before"].as_f64()?)).collect();
    assert_eq!(deltas.len(), 199, "the last token has no loss");
    let mean = deltas.iter().sum::<f64>() / deltas.len() as f64;
    assert!((mean - v["mean_delta"].as_f64().unwrap()).abs() < 1e-4);
    assert_eq!(v["per_layer"].as_array().unwrap().len(), 30);
    assert!(v["pairs_at_layer"]["kept_before"].as_u64().unwrap() > 0);
    // The tables.
    let o = focus_lens(&["intervene", "--model", m, "--adapter", a, "--layer", "5", "--ablate", "0", "--mode", "soft", "--max-tokens", "140", t]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_has(&out, &["ablate G0 at layer 5 (soft mode", "mean loss", "mean delta", "loss_before  loss_after"]);
    for (args, want) in [
        (vec!["--ablate", "8"], "group 8 is out of range: the adapter has 8 groups (0..=7)"),
        (vec!["--force", "500:1"], "token 500 is out of range: the text has 200 tokens"),
        (vec!["--swap", "2:2"], "swapping G2 with itself"),
        (vec!["--force", "3"], "is not of the form A:B"),
    ] {
        let mut all = vec!["intervene", "--model", m, "--adapter", a, "--layer", "5", "--max-tokens", "200", t];
        all.extend(args);
        let o = focus_lens(&all);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(e.contains(want), "{want}: {e}");
    }
}
