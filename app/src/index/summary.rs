//! The per-centroid summaries of an index, computed from its stored documents (in path order, so
//! a resumed build and a single run write the same tables) and written in one transaction.

use super::store::{Identity, Store};
use anyhow::{bail, Result};
use focus_core::analysis::categories::Category;
use focus_core::index::{auto_label, label::lifted_tokens, CorpusStats};
use rusqlite::params;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Characters of context kept on each side of an example token.
pub const CONTEXT_CHARS: usize = 60;
/// Over-represented tokens kept per centroid.
pub const LIFTED_TOKENS: usize = 20;

/// `text` around bytes `start..end`: up to `CONTEXT_CHARS` characters before and after.
pub fn context(text: &str, start: usize, end: usize) -> (String, String, String) {
    let start = floor_char(text, start.min(text.len()));
    let end = floor_char(text, end.min(text.len())).max(start);
    let left: String = text[..start].chars().rev().take(CONTEXT_CHARS).collect::<Vec<_>>().into_iter().rev().collect();
    let right: String = text[end..].chars().take(CONTEXT_CHARS).collect();
    (left, text[start..end].to_string(), right)
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A document as example rows need it: its id in the store, its text and its tokens' byte ranges.
type ExampleSource = (i64, String, Vec<(u32, u32)>);

/// Reads every document, accumulates the corpus statistics and writes the summary tables;
/// returns the corpus's token count.
pub fn write_summaries(store: &mut Store, id: &Identity, cancel: &AtomicBool) -> Result<u64> {
    let k = id.settings.k;
    check_memory(&store.path, id)?;
    let mut stats = CorpusStats::new(id.n_layers, id.groups, k);
    let mut vocab: HashMap<u32, String> = HashMap::new();
    // Per document the bits an example row needs: its id in the store, text and offsets.
    let mut docs: Vec<ExampleSource> = Vec::new();
    let ids: HashMap<String, i64> = store.sql(|c| c.prepare("SELECT path, id FROM documents")?.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())?;
    let store_path = store.path.clone();
    store.for_each_document(id.n_layers, id.groups, k, |path, text, doc| {
        if cancel.load(Ordering::Relaxed) {
            bail!("cancelled");
        }
        for (i, &t) in doc.ids.iter().enumerate() {
            vocab.entry(t).or_insert_with(|| {
                let (s, e) = doc.offsets[i];
                text.get(s as usize..e as usize).unwrap_or("").to_string()
            });
        }
        stats.add(&doc);
        let Some(&doc_id) = ids.get(path) else { bail!("{}: document {path} vanished while it was read", store_path.display()) };
        docs.push((doc_id, text.to_string(), doc.offsets.clone()));
        Ok(())
    })?;
    let text_of = |t: u32| vocab.get(&t).cloned().unwrap_or_default();
    let write = |store: &mut Store| -> Result<(), WriteError> {
        let tx = store.conn.transaction()?;
        tx.execute_batch(super::store::SUMMARY_SCHEMA)?;
        {
            let mut cst = tx.prepare("INSERT INTO centroids VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")?;
            let mut est = tx.prepare("INSERT INTO examples VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?;
            let mut tst = tx.prepare("INSERT INTO token_groups VALUES(?1, ?2, ?3, ?4)")?;
            for (l, layer) in stats.centroids.iter().enumerate() {
                for (g, c) in layer.iter().enumerate() {
                    let label = auto_label(&stats, l, g, text_of);
                    let lifted: Vec<(u32, u64, f64)> = lifted_tokens(c, &stats).into_iter().take(LIFTED_TOKENS).collect();
                    cst.execute(params![
                        l as i64,
                        g as i64,
                        c.members as i64,
                        c.held as i64,
                        c.held_mass,
                        label.label,
                        label.rule,
                        serde_json::to_string(&label.evidence)?,
                        serde_json::to_string(&c.histogram)?,
                        serde_json::to_string(&c.by_category)?,
                        serde_json::to_string(&lifted)?,
                    ])?;
                    for (rank, e) in c.examples.iter().enumerate() {
                        let (doc_id, text, offsets) = &docs[e.doc as usize];
                        let (s, en) = offsets[e.pos as usize];
                        let (left, tok, right) = context(text, s as usize, en as usize);
                        est.execute(params![l as i64, g as i64, rank as i64, doc_id, e.pos as i64, e.membership as f64, left, tok, right])?;
                    }
                    for (&t, &n) in &c.token_counts {
                        tst.execute(params![l as i64, t as i64, g as i64, n as i64])?;
                    }
                }
            }
            let mut vst = tx.prepare("INSERT INTO vocab VALUES(?1, ?2, ?3)")?;
            for (&t, &n) in &stats.token_totals {
                vst.execute(params![t as i64, text_of(t), n as i64])?;
            }
            let mut kst = tx.prepare("INSERT INTO categories VALUES(?1, ?2, ?3)")?;
            for (i, c) in Category::ALL.iter().enumerate() {
                kst.execute(params![i as i64, c.name(), stats.category_totals[i] as i64])?;
            }
            let mut mst = tx.prepare("INSERT INTO comembership VALUES(?1, ?2, ?3, ?4, ?5)")?;
            for la in 0..id.n_layers {
                for ga in 0..id.groups {
                    for lb in 0..id.n_layers {
                        for gb in 0..id.groups {
                            let n = stats.comembers(la, ga, lb, gb);
                            if n > 0 && la != lb {
                                mst.execute(params![la as i64, ga as i64, lb as i64, gb as i64, n as i64])?;
                            }
                        }
                    }
                }
            }
        }
        tx.execute_batch(super::store::SUMMARY_INDEXES)?;
        for (key, value) in [("tokens", stats.tokens.to_string()), ("documents", stats.documents.to_string()), ("complete", "1".to_string())] {
            tx.execute("INSERT OR REPLACE INTO meta VALUES(?1, ?2)", params![key, value])?;
        }
        tx.commit()?;
        Ok(())
    };
    write(store).map_err(|e| match e {
        WriteError::Sql(e) => store.write_error(e),
        WriteError::Json(e) => anyhow::anyhow!("{}: {e}", store.path.display()),
    })?;
    Ok(stats.tokens)
}

/// What writing the summary tables can fail on.
enum WriteError {
    Sql(rusqlite::Error),
    Json(serde_json::Error),
}

impl From<rusqlite::Error> for WriteError {
    fn from(e: rusqlite::Error) -> Self {
        WriteError::Sql(e)
    }
}

impl From<serde_json::Error> for WriteError {
    fn from(e: serde_json::Error) -> Self {
        WriteError::Json(e)
    }
}

/// Refuses, before it is allocated, statistics larger than the memory available: their size
/// grows with the square of layers x groups (1,000 layers x 64 groups: 33 GB), which an
/// untrusted index's identity may claim.
pub fn check_memory(path: &std::path::Path, id: &Identity) -> Result<()> {
    use focus_core::model::memory;
    let need = CorpusStats::bytes_needed(id.n_layers, id.groups);
    let avail = memory::available();
    match (need, &avail) {
        (None, _) => bail!("{}: its {} layers x {} groups make statistics too large to count", path.display(), id.n_layers, id.groups),
        (Some(n), Some(a)) if n > a.bytes => bail!(
            "not enough memory: the summaries of {} ({} layers x {} groups) need about {} for their statistics, but only {} is available ({})",
            path.display(),
            id.n_layers,
            id.groups,
            memory::human(n),
            memory::human(a.bytes),
            a.source
        ),
        _ => Ok(()),
    }
}

