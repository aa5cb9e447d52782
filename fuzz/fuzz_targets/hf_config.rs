//! A Hugging Face model directory whose `config.json` is arbitrary bytes (the weights are the
//! tiny Llama fixture's).
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn dir() -> &'static std::path::PathBuf {
    static D: OnceLock<std::path::PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = common::scratch().join("cfg");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(common::tiny_llama().join("model.safetensors"), d.join("model.safetensors")).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(dir().join("config.json"), data).unwrap();
    let _ = focus_core::Model::load(dir(), &candle_core::Device::Cpu);
});
