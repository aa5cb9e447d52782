//! Generation on the real default model (SmolLM2-135M-Instruct, Q4_1 GGUF): the KV-cache
//! decode gives the logits of a full forward of the same sequence, dense and hard top-k with
//! causal Sinkhorn; top-k decode reads fewer bytes than dense; seeded sampling repeats; the
//! `generate` command end to end.

#[path = "common/mod.rs"]
mod common;

use candle_core::Device;
use focus_core::generate::sampler::Sampler;
use focus_core::generate::{Generator, Strategy};
use focus_core::model::ForwardOptions;
use focus_core::{Adapter, AdapterSpec, Mode, Model};
use std::process::Command;

fn model() -> &'static Model {
    common::default_model()
}

/// Tokens of the Persuasion fixture (160 in the exactness tests: five times the test adapter's
/// window, so top-k prunes).
fn ids(n: usize) -> Vec<u32> {
    common::persuasion_ids(model(), 2000, n)
}

/// A random causal-Sinkhorn adapter with a small window (32), so that 160 tokens prune.
fn causal_adapter() -> Adapter {
    let spec = AdapterSpec { groups: 8, window: 32, causal_sinkhorn: true, ..Default::default() };
    Adapter::random(&model().identity(), model().device(), &spec, 11).unwrap()
}

/// Feeds `ids` (the first `prefill` in one pass, then one token at a time) and returns the
/// largest |logit difference| (relative to the row's largest |logit|) against a full forward
/// of the whole sequence, over every step, and the bytes the last step read. The steps' one-row
/// products read the GGUF's quantized blocks (`qmatvec`), the forward their dequantized f32.
fn decode_vs_forward(m: &Model, mode: Mode, adapter: Option<&Adapter>, ids: &[u32], prefill: usize) -> (f32, focus_core::attention::decode::ReadBytes) {
    let full = m.decoder.forward(ids, &ForwardOptions::new(mode, adapter)).unwrap();
    let rows = full.logits.to_vec2::<f32>().unwrap();
    let mut g = Generator::new(&m.decoder, adapter, mode).unwrap();
    assert_eq!(g.strategy(), Strategy::KvCache);
    // |difference| relative to the row's largest |logit| (SmolLM2's reach ~25): f32 sums in
    // another order (one-row products, the decode kernel's chunks) differ by ~1e-4 absolute.
    let mut worst = 0f32;
    let mut check = |pos: usize, logits: &[f32]| {
        let scale = rows[pos].iter().fold(1f32, |m, x| m.max(x.abs()));
        let e = logits.iter().zip(&rows[pos]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        worst = worst.max(e / scale);
    };
    let first = g.feed(&ids[..prefill]).unwrap();
    check(prefill - 1, &first.logits);
    let mut last = first.read;
    for (p, &id) in ids.iter().enumerate().skip(prefill) {
        let s = g.feed(&[id]).unwrap();
        check(p, &s.logits);
        last = s.read;
    }
    (worst, last)
}

#[test]
fn dense_decode_equals_full_forward() {
    // From an empty cache, every token through the decode step.
    let (err, read) = decode_vs_forward(model(), Mode::Dense, None, &ids(160), 1);
    eprintln!("dense: max relative |logit diff| over 160 steps {err:.2e}");
    assert!(err <= 1e-4, "dense decode logits differ from the full forward by {err}");
    assert_eq!(read.kv, read.dense);
}

#[test]
fn topk_decode_with_causal_sinkhorn_equals_full_forward() {
    let ad = causal_adapter();
    for k in [1, 2] {
        // A prefilled prompt (its routing and Sinkhorn state come from the pass), then steps.
        let (err, read) = decode_vs_forward(model(), common::topk(k, ad.config.groups), Some(&ad), &ids(160), 80);
        eprintln!("topk k={k}: max relative |logit diff| {err:.2e}; last step read {:.1}% of dense", 100.0 * read.fraction());
        assert!(err <= 1e-4, "top-k (k={k}) decode logits differ from the full forward by {err}");
        // The mask pruned keys, and the step read only theirs.
        assert!(read.kv < read.dense, "top-k read {} of {} bytes", read.kv, read.dense);
    }
}

/// Qwen2.5-Coder and Gemma 3 (Q4_K_M files) hold their weights as Q4_K, Q6_K, Q5_0 and Q8_0
/// blocks, which the decode step reads as such: dense decode still gives the forward's logits.
#[test]
fn quantized_gguf_decode_equals_full_forward() {
    for path in [common::qwen2_model_path(), common::gemma3_model_path()] {
        let m = Model::load(&path, &Device::Cpu).unwrap();
        let d = &m.decoder;
        let lins = d.blocks.iter().flat_map(|b| [&b.q, &b.k, &b.v, &b.o, &b.mlp.up_or_fc, b.mlp.gate.as_ref().unwrap(), &b.mlp.down]);
        let mut types: Vec<String> = lins.map(|l| &l.w).chain([&d.lm_head]).map(|w| format!("{:?}", w.stored().expect("every weight keeps its blocks").ty)).collect();
        types.sort();
        types.dedup();
        assert_eq!(types, ["Q4K", "Q5_0", "Q6K", "Q8_0"], "{}", path.display());
        let (err, _) = decode_vs_forward(&m, Mode::Dense, None, &common::persuasion_ids(&m, 2000, 40), 8);
        eprintln!("{}: max relative |logit diff| over 32 steps {err:.2e}", m.config().name);
        assert!(err <= 1e-4, "{}: dense decode logits differ from the full forward by {err}", path.display());
    }
}

/// Whole-sequence Sinkhorn cannot be cached in top-k mode: the generator reruns the sequence.
#[test]
fn whole_sequence_sinkhorn_recomputes() {
    let spec = AdapterSpec { window: 32, causal_sinkhorn: false, ..Default::default() };
    let ad = Adapter::random(&model().identity(), model().device(), &spec, 3).unwrap();
    assert_eq!(Generator::new(&model().decoder, Some(&ad), common::topk(2, ad.config.groups)).unwrap().strategy(), Strategy::Recompute);
    assert_eq!(Generator::new(&model().decoder, Some(&ad), Mode::Dense).unwrap().strategy(), Strategy::KvCache);
    let ids = ids(60);
    let mut g = Generator::new(&model().decoder, Some(&ad), common::topk(2, ad.config.groups)).unwrap();
    g.feed(&ids[..59]).unwrap();
    let s = g.feed(&ids[59..]).unwrap();
    let full = model().decoder.forward(&ids, &ForwardOptions::new(common::topk(2, ad.config.groups), Some(&ad))).unwrap();
    let last = full.logits.get(59).unwrap().to_vec1::<f32>().unwrap();
    let err = s.logits.iter().zip(&last).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err <= 1e-4, "the recomputed step differs from the full forward by {err}");
    assert_eq!(s.groups.len(), model().config().n_layers);
    // The recomputation refilled the caches: every token's routing as the whole pass gave it.
    for (l, c) in g.layers().iter().enumerate() {
        let r = c.routing.as_ref().expect("routed layer");
        assert_eq!((c.len(), r.masks.len()), (60, 60), "layer {l}");
        let d = r.memberships.iter().zip(&full.routing[l].memberships).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d <= 1e-6, "layer {l}: cached memberships differ from the forward's by {d}");
    }
}

/// The same seed draws the same tokens; another seed other tokens.
#[test]
fn seeded_sampling_repeats() {
    let prompt = ids(20);
    let run = |seed: u64| {
        let mut g = Generator::new(&model().decoder, None, Mode::Dense).unwrap();
        let mut s = Sampler::new(1.0, 0.95, seed);
        let mut step = g.feed(&prompt).unwrap();
        (0..8)
            .map(|_| {
                let id = s.sample(&step.logits);
                step = g.feed(&[id]).unwrap();
                id
            })
            .collect::<Vec<u32>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

fn focus_lens(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(args).env("FOCUS_LENS_MODEL", common::model_path()).output().unwrap()
}

#[test]
fn generate_command_streams_records_and_validates_flags() {
    let m = common::model_path();
    let m = m.to_str().unwrap();
    let o = focus_lens(&["generate", "--model", m, "--prompt", "The capital of France is", "--max-tokens", "6", "--temperature", "0", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (tokens, summary) = lines.split_at(lines.len() - 1);
    assert_eq!(summary[0]["done"], true);
    assert_eq!(tokens.len() as u64, summary[0]["generated_tokens"].as_u64().unwrap());
    assert!(tokens.len() <= 6 && !tokens.is_empty());
    for t in tokens {
        assert!(t["id"].is_u64() && t["text"].is_string() && t["logprob"].as_f64().unwrap() <= 0.0);
    }
    // Greedy text equals the greedy tokens of the library.
    let plain = focus_lens(&["generate", "--model", m, "--prompt", "The capital of France is", "--max-tokens", "6", "--temperature", "0"]);
    let ids: Vec<u32> = tokens.iter().map(|t| t["id"].as_u64().unwrap() as u32).collect();
    let want = model().tokenizer().unwrap().decode(&ids).unwrap();
    assert_eq!(String::from_utf8(plain.stdout).unwrap().trim_end_matches('\n'), want.trim_end_matches('\n'));
    // A chat turn through the model's template.
    let chat = focus_lens(&["generate", "--model", m, "--prompt", "Hi", "--chat", "--max-tokens", "3", "--temperature", "0"]);
    assert!(chat.status.success(), "{}", String::from_utf8_lossy(&chat.stderr));
    // Flags outside their ranges are usage errors (exit 2); a missing prompt too.
    for bad in [vec!["--temperature", "-1"], vec!["--top-p", "0"], vec!["--max-tokens", "0"], vec!["--k", "65"]] {
        let mut args = vec!["generate", "--prompt", "x"];
        args.extend(bad.iter());
        assert_eq!(focus_lens(&args).status.code(), Some(2), "{bad:?}");
    }
    assert_eq!(focus_lens(&["generate"]).status.code(), Some(2));
    // topk without an adapter: one clear error line, exit 1.
    let o = focus_lens(&["generate", "--prompt", "x", "--mode", "topk"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs --adapter"));
}

/// Every architecture decodes exactly: the tiny Hugging Face checkpoints (GPT-2 with learned
/// positions, Llama, Qwen2 with Q/K/V biases), dense, top-k and soft (log and paper gates) with
/// causal Sinkhorn.
#[test]
fn every_architecture_decodes_like_its_forward() {
    // Gemma 2: sliding layers (window 8 < 100 tokens), attention and final soft-capping, post-norms;
    // OLMo-2: QK-norm and post-norm ordering.
    for arch in ["gpt2", "llama", "qwen2", "gemma2", "olmo2"] {
        let m = Model::load(&common::fixture("hf_tiny").join(arch), &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..100u32).map(|i| (i * 37 + 11) % m.config().vocab as u32).collect();
        let spec = AdapterSpec { groups: 4, window: 8, causal_sinkhorn: true, ..Default::default() };
        let ad = Adapter::random(&m.identity(), m.device(), &spec, 2).unwrap();
        let paper = Adapter::random(&m.identity(), m.device(), &AdapterSpec { gate: focus_core::Gate::Paper, ..spec }, 2).unwrap();
        for (mode, adapter) in [(Mode::Dense, None), (common::topk(1, ad.config.groups), Some(&ad)), (Mode::Soft, Some(&ad)), (Mode::Soft, Some(&paper))] {
            let full = m.decoder.forward(&ids, &ForwardOptions::new(mode, adapter)).unwrap().logits.to_vec2::<f32>().unwrap();
            let mut g = Generator::new(&m.decoder, adapter, mode).unwrap();
            g.feed(&ids[..30]).unwrap();
            for (p, &id) in ids.iter().enumerate().skip(30) {
                let s = g.feed(&[id]).unwrap();
                let scale = full[p].iter().fold(1f32, |a, x| a.max(x.abs()));
                let err = s.logits.iter().zip(&full[p]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                assert!(err <= 1e-5, "{arch} {mode} position {p}: relative logit difference {err}");
            }
        }
    }
}
