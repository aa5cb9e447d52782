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
use std::sync::atomic::{AtomicI64, Ordering};

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
    /// Declared first: dropped (closed) before the budget its progress handler points at.
    pub conn: Connection,
    pub path: PathBuf,
    /// SQLite's virtual-machine steps (in units of `STEPS_PER_CALL`) the current query may still
    /// take: a hostile index is a program SQLite runs, so no query may run without end.
    budget: Box<AtomicI64>,
}

/// The most layers and groups an index may claim: far above any model (the CLI's --layer
/// takes 0..4096) and groups are stored as bytes.
pub const MAX_LAYERS: usize = 4096;
pub const MAX_GROUPS: usize = 256;

/// The progress handler runs every `STEPS_PER_CALL` virtual-machine steps; `QUERY_BUDGET` calls
/// (10^9 steps, seconds of work) end a query: far more than any query of a real index takes (a
/// dashboard of a 1.4M-token index is about 10^5 steps per query).
const STEPS_PER_CALL: i32 = 10_000;
pub const QUERY_BUDGET: i64 = 100_000;

/// The tables an index holds; anything else of another kind (a view, a trigger, a virtual
/// table) is refused before a query runs.
const TABLES: [&str; 9] = ["meta", "documents", "routing", "centroids", "examples", "token_groups", "vocab", "categories", "comembership"];

/// One clear sentence for any failure to read `path` as an index.
pub fn not_an_index(path: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{} is not a readable Focus Lens index ({why}); rebuild it with `focus-lens index`", path.display())
}

/// An SQLite error while reading `path`, in words: which file, and what is wrong with it.
pub fn sql_error(path: &Path, e: rusqlite::Error) -> anyhow::Error {
    use rusqlite::ffi::ErrorCode;
    match &e {
        rusqlite::Error::QueryReturnedNoRows => not_an_index(path, "a row its tables refer to is missing"),
        rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::OperationInterrupted => {
            not_an_index(path, format!("a query did not finish within its budget of {} steps", QUERY_BUDGET * STEPS_PER_CALL as i64))
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::DatabaseBusy || f.code == ErrorCode::DatabaseLocked => {
            anyhow::anyhow!("{} is locked by another program (a build writing it?); try again when it is done", path.display())
        }
        rusqlite::Error::IntegralValueOutOfRange(i, v) => not_an_index(path, format!("a count or number out of range: {v} in column {i}")),
        rusqlite::Error::InvalidColumnType(i, name, t) => not_an_index(path, format!("column {i} ({name}) holds a value of type {t}")),
        _ => not_an_index(path, e),
    }
}

/// Column `i` as a count: a negative or hostile value is an error, not a wrap to 2^64 - 5.
pub fn get_u64(r: &rusqlite::Row, i: usize) -> rusqlite::Result<u64> {
    let v: i64 = r.get(i)?;
    u64::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, v))
}

/// Column `i` as an index (a layer, group, rank or position).
pub fn get_usize(r: &rusqlite::Row, i: usize) -> rusqlite::Result<usize> {
    let v: i64 = r.get(i)?;
    usize::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, v))
}

unsafe extern "C" fn progress(budget: *mut std::ffi::c_void) -> std::ffi::c_int {
    // SAFETY: `budget` is the `Box<AtomicI64>` of the `Store` whose connection calls this; the
    // connection is closed before the box is dropped.
    let b = unsafe { &*(budget as *const AtomicI64) };
    (b.fetch_sub(1, Ordering::Relaxed) <= 0) as std::ffi::c_int
}

/// Checks, by name and on the opened file, that `path` is a regular file (a FIFO would block
/// SQLite's open forever, a device never ends); returns its length.
fn check_file(path: &Path) -> Result<u64> {
    let f = focus_core::io::open_input(path, u64::MAX, "corpus index").map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(f.metadata().with_context(|| format!("cannot read the index {}", path.display()))?.len())
}

impl Store {
    fn wrap(conn: Connection, path: &Path, read_only: bool) -> Result<Store> {
        let store = Store { conn, path: path.to_path_buf(), budget: Box::new(AtomicI64::new(QUERY_BUDGET)) };
        let e = |e| sql_error(path, e);
        // Functions in the file's schema (a column's default, an index's expression) may only be
        // the innocuous ones; a reader waits a while for a build's commit instead of failing.
        store.conn.pragma_update(None, "trusted_schema", false).map_err(e)?;
        store.conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(e)?;
        if read_only {
            // SAFETY: the handle is this connection's, alive as long as `store`; the pointer is
            // the budget's box, which outlives the connection (field order).
            unsafe {
                let db = store.conn.handle();
                rusqlite::ffi::sqlite3_progress_handler(db, STEPS_PER_CALL, Some(progress), &*store.budget as *const AtomicI64 as *mut std::ffi::c_void);
                // No string or blob longer than 256 MiB is made (a document is at most 4 MiB).
                rusqlite::ffi::sqlite3_limit(db, rusqlite::ffi::SQLITE_LIMIT_LENGTH, 256 << 20);
            }
        }
        Ok(store)
    }

    /// Gives the next query (or queries) a fresh budget of `QUERY_BUDGET`.
    pub fn arm(&self) {
        self.budget.store(QUERY_BUDGET, Ordering::Relaxed);
    }

    /// Runs `f` on the connection with a fresh budget, its SQLite errors naming the file.
    pub fn sql<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.arm();
        f(&self.conn).map_err(|e| sql_error(&self.path, e))
    }

    /// Opens an existing index read-only, checking that it is whole: an SQLite file whose pages are
    /// all there (a truncated copy fails here, not in a later query), of this format, holding
    /// tables only (no view or trigger: code SQLite would run). `identity` checks the identity.
    pub fn open(path: &Path) -> Result<Store> {
        let len = check_file(path)?;
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|e| sql_error(path, e))?;
        let store = Store::wrap(conn, path, true)?;
        store.check_whole(len)?;
        Ok(store)
    }

    fn check_whole(&self, len: u64) -> Result<()> {
        let path = &self.path;
        let pages: (i64, i64) = self.sql(|c| c.query_row("SELECT page_count, page_size FROM pragma_page_count, pragma_page_size", [], |r| Ok((r.get(0)?, r.get(1)?))))?;
        if pages.0.saturating_mul(pages.1) as u64 > len {
            return Err(not_an_index(path, format!("truncated: {len} bytes of {}", pages.0.saturating_mul(pages.1))));
        }
        self.check_schema()?;
        let format: Option<String> = self.sql(|c| c.query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| r.get(0)).optional())?;
        if format.as_deref() != Some(FORMAT) {
            return Err(not_an_index(path, "no focus-lens-index format marker"));
        }
        let version: u32 = self.meta_value("format_version")?.parse().map_err(|_| not_an_index(path, "bad format_version"))?;
        if version != FORMAT_VERSION {
            bail!("{} is a Focus Lens index of format version {version}; this build reads version {FORMAT_VERSION}: rebuild it", path.display());
        }
        Ok(())
    }

    /// Every object of the file's schema is a plain table of an index's, or an index on one:
    /// a view (an endless recursive one never returns), a trigger or a virtual table is code or
    /// a module SQLite would run for us, and is refused.
    fn check_schema(&self) -> Result<()> {
        let objects: Vec<(String, String, String)> =
            self.sql(|c| c.prepare("SELECT type, name, coalesce(sql, '') FROM sqlite_schema")?.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect())?;
        for (ty, name, sql) in objects {
            let ok = match ty.as_str() {
                "table" => (TABLES.contains(&name.as_str()) || name.starts_with("sqlite_")) && !sql.trim_start().to_ascii_uppercase().starts_with("CREATE VIRTUAL"),
                "index" => true,
                _ => false,
            };
            if !ok {
                return Err(not_an_index(&self.path, format!("it holds the {ty} {}; an index holds its own tables only", focus_core::index::label::quoted(&name))));
            }
        }
        Ok(())
    }

    /// Creates (or reopens, to resume) an index being built. The file must be absent or a
    /// regular file (never a link: it could lead to another program's database) in an existing,
    /// writable folder.
    pub fn create(path: &Path) -> Result<Store> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_symlink() => bail!("{} is a symbolic link; the index being built must be a regular file of its own: remove the link", path.display()),
            Ok(m) if !m.is_file() => bail!("{} is not a regular file (a directory, FIFO or device?); the index must be a regular file", path.display()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_new_file(path)?,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
        let store = Store::wrap(conn, path, false)?;
        // A file left at the name is checked before anything is written to it.
        store.check_schema()?;
        store.conn.execute_batch(SCHEMA).map_err(|e| store.write_error(e))?;
        store.conn.execute("INSERT OR IGNORE INTO meta VALUES('format', ?1)", [FORMAT]).map_err(|e| store.write_error(e))?;
        store.conn.execute("INSERT OR IGNORE INTO meta VALUES('format_version', ?1)", [FORMAT_VERSION.to_string()]).map_err(|e| store.write_error(e))?;
        store.check_whole(std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len())?;
        Ok(store)
    }

    /// An error while writing the index, in words.
    pub fn write_error(&self, e: rusqlite::Error) -> anyhow::Error {
        use rusqlite::ffi::ErrorCode;
        match &e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ReadOnly => {
                anyhow::anyhow!("cannot write {}: it was removed or replaced while this build wrote it (another build of the same index?), or its folder is read-only", self.path.display())
            }
            rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::DiskFull => anyhow::anyhow!("cannot write {}: the disk is full", self.path.display()),
            rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::CannotOpen || f.code == ErrorCode::PermissionDenied => {
                anyhow::anyhow!("cannot write {}: {e} (is its folder writable?)", self.path.display())
            }
            _ => sql_error(&self.path, e),
        }
    }

    pub fn meta_value(&self, key: &str) -> Result<String> {
        self.sql(|c| c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional())?
            .ok_or_else(|| not_an_index(&self.path, format!("no {key} in its meta table")))
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES(?1, ?2)", [key, value]).map_err(|e| self.write_error(e))?;
        Ok(())
    }

    /// What the index was built from, checked before anything is sized by it: 1 to
    /// `MAX_LAYERS` layers, 1 to `MAX_GROUPS` groups, k within the groups, segments of at least
    /// one token.
    pub fn identity(&self) -> Result<Option<Identity>> {
        let v: Option<String> = self.sql(|c| c.query_row("SELECT value FROM meta WHERE key = 'identity'", [], |r| r.get(0)).optional())?;
        let Some(v) = v else { return Ok(None) };
        let id: Identity = serde_json::from_str(&v).map_err(|e| not_an_index(&self.path, format!("its identity: {e}")))?;
        let bad = |what: String| Err(not_an_index(&self.path, format!("its identity says {what}")));
        if !(1..=MAX_LAYERS).contains(&id.n_layers) {
            return bad(format!("{} layers; an index has 1 to {MAX_LAYERS}", id.n_layers));
        }
        if !(1..=MAX_GROUPS).contains(&id.groups) {
            return bad(format!("{} groups per layer; an index has 1 to {MAX_GROUPS}", id.groups));
        }
        if !(1..=id.groups).contains(&id.settings.k) {
            return bad(format!("top-k {} with {} groups; k must be 1 to {}", id.settings.k, id.groups, id.groups));
        }
        if id.settings.segment_len == 0 {
            return bad("segments of 0 tokens".into());
        }
        Ok(Some(id))
    }

    /// Whether the summaries of the current documents are written.
    pub fn complete(&self) -> bool {
        self.meta_value("complete").is_ok_and(|v| v == "1")
    }

    /// (path, sha256) of every stored document, by path.
    pub fn documents(&self) -> Result<Vec<(String, String)>> {
        self.sql(|c| c.prepare("SELECT path, sha256 FROM documents ORDER BY path")?.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
    }

    /// Stores one routed document in one transaction (replacing a stored one of the same path),
    /// and marks the summaries stale.
    pub fn put_document(&mut self, path: &str, sha256: &str, text: &str, doc: &DocRouting) -> Result<()> {
        let r = (|| -> rusqlite::Result<()> {
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
            tx.commit()
        })();
        r.map_err(|e| self.write_error(e))
    }

    pub fn remove_document(&mut self, path: &str) -> Result<()> {
        let r = (|| -> rusqlite::Result<()> {
            let tx = self.conn.transaction()?;
            delete_document(&tx, path)?;
            tx.execute("INSERT OR REPLACE INTO meta VALUES('complete', '0')", [])?;
            tx.commit()
        })();
        r.map_err(|e| self.write_error(e))
    }

    /// Visits every stored document in path order: (path, text, routing), checked against the
    /// index's K and layer count. Each document's reads get a fresh query budget.
    pub fn for_each_document(&self, n_layers: usize, groups: usize, k: usize, mut f: impl FnMut(&str, &str, DocRouting) -> Result<()>) -> Result<()> {
        let e = |e| sql_error(&self.path, e);
        self.arm();
        let mut docs = self.conn.prepare("SELECT id, path, text, ids, offsets, categories FROM documents ORDER BY path").map_err(e)?;
        let mut layers = self.conn.prepare("SELECT layer, groups, memberships FROM routing WHERE doc = ?1 ORDER BY layer").map_err(e)?;
        let mut rows = docs.query([]).map_err(e)?;
        loop {
            self.arm();
            let Some(r) = rows.next().map_err(e)? else { break };
            let (id, path, text): (i64, String, String) = (r.get(0).map_err(e)?, r.get(1).map_err(e)?, r.get(2).map_err(e)?);
            let (ids, offsets, cats): (Vec<u8>, Vec<u8>, Vec<u8>) = (r.get(3).map_err(e)?, r.get(4).map_err(e)?, r.get(5).map_err(e)?);
            let mut ls: Vec<(i64, Vec<u8>, Vec<u8>)> = Vec::new();
            for l in layers.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(e)? {
                // No more layers are read than the identity says (a hostile file may hold millions).
                if ls.len() > n_layers {
                    break;
                }
                ls.push(l.map_err(e)?);
            }
            if ls.len() != n_layers || ls.iter().enumerate().any(|(i, l)| l.0 != i as i64) {
                return Err(not_an_index(&self.path, format!("document {} has {} of {n_layers} layers", focus_core::index::label::quoted(&path), ls.len())));
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

/// Creates the new file `path` (empty: SQLite takes an empty file as a new database), saying
/// when its folder is missing or not writable, not that the file cannot be read as an index.
pub fn create_new_file(path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("cannot write {}: its folder {} does not exist", path.display(), dir.display()),
        Ok(m) if !m.is_dir() => bail!("cannot write {}: {} is not a folder", path.display(), dir.display()),
        _ => {}
    }
    match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) => {
            bail!("cannot write {}: its folder {} is not writable ({e})", path.display(), dir.display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot write {}", path.display())),
    }
}

fn delete_document(tx: &rusqlite::Transaction, path: &str) -> rusqlite::Result<()> {
    let old: Option<i64> = tx.query_row("SELECT id FROM documents WHERE path = ?1", [path], |r| r.get(0)).optional()?;
    if let Some(id) = old {
        tx.execute("DELETE FROM routing WHERE doc = ?1", [id])?;
        tx.execute("DELETE FROM documents WHERE id = ?1", [id])?;
    }
    Ok(())
}
