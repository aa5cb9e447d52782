//! Hub ids `ORG/NAME[@REV]`: arbitrary text resolved in a scratch Hugging Face cache (one repo,
//! refs main and dev, a snapshot, a secret file beside the cache). A spec either resolves to a
//! folder inside the cache or is an error that never quotes the secret.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use focus_core::model::hub;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

const SECRET: &str = "FUZZ-SECRET-CONTENT";

/// scratch/hub/models--org--tiny/{refs/main, refs/dev, snapshots/abc123/}, scratch/secret.txt.
fn cache() -> &'static (PathBuf, PathBuf) {
    static C: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    C.get_or_init(|| {
        let root = common::scratch();
        let cache = root.join("hub");
        let repo = cache.join("models--org--tiny");
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(repo.join("refs/dev"), "abc123").unwrap();
        std::fs::write(root.join("secret.txt"), SECRET).unwrap();
        let canon = cache.canonicalize().unwrap();
        (cache, canon)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = std::str::from_utf8(data) else { return };
    let (cache, canon) = cache();
    let _ = hub::is_repo_id(spec);
    match hub::resolve_in(cache, spec) {
        Ok(p) => assert!(p.canonicalize().unwrap().starts_with(canon), "{spec:?} resolved outside the cache: {}", p.display()),
        Err(e) => assert!(!e.to_string().contains(SECRET), "{spec:?}: {e}"),
    }
});
