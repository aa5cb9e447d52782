//! A set of export files (`focus-lens analyze --out STEM.csv`'s seven, the app's CSV sets)
//! written as plain files a user may move, copy or mail one by one, with a manifest that says
//! which files belong together: `STEM.manifest.json` lists each file's name, size and SHA-256,
//! and the caller's provenance (app version, model and adapter with their fingerprints). The one
//! writer of a set of files (issue 50 chose this layout; issue 51 made it the only one).
//!
//! ```text
//! k.csv, k.profiles.csv, k.tokens.csv, ...   (plain files, each written atomically)
//! k.manifest.json                            (removed first, written last)
//! ```
//!
//! A write: (0) every name is checked before anything is written (a FIFO, device or folder at
//! one, or a missing folder, refuses the whole set); one writer at a time per folder (an
//! advisory lock on the folder itself: no lock file to leave behind or to find a FIFO at);
//! (1) the old manifest is removed; (2) each file is written atomically (`write_atomic`: a
//! reader never sees half a file); (3) the new manifest is written. So a manifest on disk always
//! describes a whole set: while a set is being replaced, or after a write killed at any step,
//! there is none, and each file is whole (the old one or the new one); `check` says which
//! listed files are not the manifest's. One file alone is written as it is, without a manifest.
//!
//! Sets written by earlier versions were links into a hidden folder, switched by one rename of
//! a `current` link (`k.csv -> .k.csv.focus-sets/current/k.csv`). Such leftovers never block a
//! write and are never followed: a visible name that is a link into `.k.csv.focus-sets/` is
//! replaced by the plain file (the rename replaces the link, not what it points to, even when
//! `current` points outside the folder or nowhere); after the new manifest, the other links of
//! that layout beside it (names the new set lacks) are removed as links, and the hidden folder
//! is removed without following any link inside it (a link at its own name is removed as a
//! link). A kill before that cleanup leaves it for the next write of the set.
//!
//! Test hook: with `FOCUS_LENS_ABORT_SET_AT=N` in the environment the process kills itself
//! (SIGKILL) at the Nth step of a set's write (`tests/hostile_surfaces.rs` runs every N).

use super::atomic::{check_target, replace, short_name, write_atomic};
use crate::error::{Error, Result};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The manifest's `format`.
pub const FORMAT: &str = "focus-lens-export-set";

/// The largest manifest `check` reads.
const MAX_MANIFEST_BYTES: u64 = super::MAX_JSON_BYTES;

/// The SHA-256 of `bytes` in lowercase hex.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `STEM.manifest.json` beside the set's first file `first` (`STEM.csv`), shortened with a
/// hash (`short_name`) when that would pass 255 bytes.
pub fn manifest_path(first: &Path) -> PathBuf {
    let (dir, _) = split(first);
    dir.join(short_name(first.file_stem().unwrap_or_default(), "", ".manifest.json"))
}

/// The hidden folder of the old link layout beside the set's first file `first`:
/// `.NAME.focus-sets` (shortened with a hash as earlier versions did for long names).
pub fn old_store_dir(first: &Path) -> PathBuf {
    let (dir, name) = split(first);
    dir.join(short_name(&name, ".", ".focus-sets"))
}

fn split(p: &Path) -> (PathBuf, OsString) {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    (dir, p.file_name().map(|n| n.to_os_string()).unwrap_or_default())
}

/// Counts a set write's steps and kills the process at the step `FOCUS_LENS_ABORT_SET_AT`
/// names (a test hook: a kill at that instant; `tests/hostile_surfaces.rs` runs every step).
pub struct Steps {
    done: usize,
    abort_at: Option<usize>,
}

impl Default for Steps {
    fn default() -> Self {
        Self::new()
    }
}

impl Steps {
    pub fn new() -> Steps {
        Steps { done: 0, abort_at: std::env::var("FOCUS_LENS_ABORT_SET_AT").ok().and_then(|v| v.parse().ok()) }
    }
    pub fn step(&mut self) {
        self.done += 1;
        if self.abort_at == Some(self.done) {
            // SAFETY: kill(2) on our own pid; nothing is touched afterwards.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}

/// Whether `path` is a link of the old layout: a symbolic link whose target starts with the
/// hidden folder's name (`.k.csv.focus-sets/current/k.csv`). Its target is never followed.
fn is_old_link(path: &Path, store_name: &OsString) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink())
        && std::fs::read_link(path).is_ok_and(|t| matches!(t.components().next(), Some(Component::Normal(c)) if c == store_name.as_os_str()))
}

/// Writes `files` (the first names the set; all in one folder, with distinct names) as plain
/// files, then their manifest with `provenance`; returns every path written, the manifest last.
/// One file alone is written as it is (`write_atomic`), without a manifest. See the module's
/// comment for the order of the steps and what a kill at each leaves.
pub fn write_set(files: &[(PathBuf, Vec<u8>)], provenance: &serde_json::Value) -> Result<Vec<PathBuf>> {
    let Some((first, _)) = files.first() else { return Ok(Vec::new()) };
    if files.len() == 1 {
        write_atomic(first, &files[0].1)?;
        return Ok(vec![first.clone()]);
    }
    let (dir, _) = split(first);
    let manifest = manifest_path(first);
    let mut names: Vec<OsString> = Vec::new();
    for p in files.iter().map(|(p, _)| p).chain([&manifest]) {
        let (d, n) = split(p);
        if d != dir || n.is_empty() || names.contains(&n) {
            return Err(Error::Invalid(format!("{}: the files of one export must have distinct names in one folder, and none may be named like the manifest", p.display())));
        }
        names.push(n);
    }
    let store = old_store_dir(first);
    let store_name = split(&store).1;
    // Every name is checked before anything is written: a FIFO, device or folder at one (or a
    // missing folder) refuses the whole set. A link of the old layout is not followed: the
    // write replaces it.
    let old_links: Vec<bool> = files.iter().map(|(p, _)| is_old_link(p, &store_name)).collect();
    for ((p, _), old) in files.iter().zip(&old_links) {
        if !old {
            check_target(p)?;
        }
    }
    check_target(&manifest)?;
    // One writer of this folder's sets at a time (advisory; where the file system has no
    // locks, the manifest's hashes still say which files are not its set's).
    let dir_handle = std::fs::File::open(&dir).map_err(|e| Error::write(&dir, e))?;
    let _ = dir_handle.lock();
    let mut steps = Steps::new();

    // 1. The old manifest goes first: none describes a half-replaced set.
    match std::fs::remove_file(&manifest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::write(&manifest, e)),
    }
    steps.step();
    // 2. Each file, atomically.
    let mut listed = Vec::new();
    for ((path, bytes), old) in files.iter().zip(&old_links) {
        if *old {
            replace(path, bytes)?;
        } else {
            write_atomic(path, bytes)?;
        }
        steps.step();
        listed.push(serde_json::json!({
            "name": path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "bytes": bytes.len(),
            "sha256": sha256_hex(bytes),
        }));
    }
    // 3. The new manifest, last.
    let doc = serde_json::json!({
        "format": FORMAT,
        "version": 1,
        "note": "the files of one export, written together; each file's sha256 says whether it is still the one written with the others",
        "files": listed,
        "provenance": provenance,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Error::Invalid(e.to_string()))?;
    write_atomic(&manifest, text.as_bytes())?;
    steps.step();
    remove_old_layout(&dir, &store, &store_name);
    let mut out: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    out.push(manifest);
    Ok(out)
}

/// Removes what the old link layout left beside a set: the links into the hidden folder `store`
/// (names the new set lacks; each removed as a link, its target untouched), then the folder
/// itself (`remove_dir_all` removes links inside it without following them; a link at the
/// folder's own name is removed as a link). Best effort: what cannot be removed stays, and is
/// tried again by the next write.
fn remove_old_layout(dir: &Path, store: &Path, store_name: &OsString) {
    let Ok(meta) = std::fs::symlink_metadata(store) else { return };
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if is_old_link(&p, store_name) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    if meta.is_dir() {
        let _ = std::fs::remove_dir_all(store);
    } else if meta.is_symlink() {
        let _ = std::fs::remove_file(store);
    }
}

/// Checks a set against its manifest: the names of the listed files that are missing or are
/// not the bytes the manifest lists (empty: the set is whole).
pub fn check(manifest: &Path) -> Result<Vec<String>> {
    let text = super::read_capped_string(manifest, MAX_MANIFEST_BYTES, "export manifest")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(manifest, format!("not an export manifest: {e}")))?;
    if v["format"] != FORMAT {
        return Err(Error::bad_file(manifest, "is not an export manifest"));
    }
    let dir = manifest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut bad = Vec::new();
    for f in v["files"].as_array().into_iter().flatten() {
        let name = f["name"].as_str().unwrap_or_default();
        // A listed name is a file beside the manifest, never a path elsewhere.
        let plain = !name.is_empty() && Path::new(name).components().count() == 1 && matches!(Path::new(name).components().next(), Some(Component::Normal(_)));
        let ok = plain && f["bytes"].as_u64().is_some_and(|n| super::read_capped(&dir.join(name), n, "exported file").is_ok_and(|b| Some(sha256_hex(&b).as_str()) == f["sha256"].as_str()));
        if !ok {
            bad.push(name.to_string());
        }
    }
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("focus-set-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn kinds(dir: &Path) -> Vec<(String, &'static str)> {
        let mut v: Vec<(String, &'static str)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let t = e.file_type().unwrap();
                (e.file_name().to_string_lossy().into_owned(), if t.is_symlink() { "link" } else if t.is_dir() { "dir" } else { "file" })
            })
            .collect();
        v.sort();
        v
    }

    /// Plain files and a manifest that lists them; a changed file is found; a file moved alone
    /// is still its content.
    #[test]
    fn a_set_is_plain_files_with_a_manifest() {
        let dir = scratch("plain");
        let a = dir.join("s.csv");
        let files = vec![(a.clone(), b"1,2\n".to_vec()), (dir.join("s.tokens.csv"), b"t\n".to_vec())];
        let written = write_set(&files, &serde_json::json!({"app": "x"})).unwrap();
        assert_eq!(written, vec![a.clone(), dir.join("s.tokens.csv"), dir.join("s.manifest.json")]);
        assert_eq!(kinds(&dir), vec![("s.csv".into(), "file"), ("s.manifest.json".into(), "file"), ("s.tokens.csv".into(), "file")]);
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&written[2]).unwrap()).unwrap();
        assert_eq!((m["format"].as_str(), m["provenance"]["app"].as_str(), m["files"][1]["bytes"].as_u64()), (Some(FORMAT), Some("x"), Some(2)));
        assert!(check(&written[2]).unwrap().is_empty());
        std::fs::write(&a, "changed").unwrap();
        assert_eq!(check(&written[2]).unwrap(), vec!["s.csv".to_string()]);
        let moved = dir.join("moved.csv");
        std::fs::rename(dir.join("s.tokens.csv"), &moved).unwrap();
        assert_eq!(std::fs::read(&moved).unwrap(), b"t\n");
        assert_eq!(check(&written[2]).unwrap(), vec!["s.csv".to_string(), "s.tokens.csv".to_string()]);
        // One file alone: no manifest.
        let one = scratch("one");
        assert_eq!(write_set(&[(one.join("x.json"), b"{}".to_vec())], &serde_json::Value::Null).unwrap(), vec![one.join("x.json")]);
        assert_eq!(kinds(&one), vec![("x.json".into(), "file")]);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&one).unwrap();
    }

    /// What earlier versions left (issue 51: "an export set whose `current` link points outside
    /// is reported missing and blocks every later export of that name"): the visible names are
    /// links into `.s.csv.focus-sets/`, whose `current` points outside the folder (to files that
    /// must stay untouched), or nowhere, and whose lock is a FIFO. The new export writes plain
    /// files, follows no link, and removes the old links and folder.
    #[test]
    fn old_link_sets_never_block_a_new_export_and_are_not_followed() {
        for current in ["outside", "nowhere"] {
            let root = scratch(&format!("old-{current}"));
            let dir = root.join("out");
            let outside = root.join("outside");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            for n in ["s.csv", "s.extra.csv"] {
                std::fs::write(outside.join(n), format!("secret {n}")).unwrap();
            }
            // Followed, this one would refuse the set (not a regular file) or hang a reader.
            let c = std::ffi::CString::new(outside.join("s.tokens.csv").as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let store = dir.join(".s.csv.focus-sets");
            std::fs::create_dir_all(store.join("g-1")).unwrap();
            let target = if current == "outside" { "../../outside".to_string() } else { "g-gone".to_string() };
            std::os::unix::fs::symlink(&target, store.join("current")).unwrap();
            let c = std::ffi::CString::new(store.join("lock").as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            for n in ["s.csv", "s.tokens.csv", "s.extra.csv"] {
                std::os::unix::fs::symlink(format!(".s.csv.focus-sets/current/{n}"), dir.join(n)).unwrap();
            }
            // A link of the user's own (not into the hidden folder) beside it stays.
            std::os::unix::fs::symlink("../outside/s.csv", dir.join("mine.csv")).unwrap();
            if current == "outside" {
                assert_eq!(std::fs::read(dir.join("s.csv")).unwrap(), b"secret s.csv", "the old layout reads through current");
            }
            let files = vec![(dir.join("s.csv"), b"new 1".to_vec()), (dir.join("s.tokens.csv"), b"new 2".to_vec())];
            let written = write_set(&files, &serde_json::Value::Null).unwrap();
            assert_eq!(kinds(&dir), vec![("mine.csv".into(), "link"), ("s.csv".into(), "file"), ("s.manifest.json".into(), "file"), ("s.tokens.csv".into(), "file")], "{current}");
            assert_eq!(std::fs::read(dir.join("s.csv")).unwrap(), b"new 1");
            assert!(check(&written[2]).unwrap().is_empty());
            for n in ["s.csv", "s.extra.csv"] {
                assert_eq!(std::fs::read(outside.join(n)).unwrap(), format!("secret {n}").into_bytes(), "{current}: {n} outside was written");
            }
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::symlink_metadata(outside.join("s.tokens.csv")).unwrap().file_type().is_fifo());
            // And again: a plain set over a plain set.
            write_set(&files, &serde_json::Value::Null).unwrap();
            std::fs::remove_dir_all(&root).unwrap();
        }
    }

    /// Nothing is written when one name cannot take a file: a FIFO at a file's or the
    /// manifest's name, a folder, a missing folder, or a folder that is a file (each named).
    #[test]
    fn bad_targets_refuse_the_whole_set_before_anything_is_written() {
        let dir = scratch("bad");
        let fifo = |p: &Path| {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        };
        let set = |d: &Path| vec![(d.join("k.csv"), b"1".to_vec()), (d.join("k.tokens.csv"), b"2".to_vec())];
        fifo(&dir.join("k.tokens.csv"));
        let e = write_set(&set(&dir), &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.contains("k.tokens.csv") && e.contains("not a regular file"), "{e}");
        std::fs::remove_file(dir.join("k.tokens.csv")).unwrap();
        fifo(&dir.join("k.manifest.json"));
        let e = write_set(&set(&dir), &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.contains("k.manifest.json") && e.contains("not a regular file"), "{e}");
        assert!(!dir.join("k.csv").exists(), "nothing of the set is written");
        let missing = dir.join("missing");
        let e = write_set(&set(&missing), &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.contains(&format!("its folder {} does not exist", missing.display())), "{e}");
        let file = dir.join("file.txt");
        std::fs::write(&file, "x").unwrap();
        let e = write_set(&set(&file), &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.contains(&format!("{} is not a folder", file.display())), "{e}");
        let e = write_set(&set(&file.join("sub")), &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.contains("is not a folder") && e.contains(&format!("{} is a file", file.display())), "{e}");
        let e = write_set(&[(dir.join("a.csv"), vec![]), (dir.join("a.manifest.json"), vec![])], &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.contains("distinct names"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
