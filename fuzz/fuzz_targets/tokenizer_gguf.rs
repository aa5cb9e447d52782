//! The tokenizer rebuilt from GGUF metadata: arbitrary tokens, merges, types, special ids and
//! pre-tokenizer name, then an arbitrary text encoded and decoded.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use arbitrary::Arbitrary;
use focus_core::model::gguf::GgufFile;
use focus_core::model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    pre: u8,
    tokens: Vec<String>,
    merges: Vec<String>,
    types: Option<Vec<u32>>,
    bos: Option<u32>,
    add_bos: Option<bool>,
    text: String,
}

const PRE: [&str; 7] = ["default", "gpt2", "smollm", "llama3", "qwen2", "unknown-pre", ""];

fuzz_target!(|inp: Input| {
    let mut g = common::gguf_builder::GgufBuilder::default()
        .kv_str("tokenizer.ggml.model", "gpt2")
        .kv_str("tokenizer.ggml.pre", PRE[inp.pre as usize % PRE.len()])
        .kv_str_array("tokenizer.ggml.tokens", &inp.tokens)
        .kv_str_array("tokenizer.ggml.merges", &inp.merges);
    if let Some(t) = &inp.types {
        g = g.kv_u32_array("tokenizer.ggml.token_type", t.len() as u64, t);
    }
    if let Some(b) = inp.bos {
        g = g.kv_u32("tokenizer.ggml.bos_token_id", b);
    }
    if let Some(a) = inp.add_bos {
        g = g.kv_bool("tokenizer.ggml.add_bos_token", a);
    }
    let p = common::scratch().join("tok.gguf");
    std::fs::write(&p, g.bytes()).unwrap();
    let Ok(file) = GgufFile::open(&p) else { return };
    if let Ok(t) = Tokenizer::from_gguf(&file) {
        if let Ok(e) = t.encode(&inp.text, true) {
            let _ = t.decode(&e.ids);
        }
        let _ = t.encode(&inp.text, false);
    }
});
