//! The zero-degradation suites: where every input fits in the local window, Focus (soft and
//! hard top-k) must score exactly as the base model; beyond it, scores may move.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::TestResult;
use candle_core::Device;
use focus_core::eval::suites as eval;
use focus_core::{Adapter, Mode, Model};

fn setup() -> (Model, Adapter) {
    let model = Model::load(&common::model_path(), &Device::Cpu).unwrap();
    let adapter = Adapter::load(&common::root().join("sample_adapters/smollm2-135m-k8-init"), &model.identity(), model.device()).unwrap();
    (model, adapter)
}

#[test]
fn truthfulqa_scores_are_identical_within_the_window() -> TestResult {
    let (model, adapter) = setup();
    let (qs, prefix) = eval::load_truthfulqa(&common::root().join("assets/eval/truthfulqa/task_mc.json"))?;
    assert_eq!(qs.len(), 299);
    assert!(prefix.contains("Q: "), "the six-shot prefix is read");
    let qs = &qs[..8];
    let w = adapter.config.window;
    let base = eval::truthfulqa(&model, qs, "", Mode::Dense, None, w, None, |_, _| {})?;
    assert_eq!(base.items_within_window, qs.len(), "zero-shot TruthfulQA inputs fit in the window");
    for mode in [Mode::Soft, common::topk(1, adapter.config.groups)] {
        let r = eval::truthfulqa(&model, qs, "", mode, Some(&adapter), w, None, |_, _| {})?;
        assert_eq!(r.per_item, base.per_item, "{mode}: scores differ inside the window");
        assert_eq!((r.accuracy, r.score), (base.accuracy, base.score));
    }
    // Sanity of the scoring itself: MC2 is a probability, and log-likelihoods are negative.
    assert!(base.per_item.iter().all(|p| (0.0..=1.0).contains(&p["mc2"].as_f64().unwrap())));
    assert!(base.per_item.iter().all(|p| p["logprobs"].as_array().unwrap().iter().all(|l| l.as_f64().unwrap() < 0.0)));
    Ok(())
}

#[test]
fn long_inputs_can_differ_and_the_cloze_file_is_sound() -> TestResult {
    let (model, adapter) = setup();
    let items = eval::load_cloze(&common::root().join("assets/eval/cloze_persuasion.jsonl"))?;
    assert!(items.len() >= 150, "{} cloze items", items.len());
    // Every target occurs in its context beyond the last 100 words (the construction's promise).
    for it in &items {
        let words: Vec<&str> = it.context.split_whitespace().collect();
        let far = &words[..words.len() - 100];
        assert!(far.iter().any(|w| w.trim_matches(|c: char| !c.is_alphanumeric()) == it.target), "{}", it.target);
    }
    let w = adapter.config.window;
    let base = eval::cloze(&model, &items[..2], Mode::Dense, None, w, None, |_, _| {})?;
    let topk = eval::cloze(&model, &items[..2], common::topk(1, adapter.config.groups), Some(&adapter), w, None, |_, _| {})?;
    assert_eq!(base.items_within_window, 0);
    assert!(base.max_tokens > 4 * w);
    // The untrained sample adapter prunes pairs, so long-input log-likelihoods move.
    assert_ne!(base.per_item, topk.per_item);
    Ok(())
}

#[test]
fn bad_eval_files_are_named() -> TestResult {
    let dir = tempfile::tempdir()?;
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, "{\"context\": \"a b\", \"target\": \"two words\"}\n")?;
    let e = eval::load_cloze(&p).unwrap_err().to_string();
    assert!(e.contains("bad.jsonl") && e.contains("one word"), "{e}");
    std::fs::write(&p, "not json")?;
    assert!(eval::load_cloze(&p).unwrap_err().to_string().contains("line 1"));
    let q = dir.path().join("task_mc.json");
    std::fs::write(&q, r#"{"examples": [{"input": "Q?", "target_scores": {"a": 0, "b": 0}}]}"#)?;
    assert!(eval::load_truthfulqa(&q).unwrap_err().to_string().contains("one true answer"));
    Ok(())
}

/// The long-context cloze's construction on a small text: filler of stopwords (never a target)
/// with names planted at known word positions. A name whose last earlier occurrence is at least
/// half the item back and inside it is an item (Zebulon, Ashdown); one repeated within that
/// distance (Quimby) or with its evidence beyond the item (Marchbank) is not, nor is any first
/// occurrence. Every item fits the context, holds its evidence at least min_distance tokens
/// back (checked by tokenising the item itself), never in its last 128 tokens, ends just before
/// the target's later occurrence in the text, and the construction is deterministic.
#[test]
fn long_cloze_items_have_only_distant_evidence() -> TestResult {
    let model = Model::load(&common::model_path(), &Device::Cpu)?;
    let tok = model.tokenizer()?;
    let filler = ["the", "and", "of", "was", "in", "it", "to", "he"];
    let planted = [(300, "Zebulon"), (650, "Zebulon"), (700, "Quimby"), (760, "Quimby"), (800, "Marchbank"), (1000, "Ashdown"), (1300, "Ashdown"), (1500, "Marchbank")];
    let words: Vec<&str> = (0..1600).map(|i| planted.iter().find(|p| p.0 == i).map_or(filler[i % filler.len()], |p| p.1)).collect();
    let text = words.join(" ");
    let spec = eval::LongCloze::new(512);
    assert_eq!((spec.min_distance, eval::LONG_CLOZE_NEAR), (256, 128));
    let items = eval::long_cloze_items(tok, &text, "small.txt", spec)?;
    assert_eq!(items.iter().map(|i| i.target.as_str()).collect::<Vec<_>>(), ["Zebulon", "Ashdown"]);
    assert_eq!(items, eval::long_cloze_items(tok, &text, "small.txt", spec)?, "deterministic");
    for (it, at) in items.iter().zip([650, 1300]) {
        // The item is the text up to just before the target's later occurrence.
        assert!(text[..text.find(&format!(" {}", words[at..].join(" "))).unwrap()].ends_with(&it.context), "{}", it.target);
        let enc = tok.encode(&it.context, false)?;
        let total = enc.ids.len() + tok.encode(&format!(" {}", it.target), false)?.ids.len();
        assert!(total <= spec.context && total > spec.context - 40, "{}: {total} tokens", it.target);
        let at_byte = it.context.rfind(&it.target).unwrap();
        let evidence = enc.offsets.partition_point(|o| o.1 <= at_byte);
        let back = enc.ids.len() - evidence;
        assert!(back >= spec.min_distance && back > eval::LONG_CLOZE_NEAR, "{}: evidence {back} tokens back", it.target);
        assert!(it.distance.unwrap() >= back && it.source == "small.txt", "{it:?}");
    }
    // Too short a context for evidence that far back is refused.
    assert!(eval::long_cloze_items(tok, &text, "small.txt", eval::LongCloze { context: 140, min_distance: 128, spacing: 1 }).is_err());
    Ok(())
}

#[test]
fn a_continuation_is_scored_without_the_bos_that_starts_its_prompt() -> TestResult {
    // Gemma 3's tokenizer puts BOS first in every encoding: the prompt keeps it, the
    // continuation that follows the prompt must not (scoring a BOS mid-text costs ~30 nats,
    // which once made every Gemma 3 cloze item score about -37).
    let model = Model::load(&common::gemma3_model_path(), &Device::Cpu)?;
    let tok = model.tokenizer()?;
    assert!(tok.add_bos() && tok.bos_id().is_some(), "the test needs a model that adds BOS");
    let prompt = "The capital of France is";
    let alone = tok.encode(" Paris", false)?.ids;
    assert_eq!(alone.first(), tok.bos_id().as_ref());
    let c = eval::score_continuation(&model, prompt, " Paris", Mode::Dense, None)?;
    assert_eq!(c.tokens, alone.len() - 1, "the continuation's tokens are scored, not BOS");
    assert_eq!(c.total_tokens, tok.encode(prompt, false)?.ids.len() + c.tokens);
    assert!(c.logprob > -8.0, "log p(' Paris' | '{prompt}') = {:.2}", c.logprob);
    Ok(())
}
