//! The shipped, trained SmolLM2 sample adapters (`sample_adapters/smollm2-135m-k8` and `-k4`):
//! they load with their provenance and results recorded, and the CPU reproduces the per-chunk
//! held-out NLL of `tests/fixtures/trained_adapters_nll.json`, each as shipped: the H200's
//! figures after training (CUDA kernels with an attention sink). Gemma 3's adapters have theirs
//! in `tests/real_model_gemma3.rs`. The fixture says how each figure was
//! measured; `scripts/gen-adapter-nll-fixture.py` rewrites an adapter's entry after a retrain.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::TestResult;
use candle_core::Device;
use focus_core::{Adapter, Mode, Model};

#[test]
fn sample_adapters_reproduce_the_published_perplexities() -> TestResult {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("trained_adapters_nll.json"))?)?;
    let ctx = reference["ctx"].as_u64().unwrap() as usize;
    let chunks = reference["chunks"].as_u64().unwrap() as usize;
    let model = Model::load(&common::model_path(), &Device::Cpu)?;
    let mut text = std::fs::read_to_string(common::root().join(reference["text"].as_str().unwrap())).unwrap();
    text.pop(); // the llama-perplexity convention drops one trailing newline (as `focus-lens ppl`)
    let ids = model.tokenizer()?.encode(&text, false)?.ids;
    let entries = reference["adapters"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "the two trained SmolLM2 adapters, as shipped");
    // Every trained SmolLM2 adapter that ships has its reference (a renamed or added one too).
    let mut shipped: Vec<String> = std::fs::read_dir(common::root().join("sample_adapters"))
        ?
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("smollm2-") && !n.ends_with("-init"))
        .map(|n| format!("sample_adapters/{n}"))
        .collect();
    shipped.sort();
    let mut named: Vec<String> = entries.iter().filter(|e| e["sinkhorn_iters"].is_null()).map(|e| e["adapter"].as_str().unwrap().to_string()).collect();
    named.sort();
    assert_eq!(named, shipped, "one reference per shipped trained SmolLM2 adapter, as shipped");
    for entry in entries {
        let dir = entry["adapter"].as_str().unwrap();
        let mut adapter = Adapter::load(&common::root().join(dir), &model.identity(), model.device())?;
        assert!(adapter.config.training.is_some() && adapter.config.results.is_some(), "{dir}: provenance and results recorded");
        // Sinkhorn iterations if not the config's (null: the adapter as shipped).
        if let Some(n) = entry["sinkhorn_iters"].as_u64() {
            adapter.config.sinkhorn_iters = n as usize;
        }
        for (mode, key) in [(Mode::Soft, "soft"), (common::topk(2, adapter.config.groups), "topk2")] {
            let got = focus_core::eval::ppl::perplexity(&model, &ids[..chunks * ctx], ctx, mode, Some(&adapter), None, |_, _| {})?;
            let want = entry["per_chunk_nll"][key].as_array().unwrap();
            assert_eq!(want.len(), chunks);
            for c in 0..chunks {
                let w = want[c].as_f64().unwrap();
                let g = got.per_chunk_nll[c];
                assert!((g - w).abs() <= 1e-3 * w, "{dir} {key} chunk {c}: CPU {g} vs reference {w} ({})", entry["measured_on"]);
            }
        }
    }
    Ok(())
}
