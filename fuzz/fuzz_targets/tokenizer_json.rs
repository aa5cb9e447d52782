//! A `tokenizer.json` of arbitrary bytes: load, then encode and decode a fixed text.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use focus_core::model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = common::scratch().join("tokenizer.json");
    std::fs::write(&p, data).unwrap();
    if let Ok(t) = Tokenizer::from_file(&p) {
        for text in ["Hello, world! 123\n\n  The cat sat.", "naïve 東京 <|im_start|>"] {
            if let Ok(e) = t.encode(text, true) {
                let _ = t.decode(&e.ids);
            }
        }
    }
});
