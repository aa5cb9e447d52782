//! `focus-lens bench centroids`: how long the Centroids view's queries take on an index, and (with
//! `scale_to`) on a larger one made of its documents repeated, so that the query times at a
//! million tokens can be measured without routing a million tokens first. The summaries of the
//! larger index are written by the build's own code (`summary::write_summaries`) and timed too.

use super::query::Index;
use super::store::Store;
use super::summary::write_summaries;
use anyhow::{bail, Result};
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
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Timing { query: query.into(), calls: ms.len(), median_ms: at(0.5), p95_ms: at(0.95), max_ms: at(1.0) }
}

/// Copies the documents of `source` (a finished or partial index) into `scratch` under new names
/// (`copyN/NAME`; one copy keeps them) until it holds at least `tokens` tokens, and writes its summaries; returns the
/// seconds the summaries took.
pub fn scale(source: &Path, scratch: &Path, tokens: u64) -> Result<f64> {
    let src = Store::open(source)?;
    let Some(id) = src.identity()? else { bail!("{} has no identity: not an index", source.display()) };
    let mut docs = Vec::new();
    src.for_each_document(id.n_layers, id.groups, id.settings.k, |name, text, doc| {
        docs.push((name.to_string(), text.to_string(), doc));
        Ok(())
    })?;
    let per_copy: u64 = docs.iter().map(|d| d.2.len() as u64).sum();
    if per_copy == 0 {
        bail!("{} holds no routed document yet", source.display());
    }
    if scratch.exists() {
        std::fs::remove_file(scratch)?;
    }
    let mut out = Store::create(scratch)?;
    out.set_meta("identity", &serde_json::to_string(&id)?)?;
    let copies = tokens.div_ceil(per_copy);
    for c in 0..copies {
        for (name, text, doc) in &docs {
            // One copy keeps the names (a finished copy of a partial index).
            let n = if copies == 1 { name.clone() } else { format!("copy{c:03}/{name}") };
            out.put_document(&n, "scaled", text, doc)?;
        }
    }
    let t = Instant::now();
    write_summaries(&mut out, &id, &AtomicBool::new(false))?;
    Ok(t.elapsed().as_secs_f64())
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
        file_bytes: std::fs::metadata(path)?.len(),
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
