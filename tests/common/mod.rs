//! Shared helpers of the end-to-end tests.
#![allow(dead_code)]

pub mod inputs;

use std::path::PathBuf;
use std::sync::OnceLock;

/// What a test returns where `?` says more briefly than `.unwrap()` (an error fails the test
/// with its message).
pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The repository root (the packages that include this, `app/` and `core/`, sit one folder
/// below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// The default model: $FOCUS_LENS_MODEL, else fetched (and verified) by scripts/fetch-model.sh.
pub fn model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| fetched("FOCUS_LENS_MODEL", "scripts/fetch-model.sh")).clone()
}

/// Qwen2.5-Coder-0.5B (GGUF arch qwen2): $FOCUS_LENS_QWEN2_MODEL, else scripts/fetch-qwen.sh.
pub fn qwen2_model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| fetched("FOCUS_LENS_QWEN2_MODEL", "scripts/fetch-qwen.sh")).clone()
}

/// Gemma 3 270M (GGUF arch gemma3): $FOCUS_LENS_GEMMA3_MODEL, else scripts/fetch-gemma3.sh.
pub fn gemma3_model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| fetched("FOCUS_LENS_GEMMA3_MODEL", "scripts/fetch-gemma3.sh")).clone()
}

/// The default model on the CPU, loaded once per test binary.
pub fn default_model() -> &'static focus_core::Model {
    static M: OnceLock<focus_core::Model> = OnceLock::new();
    M.get_or_init(|| focus_core::Model::load(&model_path(), &candle_core::Device::Cpu).expect("load the default model"))
}

/// Tokens `start..start + n` of the Persuasion fixture under `model`'s tokenizer.
pub fn persuasion_ids(model: &focus_core::Model, start: usize, n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(fixture("ppl_persuasion_60k.txt")).unwrap();
    model.tokenizer().unwrap().encode(&text, false).unwrap().ids[start..start + n].to_vec()
}

fn fetched(env: &str, script: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let out = std::process::Command::new("bash").arg(root().join(script)).output().unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(out.status.success(), "{script} failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Top-k mode with k of `groups` (the adapter's K), checked as the app checks it.
pub fn topk(k: usize, groups: usize) -> focus_core::Mode {
    focus_core::Mode::TopK(focus_core::focus::mask::TopK::new(k, groups).unwrap())
}
