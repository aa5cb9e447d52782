//! The index file: one SQLite database.
//!
//! Why SQLite: one file a user can copy, transactions (each document is committed on its own, so
//! a killed or cancelled build keeps every finished document and resumes after it), indexed
//! lookups, and a bundled C build of about a minute; DuckDB's bundled build is far heavier and
//! Parquet would need a transaction scheme of our own.
//!
//! Layout. Per document the raw routing (what a query never scans):
//! - `documents(id, path, sha256, bytes, text, ids, offsets, categories)`: the text and its
//!   tokens (little-endian blobs);
//! - `routing(doc, layer, groups, memberships)`: per token its top-k groups (u8) and their
//!   memberships (f32).
//!
//! And the per-centroid summaries written once at the end of a build, so that every GUI query
//! is a primary-key or index lookup of a few hundred rows at most, whatever the corpus size:
//! - `centroids(layer, grp, ...)`: members, held, histogram, category counts, auto-label and its
//!   evidence, the most over-represented tokens;
//! - `examples(layer, grp, rank, ...)`: the top examples with their context;
//! - `token_groups(layer, token, grp, count)`: members per token (make-up, search), indexed both
//!   by token and by group;
//! - `vocab(token, text, count)`: each token's text and corpus count (the base rate);
//! - `categories(category, name, count)`: the corpus's category counts;
//! - `comembership(la, ga, lb, gb, count)`: tokens in both centroids (neighbours).
//!
//! `meta(key, value)` holds the format, the model, adapter and settings, and whether the
//! summaries are written (`complete`).

use anyhow::{bail, Context, Result};
use focus_core::index::{DocRouting, IndexSettings};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

pub const FORMAT: &str = "focus-lens-index";
pub const FORMAT_VERSION: u32 = 1;

/// What an index was built from; two builds with equal `Identity` share documents.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub model: String,
    pub model_fingerprint: String,
    pub adapter: String,
    /// sha256 of the adapter's files.
    pub adapter_sha256: String,
    pub n_layers: usize,
    pub groups: usize,
    pub settings: IndexSettings,
}

impl Identity {
    /// Whether documents routed under `other` may be reused here (the adapter's path may differ,
    /// its contents may not).
    pub fn same_routing(&self, other: &Identity) -> bool {
        self.model_fingerprint == other.model_fingerprint
            && self.adapter_sha256 == other.adapter_sha256
            && self.n_layers == other.n_layers
            && self.groups == other.groups
            && self.settings == other.settings
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, sha256 TEXT NOT NULL,
    bytes INTEGER NOT NULL, tokens INTEGER NOT NULL, text TEXT NOT NULL, ids BLOB NOT NULL, offsets BLOB NOT NULL, categories BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS routing(doc INTEGER NOT NULL, layer INTEGER NOT NULL, groups BLOB NOT NULL, memberships BLOB NOT NULL,
    PRIMARY KEY(doc, layer));
";

pub const SUMMARY_SCHEMA: &str = "
DROP TABLE IF EXISTS centroids; DROP TABLE IF EXISTS examples; DROP TABLE IF EXISTS token_groups;
DROP TABLE IF EXISTS vocab; DROP TABLE IF EXISTS categories; DROP TABLE IF EXISTS comembership;
CREATE TABLE centroids(layer INTEGER NOT NULL, grp INTEGER NOT NULL, members INTEGER NOT NULL, held INTEGER NOT NULL,
    held_mass REAL NOT NULL, label TEXT NOT NULL, rule TEXT NOT NULL, evidence TEXT NOT NULL, histogram TEXT NOT NULL,
    by_category TEXT NOT NULL, lifted TEXT NOT NULL, PRIMARY KEY(layer, grp)) WITHOUT ROWID;
CREATE TABLE examples(layer INTEGER NOT NULL, grp INTEGER NOT NULL, rank INTEGER NOT NULL, doc INTEGER NOT NULL, pos INTEGER NOT NULL,
    membership REAL NOT NULL, left TEXT NOT NULL, token TEXT NOT NULL, right TEXT NOT NULL, PRIMARY KEY(layer, grp, rank)) WITHOUT ROWID;
CREATE TABLE token_groups(layer INTEGER NOT NULL, token INTEGER NOT NULL, grp INTEGER NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY(layer, token, grp)) WITHOUT ROWID;
CREATE TABLE vocab(token INTEGER PRIMARY KEY, text TEXT NOT NULL, count INTEGER NOT NULL);
CREATE TABLE categories(category INTEGER PRIMARY KEY, name TEXT NOT NULL, count INTEGER NOT NULL);
CREATE TABLE comembership(la INTEGER NOT NULL, ga INTEGER NOT NULL, lb INTEGER NOT NULL, gb INTEGER NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY(la, ga, lb, gb)) WITHOUT ROWID;
";

/// Indexes made after the bulk insert (faster than keeping them up to date row by row).
pub const SUMMARY_INDEXES: &str = "
CREATE INDEX token_groups_by_group ON token_groups(layer, grp, count DESC);
CREATE INDEX token_groups_by_token ON token_groups(token, layer);
CREATE INDEX vocab_by_text ON vocab(text);
CREATE INDEX vocab_by_trimmed ON vocab(trim(text, ' '||char(9)||char(10)||char(13)));
";

/// An index file open for reading or building.
pub struct Store {
    pub conn: Connection,
    pub path: PathBuf,
}

/// One clear sentence for any failure to read `path` as an index.
fn not_an_index(path: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{} is not a readable Focus Lens index ({why}); rebuild it with `focus-lens index`", path.display())
}

impl Store {
    /// Opens an existing index read-only, checking that it is whole: an SQLite file whose pages are
    /// all there (a truncated copy fails here, not in a later query), of this format.
    pub fn open(path: &Path) -> Result<Store> {
        let len = std::fs::metadata(path).with_context(|| format!("cannot read the index {}", path.display()))?.len();
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|e| not_an_index(path, e))?;
        let store = Store { conn, path: path.to_path_buf() };
        store.check_whole(len)?;
        Ok(store)
    }

    fn check_whole(&self, len: u64) -> Result<()> {
        let path = &self.path;
        let pages: (i64, i64) = self
            .conn
            .query_row("SELECT page_count, page_size FROM pragma_page_count, pragma_page_size", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| not_an_index(path, e))?;
        if (pages.0 * pages.1) as u64 > len {
            return Err(not_an_index(path, format!("truncated: {len} bytes of {}", pages.0 * pages.1)));
        }
        let format: Option<String> =
            self.conn.query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| r.get(0)).optional().map_err(|e| not_an_index(path, e))?;
        if format.as_deref() != Some(FORMAT) {
            return Err(not_an_index(path, "no focus-lens-index format marker"));
        }
        let version: u32 = self.meta_value("format_version")?.parse().map_err(|_| not_an_index(path, "bad format_version"))?;
        if version != FORMAT_VERSION {
            bail!("{} is a Focus Lens index of format version {version}; this build reads version {FORMAT_VERSION}: rebuild it", path.display());
        }
        Ok(())
    }

    /// Creates (or reopens, to resume) an index being built.
    pub fn create(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|e| not_an_index(path, e))?;
        conn.execute_batch(SCHEMA).map_err(|e| not_an_index(path, e))?;
        conn.execute("INSERT OR IGNORE INTO meta VALUES('format', ?1)", [FORMAT])?;
        conn.execute("INSERT OR IGNORE INTO meta VALUES('format_version', ?1)", [FORMAT_VERSION.to_string()])?;
        let store = Store { conn, path: path.to_path_buf() };
        store.check_whole(std::fs::metadata(path)?.len())?;
        Ok(store)
    }

    pub fn meta_value(&self, key: &str) -> Result<String> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| not_an_index(&self.path, e))?
            .ok_or_else(|| not_an_index(&self.path, format!("no {key} in its meta table")))
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES(?1, ?2)", [key, value])?;
        Ok(())
    }

    pub fn identity(&self) -> Result<Option<Identity>> {
        let v: Option<String> = self.conn.query_row("SELECT value FROM meta WHERE key = 'identity'", [], |r| r.get(0)).optional()?;
        v.map(|s| serde_json::from_str(&s).map_err(|e| not_an_index(&self.path, format!("identity: {e}")))).transpose()
    }

    /// Whether the summaries of the current documents are written.
    pub fn complete(&self) -> bool {
        self.meta_value("complete").is_ok_and(|v| v == "1")
    }

    /// (path, sha256) of every stored document, by path.
    pub fn documents(&self) -> Result<Vec<(String, String)>> {
        let mut st = self.conn.prepare("SELECT path, sha256 FROM documents ORDER BY path")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Stores one routed document in one transaction (replacing a stored one of the same path),
    /// and marks the summaries stale.
    pub fn put_document(&mut self, path: &str, sha256: &str, text: &str, doc: &DocRouting) -> Result<()> {
        let tx = self.conn.transaction()?;
        delete_document(&tx, path)?;
        tx.execute(
            "INSERT INTO documents(path, sha256, bytes, tokens, text, ids, offsets, categories) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![path, sha256, text.len() as i64, doc.len() as i64, text, doc.ids_bytes(), doc.offsets_bytes(), doc.categories_bytes()],
        )?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx.prepare("INSERT INTO routing(doc, layer, groups, memberships) VALUES(?1, ?2, ?3, ?4)")?;
            for (l, layer) in doc.layers.iter().enumerate() {
                st.execute(params![id, l as i64, layer.groups, layer.memberships_bytes()])?;
            }
        }
        tx.execute("INSERT OR REPLACE INTO meta VALUES('complete', '0')", [])?;
        tx.commit()?;
        Ok(())
    }

    pub fn remove_document(&mut self, path: &str) -> Result<()> {
        let tx = self.conn.transaction()?;
        delete_document(&tx, path)?;
        tx.execute("INSERT OR REPLACE INTO meta VALUES('complete', '0')", [])?;
        tx.commit()?;
        Ok(())
    }

    /// Visits every stored document in path order: (path, text, routing), checked against the
    /// index's K and layer count.
    pub fn for_each_document(&self, n_layers: usize, groups: usize, k: usize, mut f: impl FnMut(&str, &str, DocRouting) -> Result<()>) -> Result<()> {
        let mut docs = self.conn.prepare("SELECT id, path, text, ids, offsets, categories FROM documents ORDER BY path")?;
        let mut layers = self.conn.prepare("SELECT layer, groups, memberships FROM routing WHERE doc = ?1 ORDER BY layer")?;
        let mut rows = docs.query([])?;
        while let Some(r) = rows.next()? {
            let (id, path, text): (i64, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let (ids, offsets, cats): (Vec<u8>, Vec<u8>, Vec<u8>) = (r.get(3)?, r.get(4)?, r.get(5)?);
            let ls: Vec<(i64, Vec<u8>, Vec<u8>)> = layers.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<rusqlite::Result<_>>()?;
            if ls.len() != n_layers || ls.iter().enumerate().any(|(i, l)| l.0 != i as i64) {
                return Err(not_an_index(&self.path, format!("document {path} has {} of {n_layers} layers", ls.len())));
            }
            let ls: Vec<(Vec<u8>, Vec<u8>)> = ls.into_iter().map(|(_, g, m)| (g, m)).collect();
            let doc = DocRouting::from_bytes(&ids, &offsets, &cats, k, &ls).and_then(|d| d.check(groups).map(|_| d)).map_err(|e| not_an_index(&self.path, format!("{path}: {e}")))?;
            if doc.offsets.iter().any(|&(s, e)| s > e || e as usize > text.len()) {
                return Err(not_an_index(&self.path, format!("{path}: a token's byte range lies outside its text")));
            }
            f(&path, &text, doc)?;
        }
        Ok(())
    }
}

fn delete_document(tx: &rusqlite::Transaction, path: &str) -> Result<()> {
    let old: Option<i64> = tx.query_row("SELECT id FROM documents WHERE path = ?1", [path], |r| r.get(0)).optional()?;
    if let Some(id) = old {
        tx.execute("DELETE FROM routing WHERE doc = ?1", [id])?;
        tx.execute("DELETE FROM documents WHERE id = ?1", [id])?;
    }
    Ok(())
}
