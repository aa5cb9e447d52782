//! Building an index from a folder of texts: list the texts, route each new or changed one once
//! and commit it (so a cancelled or killed build resumes after its last document), then write
//! the per-centroid summaries and move the finished file into place.
//!
//! The file being built is `OUT.partial`; `OUT` is replaced only by a finished index (a rename),
//! so a reader never sees a half-built one. A build whose model, adapter or settings differ from
//! the partial (or finished) file's starts a new index instead of mixing routings.

use super::store::{Identity, Store};
use super::summary::write_summaries;
use anyhow::{bail, Context, Result};
use focus_core::index::{route_document, IndexSettings, RouteOptions};
use focus_core::{Adapter, Mode, Model};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Documents larger than this are skipped (their routing would be held in memory at once: about
/// 10 bytes per token, layer and top-k slot); split them.
pub const MAX_DOC_BYTES: u64 = 4 << 20;

/// Files left out of an index: (name, why).
pub type Skipped = Vec<(String, String)>;

/// A text of the corpus folder that will be indexed.
#[derive(Debug, Clone)]
pub struct CorpusFile {
    /// Relative to the corpus folder, with '/' separators: the document's name in the index.
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
}

/// The texts of `dir` (recursively, hidden entries left out), by name, and the files skipped
/// with why. Files that are not UTF-8 text or too large are skipped, not fatal; no text at all is.
pub fn list_corpus(dir: &Path) -> Result<(Vec<CorpusFile>, Skipped)> {
    let meta = std::fs::metadata(dir).with_context(|| format!("cannot read the corpus folder {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a folder: index takes a folder of text files", dir.display());
    }
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let e = e.with_context(|| format!("cannot list {}", d.display()))?;
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let name = p.strip_prefix(dir).unwrap_or(&p).to_string_lossy().replace('\\', "/");
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(p);
            } else if let Some(m) = std::fs::metadata(&p).ok().filter(|m| m.is_file()) {
                if m.len() > MAX_DOC_BYTES {
                    skipped.push((name, format!("{} bytes, over the {} MiB a document may have: split it", m.len(), MAX_DOC_BYTES >> 20)));
                } else {
                    files.push(CorpusFile { name, path: p, bytes: m.len() });
                }
            } else {
                skipped.push((name, "not a regular file".into()));
            }
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    skipped.sort();
    Ok((files, skipped))
}

/// What a build reports as it goes.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub docs_done: usize,
    pub docs_total: usize,
    /// Bytes of text routed (or found already indexed) of the corpus's total.
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Tokens routed by this run (not counting documents resumed from the file).
    pub tokens_routed: u64,
    pub seconds: f64,
    /// The document being routed, or "summaries" at the end.
    pub current: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildReport {
    pub index: PathBuf,
    pub documents: usize,
    /// Documents routed by this run; the others were already in the index.
    pub routed: usize,
    pub reused: usize,
    pub removed: usize,
    pub skipped: Vec<(String, String)>,
    pub tokens: u64,
    pub tokens_routed: u64,
    pub route_seconds: f64,
    pub summary_seconds: f64,
    /// True when nothing had changed since the finished index was written.
    pub up_to_date: bool,
}

pub struct BuildRequest<'a> {
    pub model: &'a Model,
    pub adapter: &'a Adapter,
    /// The adapter's directory (its files are hashed into the index's identity); `None`: the
    /// embedded sample adapter.
    pub adapter_path: Option<&'a Path>,
    pub corpus: &'a Path,
    pub out: &'a Path,
    pub mode: Mode,
    pub k: usize,
    pub segment_len: usize,
}

/// The files that make an adapter (what its identity hash covers; notes beside them do not count).
pub const ADAPTER_FILES: [&str; 2] = ["adapter_config.json", "adapter_model.safetensors"];

/// sha256 over an adapter's files, each preceded by its name.
pub fn files_sha256(files: &[(&str, &[u8])]) -> String {
    let mut h = Sha256::new();
    for (name, bytes) in files {
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    format!("{:x}", h.finalize())
}

/// The identity hash of the adapter in directory `path` (`None`: the embedded sample adapter).
pub fn adapter_sha256(path: Option<&Path>) -> Result<String> {
    let Some(dir) = path else {
        return Ok(files_sha256(&crate::defaults::sample_adapter_files()));
    };
    let mut read = Vec::new();
    for name in ADAPTER_FILES {
        let f = dir.join(name);
        read.push((name, std::fs::read(&f).with_context(|| format!("cannot read {}", f.display()))?));
    }
    Ok(files_sha256(&read.iter().map(|(n, b)| (*n, b.as_slice())).collect::<Vec<_>>()))
}

pub fn partial_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

impl BuildRequest<'_> {
    pub fn identity(&self) -> Result<Identity> {
        let seg = self.segment_len.min(self.model.config().context);
        Ok(Identity {
            model: self.model.config().name.clone(),
            model_fingerprint: self.model.fingerprint.clone(),
            adapter: self.adapter_path.map_or_else(|| crate::defaults::SAMPLE_ADAPTER_NAME.to_string(), |p| p.display().to_string()),
            adapter_sha256: adapter_sha256(self.adapter_path)?,
            n_layers: self.model.config().n_layers,
            groups: self.adapter.config.groups,
            settings: IndexSettings { mode: self.mode.to_string(), k: self.k, segment_len: seg },
        })
    }
}

/// Builds or brings up to date the index `req.out` from `req.corpus`. `note` receives one-line
/// messages (a new index started, files skipped); `progress` is called after each document.
pub fn build_index(req: &BuildRequest, cancel: &AtomicBool, mut note: impl FnMut(&str), mut progress: impl FnMut(&Progress)) -> Result<BuildReport> {
    let start = Instant::now();
    let (files, skipped) = list_corpus(req.corpus)?;
    for (n, why) in &skipped {
        note(&format!("skipped {n}: {why}"));
    }
    let id = req.identity()?;
    // Read every text first: a file that is not text is skipped, and the hashes say what is new.
    let mut texts = Vec::new();
    let mut skipped = skipped;
    for f in &files {
        match focus_core::io::text::read_text(&f.path) {
            Ok(t) => {
                let sha = format!("{:x}", Sha256::digest(t.as_bytes()));
                texts.push((f.name.clone(), sha, t));
            }
            Err(e) => {
                note(&format!("skipped {}: {e}", f.name));
                skipped.push((f.name.clone(), e.to_string()));
            }
        }
    }
    if texts.is_empty() {
        let first = skipped.first().map(|(n, w)| format!(" ({} skipped; first: {n}: {w})", skipped.len())).unwrap_or_default();
        bail!("no text to index in {}{first}", req.corpus.display());
    }
    let wanted: Vec<(String, String)> = texts.iter().map(|(n, s, _)| (n.clone(), s.clone())).collect();
    let partial = partial_path(req.out);
    let mut report = BuildReport {
        index: req.out.to_path_buf(),
        documents: texts.len(),
        routed: 0,
        reused: 0,
        removed: 0,
        skipped: skipped.clone(),
        tokens: 0,
        tokens_routed: 0,
        route_seconds: 0.0,
        summary_seconds: 0.0,
        up_to_date: false,
    };
    // A finished index of the same routing and documents needs nothing.
    if !partial.exists() && req.out.exists() {
        if let Ok(done) = Store::open(req.out) {
            if done.complete() && done.identity()?.is_some_and(|d| d.same_routing(&id)) && done.documents()? == sorted(&wanted) {
                report.up_to_date = true;
                report.reused = texts.len();
                report.tokens = done.meta_value("tokens")?.parse().unwrap_or(0);
                return Ok(report);
            }
        }
    }
    // Resume the partial file, or start from the finished one, when their routing is the same.
    if partial.exists() {
        let keep = Store::create(&partial).ok().and_then(|s| s.identity().ok().flatten()).is_some_and(|d| d.same_routing(&id));
        if keep {
            note(&format!("resuming {}", partial.display()));
        } else {
            note(&format!("{} was built with another model, adapter or settings (or is damaged): starting a new index", partial.display()));
            remove(&partial)?;
        }
    } else if req.out.exists() {
        let reuse = Store::open(req.out).ok().and_then(|s| s.identity().ok().flatten()).is_some_and(|d| d.same_routing(&id));
        if reuse {
            std::fs::copy(req.out, &partial).with_context(|| format!("cannot copy {} to {}", req.out.display(), partial.display()))?;
            note(&format!("updating {}", req.out.display()));
        } else {
            note(&format!("{} was built with another model, adapter or settings (or is damaged): starting a new index (it is replaced when the new one is finished)", req.out.display()));
        }
    }
    let mut store = Store::create(&partial)?;
    store.set_meta("identity", &serde_json::to_string(&id)?)?;
    let stored: std::collections::HashMap<String, String> = store.documents()?.into_iter().collect();
    for name in stored.keys() {
        if !wanted.iter().any(|(n, _)| n == name) {
            store.remove_document(name)?;
            report.removed += 1;
        }
    }
    let mut p = Progress { docs_total: texts.len(), bytes_total: texts.iter().map(|t| t.2.len() as u64).sum(), ..Default::default() };
    for (name, sha, text) in &texts {
        if cancel.load(Ordering::Relaxed) {
            bail!(cancelled(&partial));
        }
        if stored.get(name) != Some(sha) {
            p.current = name.clone();
            progress(&p);
            // Progress within a long document, segment by segment.
            let base = p.clone();
            let opts = RouteOptions { mode: req.mode, k: req.k, segment_len: id.settings.segment_len, cancel: Some(cancel) };
            let doc = match route_document(req.model, req.adapter, text, &opts, |d, t| {
                let mut q = base.clone();
                q.bytes_done += text.len() as u64 * d as u64 / t.max(1) as u64;
                q.tokens_routed += d as u64;
                q.seconds = start.elapsed().as_secs_f64();
                progress(&q);
            }) {
                Ok(d) => d,
                Err(focus_core::Error::Cancelled) => bail!(cancelled(&partial)),
                Err(focus_core::Error::BadText(e)) => {
                    note(&format!("skipped {name}: {e}"));
                    report.skipped.push((name.clone(), e));
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("routing {name}")),
            };
            store.put_document(name, sha, text, &doc)?;
            p.tokens_routed += doc.len() as u64;
            report.routed += 1;
        } else {
            report.reused += 1;
        }
        p.docs_done += 1;
        p.bytes_done += text.len() as u64;
        p.seconds = start.elapsed().as_secs_f64();
        progress(&p);
    }
    report.tokens_routed = p.tokens_routed;
    report.route_seconds = start.elapsed().as_secs_f64();
    p.current = "summaries".into();
    progress(&p);
    let t0 = Instant::now();
    report.tokens = write_summaries(&mut store, &id, cancel).map_err(|e| if cancel.load(Ordering::Relaxed) { anyhow::anyhow!(cancelled(&partial)) } else { e })?;
    report.summary_seconds = t0.elapsed().as_secs_f64();
    report.documents = store.documents()?.len();
    drop(store);
    std::fs::rename(&partial, req.out).with_context(|| format!("cannot move {} to {}", partial.display(), req.out.display()))?;
    Ok(report)
}

fn sorted(v: &[(String, String)]) -> Vec<(String, String)> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn remove(p: &Path) -> Result<()> {
    std::fs::remove_file(p).with_context(|| format!("cannot remove {}", p.display()))?;
    let mut j = p.as_os_str().to_owned();
    j.push("-journal");
    let _ = std::fs::remove_file(PathBuf::from(j));
    Ok(())
}

fn cancelled(partial: &Path) -> String {
    format!("cancelled: the documents routed so far are kept in {}; run the same command again to resume", partial.display())
}
