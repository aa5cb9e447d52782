//! A second real model family from GGUF: Qwen2.5-Coder-0.5B-Instruct (arch qwen2, Q4_K_M, fetched
//! by scripts/fetch-qwen.sh) against llama.cpp's token ids and perplexity on the Persuasion text
//! (tests/fixtures/qwen2_persuasion_reference.json).

#[path = "../../tests/common/mod.rs"]
mod common;

use common::TestResult;
use candle_core::Device;
use focus_core::{Mode, Model};

#[test]
fn qwen2_gguf_matches_llama_cpp() -> TestResult {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("qwen2_persuasion_reference.json"))?)?;
    let model = Model::load(&common::qwen2_model_path(), &Device::Cpu).expect("load Qwen2.5-Coder-0.5B");
    let c = model.config();
    assert_eq!((c.arch.to_string().as_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads), ("qwen2", 24, 896, 14, 2));

    // The whole text's token ids, exactly.
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt"))?;
    let ids = model.tokenizer()?.encode(&text, false)?.ids;
    let ref_ids: Vec<u32> = reference["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    assert_eq!(ids.len(), 14135);
    assert_eq!(ids, ref_ids, "tokenization differs from llama.cpp");

    // Perplexity of the first 4 chunks at ctx 512 (a 0.5B model on 2 cores: the whole text takes
    // 85 s; RESULTS.md has it): each chunk's mean NLL within 1% of llama.cpp's (Q4_K weights
    // dequantized to f32 here, 8-bit activations there), and their PPL within 0.5%.
    let n = 4;
    let r = focus_core::eval::ppl::perplexity(&model, &ids[..n * 512], 512, Mode::Dense, None, None, |_, _| {})?;
    let per: Vec<f64> = reference["ctx_512"]["per_chunk_mean_nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(r.per_chunk_nll.len(), n);
    for (k, (a, b)) in r.per_chunk_nll.iter().zip(&per).enumerate() {
        assert!((a - b).abs() / b < 0.01, "chunk {k}: nll {a} vs llama.cpp {b}");
    }
    let want = reference["ctx_512"]["running_ppl"][n - 1].as_f64().unwrap();
    let rel = (r.ppl - want).abs() / want;
    eprintln!("first {n} chunks: ppl {:.4} vs llama.cpp {want:.4} ({:.3}%)", r.ppl, rel * 100.0);
    assert!(rel < 0.005, "ppl {} vs llama.cpp {want}", r.ppl);
    Ok(())
}

/// The integer route's K-quant form (X in Q8_K, the sub-block scales as integers: the
/// `kquants` module) on a real Q4_K_M model: the first 4 chunks' perplexity within 0.5% of
/// llama.cpp's (whose own products are this route's), each chunk within 1%, and not the exact
/// products' figure (the route was taken).
#[test]
fn qwen2_int8_products_match_llama_cpp() -> TestResult {
    if !focus_core::model::qmatmul_int8::available() {
        eprintln!("no AVX-512 VNNI on this CPU: the integer route is not tested here");
        return Ok(());
    }
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("qwen2_persuasion_reference.json"))?)?;
    let ids: Vec<u32> = reference["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let mut model = Model::load(&common::qwen2_model_path(), &Device::Cpu).expect("load Qwen2.5-Coder-0.5B");
    let n = 4;
    let exact = focus_core::eval::ppl::perplexity(&model, &ids[..n * 512], 512, Mode::Dense, None, None, |_, _| {})?;
    model.decoder.set_products(focus_core::model::qmatmul::Products::Int8);
    let r = focus_core::eval::ppl::perplexity(&model, &ids[..n * 512], 512, Mode::Dense, None, None, |_, _| {})?;
    let per: Vec<f64> = reference["ctx_512"]["per_chunk_mean_nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (k, (a, b)) in r.per_chunk_nll.iter().zip(&per).enumerate() {
        assert!((a - b).abs() / b < 0.01, "chunk {k}: nll {a} vs llama.cpp {b}");
    }
    let want = reference["ctx_512"]["running_ppl"][n - 1].as_f64().unwrap();
    let rel = (r.ppl - want).abs() / want;
    eprintln!("int8 products, first {n} chunks: ppl {:.4} vs llama.cpp {want:.4} ({:.3}%); exact products {:.4}", r.ppl, rel * 100.0, exact.ppl);
    assert!(rel < 0.005, "int8 ppl {} vs llama.cpp {want}", r.ppl);
    assert!(r.ppl != exact.ppl, "the integer route gave the exact products' perplexity: was it taken?");
    Ok(())
}
