//! What the crates cannot say about imports, checked by parsing every source file with `syn`:
//! (a) no import circle among FILES, in the library and in the app; (b) inside each crate, its
//! top-level folders import one way, each only from the ones before it (`ORDERS`). Every form
//! of a path counts: `use` trees (grouped, nested, renamed, globs, `self::`, `super::`,
//! `super::super::`), paths in code and types, names bound by a `use` and used later
//! (`use super::cpu; cpu::decode::attend(..)`), a child module named without a prefix, and
//! paths inside macro calls. Tests count too: a test helper that needs a later folder belongs
//! there. A file imports another when a path resolves into that file's module (the longest
//! module prefix of the path that is a file); `mod x;` declarations are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// One crate's folder order: its floors, lowest first; the names on one floor may not import
/// each other, except the ground floor's (the first), which are open to each other. A name is
/// a top-level module of the crate (a folder or a file).
struct Order {
    /// The crate's source root, relative to the workspace. Modules a crate re-exports from the
    /// crates below it (`pub use focus_model::model`) resolve to its `lib.rs`, outside the order.
    root: &'static str,
    floors: &'static [&'static [&'static str]],
    /// Top-level files outside the order (the crate root and its entry points).
    outside: &'static [&'static str],
}

const ORDERS: &[Order] = &[
    // The crates' order is the compiler's (focus-model -> focus-analysis -> focus-train,
    // focus-bench); inside each crate, its folders' order is this test's.
    Order { root: "crates/model/src", floors: &[&["error", "device"], &["io"], &["focus"], &["attention"], &["model"]], outside: &["lib"] },
    Order { root: "crates/analysis/src", floors: &[&["analysis", "eval", "generate"], &["index"]], outside: &["lib"] },
    Order { root: "crates/train/src", floors: &[&["train"]], outside: &["lib"] },
    Order { root: "crates/bench/src", floors: &[&["bench"]], outside: &["lib"] },
    // The app: its library parts below the two front ends; the command line starts the GUI
    // (`focus-lens gui`), so `cli` stands over `gui`. `gui`'s own folders have their
    // order below (GUI_ORDER).
    Order { root: "app/src", floors: &[&["defaults"], &["sampling", "training", "index"], &["gui"], &["cli"]], outside: &["lib", "main"] },
];

/// Inside the app's `gui`: state, paint, worker and compared (two runs side by side) at the ground; export reads them; jobs
/// run what export writes; session, views, then the app's frame loop over all of them.
const GUI_ORDER: &[&[&str]] = &[&["state", "paint", "worker", "compared"], &["export"], &["jobs"], &["session"], &["views"], &["app"]];

/// Circles that exist today, each to be closed by moving the shared items into the lower file
/// (issue 48). The test fails on any other circle, and on an entry here that no longer exists,
/// so the list only shrinks: delete an entry when its circle is gone.
const KNOWN_CIRCLES: &[&str] = &[];

/// Imports against the order that exist today (as KNOWN_CIRCLES: the list only shrinks).
const KNOWN_AGAINST_ORDER: &[&str] = &[];

/// `found` less the `known`, and the known ones not found (stale entries).
fn unknown_and_stale(found: &[String], known: &[&str]) -> (Vec<String>, Vec<String>) {
    let new = found.iter().filter(|f| !known.contains(&f.as_str())).cloned().collect();
    let stale = known.iter().filter(|k| !found.iter().any(|f| f == *k)).map(|k| k.to_string()).collect();
    (new, stale)
}

// ---------------------------------------------------------------------------------------------
// The parser: each file's module path and the module paths it names.

/// A module path inside one crate: `["attention", "cpu", "decode"]`.
type ModPath = Vec<String>;

/// The module path of the file at `rel` (relative to the crate's source root).
fn module_of(rel: &Path) -> ModPath {
    let mut m: ModPath = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = m.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        m.push(stem.to_string());
    }
    m
}

/// Collects every crate-internal path a file names, as absolute module paths.
struct Collector<'a> {
    /// The module the visitor stands in (the file's, then its inline `mod`s).
    here: ModPath,
    /// Every module of the crate (files and inline modules seen so far), to resolve a path
    /// that starts with a child module's name.
    modules: &'a BTreeSet<ModPath>,
    /// Names bound by `use` in each module: name -> absolute path.
    bound: BTreeMap<(ModPath, String), ModPath>,
    /// Inside a `pub use`: a re-export, which binds names for other files but is no import
    /// of this one (a path through it is followed to the item's own file).
    public: bool,
    /// Re-exports: (module, name) -> absolute path; glob re-exports: module -> paths.
    exports: BTreeMap<(ModPath, String), ModPath>,
    globs: BTreeMap<ModPath, Vec<ModPath>>,
    out: Vec<ModPath>,
}

impl Collector<'_> {
    /// `segs` (as written) resolved against the current module, or None when it leaves the
    /// crate (another crate, a local name, a primitive).
    fn resolve(&self, segs: &[String]) -> Option<ModPath> {
        let first = segs.first()?;
        let mut base: ModPath;
        let mut rest = &segs[1..];
        match first.as_str() {
            "crate" => base = Vec::new(),
            "self" => base = self.here.clone(),
            "super" => {
                base = self.here.clone();
                base.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            name => {
                // A name bound by a `use` of this module, or a child module.
                if let Some(p) = self.bound.get(&(self.here.clone(), name.to_string())) {
                    base = p.clone();
                } else {
                    let mut child = self.here.clone();
                    child.push(name.to_string());
                    if !self.modules.contains(&child) {
                        return None;
                    }
                    base = child;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn name(&mut self, segs: &[String]) {
        if let Some(p) = self.resolve(segs) {
            self.out.push(p);
        }
    }

    /// A `use` tree: every leaf's path, and the names it binds (globs bind none).
    fn use_tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.bind(prefix, &n.ident, &n.ident),
            syn::UseTree::Rename(r) => self.bind(prefix, &r.ident, &r.rename),
            syn::UseTree::Glob(_) => {
                if let Some(p) = self.resolve(prefix) {
                    if self.public {
                        self.globs.entry(self.here.clone()).or_default().push(p.clone());
                    }
                    self.out.push(p);
                }
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn bind(&mut self, prefix: &[String], ident: &syn::Ident, alias: &syn::Ident) {
        // `use a::b::{self}` names `a::b`.
        let mut segs = prefix.to_vec();
        if ident != "self" {
            segs.push(ident.to_string());
        }
        let Some(p) = self.resolve(&segs) else { return };
        self.out.push(p.clone());
        let alias = if alias == "self" { prefix.last().cloned().unwrap_or_default() } else { alias.to_string() };
        if alias != "_" {
            if self.public {
                self.exports.insert((self.here.clone(), alias.clone()), p.clone());
            }
            self.bound.insert((self.here.clone(), alias), p);
        }
    }

    /// Paths inside a macro call's tokens: every run `a :: b :: c` whose first name resolves.
    fn tokens(&mut self, ts: proc_macro2::TokenStream) {
        let toks: Vec<proc_macro2::TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                proc_macro2::TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                proc_macro2::TokenTree::Ident(id) => {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < toks.len() && is_colon2(&toks[j], &toks[j + 1]) {
                        match &toks[j + 2] {
                            proc_macro2::TokenTree::Ident(n) => segs.push(n.to_string()),
                            _ => break,
                        }
                        j += 3;
                    }
                    if segs.len() > 1 {
                        self.name(&segs);
                    }
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }
}

fn is_colon2(a: &proc_macro2::TokenTree, b: &proc_macro2::TokenTree) -> bool {
    matches!((a, b), (proc_macro2::TokenTree::Punct(x), proc_macro2::TokenTree::Punct(y))
        if x.as_char() == ':' && y.as_char() == ':' && x.spacing() == proc_macro2::Spacing::Joint)
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.here.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.here.pop();
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.public = !matches!(u.vis, syn::Visibility::Inherited);
        let before = self.out.len();
        self.use_tree(&mut Vec::new(), &u.tree);
        if self.public {
            self.out.truncate(before);
        }
        self.public = false;
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        // One-segment paths are locals, items in scope or primitives: a `use` named them.
        if p.segments.len() > 1 {
            let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.name(&segs);
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// The inline modules of a file (`mod tests { .. }`), as absolute module paths, and the items
/// each of its modules defines: (module, name).
fn inline_modules(file: &syn::File, here: &ModPath, out: &mut BTreeSet<ModPath>, items: &mut BTreeSet<(ModPath, String)>) {
    fn walk(list: &[syn::Item], here: &mut ModPath, out: &mut BTreeSet<ModPath>, items: &mut BTreeSet<(ModPath, String)>) {
        for it in list {
            let name = match it {
                syn::Item::Const(i) => Some(&i.ident),
                syn::Item::Enum(i) => Some(&i.ident),
                syn::Item::Fn(i) => Some(&i.sig.ident),
                syn::Item::Macro(i) => i.ident.as_ref(),
                syn::Item::Mod(i) => Some(&i.ident),
                syn::Item::Static(i) => Some(&i.ident),
                syn::Item::Struct(i) => Some(&i.ident),
                syn::Item::Trait(i) => Some(&i.ident),
                syn::Item::Type(i) => Some(&i.ident),
                syn::Item::Union(i) => Some(&i.ident),
                _ => None,
            };
            if let Some(n) = name {
                items.insert((here.clone(), n.to_string()));
            }
            if let syn::Item::Mod(m) = it {
                here.push(m.ident.to_string());
                out.insert(here.clone());
                if let Some((_, list)) = &m.content {
                    walk(list, here, out, items);
                }
                here.pop();
            }
        }
    }
    walk(&file.items, &mut here.clone(), out, items);
}

/// What resolving a path needs from the whole crate.
struct Names {
    modules: BTreeSet<ModPath>,
    items: BTreeSet<(ModPath, String)>,
    exports: BTreeMap<(ModPath, String), ModPath>,
    globs: BTreeMap<ModPath, Vec<ModPath>>,
}

impl Names {
    /// The module that holds the item `p` names, through re-exports: the longest prefix of `p`
    /// that is a module, or where that module's `pub use` takes the next name from.
    fn home(&self, p: &ModPath, depth: usize) -> Option<ModPath> {
        let n = (0..=p.len()).rev().find(|&n| self.modules.contains(&p[..n]))?;
        if n < p.len() && depth < 16 {
            let (m, name) = (p[..n].to_vec(), p[n].clone());
            let follow = |t: &ModPath, from: usize| {
                let mut q = t.clone();
                q.extend(p[from..].iter().cloned());
                self.home(&q, depth + 1)
            };
            if let Some(t) = self.exports.get(&(m.clone(), name.clone())) {
                return follow(t, n + 1);
            }
            if !self.items.contains(&(m.clone(), name.clone())) {
                for g in self.globs.get(&m).into_iter().flatten() {
                    if self.defines(g, &name, depth + 1) {
                        return follow(g, n);
                    }
                }
            }
        }
        Some(p[..n].to_vec())
    }

    fn defines(&self, m: &ModPath, name: &str, depth: usize) -> bool {
        let key = (m.clone(), name.to_string());
        self.items.contains(&key)
            || self.exports.contains_key(&key)
            || (depth < 16 && self.globs.get(m).into_iter().flatten().any(|g| self.defines(g, name, depth + 1)))
    }
}

/// One crate's files: module path -> (file name for messages, source).
struct Crate {
    files: BTreeMap<ModPath, (String, String)>,
}

impl Crate {
    fn read(root: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(root, &mut paths);
        let files = paths
            .into_iter()
            .map(|p| {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                (module_of(&rel), (rel.display().to_string(), std::fs::read_to_string(&p).unwrap()))
            })
            .collect();
        Crate { files }
    }

    /// From sources given inline (the checker's own tests): (file name, source).
    fn inline(files: &[(&str, &str)]) -> Crate {
        Crate { files: files.iter().map(|(n, s)| (module_of(Path::new(n)), (n.to_string(), s.to_string()))).collect() }
    }

    /// The file of module `p`: the longest prefix of `p` that is a file's module.
    fn file_of(&self, p: &ModPath) -> Option<&ModPath> {
        (0..=p.len()).rev().find_map(|n| self.files.get_key_value(&p[..n]).map(|(k, _)| k))
    }

    /// Per file, the files it imports (itself left out), or the files that do not parse.
    fn graph(&self) -> Result<BTreeMap<ModPath, BTreeSet<ModPath>>, Vec<String>> {
        let mut parsed = BTreeMap::new();
        let mut errors = Vec::new();
        let mut modules: BTreeSet<ModPath> = self.files.keys().cloned().collect();
        let mut items = BTreeSet::new();
        for (m, (name, src)) in &self.files {
            match syn::parse_file(src) {
                Ok(f) => {
                    inline_modules(&f, m, &mut modules, &mut items);
                    parsed.insert(m.clone(), f);
                }
                Err(e) => errors.push(format!("{name}: does not parse: {e}")),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        // First every file's bindings and re-exports (a `use` may come after the code that
        // uses its name, a re-export in another file), then its paths.
        let (mut exports, mut globs, mut bound) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (m, f) in &parsed {
            let mut c = Collector { here: m.clone(), modules: &modules, bound: BTreeMap::new(), public: false, exports: BTreeMap::new(), globs: BTreeMap::new(), out: Vec::new() };
            c.visit_file(f);
            exports.extend(c.exports);
            for (k, v) in c.globs {
                globs.entry(k).or_insert_with(Vec::new).extend(v);
            }
            bound.insert(m.clone(), c.bound);
        }
        let names = Names { modules: modules.clone(), items, exports, globs };
        let mut graph = BTreeMap::new();
        for (m, f) in &parsed {
            let mut c = Collector { here: m.clone(), modules: &modules, bound: bound.remove(m).unwrap_or_default(), public: false, exports: BTreeMap::new(), globs: BTreeMap::new(), out: Vec::new() };
            c.visit_file(f);
            let to: BTreeSet<ModPath> = c.out.iter().filter_map(|p| names.home(p, 0)).filter_map(|h| self.file_of(&h)).filter(|t| *t != m).cloned().collect();
            graph.insert(m.clone(), to);
        }
        Ok(graph)
    }

    fn name(&self, m: &ModPath) -> &str {
        &self.files[m].0
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// Import circles among files: each strongly connected set of two or more files (Tarjan),
/// as its files' names.
fn circles(c: &Crate, g: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        out: Vec<Vec<&'a ModPath>>,
    }
    fn strong<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                strong(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut set = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                set.push(w);
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                t.out.push(set);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), out: Vec::new() };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            strong(&mut t, v);
        }
    }
    let mut out: Vec<Vec<String>> = t.out.iter().map(|s| {
        let mut names: Vec<String> = s.iter().map(|m| c.name(m).to_string()).collect();
        names.sort();
        names
    }).collect();
    out.sort();
    out
}

/// The floor of `name` in `floors`, or None.
fn floor(floors: &[&[&str]], name: &str) -> Option<usize> {
    floors.iter().position(|f| f.contains(&name))
}

/// Imports against an order among the modules under `under` (the crate root: `[]`; the app's
/// gui: `["gui"]`): "file imports file", for each edge from one floor to the same or a later
/// floor's folder (the ground floor's names may import each other). Modules under `under` that
/// the order does not know are reported too.
fn against_order(c: &Crate, g: &BTreeMap<ModPath, BTreeSet<ModPath>>, under: &[&str], floors: &[&[&str]], outside: &[&str]) -> Vec<String> {
    let top = |m: &ModPath| -> Option<String> {
        (m.len() > under.len() && m.iter().zip(under).all(|(a, b)| a == b)).then(|| m[under.len()].clone())
    };
    let mut bad = Vec::new();
    for (from, tos) in g {
        let Some(own) = top(from) else { continue };
        if outside.contains(&own.as_str()) {
            continue;
        }
        let Some(f_own) = floor(floors, &own) else {
            bad.push(format!("{}: in `{own}`, which the order does not know", c.name(from)));
            continue;
        };
        for to in tos {
            let Some(other) = top(to) else { continue };
            let Some(f_other) = floor(floors, &other) else { continue };
            let ground = f_own == 0 && f_other == 0;
            if other != own && !ground && f_other >= f_own {
                bad.push(format!("{} imports {} (`{own}` may not import `{other}`)", c.name(from), c.name(to)));
            }
        }
    }
    bad
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn no_import_circle_among_files() {
    let mut found = Vec::new();
    for o in ORDERS {
        let c = Crate::read(&workspace().join(o.root));
        let g = c.graph().unwrap_or_else(|e| panic!("{}", e.join("\n")));
        assert!(g.len() > 1, "{}: the scan found only {} files", o.root, g.len());
        for set in circles(&c, &g) {
            found.push(format!("{}: {}", o.root, set.join(" <-> ")));
        }
    }
    let (new, stale) = unknown_and_stale(&found, KNOWN_CIRCLES);
    assert!(new.is_empty(), "import circles among files (move the shared items into the lower file):\n{}", new.join("\n"));
    assert!(stale.is_empty(), "circles gone: delete them from KNOWN_CIRCLES:\n{}", stale.join("\n"));
}

#[test]
fn folders_import_one_way() {
    let mut bad = Vec::new();
    for o in ORDERS {
        let c = Crate::read(&workspace().join(o.root));
        let g = c.graph().unwrap_or_else(|e| panic!("{}", e.join("\n")));
        bad.extend(against_order(&c, &g, &[], o.floors, o.outside).into_iter().map(|b| format!("{}: {b}", o.root)));
        if o.root == "app/src" {
            bad.extend(against_order(&c, &g, &["gui"], GUI_ORDER, &["mod"]).into_iter().map(|b| format!("{}: {b}", o.root)));
        }
    }
    let (new, stale) = unknown_and_stale(&bad, KNOWN_AGAINST_ORDER);
    assert!(new.is_empty(), "imports against the order:\n{}", new.join("\n"));
    assert!(stale.is_empty(), "gone: delete them from KNOWN_AGAINST_ORDER:\n{}", stale.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The checker itself: each planted violation is reported, and what is allowed passes.

const SMALL: &[&[&str]] = &[&["error"], &["focus"], &["attention"], &["model"]];

fn check(files: &[(&str, &str)]) -> (Vec<Vec<String>>, Vec<String>) {
    let c = Crate::inline(files);
    let g = c.graph().unwrap();
    (circles(&c, &g), against_order(&c, &g, &[], SMALL, &["lib"]))
}

#[test]
fn the_checker_reads_a_grouped_use() {
    let (_, bad) = check(&[
        ("lib.rs", "pub mod attention; pub mod model;"),
        ("attention/mod.rs", "use crate::{error::Result, model::config::Config};"),
        ("model/config.rs", "pub struct Config;"),
        ("model/mod.rs", "pub mod config;"),
    ]);
    assert_eq!(bad, ["attention/mod.rs imports model/config.rs (`attention` may not import `model`)"]);
}

#[test]
fn the_checker_resolves_super_super() {
    let (_, bad) = check(&[
        ("focus/router/score.rs", "fn f(_: super::super::super::attention::Plan) {}"),
        ("focus/router/mod.rs", "pub mod score;"),
        ("attention/mod.rs", "pub struct Plan;"),
    ]);
    assert_eq!(bad, ["focus/router/score.rs imports attention/mod.rs (`focus` may not import `attention`)"]);
    // Up to the crate root from inside `attention`, then down into a lower folder: allowed.
    let (_, bad) = check(&[("attention/cpu/dense.rs", "use super::super::super::focus::Mask;"), ("focus/mod.rs", "pub struct Mask;")]);
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn the_checker_reads_a_glob_and_a_rename() {
    let (_, bad) = check(&[("focus/mask.rs", "use crate::model::*;"), ("model/mod.rs", "pub struct Model;")]);
    assert_eq!(bad, ["focus/mask.rs imports model/mod.rs (`focus` may not import `model`)"]);
    let (_, bad) = check(&[
        ("focus/mask.rs", "use crate::model as m; fn f() { m::block::run(); }"),
        ("model/mod.rs", "pub mod block;"),
        ("model/block.rs", "pub fn run() {}"),
    ]);
    assert_eq!(
        bad,
        ["focus/mask.rs imports model/mod.rs (`focus` may not import `model`)", "focus/mask.rs imports model/block.rs (`focus` may not import `model`)"]
    );
}

#[test]
fn the_checker_reads_paths_in_code_tests_and_macros() {
    let (_, bad) = check(&[
        ("focus/gate.rs", "#[cfg(test)] mod tests { #[test] fn t() { assert!(crate::model::ok()); } }"),
        ("model/mod.rs", "pub fn ok() -> bool { true }"),
    ]);
    assert_eq!(bad, ["focus/gate.rs imports model/mod.rs (`focus` may not import `model`)"]);
    let (_, bad) = check(&[("focus/gate.rs", "// crate::model::ok in a comment\nfn f() { let s = \"crate::model\"; }"), ("model/mod.rs", "")]);
    assert!(bad.is_empty(), "comments and strings are not imports: {bad:?}");
}

#[test]
fn the_checker_finds_a_two_file_circle() {
    let (circles, _) = check(&[
        ("attention/mod.rs", "mod decode; mod cpu;"),
        ("attention/decode.rs", "pub struct How; fn f() { super::cpu::decode::attend(); }"),
        ("attention/cpu/mod.rs", "pub mod decode;"),
        ("attention/cpu/decode.rs", "use crate::attention::decode::How; pub fn attend() {}"),
    ]);
    assert_eq!(circles, [["attention/cpu/decode.rs", "attention/decode.rs"]]);
    // A child module named without a prefix, through a name bound by `use`.
    let (circles, _) = check(&[
        ("focus/mod.rs", "pub mod adapter; pub mod router;"),
        ("focus/adapter.rs", "use super::router; fn f() { router::route(); }"),
        ("focus/router.rs", "pub fn route() {} fn g(_: super::adapter::Score) {}"),
    ]);
    assert_eq!(circles, [["focus/adapter.rs", "focus/router.rs"]]);
}

#[test]
fn the_checker_passes_the_order() {
    let (circles, bad) = check(&[
        ("lib.rs", "pub mod model; pub use model::Model;"),
        ("model/mod.rs", "use crate::{attention::{self, Plan}, focus::*, error::Result}; pub struct Model;"),
        ("attention/mod.rs", "use super::focus::Mask; pub struct Plan;"),
        ("focus/mod.rs", "pub struct Mask; fn f() -> crate::error::Result { Ok(()) }"),
        ("error.rs", "pub type Result = std::result::Result<(), ()>;"),
    ]);
    assert!(circles.is_empty() && bad.is_empty(), "{circles:?} {bad:?}");
}

#[test]
fn the_checker_follows_re_exports() {
    // A name the crate root re-exports is the file that defines it.
    let (_, bad) = check(&[
        ("lib.rs", "pub mod focus; pub mod model; pub use model::{block::Block, *};"),
        ("focus/mask.rs", "fn f(_: crate::Block, _: crate::Model) {}"),
        ("model/mod.rs", "pub mod block; pub struct Model;"),
        ("model/block.rs", "pub struct Block;"),
    ]);
    assert_eq!(
        bad,
        ["focus/mask.rs imports model/mod.rs (`focus` may not import `model`)", "focus/mask.rs imports model/block.rs (`focus` may not import `model`)"]
    );
    // A folder's front door (`pub use child::*`) is no import of the child: no circle with a
    // child that takes a helper from it.
    let (circles, _) = check(&[
        ("bench/mod.rs", "mod attention; pub use attention::*; pub fn median() {}"),
        ("bench/attention.rs", "use super::median; pub fn run() { median() }"),
        ("model/mod.rs", "fn f() { crate::bench::run() }"),
    ]);
    assert!(circles.is_empty(), "{circles:?}");
}
