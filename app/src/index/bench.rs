//! `focus-lens bench centroids`: how long the Centroids view's queries take on an index, and (with
//! `scale_to`) on a larger one made of its documents repeated, so that the query times at a
//! million tokens can be measured without routing a million tokens first. The summaries of the
//! larger index are written by the build's own code (`summary::write_summaries`) and timed too.

use super::build::sqlite_name;
use super::query::Index;
use super::store::Store;
use super::summary::write_summaries;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub query: String,
    pub calls: usize,
    pub median_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub index: String,
    pub documents: u64,
    pub tokens: u64,
    pub layers: usize,
    pub groups: usize,
    pub file_bytes: u64,
    /// Writing the summaries of the scaled index (absent without `scale_to`).
    pub summary_seconds: Option<f64>,
    pub open_ms: f64,
    pub timings: Vec<Timing>,
}

fn timing(query: &str, mut ms: Vec<f64>) -> Timing {
    if ms.is_empty() {
        return Timing { query: query.into(), calls: 0, median_ms: 0.0, p95_ms: 0.0, max_ms: 0.0 };
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Timing { query: query.into(), calls: ms.len(), median_ms: at(0.5), p95_ms: at(0.95), max_ms: at(1.0) }
}

/// Copies the documents of `source` (a finished or partial index) into `scratch`, a new file,
/// under new names (`copyN/NAME`; one copy keeps them) until it holds at least `tokens` tokens,
/// and writes its summaries; returns the seconds the summaries took. The copy is written to a
/// temporary file beside `scratch` and put in place only when it is finished, and never over an
/// existing file (so never over `source`); the source is only read, a document at a time.
pub fn scale(source: &Path, scratch: &Path, tokens: u64) -> Result<f64> {
    check_scratch(scratch)?;
    let src = Store::open(source)?;
    let Some(id) = src.identity()? else { bail!("{} has no identity: not an index", source.display()) };
    // Refused before anything is read or written: statistics larger than the memory there is.
    super::summary::check_memory(source, &id)?;
    let mut per_copy = 0u64;
    src.for_each_document(id.n_layers, id.groups, id.settings.k, |_, _, doc| {
        per_copy += doc.len() as u64;
        Ok(())
    })?;
    if per_copy == 0 {
        bail!("{} holds no routed document yet", source.display());
    }
    let tmp = scratch.with_file_name(sqlite_name(scratch.file_name().unwrap_or_default(), ".", ".focus-tmp"));
    let (lock, _) = focus_core::io::open_own(&tmp).map_err(|e| anyhow!("cannot write {}: {e}", tmp.display()))?;
    lock.try_lock().map_err(|_| anyhow!("{} is being written by another `bench centroids`: wait for it, or use another --scratch", tmp.display()))?;
    let r = (|| -> Result<f64> {
        remove_journal(&tmp)?;
        lock.set_len(0).with_context(|| format!("cannot empty {}", tmp.display()))?;
        let mut out = Store::create(&tmp)?;
        out.set_meta("identity", &serde_json::to_string(&id)?)?;
        let copies = tokens.div_ceil(per_copy);
        for c in 0..copies {
            src.for_each_document(id.n_layers, id.groups, id.settings.k, |name, text, doc| {
                // One copy keeps the names (a finished copy of a partial index).
                let n = if copies == 1 { name.to_string() } else { format!("copy{c:03}/{name}") };
                out.put_document(&n, "scaled", text, &doc)
            })?;
        }
        let t = Instant::now();
        write_summaries(&mut out, &id, &AtomicBool::new(false))?;
        Ok(t.elapsed().as_secs_f64())
    })();
    let r = r.and_then(|secs| {
        // A hard link fails if `scratch` appeared meanwhile: nothing is ever replaced.
        std::fs::hard_link(&tmp, scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
        Ok(secs)
    });
    let _ = std::fs::remove_file(&tmp);
    let _ = remove_journal(&tmp);
    drop(lock);
    r
}

/// `--scratch` must name a new file in an existing folder: the scaled copy never replaces
/// anything (the index it reads above all).
pub fn check_scratch(scratch: &Path) -> Result<()> {
    if std::fs::symlink_metadata(scratch).is_ok() {
        let kind = if scratch.is_dir() { "a folder" } else { "a file" };
        bail!("--scratch {} is {kind} that already exists: give the name of a new file (bench centroids never replaces a file, least of all the index it reads)", scratch.display());
    }
    let dir = scratch.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!("--scratch {}: its folder {} does not exist", scratch.display(), dir.display());
    }
    Ok(())
}

fn remove_journal(db: &Path) -> Result<()> {
    let mut j = db.as_os_str().to_owned();
    j.push("-journal");
    match std::fs::remove_file(std::path::PathBuf::from(&j)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e).with_context(|| format!("cannot remove {}", Path::new(&j).display())),
        _ => Ok(()),
    }
}

/// Times every query the Centroids view makes on `path`: open, a layer's list, every centroid's
/// dashboard (`rows` rows), and searches for common tokens at one layer and at every layer.
pub fn bench(path: &Path, rows: usize, summary_seconds: Option<f64>) -> Result<BenchReport> {
    let t = Instant::now();
    let ix = Index::open(path)?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let (nl, k) = (ix.identity.n_layers, ix.identity.groups);
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let mut layer = Vec::new();
    let mut centroid = Vec::new();
    for l in 0..nl {
        layer.push(time(&mut || ix.layer(l).map(|_| ()))?);
        for g in 0..k {
            centroid.push(time(&mut || ix.centroid(l, g, rows).map(|_| ()))?);
        }
    }
    let mut one = Vec::new();
    let mut all = Vec::new();
    for q in [" of", " the", ",", ".", " and", "of", "the", "\n"] {
        one.push(time(&mut || ix.search(q, Some(nl / 3)).map(|_| ()))?);
        all.push(time(&mut || ix.search(q, None).map(|_| ()))?);
    }
    Ok(BenchReport {
        index: path.display().to_string(),
        documents: ix.documents,
        tokens: ix.tokens,
        layers: nl,
        groups: k,
        file_bytes: std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len(),
        summary_seconds,
        open_ms,
        timings: vec![
            timing("a layer's centroids", layer),
            timing(&format!("a centroid's dashboard ({rows} rows)"), centroid),
            timing("search one layer", one),
            timing("search every layer", all),
        ],
    })
}
