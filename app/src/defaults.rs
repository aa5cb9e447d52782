//! The embedded default that `focus-lens` runs without arguments, shared by the CLI and the GUI:
//! the default model's path (fetched by `scripts/fetch-model.sh`), the sample adapter and the
//! sample text, both compiled into the binary, and the evaluation suites' data (`eval`'s default
//! `--truthfulqa` and `--cloze`), compiled in too so that a binary copied elsewhere has them.

use focus_core::{Adapter, Model};
use std::path::{Path, PathBuf};

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `scripts/fetch-model.sh` puts the default model (`FOCUS_LENS_MODEL` overrides it,
/// `FOCUS_LENS_CACHE` moves the cache folder).
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FOCUS_LENS_MODEL") {
        return PathBuf::from(p);
    }
    cache_dir().join(DEFAULT_MODEL_FILE)
}

/// The app's cache folder: `FOCUS_LENS_CACHE`, else `~/.cache/focus-lens` (the default model,
/// the GUI's generated texts).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FOCUS_LENS_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/focus-lens"))
}

pub const SAMPLE_TEXT: &str = include_str!("../../assets/sample.txt");
pub const SAMPLE_TEXT_NAME: &str = "assets/sample.txt";

pub const SAMPLE_ADAPTER_NAME: &str = "sample_adapters/smollm2-135m-k8";
const SAMPLE_ADAPTER_CONFIG: &str = include_str!("../../sample_adapters/smollm2-135m-k8/adapter_config.json");
const SAMPLE_ADAPTER_WEIGHTS: &[u8] = include_bytes!("../../sample_adapters/smollm2-135m-k8/adapter_model.safetensors");

/// The sample adapter's files by name (what `index::build::adapter_sha256` hashes).
pub fn sample_adapter_files() -> [(&'static str, &'static [u8]); 2] {
    [("adapter_config.json", SAMPLE_ADAPTER_CONFIG.as_bytes()), ("adapter_model.safetensors", SAMPLE_ADAPTER_WEIGHTS)]
}

/// The sample adapter, for `model` (which must be the default model).
pub fn sample_adapter(model: &Model) -> focus_core::Result<Adapter> {
    Adapter::from_bytes(SAMPLE_ADAPTER_CONFIG, SAMPLE_ADAPTER_WEIGHTS, &model.identity(), model.device(), Path::new(SAMPLE_ADAPTER_NAME))
}

/// BIG-bench's TruthfulQA `task_mc.json` (Apache-2.0, `assets/eval/truthfulqa/NOTICE.md`), 125 KB.
pub const TRUTHFULQA_MC: &str = include_str!("../../assets/eval/truthfulqa/task_mc.json");
pub const TRUTHFULQA_MC_NAME: &str = "assets/eval/truthfulqa/task_mc.json";
/// The last-word cloze items of held-out *Persuasion* (`scripts/make_cloze.py`), 460 KB.
pub const CLOZE: &str = include_str!("../../assets/eval/cloze_persuasion.jsonl");
pub const CLOZE_NAME: &str = "assets/eval/cloze_persuasion.jsonl";
/// The long-context cloze's default text: the first 60,000 bytes of held-out *Persuasion* (the
/// perplexity fixture), 60 KB.
pub const LONG_CLOZE_TEXT: &str = include_str!("../../tests/fixtures/ppl_persuasion_60k.txt");
pub const LONG_CLOZE_TEXT_NAME: &str = "tests/fixtures/ppl_persuasion_60k.txt";
