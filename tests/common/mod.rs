//! Shared helpers of the end-to-end tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// The default model: $FOCUS_LENS_MODEL, else fetched (and verified) by scripts/fetch-model.sh.
pub fn model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        if let Some(p) = std::env::var_os("FOCUS_LENS_MODEL") {
            return PathBuf::from(p);
        }
        let out = std::process::Command::new("bash")
            .arg(root().join("scripts/fetch-model.sh"))
            .output()
            .expect("run scripts/fetch-model.sh");
        assert!(out.status.success(), "fetch-model.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}
