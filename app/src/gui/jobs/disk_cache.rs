//! Finished analyses kept on disk, so that reopening a recent text (same model, adapter and
//! settings) shows its analysis at once instead of running the model again. An entry's name is
//! the SHA-256 of everything the analysis depends on (`DiskKey`): the model's identity (its
//! weights' fingerprint), the adapter as run (its config with the window and Sinkhorn overrides,
//! and its weights file's path, size and time, or the embedded default), the text and the run
//! settings. Entries are written atomically (a reader never sees half of one); an entry that
//! cannot be read or does not fit its analysis is removed and ignored, never an error; the
//! folder is kept under a size bound by dropping the least recently used entries.

use crate::gui::export::sha256_hex;
use crate::gui::state::RunParams;
use focus_core::analysis::Analysis;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Written into every entry: an entry of another format is ignored.
const FORMAT: &str = "focus-lens analysis cache 1";

/// The default bound on the folder's size.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// The cache's folder and size bound.
#[derive(Debug, Clone)]
pub struct DiskCache {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

impl DiskCache {
    /// `FOCUS_LENS_CACHE` (or ~/.cache/focus-lens) `/analyses`, 1 GiB at most.
    pub fn default_location() -> DiskCache {
        DiskCache { dir: crate::defaults::cache_dir().join("analyses"), max_bytes: DEFAULT_MAX_BYTES }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The entry of `key`, when there is a readable one that fits (`layers` layers of the
    /// model); a corrupt or foreign entry is removed.
    pub fn load(&self, key: &str, layers: usize) -> Option<Cached> {
        let p = self.path(key);
        let bytes = std::fs::read(&p).ok()?;
        let fits = |c: &Cached| {
            let n = c.analysis.tokens.len();
            c.format == FORMAT
                && c.analysis.layers.len() == layers
                && c.argmax.len() == layers
                && c.masks.len() == layers
                && c.labels.len() == layers
                && c.routing.len() == layers
                && c.routing.iter().all(|r| r.t == n && r.memberships.len() == n * r.groups)
                && c.argmax.iter().all(|a| a.len() == n)
                && c.masks.iter().all(|m| m.len() == n)
                && n > 0
        };
        match serde_json::from_slice::<Cached>(&bytes) {
            Ok(c) if fits(&c) => {
                // Used now: the last to go when the folder is trimmed.
                let _ = std::fs::File::options().append(true).open(&p).and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Some(c)
            }
            _ => {
                let _ = std::fs::remove_file(&p);
                None
            }
        }
    }

    /// Stores `c` as `key` (atomically), then trims the folder to the bound. Failures are
    /// ignored: the cache only saves time.
    pub fn store(&self, key: &str, c: &Cached) {
        let Ok(json) = serde_json::to_vec(c) else { return };
        if json.len() as u64 > self.max_bytes || std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        if focus_core::io::write_atomic(&self.path(key), &json).is_ok() {
            self.trim(Some(&self.path(key)));
        }
    }

    /// Drops the least recently used entries until the folder holds at most `max_bytes`
    /// (`keep`: the entry just written, never dropped).
    pub fn trim(&self, keep: Option<&Path>) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return };
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = rd
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, p) in entries {
            if total <= self.max_bytes {
                break;
            }
            if Some(p.as_path()) != keep && std::fs::remove_file(&p).is_ok() {
                total -= len;
            }
        }
    }
}

/// What an entry holds: the analysis and what the app derives from it besides the cheap group
/// alignment (recomputed).
#[derive(Serialize, Deserialize)]
pub struct Cached {
    pub format: String,
    pub analysis: Analysis,
    /// `analysis.routing`, which the analysis' own serialisation leaves out (the routing space
    /// view needs it).
    pub routing: Vec<focus_core::focus::router::LayerRouting>,
    pub text_tokens: usize,
    pub note: Option<String>,
    /// Seconds the analysis took when it ran.
    pub seconds: f64,
    pub argmax: Vec<Vec<u8>>,
    pub masks: Vec<Vec<u64>>,
    pub labels: Vec<Vec<String>>,
}

impl Cached {
    pub fn new(r: &crate::gui::state::AnalysisResult) -> Cached {
        Cached {
            format: FORMAT.into(),
            analysis: r.analysis.clone(),
            routing: r.analysis.routing.clone(),
            text_tokens: r.text_tokens,
            note: r.note.clone(),
            seconds: r.seconds,
            argmax: r.argmax.clone(),
            masks: r.masks.clone(),
            labels: r.labels.clone(),
        }
    }
}

/// The adapter's file identity for the key: its weights file's path, size and modification
/// time (`None`: the embedded default, named with this build's version).
pub fn adapter_identity(path: Option<&Path>) -> String {
    match path {
        None => format!("embedded {} {}", crate::defaults::SAMPLE_ADAPTER_NAME, env!("CARGO_PKG_VERSION")),
        Some(p) => {
            let w = p.join("adapter_model.safetensors");
            let m = std::fs::metadata(&w).ok();
            let t = m.as_ref().and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_nanos());
            format!("{} {:?} {:?}", p.canonicalize().unwrap_or_else(|_| p.to_path_buf()).display(), m.map(|m| m.len()), t)
        }
    }
}

/// The entry name of an analysis: the SHA-256 of the model's identity, the adapter (its file
/// identity and its config as run), the text and the settings.
pub fn key(model: &focus_core::Model, adapter_file: &str, adapter: &focus_core::focus::adapter::Adapter, text: &str, params: &RunParams) -> String {
    let parts = [
        FORMAT.to_string(),
        serde_json::to_string(&model.identity()).unwrap_or_default(),
        adapter_file.to_string(),
        serde_json::to_string(&adapter.config).unwrap_or_default(),
        sha256_hex(text.as_bytes()),
        serde_json::to_string(params).unwrap_or_default(),
    ];
    sha256_hex(parts.join("\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_drops_the_least_recently_used_beyond_the_bound() {
        let d = tempfile::tempdir().unwrap();
        let c = DiskCache { dir: d.path().to_path_buf(), max_bytes: 250 };
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let p = d.path().join(format!("{name}.json"));
            std::fs::write(&p, vec![b'x'; 100]).unwrap();
            let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            std::fs::File::options().append(true).open(&p).unwrap().set_modified(t).unwrap();
        }
        c.trim(None);
        let left: Vec<bool> = ["a", "b", "c"].iter().map(|n| d.path().join(format!("{n}.json")).exists()).collect();
        assert_eq!(left, [false, true, true], "the oldest goes first");
    }

    #[test]
    fn a_corrupt_entry_is_removed_and_ignored() {
        let d = tempfile::tempdir().unwrap();
        let c = DiskCache { dir: d.path().to_path_buf(), max_bytes: 1 << 20 };
        let p = d.path().join("k.json");
        std::fs::write(&p, b"{\"format\": \"focus-lens analysis cache 1\", \"analysis\": [1, 2").unwrap();
        assert!(c.load("k", 30).is_none());
        assert!(!p.exists());
        assert!(c.load("missing", 30).is_none());
    }
}
