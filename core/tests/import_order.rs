//! The library's folders import one way: io -> focus -> attention -> model -> {analysis, eval,
//! generate} -> {train, index} -> bench (`error` and `device` are the ground floor, open to all). A file
//! may name items of its own folder and of earlier ones, never of a later folder or of a
//! sibling on its floor. The scan reads every `crate::FOLDER` path outside comments, in tests
//! too: a test helper that needs a later folder belongs there.

use std::path::Path;

/// Each top-level folder (or file) of the library crates' src/ and its floor.
const FLOORS: &[(&str, usize)] = &[
    ("error", 0),
    ("device", 0),
    ("io", 1),
    ("focus", 2),
    ("attention", 3),
    ("model", 4),
    ("analysis", 5),
    ("eval", 5),
    ("generate", 5),
    ("train", 6),
    ("index", 6),
    ("bench", 7),
];

fn floor(name: &str) -> Option<usize> {
    FLOORS.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
}

/// The imports of `text` (a file of folder `from`) that break the order: (line, target).
fn violations(from: &str, text: &str) -> Vec<(usize, String)> {
    let Some(own) = floor(from) else { return Vec::new() };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(p) = rest.find("crate::") {
            let after = &rest[p + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if let Some(f) = floor(&name) {
                let ground = own == 0 && f == 0;
                if name != from && !ground && f >= own {
                    out.push((i + 1, name.clone()));
                }
            }
            rest = &after[name.len()..];
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn folders_import_one_way() {
    // The crates' order is the compiler's; inside a crate the folders' order is this test's.
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for krate in ["model", "analysis", "train", "bench"] {
    let src = crates.join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" {
            continue;
        }
        assert!(floor(&top).is_some(), "{} is in a folder the order does not know: add `{top}` to FLOORS", rel.display());
        seen.insert(top.clone());
        for (line, to) in violations(&top, &std::fs::read_to_string(f).unwrap()) {
            bad.push(format!("{krate}/{}:{line}: {top} imports {to}", rel.display()));
        }
    }
    }
    assert!(seen.len() >= 10, "the scan found only {seen:?}");
    assert!(bad.is_empty(), "imports against the order io -> focus -> attention -> model -> {{analysis, eval, generate}} -> train -> bench:\n{}", bad.join("\n"));
}

/// The scan itself finds what it must, and passes what it must.
#[test]
fn the_scan_sees_a_wrong_import() {
    assert_eq!(violations("attention", "use crate::model::config::LayerAttention;"), vec![(1, "model".to_string())]);
    assert_eq!(violations("focus", "    let x = crate::train::attention::tests::norm(&a);"), vec![(1, "train".to_string())]);
    assert_eq!(violations("analysis", "use crate::generate::Generator;"), vec![(1, "generate".to_string())], "siblings");
    assert!(violations("model", "use crate::attention::{self, Mode}; // crate::train in a comment").is_empty());
    assert!(violations("bench", "use crate::generate::Generator; use crate::error::Result;").is_empty());
    assert!(violations("device", "use crate::error::Result;").is_empty());
}
