//! `ORG/NAME`: a Hugging Face repo id resolved in the local hub cache, offline, with the hub's
//! layout and variables (as the `hf-hub` crate and huggingface_hub do): the cache is
//! `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
//! `~/.cache/huggingface/hub`; the repo is `models--ORG--NAME/`, its revision `refs/main` (or
//! `ORG/NAME@REV`: a ref name or a commit), and its files `snapshots/<commit>/`.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The hub cache folder, from the environment.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("huggingface").join("hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("huggingface").join("hub")))
}

/// One part of a repo id or a revision: what the hub allows in a name (letters, digits, `-`,
/// `_`, `.`), never `.` or `..`, so that joining it to a cache path cannot leave the cache.
fn valid_name(p: &str) -> bool {
    !p.is_empty() && p.len() <= 255 && p != "." && p != ".." && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Whether `spec` reads as a repo id (`ORG/NAME`, optionally `@REV`) rather than a path. REV is
/// checked by `resolve_in`, so that a bad revision is an error naming it, not a missing file.
pub fn is_repo_id(spec: &str) -> bool {
    let id = spec.split('@').next().unwrap_or("");
    let parts: Vec<&str> = id.split('/').collect();
    parts.len() == 2 && parts.iter().all(|p| valid_name(p))
}

/// The largest `refs/REV` file read: it holds one commit hash (40 hex digits and a newline).
const MAX_REF_BYTES: u64 = 1024;

/// The snapshot folder of `spec` (`ORG/NAME[@REV]`) in `cache`. REV is validated like ORG and
/// NAME, `refs/REV` is read through the capped, regular-file-only reader, and the snapshot must
/// lie inside the cache once links are resolved. No error quotes a ref's content: a ref may be
/// a link to any file on the machine.
pub fn resolve_in(cache: &Path, spec: &str) -> Result<PathBuf> {
    let (id, rev) = match spec.split_once('@') {
        Some((id, rev)) => (id, rev),
        None => (spec, "main"),
    };
    let (org, name) = id.split_once('/').ok_or_else(|| Error::Invalid(format!("{spec:?} is not ORG/NAME")))?;
    if !valid_name(org) || !valid_name(name) || name.contains('/') {
        return Err(Error::Invalid(format!("{id:?} is not a repo id ORG/NAME (letters, digits, '-', '_', '.')")));
    }
    if !valid_name(rev) {
        return Err(Error::Invalid(format!("{id}: revision {rev:?} is not a ref name or commit (letters, digits, '-', '_', '.'; no '/', '..' or absolute path)")));
    }
    let repo = cache.join(format!("models--{org}--{name}"));
    if !repo.is_dir() {
        return Err(Error::Invalid(format!("{id} is not in the Hugging Face cache {} (no {}); offline, models must be downloaded first", cache.display(), repo.display())));
    }
    // A ref (refs/main) holds a commit hash; a revision may also be the commit itself.
    let ref_path = repo.join("refs").join(rev);
    let commit = match std::fs::symlink_metadata(&ref_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => rev.to_string(),
        _ => {
            let bytes = crate::io::read_capped(&ref_path, MAX_REF_BYTES, "hub ref")?;
            inside(cache, &ref_path)?;
            let commit = std::str::from_utf8(&bytes).map(str::trim).unwrap_or("");
            if !valid_name(commit) {
                return Err(Error::bad_file(&ref_path, "does not hold a commit name (letters, digits, '-', '_', '.')"));
            }
            commit.to_string()
        }
    };
    let snap = repo.join("snapshots").join(&commit);
    if !snap.is_dir() {
        // The commit is named only when it is the revision given (not read from a ref).
        let which = if commit == rev { snap.display().to_string() } else { format!("for refs/{rev} under {}", repo.join("snapshots").display()) };
        return Err(Error::Invalid(format!("{id}@{rev}: no snapshot {which} in the cache")));
    }
    inside(cache, &snap)?;
    Ok(snap)
}

/// Refuses `path` when, links resolved, it lies outside `cache`.
fn inside(cache: &Path, path: &Path) -> Result<()> {
    let canon = |p: &Path| p.canonicalize().map_err(|e| Error::io(p, e));
    if !canon(path)?.starts_with(canon(cache)?) {
        return Err(Error::bad_file(path, format!("links outside the Hugging Face cache {}", cache.display())));
    }
    Ok(())
}

/// `spec` as a path: itself when it exists or is not a repo id, else its snapshot in the hub
/// cache.
pub fn resolve(spec: &Path) -> Result<PathBuf> {
    let s = spec.to_string_lossy();
    if spec.exists() || !is_repo_id(&s) {
        return Ok(spec.to_path_buf());
    }
    let cache = cache_dir().ok_or_else(|| Error::Invalid("no Hugging Face cache folder: set HF_HUB_CACHE or HF_HOME".into()))?;
    resolve_in(&cache, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_paths() {
        assert!(is_repo_id("google/gemma-2-2b") && is_repo_id("org/name@main"));
        for p in ["model.gguf", "/abs/x", "a/b/c", "./x", "../x", "a/", "/a"] {
            assert!(!is_repo_id(p), "{p}");
        }
    }

    #[test]
    fn resolves_refs_and_commits_in_a_hub_layout() {
        let tmp = std::env::temp_dir().join(format!("focus-hub-{}", std::process::id()));
        let repo = tmp.join("models--org--tiny");
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/def456")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        assert_eq!(resolve_in(&tmp, "org/tiny").unwrap(), repo.join("snapshots/abc123"));
        assert_eq!(resolve_in(&tmp, "org/tiny@def456").unwrap(), repo.join("snapshots/def456"));
        assert!(resolve_in(&tmp, "org/other").unwrap_err().to_string().contains("not in the Hugging Face cache"));
        assert!(resolve_in(&tmp, "org/tiny@nope").is_err());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
