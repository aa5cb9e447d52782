//! A whole GGUF model load from arbitrary bytes: header, metadata, tensor table, the config
//! built from it, the tokenizer rebuilt from `tokenizer.ggml.*`, and the weights.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = common::scratch().join("model.gguf");
    std::fs::write(&p, data).unwrap();
    let _ = focus_core::model::gguf::GgufFile::open(&p);
    let _ = focus_core::Model::load(&p, &candle_core::Device::Cpu);
});
