//! The app's sets of export files (the CSV set of `focus-lens analyze --out STEM.csv`, the
//! compare view's two) go through the library's one set writer, `focus_core::io::export_set`
//! (plain files, `STEM.manifest.json` with each file's size and SHA-256 written last, the old
//! link layout replaced without being followed; its module comment has the steps). What is the
//! app's: the provenance it records (`export::fingerprints`, `cli::analyze`'s), and errors as
//! the text the status line and the error list show.

use std::path::{Path, PathBuf};

pub use focus_core::io::export_set::{manifest_path, FORMAT};

/// Writes `files` (the first names the set) as plain files, then their manifest with
/// `provenance`; returns every path written, the manifest last. One file alone is written as
/// it is, without a manifest.
pub fn write_set(files: &[(PathBuf, Vec<u8>)], provenance: &serde_json::Value) -> Result<Vec<PathBuf>, String> {
    focus_core::io::export_set::write_set(files, provenance).map_err(|e| e.to_string())
}

/// Checks a set against its manifest: the names of the listed files that are missing or are
/// not the bytes the manifest lists (empty: the set is whole).
pub fn check(manifest: &Path) -> Result<Vec<String>, String> {
    focus_core::io::export_set::check(manifest).map_err(|e| e.to_string())
}
