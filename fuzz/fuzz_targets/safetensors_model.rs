//! A Hugging Face model directory whose `model.safetensors` is arbitrary bytes (the config is
//! the tiny Llama fixture's).
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn dir() -> &'static std::path::PathBuf {
    static D: OnceLock<std::path::PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = common::scratch().join("st");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(common::tiny_llama().join("config.json"), d.join("config.json")).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(dir().join("model.safetensors"), data).unwrap();
    let _ = focus_core::Model::load(dir(), &candle_core::Device::Cpu);
});
