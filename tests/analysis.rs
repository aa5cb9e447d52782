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
