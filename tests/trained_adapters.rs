//! The shipped, trained sample adapters: they load, and the CPU reproduces the per-chunk
//! held-out NLL that the H200 measured for docs/RESULTS.md (docs/results/round4_full_gradient.json
//! for the K=8 adapter with its training's 10 Sinkhorn iterations, docs/results/results.json for
//! round 3, docs/results/round1_results.json for round 1), and the figures of the K=8 adapter as
//! shipped (40 iterations, measured on the CPU: docs/results/round4_sinkhorn_iters.json).

#[path = "common/mod.rs"]
mod common;

use candle_core::Device;
use focus_core::{Adapter, Mode, Model};

#[test]
fn sample_adapters_reproduce_the_published_perplexities() {
    let model = Model::load(&common::model_path(), &Device::Cpu).unwrap();
    let mut text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    text.pop(); // the llama-perplexity convention drops one trailing newline (as `focus-lens ppl`)
    let ids = model.tokenizer().unwrap().encode(&text, false).unwrap().ids;
    let ctx = 1024;
    let chunks = 2;
    // (adapter, results file, run, Sinkhorn iterations if not the config's)
    let adapters = [
        ("smollm2-135m-k8", "round4_sinkhorn_iters.json", "k8_iters40", None),
        ("smollm2-135m-k8", "round4_full_gradient.json", "smolfull_k8_paper", Some(10)),
        ("smollm2-135m-k8-round3", "results.json", "k8_log", None),
        ("smollm2-135m-k4", "round4_sinkhorn_iters.json", "k4paper_iters40", None),
        ("smollm2-135m-k4", "round4_full_gradient.json", "smolfull_k4_paper", Some(10)),
        ("smollm2-135m-k4-round3", "results.json", "k4_paper", None),
        ("smollm2-135m-k8-round1", "round1_results.json", "k8_log", None),
        ("smollm2-135m-k4-round1", "round1_results.json", "k4_log", None),
    ];
    for (dir, file, run, iters) in adapters {
        let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::root().join("docs/results").join(file)).unwrap()).unwrap();
        let mut adapter = Adapter::load(&common::root().join("sample_adapters").join(dir), &model).unwrap();
        assert!(adapter.config.training.is_some() && adapter.config.results.is_some(), "{dir}: provenance and results recorded");
        if let Some(n) = iters {
            adapter.config.sinkhorn_iters = n;
        }
        for (mode, key) in [(Mode::Soft, "soft"), (Mode::TopK(2), "topk2")] {
            let got = focus_core::ppl::perplexity(&model, &ids[..chunks * ctx], ctx, mode, Some(&adapter), None, |_, _| {}).unwrap();
            let want = &results["ppl"][format!("{run}_{key}_{ctx}")]["per_chunk_nll"];
            for c in 0..chunks {
                let w = want[c].as_f64().unwrap();
                let g = got.per_chunk_nll[c];
                assert!((g - w).abs() <= 1e-3 * w, "{dir} {key} chunk {c}: CPU {g} vs H200 {w}");
            }
        }
    }
}
