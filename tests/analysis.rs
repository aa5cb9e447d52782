//! What core's `analysis` computes for the app's views, on the tiny Hugging Face checkpoints
//! (tests/fixtures/hf_tiny): the comparison's per-token loss is the model's own.

#[path = "common/mod.rs"]
mod common;

use candle_core::Device;
use focus_core::analysis::compare::{run, Run};
use focus_core::model::{Decoder, ForwardOptions};
use focus_core::{Adapter, AdapterSpec, Mode, Model};

/// The Compare view's per-token loss (`analysis::compare::run`) is the model's own: computed
/// through `Decoder::logits`, which soft-caps Gemma 2's final logits. The view used to rebuild
/// the logits by hand (final norm + lm_head), skipping the cap: 1.3e-4 off at position 1 here.
#[test]
fn compare_loss_is_the_models_own_on_gemma2() {
    let model = Model::load(&common::fixture("hf_tiny").join("gemma2"), &Device::Cpu).unwrap();
    assert!(model.config().final_softcap.is_some(), "the fixture soft-caps its final logits");
    let adapter = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window: 3, ..Default::default() }, 1).unwrap();
    let ids: Vec<u32> = (0..40).map(|i| (i * 37 % 500) as u32).collect();
    let r = Run { label: "A", mode: Mode::Soft, k: 2, adapter: &adapter };
    let out = run(&model, &ids, &r, 2, None, |_| {}).unwrap();
    let logits = model.decoder.forward(&ids, &ForwardOptions::new(Mode::Soft, Some(&adapter))).unwrap().logits;
    let want = Decoder::nll(&logits.narrow(0, 0, ids.len() - 1).unwrap(), &ids[1..]).unwrap();
    for (i, (got, want)) in out.loss.iter().zip(&want).enumerate() {
        assert!((got - want).abs() <= 2e-5, "position {i}: compare's loss {got}, the model's {want}");
    }
    assert!(out.loss[ids.len() - 1].is_nan(), "the last position has no next token");
}

/// An analysis keeps its own passes (`analysis::kept`) in segment order while they fit the byte
/// budget it is given, each as large as `pass_bytes` says; a kept pass holds exactly what a fresh
/// pass of its segment computes (queries, keys and routing), and its last residual gives the
/// losses a compare's run computes.
#[test]
fn analysis_keeps_its_passes_within_the_budget() {
    use focus_core::analysis::kept::pass_bytes;
    use focus_core::analysis::{analyze_tokens_keeping, AnalyzeOptions, Tokens};
    let model = common::default_model();
    let adapter = focus_lens::defaults::sample_adapter(model).unwrap();
    let text: String = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap().chars().take(4000).collect();
    let enc = model.tokenizer().unwrap().encode(&text, false).unwrap();
    let n = 300.min(enc.ids.len());
    assert_eq!(n, 300, "the text is long enough");
    let tokens = Tokens { ids: &enc.ids[..n], offsets: &enc.offsets[..n] };
    let mode = common::topk(2, adapter.config.groups);
    let opts = AnalyzeOptions { mode, k: 2, segment_len: 120, keep_tokens: false, cancel: None };
    let one = pass_bytes(model.config(), adapter.config.groups, 120);
    let end = &text[..enc.offsets[n - 1].1];
    // Segments of 120, 120 and 60 tokens: a budget of one and a half segments keeps the first.
    let (analysis, kept) = analyze_tokens_keeping(model, &adapter, "sample", end, &tokens, &opts, one + one / 2, |_, _| {}).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].start, kept[0].tokens(), kept[0].bytes()), (0, 120, one));
    let (_, none) = analyze_tokens_keeping(model, &adapter, "sample", end, &tokens, &opts, one - 1, |_, _| {}).unwrap();
    assert!(none.is_empty(), "a budget below one segment keeps nothing");
    let (again, all) = analyze_tokens_keeping(model, &adapter, "sample", end, &tokens, &opts, usize::MAX, |_, _| {}).unwrap();
    assert_eq!(all.iter().map(|k| (k.start, k.tokens())).collect::<Vec<_>>(), [(0, 120), (120, 120), (240, 60)]);
    assert_eq!(again.routing[3].memberships, analysis.routing[3].memberships, "keeping changes nothing of the analysis");
    // The second segment against a fresh pass of it.
    let fresh = focus_core::analysis::partners::sequence_heads(model, Some(&adapter), &enc.ids[120..240], mode, None, &|_| {}).unwrap();
    for l in [0, 17, 29] {
        let (kh, kr) = &all[1].heads.layers[l];
        let (fh, fr) = &fresh.layers[l];
        assert_eq!(kr.as_ref().unwrap().memberships, fr.as_ref().unwrap().memberships, "layer {l}");
        for (h, q) in [(0, 119), (8, 57)] {
            assert_eq!(kh.row(focus_core::analysis::partners::Distant::Attend, h, q).unwrap(), fh.row(focus_core::analysis::partners::Distant::Attend, h, q).unwrap(), "layer {l} head {h}");
        }
    }
    // Its residual gives the losses of a compare run over the segment.
    let ids = &enc.ids[120..240];
    let r = Run { label: "A", mode, k: 2, adapter: &adapter };
    let from_kept = focus_core::analysis::compare::run_from_kept(model, &all[1], ids, &r, 2, None);
    assert!(from_kept.is_err(), "a pass that starts at token 120 cannot stand for a run from position 0 of the text");
    let got = focus_core::analysis::compare::run_from_kept(model, &all[0], &enc.ids[..120], &r, 2, None).unwrap();
    let want = run(model, &enc.ids[..120], &r, 2, None, |_| {}).unwrap();
    assert_eq!(got.masks, want.masks);
    assert!(got.loss.iter().zip(&want.loss).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())));
    assert_eq!(got.pruned.unwrap().mass, want.pruned.unwrap().mass);
    // Whole-sequence Sinkhorn: a prefix of the pass is not the pass of the prefix.
    assert!(!adapter.config.causal_sinkhorn && !all[0].serves(mode, 100) && all[0].serves(mode, 120));
}
