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
    /// Relative to the corpus folder, with '/' separators: the document's name in the index
    /// (`doc_name`: the file name's bytes kept exactly).
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
}

/// A path relative to the corpus folder as a document's name: its components joined by '/',
/// each kept byte for byte: UTF-8 as it is, a backslash as `\\`, a byte that is not UTF-8 as
/// `\xNN`. Two different file names never get one name (`caf\xe9.txt` and `caf\xe8.txt`, which
/// a lossy conversion made one).
pub fn doc_name(rel: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for (i, c) in rel.components().enumerate() {
        if i > 0 {
            out.push('/');
        }
        for chunk in c.as_os_str().as_bytes().utf8_chunks() {
            out.push_str(&chunk.valid().replace('\\', "\\\\"));
            for b in chunk.invalid() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out
}

/// The texts of `dir` (recursively, hidden entries left out), by name, and the files skipped
/// with why. Files that are not UTF-8 text or too large are skipped, not fatal; no text at all
/// is. A link is followed only to a file inside `dir` (never to a folder: a link to one is
/// skipped, as is one leading out of the folder).
pub fn list_corpus(dir: &Path) -> Result<(Vec<CorpusFile>, Skipped)> {
    let meta = std::fs::metadata(dir).with_context(|| format!("cannot read the corpus folder {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a folder: index takes a folder of text files", dir.display());
    }
    let root = std::fs::canonicalize(dir).with_context(|| format!("cannot read the corpus folder {}", dir.display()))?;
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let e = e.with_context(|| format!("cannot list {}", d.display()))?;
            let p = e.path();
            if e.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let name = doc_name(p.strip_prefix(dir).unwrap_or(&p));
            let ft = e.file_type().with_context(|| format!("cannot read {}", p.display()))?;
            if ft.is_dir() {
                stack.push(p);
                continue;
            }
            if ft.is_symlink() {
                match std::fs::canonicalize(&p) {
                    Err(e) => {
                        skipped.push((name, format!("a link that leads nowhere ({e})")));
                        continue;
                    }
                    Ok(t) if !t.starts_with(&root) => {
                        skipped.push((name, format!("a link to {}, outside the corpus folder (links out of it are not followed)", t.display())));
                        continue;
                    }
                    Ok(t) if t.is_dir() => {
                        skipped.push((name, "a link to a folder (links to folders are not followed)".into()));
                        continue;
                    }
                    Ok(_) => {}
                }
            }
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() && m.len() > MAX_DOC_BYTES => {
                    skipped.push((name, format!("{} bytes, over the {} MiB a document may have: split it", m.len(), MAX_DOC_BYTES >> 20)))
                }
                Ok(m) if m.is_file() => files.push(CorpusFile { name, path: p, bytes: m.len() }),
                Ok(_) => skipped.push((name, "not a regular file (a FIFO, socket or device)".into())),
                Err(e) => skipped.push((name, format!("cannot be read ({e})"))),
            }
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    skipped.sort();
    Ok((files, skipped))
}

/// Reads one text of the corpus `root` as it is now: a regular file inside the folder (a file
/// swapped for a link out of it after the listing is refused), of at most `MAX_DOC_BYTES` (the
/// size is checked again when it is opened, and the read is capped), holding UTF-8 text.
pub fn read_document(path: &Path, root: &Path) -> focus_core::Result<String> {
    let f = focus_core::io::open_within(path, root, MAX_DOC_BYTES, "text")?;
    let bytes = focus_core::io::read_opened(f, path, MAX_DOC_BYTES, "text")?;
    focus_core::io::text::text_from_bytes(bytes, &path.display().to_string())
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
        read.push((name, focus_core::io::read_capped(&f, focus_core::focus::adapter::MAX_WEIGHTS_BYTES.max(focus_core::io::MAX_JSON_BYTES), "adapter file")?));
    }
    Ok(files_sha256(&read.iter().map(|(n, b)| (*n, b.as_slice())).collect::<Vec<_>>()))
}

/// The file a build writes, `OUT.partial` beside `OUT` (shortened with a hash when that name
/// and SQLite's `-journal` beside it would pass 255 bytes: `focus_core::io::short_name_within`).
pub fn partial_path(out: &Path) -> PathBuf {
    out.with_file_name(sqlite_name(out.file_name().unwrap_or_default(), "", ".partial"))
}

/// `prefix + name + suffix` as the name of an SQLite file: short enough for its `-journal`.
pub fn sqlite_name(name: &std::ffi::OsStr, prefix: &str, suffix: &str) -> std::ffi::OsString {
    focus_core::io::short_name_within(name, prefix, suffix, focus_core::io::NAME_MAX - "-journal".len())
}

/// Checks an index's output before anything is loaded: `out` absent or a regular file (a
/// device, FIFO or folder there is refused, never replaced), its folder there and a folder
/// (`io::check_target` names it: a missing folder was reported as "X.partial is not a readable
/// Focus Lens index"), and its `.partial` absent or a regular file (a link there could lead to
/// another program's database).
pub fn check_out(out: &Path) -> Result<()> {
    focus_core::io::check_target(out).map_err(|e| anyhow::anyhow!("{e}"))?;
    let partial = partial_path(out);
    match std::fs::symlink_metadata(&partial) {
        Ok(m) if m.is_symlink() => bail!("{} is a symbolic link; the unfinished index must be a regular file of its own: remove the link", partial.display()),
        Ok(m) if !m.is_file() => bail!("{} is not a regular file (a folder, FIFO or device?); the unfinished index must be a regular file: remove it", partial.display()),
        _ => Ok(()),
    }
}

/// Takes the build's lock: an exclusive lock on `OUT.partial` (created empty when absent),
/// held until the build ends, so that a second build of the same index says so instead of
/// failing inside SQLite. A build that holds it is waited for up to `LOCK_WAIT` (a cancelled
/// build in the app ends its current layer first), then refused. Returns the locked file and
/// whether this call created it.
fn lock_partial(partial: &Path, cancel: &AtomicBool, note: &mut dyn FnMut(&str)) -> Result<(std::fs::File, bool)> {
    let (f, created) = focus_core::io::open_own(partial).map_err(|e| {
        if matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) {
            anyhow::anyhow!("cannot write {}: its folder is not writable ({e})", partial.display())
        } else {
            anyhow::anyhow!("cannot write {}: {e}", partial.display())
        }
    })?;
    let t0 = Instant::now();
    let mut said = false;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok((f, created)),
            Err(std::fs::TryLockError::WouldBlock) if t0.elapsed() < LOCK_WAIT && !cancel.load(Ordering::Relaxed) => {
                if !said {
                    note(&format!("waiting for another build of this index to stop ({} is locked)", partial.display()));
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                bail!("another `focus-lens index` (or the app) is building this index now ({} is locked): wait for it to finish, or stop it first", partial.display())
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e).with_context(|| format!("cannot lock {}", partial.display())),
        }
    }
}

/// How long a build waits for another build of the same index to let go of it.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

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
    check_out(req.out)?;
    let (files, skipped) = list_corpus(req.corpus)?;
    for (n, why) in &skipped {
        note(&format!("skipped {n}: {why}"));
    }
    let id = req.identity()?;
    // A first pass hashes every text (one in memory at a time): a file that is not text is
    // skipped, and the hashes say what is new. Texts are read again, one by one, to be routed.
    let mut entries: Vec<(String, PathBuf, String, u64)> = Vec::new();
    let mut skipped = skipped;
    for f in &files {
        match read_document(&f.path, req.corpus) {
            Ok(t) => entries.push((f.name.clone(), f.path.clone(), format!("{:x}", Sha256::digest(t.as_bytes())), t.len() as u64)),
            Err(e) => {
                note(&format!("skipped {}: {e}", f.name));
                skipped.push((f.name.clone(), e.to_string()));
            }
        }
    }
    if entries.is_empty() {
        let first = skipped.first().map(|(n, w)| format!(" ({} skipped; first: {n}: {w})", skipped.len())).unwrap_or_default();
        bail!("no text to index in {}{first}", req.corpus.display());
    }
    let wanted: Vec<(String, String)> = entries.iter().map(|(n, _, s, _)| (n.clone(), s.clone())).collect();
    let partial = partial_path(req.out);
    let mut report = BuildReport {
        index: req.out.to_path_buf(),
        documents: entries.len(),
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
    let partial_there = std::fs::symlink_metadata(&partial).is_ok_and(|m| m.len() > 0);
    if !partial_there && req.out.exists() {
        if let Ok(done) = Store::open(req.out) {
            if done.complete() && done.identity().ok().flatten().is_some_and(|d| d.same_routing(&id)) && done.documents().is_ok_and(|d| d == sorted(&wanted)) {
                report.up_to_date = true;
                report.reused = entries.len();
                report.tokens = done.meta_value("tokens")?.parse().unwrap_or(0);
                return Ok(report);
            }
        }
    }
    // One build at a time: the lock is held until the finished file is in place.
    let (lock, created) = lock_partial(&partial, cancel, &mut note)?;
    let had_partial = !created && lock.metadata().with_context(|| format!("cannot read {}", partial.display()))?.len() > 0;
    // Resume the partial file, or start from the finished one, when their routing is the same.
    if had_partial {
        let keep = Store::create(&partial).ok().and_then(|s| s.identity().ok().flatten()).is_some_and(|d| d.same_routing(&id));
        if keep {
            note(&format!("resuming {}", partial.display()));
        } else {
            note(&format!("{} was built with another model, adapter or settings (or is damaged): starting a new index", partial.display()));
            clear(&partial, &lock)?;
        }
    } else {
        clear(&partial, &lock)?;
        if req.out.exists() {
            let reuse = Store::open(req.out).ok().and_then(|s| s.identity().ok().flatten()).is_some_and(|d| d.same_routing(&id));
            if reuse {
                std::fs::copy(req.out, &partial).with_context(|| format!("cannot copy {} to {}", req.out.display(), partial.display()))?;
                note(&format!("updating {}", req.out.display()));
            } else {
                note(&format!("{} was built with another model, adapter or settings (or is damaged): starting a new index (it is replaced when the new one is finished)", req.out.display()));
            }
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
    let mut p = Progress { docs_total: entries.len(), bytes_total: entries.iter().map(|e| e.3).sum(), ..Default::default() };
    for (name, path, sha, len) in &entries {
        if cancel.load(Ordering::Relaxed) {
            bail!(cancelled(&partial));
        }
        if stored.get(name) != Some(sha) {
            // Read again as it is now (checked again: a regular file inside the corpus folder,
            // within the size limit); only this one text is in memory.
            let text = match read_document(path, req.corpus) {
                Ok(t) => t,
                Err(e) => {
                    note(&format!("skipped {name}: {e}"));
                    report.skipped.push((name.clone(), e.to_string()));
                    continue;
                }
            };
            let sha = format!("{:x}", Sha256::digest(text.as_bytes()));
            p.current = name.clone();
            progress(&p);
            // Progress within a long document, segment by segment.
            let base = p.clone();
            let opts = RouteOptions { mode: req.mode, k: req.k, segment_len: id.settings.segment_len, cancel: Some(cancel) };
            let doc = match route_document(req.model, req.adapter, &text, &opts, |d, t| {
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
            store.put_document(name, &sha, &text, &doc)?;
            p.tokens_routed += doc.len() as u64;
            report.routed += 1;
        } else {
            report.reused += 1;
        }
        p.docs_done += 1;
        p.bytes_done += len;
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
    // `out` was checked at the start; checked again just before it is replaced.
    check_out(req.out)?;
    std::fs::rename(&partial, req.out).with_context(|| format!("cannot move {} to {}", partial.display(), req.out.display()))?;
    drop(lock);
    Ok(report)
}

/// Empties the unfinished file (held locked as `lock`) for a new index, and removes a journal
/// a killed run left beside it (it would be rolled back into the new file).
fn clear(partial: &Path, lock: &std::fs::File) -> Result<()> {
    let mut j = partial.as_os_str().to_owned();
    j.push("-journal");
    match std::fs::remove_file(PathBuf::from(&j)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", Path::new(&j).display())),
    }
    lock.set_len(0).with_context(|| format!("cannot empty {}", partial.display()))
}

fn sorted(v: &[(String, String)]) -> Vec<(String, String)> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn cancelled(partial: &Path) -> String {
    format!("cancelled: the documents routed so far are kept in {}; run the same command again to resume", partial.display())
}
