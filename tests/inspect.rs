//! `focus_core::analysis::partners`: one query row's attention weights, on the real model with the sample
//! adapter, checked against an independent masked dense softmax and the real top-k kernel.

#[path = "common/mod.rs"]
mod common;

use candle_core::Tensor;
use focus_core::analysis::partners::{attention_row, layer_inputs, query_attention};
use focus_core::attention::cpu::Shape;
use focus_core::attention::reference::masked_dense_reference;
use focus_core::focus::mask;
use focus_core::{Mode, Model};

fn model() -> &'static Model {
    common::default_model()
}

fn ids(n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(common::root().join("assets/sample.txt")).unwrap();
    let ids = model().tokenizer().unwrap().encode(&text, false).unwrap().ids;
    ids.into_iter().cycle().take(n).collect()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// A top-k row: sums to 1, is zero exactly on pruned pairs, and weights x V equals both the
/// independent masked dense reference and the real top-k kernel's output for that query.
#[test]
fn topk_row_matches_masked_dense_softmax() {
    let m = model();
    let mut a = focus_lens::defaults::sample_adapter(m).unwrap();
    // A window inside the 300 tokens (the default adapter's own, 512, covers them whole).
    a.config.window = a.config.window.min(128);
    let (t, layer, k) = (300, 9, 2);
    let ids = ids(t);
    let inp = layer_inputs(m, Some(&a), &ids, common::topk(k, a.config.groups), layer, None).unwrap();
    let r = inp.routing.as_ref().unwrap();
    let masks = r.topk_masks(k);
    let w = a.config.window;
    let (h, _, d) = inp.q.dims3().unwrap();
    let hkv = inp.k.dim(0).unwrap();
    let shape = Shape { heads: h, kv_heads: hkv, t, d };
    let (q, kk, v) = (flat(&inp.q), flat(&inp.k), flat(&inp.v));
    let reference = masked_dense_reference(&q, &kk, &v, shape, |i, j| mask::kept(&masks, w, a.config.sink, i, j));
    let kernel = focus_core::attention::cpu::focus::focus_attention(&q, &kk, &v, shape, &masks, w, a.config.sink);
    let mut pruned_seen = 0;
    for (head, query) in [(0, 299), (3, 250), (8, 140), (5, 10)] {
        let row = attention_row(&inp, Some(&a.config), common::topk(k, a.config.groups), head, query).unwrap();
        assert_eq!(row.len(), query + 1);
        let sum: f64 = row.iter().map(|&x| x as f64).sum();
        assert!((sum - 1.0).abs() < 1e-5, "row sums to {sum}");
        for (j, &x) in row.iter().enumerate() {
            let kept = mask::kept(&masks, w, a.config.sink, query, j);
            if kept {
                assert!(x > 0.0);
            } else {
                assert_eq!(x, 0.0);
                pruned_seen += 1;
            }
        }
        let kh = head / (h / hkv);
        for c in 0..d {
            let o: f64 = row.iter().enumerate().map(|(j, &x)| x as f64 * v[(kh * t + j) * d + c] as f64).sum();
            let at = (head * t + query) * d + c;
            assert!((o - reference[at] as f64).abs() < 1e-4, "head {head} query {query} dim {c}: {o} vs reference {}", reference[at]);
            assert!((o - kernel[at] as f64).abs() < 1e-4, "head {head} query {query} dim {c}: {o} vs kernel {}", kernel[at]);
        }
    }
    assert!(pruned_seen > 0, "the test must cover pruned pairs");
}

/// Dense mode is the plain causal softmax; errors are errors, not panics.
#[test]
fn dense_row_and_bad_arguments() {
    let m = model();
    let a = focus_lens::defaults::sample_adapter(m).unwrap();
    let t = 200;
    let ids = ids(t);
    let inp = layer_inputs(m, Some(&a), &ids, Mode::Dense, 4, None).unwrap();
    let (h, _, d) = inp.q.dims3().unwrap();
    let hkv = inp.k.dim(0).unwrap();
    let shape = Shape { heads: h, kv_heads: hkv, t, d };
    let v = flat(&inp.v);
    let reference = masked_dense_reference(&flat(&inp.q), &flat(&inp.k), &v, shape, |_, _| true);
    let row = attention_row(&inp, Some(&a.config), Mode::Dense, 2, 199).unwrap();
    assert!(row.iter().all(|&x| x > 0.0));
    let kh = 2 / (h / hkv);
    for c in 0..d {
        let o: f64 = row.iter().enumerate().map(|(j, &x)| x as f64 * v[(kh * t + j) * d + c] as f64).sum();
        assert!((o - reference[(2 * t + 199) * d + c] as f64).abs() < 1e-4);
    }
    assert!(attention_row(&inp, Some(&a.config), Mode::Dense, h, 0).unwrap_err().to_string().contains("head"));
    assert!(attention_row(&inp, Some(&a.config), Mode::Dense, 0, t).unwrap_err().to_string().contains("query"));
    assert!(layer_inputs(m, Some(&a), &ids, Mode::Dense, 30, None).unwrap_err().to_string().contains("layer 30"));
    assert!(layer_inputs(m, None, &ids, common::topk(2, 8), 1, None).unwrap_err().to_string().contains("adapter"));
    let cancel = std::sync::atomic::AtomicBool::new(true);
    assert!(matches!(layer_inputs(m, Some(&a), &ids, Mode::Dense, 3, Some(&cancel)), Err(focus_core::Error::Cancelled)));
}

/// With causal Sinkhorn, running only the prefix up to the query gives the same row as the
/// whole sequence (the shortcut `query_attention` takes).
#[test]
fn causal_prefix_shortcut_is_exact() {
    let m = model();
    let mut a = focus_lens::defaults::sample_adapter(m).unwrap();
    a.config.causal_sinkhorn = true;
    let ids = ids(280);
    let full = layer_inputs(m, Some(&a), &ids, common::topk(2, a.config.groups), 6, None).unwrap();
    let want = attention_row(&full, Some(&a.config), common::topk(2, a.config.groups), 1, 200).unwrap();
    let got = query_attention(m, Some(&a), &ids, common::topk(2, a.config.groups), 6, 1, 200, None).unwrap();
    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err < 1e-5, "prefix vs whole sequence: {err}");
}
