//! Gemma 3 270M (GGUF arch gemma3, Q4_K_M, fetched by scripts/fetch-gemma3.sh) against
//! llama.cpp (tests/fixtures/gemma3_reference.json): SentencePiece token ids on the Persuasion
//! text and on the tokenizer fixture's texts, and dense perplexity at ctx 512. Then Focus on its
//! interleaved layers (the exact top-k kernel against the masked reference on sliding and global
//! layers, `router_layers = global`), a short CPU training run through the CLI, and the shipped
//! Gemma 3 adapters reproducing on the CPU the per-chunk NLL the H200 measured
//! (tests/fixtures/trained_adapters_gemma3_nll.json).

#[path = "common/mod.rs"]
mod common;

use candle_core::Device;
use focus_core::attention::LayerPlan;
use focus_core::focus::mask;
use focus_core::model::ForwardOptions;
use focus_core::train::TrainPath;
use focus_core::{Adapter, AdapterSpec, Mode, Model, RouterLayers};
use serde_json::Value;
use std::sync::OnceLock;

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::load(&common::gemma3_model_path(), &Device::Cpu).expect("load Gemma 3 270M"))
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(common::fixture("gemma3_reference.json")).unwrap()).unwrap()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn persuasion() -> String {
    std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap()
}

#[test]
fn gemma3_config_is_read_from_the_gguf() {
    let c = model().config();
    assert_eq!((c.arch.to_string().as_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim), ("gemma3", 18, 640, 4, 1, 256));
    assert_eq!((c.vocab, c.ffn_dim, c.mlp), (262144, 2048, focus_core::model::config::MlpKind::GeGlu));
    assert!(c.tied_embeddings && c.post_norms && c.qk_norm.is_some());
    assert_eq!(c.embed_scale, Some(640f64.sqrt()));
    // Every 6th layer is global (llama.cpp's default pattern for gemma3), with RoPE base 1e6;
    // the others slide over 512 keys with base 1e4.
    let kinds: String = (0..18).map(|l| if c.is_sliding(l) { 'S' } else { 'G' }).collect();
    assert_eq!(kinds, "SSSSSGSSSSSGSSSSSG");
    assert_eq!((c.layer_attention(0).window, c.layer_attention(0).rope_theta), (Some(512), Some(10000.0)));
    assert_eq!((c.layer_attention(5).window, c.layer_attention(5).rope_theta), (None, Some(1e6)));
    let t = model().tokenizer().unwrap();
    assert_eq!((t.vocab_size(), t.bos_id(), t.add_bos()), (262144, Some(2), true));
}

#[test]
fn gemma3_token_ids_match_llama_cpp() {
    let r = reference();
    let tok = model().tokenizer().unwrap();
    // The whole Persuasion text, with the BOS llama.cpp adds.
    let ids = tok.encode(&persuasion(), false).unwrap().ids;
    let want = ids_of(&r["persuasion"]["token_ids"]);
    assert_eq!(ids.len(), want.len(), "token count differs from llama.cpp");
    assert_eq!(ids, want, "tokenization differs from llama.cpp");
    // The tokenizer fixture's texts (prose, whitespace runs, tabs, digits, unicode, emoji, code,
    // chat markup as text and parsed).
    let cases = r["tokenizer_cases"].as_array().unwrap();
    assert!(cases.len() >= 12);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let got = tok.encode(c["text"].as_str().unwrap(), c["parse_special"].as_bool().unwrap()).unwrap().ids;
        assert_eq!(got, ids_of(&c["ids"]), "{name}: token ids differ from llama.cpp");
    }
    // Decoding gives the text back (BOS aside).
    let text = "Anne Elliot, with a  double space,\ttab, café and 😀.";
    let ids = tok.encode(text, false).unwrap().ids;
    assert_eq!(tok.decode(&ids[1..]).unwrap(), text);
}

/// Chunks of ctx 512 scored here (of 28): each chunk's mean NLL within 1% of llama.cpp's and
/// their PPL within 0.5% (Q4_K weights dequantized to f32 here, 8-bit activations and an f16 KV
/// cache there). docs/RESULTS.md has the whole file.
const CHUNKS: usize = 4;

#[test]
fn gemma3_dense_perplexity_matches_llama_cpp() {
    let r = reference();
    let ids = ids_of(&r["persuasion"]["token_ids"]);
    let m = model();
    let res = focus_core::eval::ppl::perplexity(m, &ids[..CHUNKS * 512], 512, Mode::Dense, None, None, |_, _| {}).unwrap();
    let per: Vec<f64> = r["ctx_512"]["per_chunk_mean_nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(res.per_chunk_nll.len(), CHUNKS);
    for (k, (a, b)) in res.per_chunk_nll.iter().zip(&per).enumerate() {
        eprintln!("chunk {k}: nll {a:.5} vs llama.cpp {b:.5}");
        assert!((a - b).abs() / b < 0.01, "chunk {k}: nll {a} vs llama.cpp {b}");
    }
    let want = r["ctx_512"]["running_ppl"][CHUNKS - 1].as_f64().unwrap();
    let rel = (res.ppl - want).abs() / want;
    eprintln!("first {CHUNKS} chunks: ppl {:.4} vs llama.cpp {want:.4} ({:.3}%)", res.ppl, rel * 100.0);
    assert!(rel < 0.005, "ppl {} vs llama.cpp {want}", res.ppl);
}

/// Both layer kinds under hard top-k, past the 512-token window: the exact kernel (which
/// composes the Focus mask with a sliding layer's window) equals dense attention with the
/// written-out Focus mask (to which the decoder adds the layer's own window), layer by layer
/// through the real model. With `router_layers = global`, the sliding layers attend densely
/// within their window and only the global ones are routed.
#[test]
fn gemma3_top_k_kernel_matches_the_masked_reference_on_sliding_and_global_layers() {
    let m = model();
    let ids = m.tokenizer().unwrap().encode(&persuasion(), false).unwrap().ids[..600].to_vec();
    let spec = AdapterSpec { groups: 4, window: 64, ..Default::default() };
    let all = Adapter::random(&m.identity(), m.device(), &spec, 7).unwrap();
    let global = Adapter::random(&m.identity(), m.device(), &AdapterSpec { router_layers: RouterLayers::Global, ..spec }, 7).unwrap();
    assert_eq!(global.config.router_layers, RouterLayers::Global);
    let dev = m.device().clone();
    let max_diff = |a: &candle_core::Tensor, b: &candle_core::Tensor| (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let mut logits = Vec::new();
    for (name, a) in [("all", &all), ("global", &global)] {
        let mut opts = ForwardOptions::new(common::topk(2, a.config.groups), Some(a));
        opts.logits_from = 500;
        let fast = m.decoder.forward(&ids, &opts).unwrap();
        let c = m.config();
        let masked = m
            .decoder
            .forward_with(&ids, &opts, |l, routing| {
                if !a.config.router_layers.routes(c.is_sliding(l)) {
                    return Ok(Some(LayerPlan::Dense));
                }
                Ok(Some(LayerPlan::Masked(mask::topk_mask_bias(&routing.unwrap().topk_masks(2), 64, 0, &dev)?)))
            })
            .unwrap();
        let err = max_diff(&fast.logits, &masked.logits);
        eprintln!("router layers {name}: max |fast - masked reference| = {err:e}");
        assert!(err <= 2e-3, "router layers {name}: the top-k kernel differs from the masked reference by {err}");
        logits.push(fast.logits);
    }
    // The sliding layers' routers change the output (they prune pairs within the window).
    assert!(max_diff(&logits[0], &logits[1]) > 1e-3);
}

/// The training forward (the fused step, and the composed ops) computes the inference function
/// on Gemma 3's blocks (QK-norm, post-norms, GeGLU, two RoPE bases, embedding scale), on a
/// sequence longer than the sliding layers' 512-key window (which the fused step applies).
#[test]
fn gemma3_training_forward_computes_the_inference_function() {
    let m = model();
    let ids = m.tokenizer().unwrap().encode(&persuasion(), false).unwrap().ids[..560].to_vec();
    let a = Adapter::random(&m.identity(), m.device(), &AdapterSpec { groups: 4, window: 16, ..Default::default() }, 3).unwrap();
    let max_diff = |a: &candle_core::Tensor, b: &candle_core::Tensor| (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let inference = m.decoder.forward(&ids, &ForwardOptions::new(Mode::Soft, Some(&a))).unwrap().logits;
    let o = ForwardOptions::new(Mode::Soft, Some(&a));
    let fused = focus_core::train::forward(&m.decoder, &[&ids], &o, TrainPath::default()).unwrap();
    let composed = focus_core::train::forward(&m.decoder, &[&ids], &o, TrainPath { fused: false, ..TrainPath::default() }).unwrap();
    let (ef, ec) = (max_diff(&inference, &fused), max_diff(&inference, &composed));
    eprintln!("max |inference - fused step| = {ef:e}, |inference - composed| = {ec:e}");
    assert!(ef <= 2e-3 && ec <= 2e-3, "training forward differs: fused {ef}, composed {ec}");
}

/// `focus-lens train` runs on Gemma 3 on the CPU (a few steps; sequences longer than the Focus
/// window so the gates act), writes an adapter that records its router layers, and the adapter
/// loads back for the model.
#[test]
fn gemma3_trains_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("train.txt");
    let held = tmp.path().join("held.txt");
    let p = persuasion();
    std::fs::write(&text, &p[..20000]).unwrap();
    std::fs::write(&held, &p[40000..46000]).unwrap();
    let out = tmp.path().join("adapter");
    let model = common::gemma3_model_path();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens"))
        .args(["train", "--model"])
        .arg(&model)
        .args(["--data"])
        .arg(&text)
        .args(["--heldout"])
        .arg(&held)
        // One stage from random routers (the paper's recipe): this is Gemma 3's training, not the recipe's.
        .args(["--recipe", "paper", "--steps", "2", "--seq-len", "96", "--batch", "1", "--window", "16", "--groups", "4", "--eval-every", "2", "--eval-seqs", "1", "--checkpoint-every", "0", "--router-layers", "global", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "train failed: {}", String::from_utf8_lossy(&o.stderr));
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["router_layers"], "global");
    assert_eq!(cfg["base_model"]["arch"], "gemma3");
    let a = Adapter::load(&out, &model_identity(), &Device::Cpu).unwrap();
    assert_eq!(a.layers.len(), 18);
}

fn model_identity() -> focus_core::focus::identity::BaseModel {
    model().identity()
}

/// The shipped Gemma 3 adapters (routers on every layer, and on the global layers only) load
/// with their provenance and results, and the CPU gives the per-chunk held-out NLL that the
/// H200's CUDA build measured after training, in soft and top-2 modes.
#[test]
fn gemma3_sample_adapters_reproduce_the_published_perplexities() {
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("trained_adapters_gemma3_nll.json")).unwrap()).unwrap();
    let (ctx, chunks) = (reference["ctx"].as_u64().unwrap() as usize, reference["chunks"].as_u64().unwrap() as usize);
    let m = model();
    // Tokenized as train_paper --ppl did (the first chunks do not see the text's end).
    let ids = m.tokenizer().unwrap().encode(&persuasion(), false).unwrap().ids;
    let entries = reference["adapters"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let mut layers = Vec::new();
    for entry in entries {
        let dir = entry["adapter"].as_str().unwrap();
        let adapter = Adapter::load(&common::root().join(dir), &m.identity(), m.device()).unwrap();
        assert!(adapter.config.training.is_some() && adapter.config.results.is_some(), "{dir}: provenance and results recorded");
        layers.push(adapter.config.router_layers);
        for (mode, key) in [(Mode::Soft, "soft"), (common::topk(2, adapter.config.groups), "topk2")] {
            let got = focus_core::eval::ppl::perplexity(m, &ids[..chunks * ctx], ctx, mode, Some(&adapter), None, |_, _| {}).unwrap();
            let want = entry["per_chunk_nll"][key].as_array().unwrap();
            assert_eq!(want.len(), chunks);
            for c in 0..chunks {
                let (w, g) = (want[c].as_f64().unwrap(), got.per_chunk_nll[c]);
                assert!((g - w).abs() <= 1e-3 * w, "{dir} {key} chunk {c}: CPU {g} vs H200 {w}");
            }
        }
    }
    assert_eq!(layers, [RouterLayers::All, RouterLayers::Global], "one adapter routes every layer, the other the global layers only");
}

/// With an adapter that routes only the global layers, the analysis marks the sliding layers
/// as not routed, and the structure measures leave them out: the best layer, the medians over
/// layers >= 1 and the worst dominance are the global layers' own. The shipped global
/// adapter's sliding-layer routers were never trained; counting them would report their
/// imbalance as the adapter's.
#[test]
fn structure_counts_only_the_layers_an_adapter_routes() {
    use focus_core::analysis::{analyze, categories::best_layer, structure, AnalyzeOptions};
    let m = model();
    let adapter = Adapter::load(&common::root().join("sample_adapters/gemma3-270m-k8-global"), &m.identity(), m.device()).unwrap();
    let text: String = persuasion().chars().skip(20_000).take(4_000).collect();
    let opts = AnalyzeOptions { mode: focus_core::ModeKind::TopK, k: adapter.config.topk(2).unwrap(), segment_len: 512, keep_tokens: false, cancel: None };
    let a = analyze(m, &adapter, "global", &text, &opts, |_, _| {}).unwrap();
    let cfg = m.config();
    let routed: Vec<bool> = (0..cfg.n_layers).map(|l| !cfg.is_sliding(l)).collect();
    assert_eq!(a.routed_layers(), routed);
    assert_eq!(routed.iter().filter(|&&r| r).count(), 3, "Gemma 3 270M has three global layers");
    let s = structure::of_analysis(&a);
    assert_eq!(s.layers.len(), cfg.n_layers, "every layer is still measured");
    assert!(s.layers.iter().all(|l| l.routed == routed[l.layer]));
    let own = |f: fn(&structure::LayerStructure) -> f64| -> Vec<f64> { s.layers.iter().filter(|l| l.routed).map(f).collect() };
    assert!(routed[s.best_layer().unwrap().layer]);
    assert_eq!(s.worst_dominance(), own(|l| l.dominance).into_iter().fold(0.0, f64::max));
    let nmi: Vec<f64> = s.layers.iter().filter(|l| l.routed && l.layer >= 1).map(|l| l.category.value).collect();
    assert_eq!(s.median_from_layer_1(|l| l.category.value), structure::median(&nmi));
    // The untrained sliding routers are more lopsided than the trained global ones: the fix
    // changes the figure.
    let all = s.layers.iter().map(|l| l.dominance).fold(0.0, f64::max);
    assert!(all > s.worst_dominance(), "worst dominance over every layer {all} vs over the routed ones {}", s.worst_dominance());
    let (best, _) = best_layer(a.routed_profiles()).unwrap();
    assert!(routed[best], "the labels table's best layer {best} is routed");
}
