//! The corpus index reader (`focus-lens centroids`, the Centroids view, `bench centroids`) on an
//! untrusted SQLite file: arbitrary bytes, byte patches of a valid index, or a valid index with
//! arbitrary SQL edits (tables dropped, replaced by views, rows of any type and size, any
//! identity). Every open and query ends (no panic, hang or unbounded allocation), and every
//! error names the file. The reader's modules are compiled in from the app (`app/src/index`):
//! the app crate itself would bring its GUI along.
#![no_main]
#[path = "../common/mod.rs"]
mod common;

// The app's index modules as siblings at the crate root (their `super::store` is this one).
#[allow(dead_code)]
#[path = "../../app/src/index/query.rs"]
mod query;
#[allow(dead_code)]
#[path = "../../app/src/index/store.rs"]
mod store;
#[allow(dead_code)]
#[path = "../../app/src/index/summary.rs"]
mod summary;

use arbitrary::{Arbitrary, Unstructured};
use focus_core::index::{DocRouting, IndexSettings};
use query::Index;
use store::{Identity, Store};
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A valid index of one document (2 layers x 3 groups, k = 2), written by the build's own code.
fn template() -> &'static [u8] {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| {
        let p = common::scratch().join("template.focus-index");
        let _ = std::fs::remove_file(&p);
        let mut s = Store::create(&p).unwrap();
        let id = Identity {
            model: "tiny".into(),
            model_fingerprint: "f".into(),
            adapter: "a".into(),
            adapter_sha256: "s".into(),
            n_layers: 2,
            groups: 3,
            settings: IndexSettings { mode: "topk(k=2)".into(), k: 2, segment_len: 16 },
        };
        s.set_meta("identity", &serde_json::to_string(&id).unwrap()).unwrap();
        let text = "the king of the north";
        let ids: Vec<u8> = [1u32, 2, 3, 1, 4].iter().flat_map(|i| i.to_le_bytes()).collect();
        let offsets: Vec<u8> = [(0u32, 3u32), (3, 8), (8, 11), (11, 15), (15, 21)].iter().flat_map(|&(a, b)| a.to_le_bytes().into_iter().chain(b.to_le_bytes())).collect();
        let cats = vec![0u8; 5];
        let layer = |g: [u8; 10]| (g.to_vec(), g.iter().flat_map(|&x| (0.3f32 + x as f32 * 0.2).to_le_bytes()).collect::<Vec<u8>>());
        let layers = vec![layer([0, 1, 1, 2, 2, 0, 0, 1, 1, 2]), layer([2, 0, 1, 0, 0, 2, 2, 1, 1, 0])];
        let doc = DocRouting::from_bytes(&ids, &offsets, &cats, 2, &layers).unwrap();
        s.put_document("t.txt", "sha", text, &doc).unwrap();
        summary::write_summaries(&mut s, &id, &Default::default()).unwrap();
        drop(s);
        std::fs::read(&p).unwrap()
    })
}

const TABLES: [&str; 10] = ["meta", "documents", "routing", "centroids", "examples", "token_groups", "vocab", "categories", "comembership", "other"];

#[derive(Arbitrary, Debug)]
enum Value {
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Null,
}

impl Value {
    fn sql(&self) -> String {
        match self {
            Value::Int(i) => i.to_string(),
            Value::Real(r) if r.is_finite() => format!("{r:e}"),
            Value::Real(_) => "1e999".into(),
            Value::Text(s) => format!("'{}'", s.replace('\'', "''")),
            Value::Blob(b) => format!("X'{}'", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            Value::Null => "NULL".into(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Edit {
    Drop(u8),
    /// The table becomes a view (recursive, endless when `endless`).
    View(u8, bool),
    Trigger(u8),
    Delete(u8),
    /// A row of arbitrary values (as many as the table has columns, or not).
    Insert(u8, Vec<Value>),
    /// One column of every row set to a value.
    Set(u8, u8, Value),
    /// An identity field set to a value.
    Identity(u8, Value),
    Meta(u8, Value),
}

fn columns(c: &rusqlite::Connection, t: &str) -> Vec<String> {
    c.prepare(&format!("SELECT name FROM pragma_table_info('{t}')")).and_then(|mut s| s.query_map([], |r| r.get(0))?.collect()).unwrap_or_default()
}

fn apply(c: &rusqlite::Connection, e: &Edit) {
    let t = |i: &u8| TABLES[*i as usize % TABLES.len()];
    let sql = match e {
        Edit::Drop(i) => format!("DROP TABLE {}", t(i)),
        Edit::View(i, endless) => {
            let body = if *endless { "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS a, x AS b, x AS c FROM r" } else { "SELECT 1 AS a" };
            format!("DROP TABLE IF EXISTS {0}; CREATE VIEW {0} AS {body}", t(i))
        }
        Edit::Trigger(i) => format!("CREATE TRIGGER tr{i} AFTER INSERT ON {} BEGIN SELECT 1; END", t(i)),
        Edit::Delete(i) => format!("DELETE FROM {}", t(i)),
        Edit::Insert(i, vals) => format!("INSERT INTO {} VALUES({})", t(i), vals.iter().map(Value::sql).collect::<Vec<_>>().join(", ")),
        Edit::Set(i, col, v) => {
            let cols = columns(c, t(i));
            if cols.is_empty() {
                return;
            }
            format!("UPDATE {} SET \"{}\" = {}", t(i), cols[*col as usize % cols.len()], v.sql())
        }
        Edit::Identity(f, v) => {
            let fields = ["n_layers", "groups", "settings.k", "settings.segment_len", "model", "settings.mode", "adapter_sha256"];
            format!("UPDATE meta SET value = json_set(value, '$.{}', {}) WHERE key = 'identity'", fields[*f as usize % fields.len()], v.sql())
        }
        Edit::Meta(k, v) => {
            let keys = ["format", "format_version", "complete", "tokens", "documents", "identity"];
            format!("INSERT OR REPLACE INTO meta VALUES('{}', {})", keys[*k as usize % keys.len()], v.sql())
        }
    };
    let _ = c.execute_batch(&sql);
}

/// Every read the app makes of `p`; an error must name the file.
fn read(p: &Path) {
    let name = p.display().to_string();
    let named = |e: anyhow::Error| {
        let s = format!("{e:#}");
        assert!(s.contains(&name), "an error that does not name the file: {s}");
    };
    match Index::open(p) {
        Ok(ix) => {
            for l in 0..ix.identity.n_layers.min(3) {
                ix.layer(l).err().map(named);
                for g in 0..ix.identity.groups.min(4) {
                    ix.centroid(l, g, 5).err().map(named);
                }
            }
            ix.search("of", None).err().map(named);
            ix.search(" the", Some(0)).err().map(named);
        }
        Err(e) => named(e),
    }
    if let Ok(s) = Store::open(p) {
        let _ = s.complete();
        s.documents().err().map(named);
        if let Ok(Some(id)) = s.identity() {
            s.for_each_document(id.n_layers, id.groups, id.settings.k, |_, _, _| Ok(())).err().map(named);
        }
    }
}

fn path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| common::scratch().join("input.focus-index"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let p = path();
    let _ = std::fs::remove_file(p.with_extension("focus-index-journal"));
    let bytes = match mode % 3 {
        // The bytes as the file.
        0 => rest.to_vec(),
        // Byte patches of a valid index: (offset: u16 LE, byte) triples.
        1 => {
            let mut b = template().to_vec();
            for c in rest.chunks_exact(3) {
                let at = u16::from_le_bytes([c[0], c[1]]) as usize % b.len();
                b[at] = c[2];
            }
            b
        }
        // SQL edits of a valid index.
        _ => {
            std::fs::write(p, template()).unwrap();
            let edits: Vec<Edit> = Unstructured::new(rest).arbitrary().unwrap_or_default();
            {
                let c = rusqlite::Connection::open(p).unwrap();
                for e in edits.iter().take(16) {
                    apply(&c, e);
                }
            }
            read(p);
            return;
        }
    };
    std::fs::write(p, &bytes).unwrap();
    read(p);
});
