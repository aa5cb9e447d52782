//! A set of export files (`focus-lens analyze --out STEM.csv`'s seven, the compare view's two)
//! written as plain files a user may move, copy or mail one by one, with a manifest that says
//! which files belong together: `STEM.manifest.json` lists each file's name, size and SHA-256,
//! and the provenance (app version, model and adapter with their fingerprints).
//!
//! Each file is written atomically (`io::write_atomic`: a reader never sees half a file). The
//! old manifest is removed first and the new one written last, so a manifest on disk always
//! describes a whole set: while a set is being replaced (or after a write killed midway) there
//! is none, or the files' hashes say which of them are not the manifest's (`check`). A name
//! that is not a regular file (a FIFO, a folder) refuses the set before anything is written. The sets
//! written before (the visible names were links into a hidden `.STEM.csv.focus-sets/` folder,
//! which moving `STEM.csv` alone broke) are replaced by plain files, and that folder removed.

use std::path::{Path, PathBuf};

pub const FORMAT: &str = "focus-lens-export-set";

/// The SHA-256 of `bytes` in lowercase hex (as `export::sha256_hex`; this file imports nothing
/// of `export`, which uses it).
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `STEM.manifest.json` beside the set's first file `first` (`STEM.csv`).
pub fn manifest_path(first: &Path) -> PathBuf {
    first.with_extension("manifest.json")
}

/// Writes `files` (the first names the set) as plain files, then their manifest with
/// `provenance`; returns every path written, the manifest last. One file alone is written as
/// it is, without a manifest.
pub fn write_set(files: &[(PathBuf, Vec<u8>)], provenance: &serde_json::Value) -> Result<Vec<PathBuf>, String> {
    let Some((first, _)) = files.first() else { return Ok(Vec::new()) };
    if files.len() == 1 {
        focus_core::io::write_atomic(first, &files[0].1).map_err(|e| e.to_string())?;
        return Ok(vec![first.clone()]);
    }
    let manifest = manifest_path(first);
    // Every name is checked before anything is written (a FIFO or a folder at one of them
    // refuses the whole set, and nothing of it is written).
    for p in files.iter().map(|(p, _)| p).chain([&manifest]) {
        focus_core::io::check_target(p).map_err(|e| e.to_string())?;
    }
    // The steps (the old manifest removed, each file, the new manifest) carry the kill hook.
    let mut steps = focus_core::io::export_set::Steps::new();
    // The old manifest goes first: none describes a half-replaced set.
    match std::fs::remove_file(&manifest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", manifest.display())),
    }
    steps.step();
    let mut listed = Vec::new();
    for (path, bytes) in files {
        // A link of the old layout is replaced by the file itself (the rename replaces the
        // link, never what it points to).
        focus_core::io::write_atomic(path, bytes).map_err(|e| e.to_string())?;
        steps.step();
        listed.push(serde_json::json!({
            "name": path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "bytes": bytes.len(),
            "sha256": sha256_hex(bytes),
        }));
    }
    let doc = serde_json::json!({
        "format": FORMAT,
        "version": 1,
        "note": "the files of one export, written together; each file's sha256 says whether it is still the one written with the others",
        "files": listed,
        "provenance": provenance,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    focus_core::io::write_atomic(&manifest, text.as_bytes()).map_err(|e| e.to_string())?;
    steps.step();
    remove_old_store(first);
    let mut out: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    out.push(manifest);
    Ok(out)
}

/// Removes the hidden folder of the link layout (`.NAME.focus-sets` beside `first`) once no
/// visible name points into it any more.
fn remove_old_store(first: &Path) {
    let (Some(dir), Some(name)) = (first.parent(), first.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let store = dir.join(format!(".{}.focus-sets", name.to_string_lossy()));
    if std::fs::symlink_metadata(&store).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(&store);
    }
}

/// Checks a set against its manifest: the names of the listed files that are missing or are
/// not the bytes the manifest lists (empty: the set is whole).
pub fn check(manifest: &Path) -> Result<Vec<String>, String> {
    let text = focus_core::io::read_capped_string(manifest, focus_core::io::MAX_JSON_BYTES, "export manifest").map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", manifest.display()))?;
    if v["format"] != FORMAT {
        return Err(format!("{} is not an export manifest", manifest.display()));
    }
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let mut bad = Vec::new();
    for f in v["files"].as_array().into_iter().flatten() {
        let name = f["name"].as_str().unwrap_or_default();
        let ok = std::fs::read(dir.join(name)).is_ok_and(|b| Some(sha256_hex(&b).as_str()) == f["sha256"].as_str());
        if !ok {
            bad.push(name.to_string());
        }
    }
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain files and a manifest; an old link layout is replaced; a changed file is found.
    #[test]
    fn a_set_is_plain_files_with_a_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("s.csv");
        // The old layout: links into a hidden folder.
        let store = dir.path().join(".s.csv.focus-sets/current");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("s.csv"), "old").unwrap();
        std::os::unix::fs::symlink(".s.csv.focus-sets/current/s.csv", &a).unwrap();
        let files = vec![(a.clone(), b"1,2\n".to_vec()), (dir.path().join("s.tokens.csv"), b"t\n".to_vec())];
        let written = write_set(&files, &serde_json::json!({"app": "x"})).unwrap();
        assert_eq!(written.last().unwrap(), &dir.path().join("s.manifest.json"));
        for p in &written {
            assert!(std::fs::symlink_metadata(p).unwrap().file_type().is_file(), "{} is a plain file", p.display());
        }
        assert!(!dir.path().join(".s.csv.focus-sets").exists(), "the old hidden folder is gone");
        assert_eq!(std::fs::read(&a).unwrap(), b"1,2\n");
        assert!(check(&written[2]).unwrap().is_empty());
        std::fs::write(&a, "changed").unwrap();
        assert_eq!(check(&written[2]).unwrap(), vec!["s.csv".to_string()]);
        // Moved alone, a file is still the file (no dangling link).
        let moved = dir.path().join("moved.csv");
        std::fs::rename(dir.path().join("s.tokens.csv"), &moved).unwrap();
        assert_eq!(std::fs::read(&moved).unwrap(), b"t\n");
    }
}
