//! The corpus index (`focus-lens index`, `focus_lens::index`): its stored statistics against a
//! from-scratch computation with the existing analysis (`analysis::analyze` on each text, its
//! routing and category profiles), resume against a single run, and damaged or bad input.

#[path = "common/mod.rs"]
mod common;

use focus_core::analysis::{analyze, AnalyzeOptions};
use focus_core::index::{HIST_BINS, TOP_EXAMPLES};
use focus_core::Adapter;
use focus_lens::index::{build_index, BuildRequest, Index};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SEGMENT: usize = 256;
const K: usize = 2;

fn adapter_dir() -> PathBuf {
    common::root().join("sample_adapters/smollm2-135m-k8")
}

fn adapter() -> &'static Adapter {
    static A: std::sync::OnceLock<Adapter> = std::sync::OnceLock::new();
    A.get_or_init(|| {
        let m = common::default_model();
        Adapter::load(&adapter_dir(), &m.identity(), m.device()).unwrap()
    })
}

/// Three short texts (the last spans two segments), and a binary file that is skipped.
fn corpus(dir: &Path) -> Vec<(String, String)> {
    let sample = std::fs::read_to_string(common::root().join("assets/sample.txt")).unwrap();
    let persuasion = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let cut = |s: &str, a: usize, n: usize| s.chars().skip(a).take(n).collect::<String>();
    let texts = vec![
        ("a.txt".to_string(), cut(&sample, 0, 700)),
        ("b.txt".to_string(), "The king of the north said: of all the ships, one of them is ours. Of course.".to_string()),
        ("sub/c.txt".to_string(), cut(&persuasion, 20_000, 1500)),
    ];
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for (n, t) in &texts {
        std::fs::write(dir.join(n), t).unwrap();
    }
    std::fs::write(dir.join("image.bin"), [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
    texts
}

fn request<'a>(corpus: &'a Path, out: &'a Path, adapter_path: &'a Path, adapter: &'a Adapter) -> BuildRequest<'a> {
    BuildRequest { model: common::default_model(), adapter, adapter_path: Some(adapter_path), corpus, out, mode: common::topk(K, 8), k: K, segment_len: SEGMENT }
}

fn build(corpus: &Path, out: &Path) -> focus_lens::index::BuildReport {
    let dir = adapter_dir();
    build_index(&request(corpus, out, &dir, adapter()), &AtomicBool::new(false), |_| {}, |_| {}).unwrap()
}

fn bin(m: f32) -> usize {
    ((m.clamp(0.0, 1.0) * HIST_BINS as f32) as usize).min(HIST_BINS - 1)
}

/// Every statistic the index stores, recomputed from `analyze` of each text (same mode, k and
/// segments) through the analysis' own routing and profiles.
#[test]
fn index_statistics_equal_the_analysis() {
    let tmp = tempfile::tempdir().unwrap();
    let texts = corpus(&tmp.path().join("corpus"));
    let out = tmp.path().join("c.focus-index");
    let report = build(&tmp.path().join("corpus"), &out);
    assert_eq!((report.documents, report.routed, report.skipped.len()), (3, 3, 1), "{report:?}");
    assert!(report.skipped[0].0 == "image.bin", "{:?}", report.skipped);

    let model = common::default_model();
    let opts = AnalyzeOptions { mode: focus_core::ModeKind::TopK, k: focus_core::focus::mask::TopK::new(K, 8).unwrap(), segment_len: SEGMENT, keep_tokens: false, cancel: None };
    // By name, as the index orders its documents.
    let mut analyses: Vec<(String, focus_core::analysis::Analysis)> =
        texts.iter().map(|(n, t)| (n.clone(), analyze(model, adapter(), "a", t, &opts, |_, _| {}).unwrap())).collect();
    analyses.sort_by(|a, b| a.0.cmp(&b.0));
    let n_layers = model.config().n_layers;
    let groups = 8;
    let ix = Index::open(&out).unwrap();
    let total: usize = analyses.iter().map(|(_, a)| a.tokens.len()).sum();
    assert_eq!(ix.tokens as usize, total);
    assert!(analyses[2].1.tokens.len() > SEGMENT, "the third text spans segments");

    let conn = &ix.store.conn;
    let mut vocab_ref: HashMap<u32, u64> = HashMap::new();
    for (_, a) in &analyses {
        for t in &a.tokens {
            *vocab_ref.entry(t.id).or_default() += 1;
        }
    }
    let vocab: HashMap<u32, u64> =
        conn.prepare("SELECT token, count FROM vocab").unwrap().query_map([], |r| Ok((r.get::<_, i64>(0)? as u32, r.get::<_, i64>(1)? as u64))).unwrap().map(Result::unwrap).collect();
    assert_eq!(vocab, vocab_ref, "corpus base rates");

    for l in 0..n_layers {
        for g in 0..groups {
            // Members, categories: the analysis' category profiles summed over the texts.
            let members: usize = analyses.iter().map(|(_, a)| a.profiles[l].centroids[g].tokens).sum();
            let by_cat: Vec<u64> = (0..11).map(|c| analyses.iter().map(|(_, a)| a.profiles[l].centroids[g].by_category[c] as u64).sum()).collect();
            // Token counts, held tokens, histogram and the top memberships: from the routing rows.
            let mut counts: HashMap<u32, u64> = HashMap::new();
            let mut held = 0u64;
            let mut hist = vec![0u64; HIST_BINS];
            let mut member_m: Vec<f32> = Vec::new();
            for (_, a) in &analyses {
                let r = &a.routing[l];
                for i in 0..r.t {
                    let top = r.top_groups(i, K);
                    if top[0] == g {
                        *counts.entry(a.tokens[i].id).or_default() += 1;
                        member_m.push(r.row(i)[g]);
                    }
                    if top.contains(&g) {
                        held += 1;
                        hist[bin(r.row(i)[g])] += 1;
                    }
                }
            }
            let d = ix.centroid(l, g, 50).unwrap();
            assert_eq!(d.members as usize, members, "layer {l} G{g} members");
            assert_eq!(d.held, held, "layer {l} G{g} held");
            assert_eq!(d.histogram, hist, "layer {l} G{g} histogram");
            let cats: HashMap<String, u64> = d.categories.iter().map(|c| (c.name.clone(), c.count)).collect();
            for (c, n) in focus_core::analysis::categories::Category::ALL.iter().zip(&by_cat) {
                assert_eq!(cats.get(c.name()).copied().unwrap_or(0), *n, "layer {l} G{g} {c}");
            }
            let stored: HashMap<u32, u64> = conn
                .prepare("SELECT token, count FROM token_groups WHERE layer = ?1 AND grp = ?2")
                .unwrap()
                .query_map([l as i64, g as i64], |r| Ok((r.get::<_, i64>(0)? as u32, r.get::<_, i64>(1)? as u64)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(stored, counts, "layer {l} G{g} token counts");
            member_m.sort_by(|a, b| b.total_cmp(a));
            let ex: Vec<f32> = d.examples.iter().map(|e| e.membership as f32).collect();
            assert_eq!(ex, member_m[..member_m.len().min(TOP_EXAMPLES)].to_vec(), "layer {l} G{g} top examples");
            // Each example's token and context are the text's own.
            for e in d.examples.iter().take(3) {
                let (_, a) = analyses.iter().find(|(n, _)| *n == e.document).unwrap();
                assert_eq!(e.token, a.tokens[e.position].text);
                let t = &texts.iter().find(|(n, _)| *n == e.document).unwrap().1;
                assert!(t.contains(&format!("{}{}{}", e.left, e.token, e.right)), "context of {e:?}");
            }
            // Neighbours: co-membership counts from the top groups of both layers.
            for nb in &d.neighbours {
                let mut shared = 0;
                for (_, a) in &analyses {
                    for i in 0..a.tokens.len() {
                        shared += (a.routing[l].top_groups(i, 1)[0] == g && a.routing[nb.layer].top_groups(i, 1)[0] == nb.group) as u64;
                    }
                }
                assert_eq!(nb.shared, shared, "layer {l} G{g} with layer {} G{}", nb.layer, nb.group);
            }
            if members > 0 {
                assert_eq!(d.neighbours.len(), n_layers - 1);
            }
        }
    }

    // Search: every occurrence of " of" at layer 9 is in exactly one centroid's count.
    let hits = ix.search(" of", Some(9)).unwrap();
    assert!(!hits.is_empty());
    let of_id = hits[0].token;
    assert_eq!(hits.iter().map(|h| h.count).sum::<u64>(), vocab_ref[&of_id]);
    assert!((hits.iter().map(|h| h.share).sum::<f64>() - 1.0).abs() < 1e-9);
    assert!(hits.windows(2).all(|w| w[0].count >= w[1].count), "most first");
    // "of" without its space finds " of" and "of"; " of" only itself.
    let loose = ix.search("of", Some(9)).unwrap();
    assert!(loose.iter().any(|h| h.token == of_id) && loose.iter().any(|h| h.text == "of"), "{loose:?}");
    assert!(hits.iter().all(|h| h.text == " of"));
    assert!(ix.search("zzzqqq", None).unwrap().is_empty());
    assert!(ix.centroid(30, 0, 5).unwrap_err().to_string().contains("layer 30 is out of range"));
    assert!(ix.centroid(3, 8, 5).unwrap_err().to_string().contains("centroid 8 is out of range"));
}

/// Every table of an index, as text (documents by path, not by their row ids), for comparing two
/// files.
fn dump(path: &Path) -> Vec<String> {
    let ix = Index::open(path).unwrap();
    let c = &ix.store.conn;
    let mut out = Vec::new();
    for q in [
        "SELECT path, sha256, bytes, tokens, text, ids, offsets, categories FROM documents ORDER BY path",
        "SELECT d.path, r.layer, r.groups, r.memberships FROM routing r JOIN documents d ON d.id = r.doc ORDER BY d.path, r.layer",
        "SELECT * FROM centroids ORDER BY layer, grp",
        "SELECT e.layer, e.grp, e.rank, d.path, e.pos, e.membership, e.left, e.token, e.right FROM examples e JOIN documents d ON d.id = e.doc ORDER BY e.layer, e.grp, e.rank",
        "SELECT * FROM token_groups ORDER BY layer, token, grp",
        "SELECT * FROM vocab ORDER BY token",
        "SELECT * FROM categories ORDER BY category",
        "SELECT * FROM comembership ORDER BY la, ga, lb, gb",
        "SELECT key, value FROM meta WHERE key NOT IN ('identity') ORDER BY key",
    ] {
        let mut st = c.prepare(q).unwrap();
        let n = st.column_count();
        let rows = st.query_map([], |r| Ok((0..n).map(|i| format!("{:?}", r.get_ref(i).unwrap())).collect::<Vec<_>>().join("|"))).unwrap();
        out.extend(rows.map(|r| format!("{q}: {}", r.unwrap())));
    }
    out
}

/// Two dumps are equal; on failure, the first differing row (not both whole files).
fn same(a: &[String], b: &[String], what: &str) {
    if let Some(i) = (0..a.len().min(b.len())).find(|&i| a[i] != b[i]) {
        let cut = |s: &str| s.chars().take(400).collect::<String>();
        panic!("{what}: row {i} differs:\n{}\n{}", cut(&a[i]), cut(&b[i]));
    }
    assert_eq!(a.len(), b.len(), "{what}: row counts");
}

/// A build cancelled after its first document and run again writes the same index as one run;
/// a finished index is left alone when nothing changed, and a changed adapter starts anew.
#[test]
fn resume_equals_a_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("corpus");
    corpus(&dir);
    let one = tmp.path().join("one.focus-index");
    build(&dir, &one);

    let two = tmp.path().join("two.focus-index");
    let cancel = AtomicBool::new(false);
    let ad = adapter_dir();
    let req = request(&dir, &two, &ad, adapter());
    let e = build_index(&req, &cancel, |_| {}, |p| {
        if p.docs_done == 1 {
            cancel.store(true, Ordering::Relaxed);
        }
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("cancelled") && e.contains("run the same command again to resume"), "{e}");
    assert!(!two.exists(), "no finished index after a cancel");
    let partial = focus_lens::index::build::partial_path(&two);
    assert!(partial.exists());
    let mut notes = Vec::new();
    let r = build_index(&req, &AtomicBool::new(false), |m| notes.push(m.to_string()), |_| {}).unwrap();
    assert_eq!((r.routed, r.reused), (2, 1), "the first document is not routed again: {r:?}");
    assert!(notes.iter().any(|n| n.starts_with("resuming")), "{notes:?}");
    assert!(!partial.exists());
    same(&dump(&one), &dump(&two), "resumed index = single run");

    // Nothing changed: nothing to do.
    let r = build(&dir, &two);
    assert!(r.up_to_date && r.routed == 0, "{r:?}");
    // One text changed, one removed: only that one routed again, and the same as a fresh build.
    std::fs::write(dir.join("b.txt"), "Of the ships of the line, none came back.").unwrap();
    std::fs::remove_file(dir.join("a.txt")).unwrap();
    let r = build(&dir, &two);
    assert_eq!((r.routed, r.reused, r.removed), (1, 1, 1), "{r:?}");
    let fresh = tmp.path().join("fresh.focus-index");
    build(&dir, &fresh);
    same(&dump(&fresh), &dump(&two), "updated index = fresh build");

    // Another adapter (the K=4 sample): a new index replaces the old one.
    let k4_dir = common::root().join("sample_adapters/smollm2-135m-k4");
    let m = common::default_model();
    let k4 = Adapter::load(&k4_dir, &m.identity(), m.device()).unwrap();
    let mut req = request(&dir, &two, &k4_dir, &k4);
    req.mode = common::topk(K, 4);
    let mut notes = Vec::new();
    let r = build_index(&req, &AtomicBool::new(false), |m| notes.push(m.to_string()), |_| {}).unwrap();
    assert_eq!(r.routed, 2, "{r:?}");
    assert!(notes.iter().any(|n| n.contains("another model, adapter or settings")), "{notes:?}");
    let ix = Index::open(&two).unwrap();
    assert_eq!(ix.identity.groups, 4);
    assert_eq!(ix.layer(0).unwrap().len(), 4);
}

/// A damaged index file gives one clear error, whichever way it is damaged.
#[test]
fn damaged_index_one_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.txt"), "A short text of a few words, of which none is long.").unwrap();
    let good = tmp.path().join("good.focus-index");
    build(&dir, &good);
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("garbage", vec![0x5a; 8192]),
        ("text", b"layer,group\n0,1\n".to_vec()),
        ("empty", Vec::new()),
        ("header only", bytes[..100].to_vec()),
    ];
    for (what, b) in cases {
        let p = tmp.path().join(format!("{what}.focus-index"));
        std::fs::write(&p, &b).unwrap();
        let e = match Index::open(&p) {
            Ok(_) => panic!("{what}: opened"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(&p.display().to_string()) && (e.contains("not a readable Focus Lens index") || e.contains("unfinished")), "{what}: {e}");
        assert_eq!(e.lines().count(), 1, "{what}: one line: {e}");
        // The CLI: exit 1 and that one line.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(["centroids"]).arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not a readable Focus Lens index") || err.contains("unfinished"), "{what}: {err}");
    }
    // A zeroed page inside the summaries: caught on open or as a clear error on query, never a panic.
    let mut b = bytes.clone();
    let page = 4096;
    for i in (b.len() - 3 * page)..(b.len() - 2 * page) {
        b[i] = 0xff;
    }
    let p = tmp.path().join("scribbled.focus-index");
    std::fs::write(&p, &b).unwrap();
    if let Ok(ix) = Index::open(&p) {
        for l in 0..30 {
            for g in 0..8 {
                if let Err(e) = ix.centroid(l, g, 10) {
                    assert!(format!("{e:#}").lines().count() == 1);
                }
            }
        }
    }
}

/// Bad corpus folders are refused with one clear error each.
#[test]
fn bad_corpus_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = tmp.path().join("x.focus-index");
    let ad = adapter_dir();
    let run = |dir: &Path| build_index(&request(dir, &out, &ad, adapter()), &AtomicBool::new(false), |_| {}, |_| {}).unwrap_err().to_string();
    assert!(run(&empty).contains("no text to index"), "{}", run(&empty));
    let binary = tmp.path().join("binary");
    std::fs::create_dir_all(&binary).unwrap();
    std::fs::write(binary.join("a.png"), [0x89u8, b'P', b'N', b'G', 0, 0, 0]).unwrap();
    let e = run(&binary);
    assert!(e.contains("no text to index") && e.contains("a.png"), "{e}");
    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "text").unwrap();
    assert!(run(&file).contains("is not a folder"));
    assert!(run(&tmp.path().join("missing")).contains("cannot read the corpus folder"));
    // A huge file is skipped with its size, the rest indexed.
    let big = tmp.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(big.join("huge.txt"), "word ".repeat(1 << 20)).unwrap();
    std::fs::write(big.join("small.txt"), "A small text.").unwrap();
    let r = build_index(&request(&big, &out, &ad, adapter()), &AtomicBool::new(false), |_| {}, |_| {}).unwrap();
    assert_eq!(r.documents, 1);
    assert!(r.skipped.iter().any(|(n, w)| n == "huge.txt" && w.contains("split it")), "{:?}", r.skipped);
    assert!(!out.with_extension("focus-index.partial").exists());
}

/// The auto-label's rules, each on a centroid made for it (no model): a dominant token, a pure
/// category, an over-represented one, a mix, an empty centroid; and the evidence's figures.
#[test]
fn auto_label_rules() {
    use focus_core::analysis::categories::Category;
    use focus_core::index::{auto_label, CorpusStats};
    // One layer, five groups, over a corpus of 1000 tokens: 40% nouns, 20% verbs, 20%
    // prepositions, 20% punctuation; token ids 1-4 (" of" is 2).
    let mut s = CorpusStats::new(1, 5, 1);
    s.tokens = 1000;
    let cat = |c: Category| c.index();
    s.category_totals[cat(Category::Noun)] = 400;
    s.category_totals[cat(Category::Verb)] = 200;
    s.category_totals[cat(Category::Preposition)] = 200;
    s.category_totals[cat(Category::Punctuation)] = 200;
    s.token_totals = [(1, 400), (2, 200), (3, 200), (4, 200)].into_iter().collect();
    let text = |id: u32| [" house", " of", " ran", ","][id as usize - 1].to_string();
    let mut set = |g: usize, cats: &[(Category, u64)], toks: &[(u32, u64)]| {
        let c = &mut s.centroids[0][g];
        for &(k, n) in cats {
            c.by_category[k.index()] = n;
        }
        c.members = cats.iter().map(|x| x.1).sum();
        c.token_counts = toks.iter().copied().collect();
    };
    // G0: " of" is 120 of 200 members (60%): the token rule, though prepositions are only 60% too.
    set(0, &[(Category::Preposition, 120), (Category::Noun, 80)], &[(2, 120), (1, 80)]);
    // G1: 300 nouns of 350 (86%) spread over tokens: the category rule.
    set(1, &[(Category::Noun, 300), (Category::Verb, 50)], &[(1, 150), (3, 50), (4, 150)]);
    // G2: verbs 32% (base 20%, lift 1.6), nouns 40% (lift 1.0): leaning to verbs.
    set(2, &[(Category::Noun, 40), (Category::Verb, 32), (Category::Punctuation, 28)], &[(1, 40), (3, 32), (4, 28)]);
    // G3: the corpus's own mix: no rule but the last.
    set(3, &[(Category::Noun, 40), (Category::Verb, 20), (Category::Preposition, 20), (Category::Punctuation, 20)], &[(1, 40), (2, 20), (3, 20), (4, 20)]);
    let label = |g: usize| auto_label(&s, 0, g, text);
    let l0 = label(0);
    assert_eq!((l0.label.as_str(), l0.rule.as_str()), ("' of'", "token"));
    assert!(l0.evidence.iter().any(|e| e.contains("' of' 60% of members vs 20.00% of the corpus (lift 3.0)")), "{:?}", l0.evidence);
    let l1 = label(1);
    assert_eq!((l1.label.as_str(), l1.rule.as_str()), ("noun", "category"));
    assert!(l1.evidence.iter().any(|e| e.starts_with("noun: 86% of members vs 40% of the corpus (lift 2.1)")), "{:?}", l1.evidence);
    let l2 = label(2);
    assert_eq!((l2.label.as_str(), l2.rule.as_str()), ("verb-leaning", "leaning"));
    assert!(l2.evidence.iter().any(|e| e.starts_with("verb: 32% of members vs 20% of the corpus (lift 1.6)")), "{:?}", l2.evidence);
    let l3 = label(3);
    assert_eq!((l3.label.as_str(), l3.rule.as_str()), ("mixed: ' house' ' of' ' ran'", "mixed"));
    let l4 = label(4);
    assert_eq!((l4.label.as_str(), l4.rule.as_str()), ("empty", "empty"));
    // Sizes are shares of the layer's members (200 + 350 + 100 + 100 = 750).
    assert!(l1.evidence[0].contains("350 members, 46.7% of the layer's tokens"), "{:?}", l1.evidence);
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(args).env("FOCUS_LENS_MODEL", common::model_path()).output().unwrap()
}

/// The commands as a user runs them: `index` (its JSON report, "up to date" on a second run, Ctrl-C
/// keeping the finished documents and a re-run resuming), `centroids` (overview, dashboard,
/// search; bad arguments), `bench centroids`.
#[test]
fn cli_index_centroids_and_ctrl_c() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("corpus");
    corpus(&dir);
    // A longer text routed last, so that the build is still running when the signal comes.
    let persuasion = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    std::fs::write(dir.join("z.txt"), persuasion.chars().skip(40_000).take(8000).collect::<String>()).unwrap();
    let out = tmp.path().join("c.focus-index");
    let (d, o, a) = (dir.display().to_string(), out.display().to_string(), adapter_dir().display().to_string());
    let model = common::model_path().display().to_string();

    // Ctrl-C (SIGINT) once the first document is committed: exit 1, one clear line, the partial kept.
    let partial = focus_lens::index::build::partial_path(&out);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens"))
        .args(["index", "--model", &model, "--adapter", &a, "--segment", "256", "--out", &o, &d])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let done = partial.exists() && rusqlite::Connection::open_with_flags(&partial, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok().and_then(|c| c.query_row("SELECT count(*) FROM documents", [], |r| r.get::<_, i64>(0)).ok()).unwrap_or(0) >= 1;
        if done {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the build ended before the first document was in");
        assert!(t0.elapsed() < Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(50));
    }
    std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let r = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("cancelled") && err.contains("run the same command again to resume"), "{err}");
    assert!(partial.exists() && !out.exists());

    // The same command resumes and reports as JSON.
    let r = cli(&["index", "--adapter", &a, "--segment", "256", "--out", &o, "--json", &d]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let rep: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!((rep["documents"].as_u64(), rep["up_to_date"].as_bool()), (Some(4), Some(false)), "{rep}");
    assert!(rep["reused"].as_u64().unwrap() >= 1, "{rep}");
    assert_eq!(rep["skipped"][0][0], "image.bin");
    let r = cli(&["index", "--adapter", &a, "--segment", "256", "--out", &o, &d]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("is up to date"));

    // centroids: overview, dashboard and search, as text and JSON.
    let r = cli(&["centroids", &o]);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success() && text.lines().count() == 1 + 30 * 8, "{text}");
    let r = cli(&["centroids", &o, "--layer", "9", "--centroid", "3", "--json"]);
    let dash: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!((dash["layer"].as_u64(), dash["group"].as_u64()), (Some(9), Some(3)));
    assert_eq!(dash["histogram"].as_array().unwrap().len(), HIST_BINS);
    let r = cli(&["centroids", &o, "--layer", "9", "--centroid", "3"]);
    let text = String::from_utf8_lossy(&r.stdout);
    for s in ["layer 9 centroid 3:", "evidence:", "top examples", "membership histogram", "categories", "neighbours"] {
        assert!(text.contains(s), "{s}: {text}");
    }
    let r = cli(&["centroids", &o, "--search", " of", "--layer", "9", "--json"]);
    let hits: Vec<serde_json::Value> = serde_json::from_slice(&r.stdout).unwrap();
    assert!(!hits.is_empty() && hits.iter().all(|h| h["layer"] == 9 && h["text"] == " of"));
    // Bad arguments: usage errors exit 2, out-of-range values 1 with one line.
    assert_eq!(cli(&["centroids", &o, "--centroid", "3"]).status.code(), Some(2));
    let r = cli(&["centroids", &o, "--layer", "30"]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("layer 30 is out of range"));
    let r = cli(&["index", "--adapter", &a, &tmp.path().join("nothing").display().to_string()]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("cannot read the corpus folder"));

    // bench centroids prints the query times.
    let scaled = tmp.path().join("scaled.focus-index").display().to_string();
    let r = cli(&["bench", "centroids", &o, "--scale-to", "10000", "--scratch", &scaled, "--json"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let b: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(b["tokens"].as_u64().unwrap() >= 10000 && b["timings"].as_array().unwrap().len() == 4, "{b}");
}

// Issue 51: the index as untrusted input, and `index` / `bench centroids` reading and writing
// only where they are asked to.

/// The output of `c`, killed (and the test failed) past `secs` seconds: a hang fails, it does
/// not stall the suite.
fn output_within(mut c: std::process::Command, secs: u64) -> std::process::Output {
    use std::process::Stdio;
    let child = c.env("FOCUS_LENS_MODEL", common::model_path()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("focus-lens {:?} hung (killed after {secs} s)", c.get_args().collect::<Vec<_>>());
        }
    }
}

fn cli_within(args: &[&std::ffi::OsStr], env: &[(&str, &str)], secs: u64) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    output_within(c, secs)
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// Exit 1 and one error line (after any notes) containing every phrase.
fn one_error(o: &std::process::Output, phrases: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert!(err.trim_end().ends_with(errors[0]), "the error comes last: {err}");
    for p in phrases {
        assert!(errors[0].contains(p), "{p:?} missing from: {err}");
    }
    errors[0].to_string()
}

fn mkfifo(p: &Path) {
    assert!(std::process::Command::new("mkfifo").arg(p).status().unwrap().success());
}

/// A copy of `src` at `dst` with `sql` run on it (a hostile edit).
fn edited(src: &Path, dst: &Path, sql: &str) -> PathBuf {
    std::fs::copy(src, dst).unwrap();
    rusqlite::Connection::open(dst).unwrap().execute_batch(sql).unwrap();
    dst.to_path_buf()
}

/// A small finished index (one short text), built once per test binary.
fn small_index() -> PathBuf {
    static P: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("corpus");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t.txt"), "The king of the north said: of all the ships, one of them is ours.").unwrap();
        let out = tmp.path().join("small.focus-index");
        build(&dir, &out);
        (tmp, out)
    })
    .1
    .clone()
}

/// Every query an index's reader makes, on `path`; the first error as one line.
fn read_all(path: &Path) -> Result<(), String> {
    let ix = Index::open(path).map_err(|e| format!("{e:#}"))?;
    for l in 0..ix.identity.n_layers.min(2) {
        ix.layer(l).map_err(|e| format!("{e:#}"))?;
        for g in 0..ix.identity.groups {
            let d = ix.centroid(l, g, 10).map_err(|e| format!("{e:#}"))?;
            assert!(d.size_share.is_finite() && d.size_share >= 0.0);
        }
    }
    ix.search("of", None).map_err(|e| format!("{e:#}"))?;
    Ok(())
}

/// An index file is untrusted input (issue 51): an identity of 0 layers or groups, or of 2^32
/// x 2^32 (which wrapped to 0 and passed the row check), a view where a table should be (an
/// endless recursive one never returned), a trigger, negative or overflowing counts, a missing
/// table or row: each gives one error naming the file and what is wrong, never a panic, abort,
/// hang or a count of 18446744073709551611.
#[test]
fn hostile_index_files_one_clear_error() {
    let good = small_index();
    read_all(&good).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let id = |field: &str, v: &str| format!("UPDATE meta SET value = json_set(value, '$.{field}', {v}) WHERE key = 'identity';");
    let cases: Vec<(&str, String, &str)> = vec![
        ("zero-groups", id("groups", "0"), "0 groups per layer"),
        ("zero-layers", id("n_layers", "0"), "0 layers"),
        ("wrapping", id("n_layers", "4294967296") + &id("groups", "4294967296"), "4294967296 layers"),
        ("huge-groups", id("groups", "4294967296"), "4294967296 groups"),
        ("zero-k", "UPDATE meta SET value = json_set(value, '$.settings.k', 0) WHERE key = 'identity';".into(), "top-k 0"),
        (
            "recursive-view",
            "DROP TABLE centroids; CREATE VIEW centroids AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) \
             SELECT 0 AS layer, x AS grp, 1 AS members, 1 AS held, 0.5 AS held_mass, '' AS label, '' AS rule, '[]' AS evidence, \
             '[]' AS histogram, '[]' AS by_category, '[]' AS lifted FROM r;"
                .into(),
            "the view 'centroids'",
        ),
        ("trigger", "CREATE TRIGGER t AFTER INSERT ON meta BEGIN DELETE FROM meta; END;".into(), "the trigger 't'"),
        ("other-table", "CREATE TABLE extra(x);".into(), "the table 'extra'"),
        ("negative-members", "UPDATE centroids SET members = -5 WHERE layer = 0 AND grp = 0;".into(), "out of range: -5"),
        ("no-vocab-row", "DELETE FROM vocab;".into(), "missing from its vocab table"),
        ("no-documents-table", "DROP TABLE documents;".into(), "no such table: documents"),
        ("bad-count", "UPDATE meta SET value = '-3' WHERE key = 'tokens';".into(), "tokens in the meta table is not a count"),
    ];
    for (name, sql, phrase) in cases {
        let p = edited(&good, &tmp.path().join(format!("{name}.focus-index")), &sql);
        let t = Instant::now();
        let e = read_all(&p).expect_err(name);
        assert!(t.elapsed() < Duration::from_secs(60), "{name}: {:?}", t.elapsed());
        assert!(e.contains(&p.display().to_string()) && e.contains(phrase), "{name}: {e}");
        assert_eq!(e.lines().count(), 1, "{name}: {e}");
    }
    // Counts SQLite's sum() overflows on: the dashboard still answers (a float total).
    let p = edited(&good, &tmp.path().join("overflow.focus-index"), "UPDATE centroids SET members = 9223372036854775807 WHERE layer = 0;");
    let e = Index::open(&p).unwrap().centroid(0, 1, 5).map(|_| ()).map_err(|e| e.to_string());
    assert!(e.is_ok(), "{e:?}");
    // The CLI: `bench centroids` on 0 groups panicked on an empty list of timings.
    let p = tmp.path().join("zero-groups.focus-index");
    let o = cli_within(&[os("bench"), os("centroids"), p.as_os_str()], &[], 120);
    one_error(&o, &["0 groups per layer"]);
    let o = cli_within(&[os("centroids"), tmp.path().join("negative-members.focus-index").as_os_str(), os("--layer"), os("0")], &[], 120);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("18446744073709551611"));
    one_error(&o, &["out of range"]);
}

/// A query that never ends on its own (a recursive one, as a hostile view would make) is
/// stopped by the reader's budget with an error naming the file.
#[test]
fn an_endless_query_ends_within_its_budget() {
    let ix = Index::open(&small_index()).unwrap();
    let t = Instant::now();
    let e = ix.store.sql(|c| c.query_row("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r", [], |r| r.get::<_, i64>(0))).unwrap_err().to_string();
    assert!(e.contains("did not finish within its budget") && e.contains("small.focus-index"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(120), "{:?}", t.elapsed());
}

/// `bench centroids` never writes the index it reads (`--scratch X` deleted and rewrote X), its
/// `--scratch` must be a new file (a folder said "Is a directory (os error 21)"), it times an
/// unfinished `.partial` through a finished copy, and an identity of 1000 layers x 64 groups is
/// refused with the memory figure before the 32.8 GB it would take is allocated.
#[test]
fn bench_centroids_writes_only_a_new_scratch_file() {
    let good = small_index();
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x.focus-index");
    std::fs::copy(&good, &x).unwrap();
    let before = std::fs::read(&x).unwrap();
    let o = cli_within(&[os("bench"), os("centroids"), x.as_os_str(), os("--scale-to"), os("1000"), os("--scratch"), x.as_os_str()], &[], 120);
    one_error(&o, &["already exists", &x.display().to_string()]);
    assert_eq!(std::fs::read(&x).unwrap(), before, "the index read was changed");
    let dir = tmp.path().join("adir");
    std::fs::create_dir_all(&dir).unwrap();
    let o = cli_within(&[os("bench"), os("centroids"), x.as_os_str(), os("--scale-to"), os("1000"), os("--scratch"), dir.as_os_str()], &[], 120);
    one_error(&o, &["is a folder that already exists", &dir.display().to_string()]);
    // An unfinished index, as its help says it takes.
    let partial = edited(&good, &tmp.path().join("y.focus-index.partial"), "UPDATE meta SET value = '0' WHERE key = 'complete';");
    let o = cli_within(&[os("bench"), os("centroids"), partial.as_os_str()], &[], 120);
    one_error(&o, &["unfinished", "--scratch"]);
    let copy = tmp.path().join("copy.focus-index");
    let o = cli_within(&[os("bench"), os("centroids"), partial.as_os_str(), os("--scratch"), copy.as_os_str(), os("--json")], &[], 300);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(b["tokens"].as_u64().unwrap() > 0 && b["documents"].as_u64() == Some(1), "{b}");
    let names: Vec<String> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains("focus-tmp") && !n.ends_with("-journal")), "{names:?}");
    // 1000 layers x 64 groups: (64,000)^2 co-membership counts, 32.8 GB, refused with the figure.
    let big = edited(&good, &tmp.path().join("big.focus-index"), "UPDATE meta SET value = json_set(json_set(value, '$.n_layers', 1000), '$.groups', 64) WHERE key = 'identity';");
    let scaled = tmp.path().join("scaled.focus-index");
    let o = cli_within(&[os("bench"), os("centroids"), big.as_os_str(), os("--scale-to"), os("100"), os("--scratch"), scaled.as_os_str()], &[("FOCUS_LENS_MEMORY", "8G")], 120);
    one_error(&o, &["not enough memory", "1000 layers x 64 groups", "32.7", "GB", "only 8.00 GB is available"]);
    assert!(!scaled.exists());
    // A FIFO where the index is expected: refused at once, never opened.
    let fifo = tmp.path().join("fifo.focus-index");
    mkfifo(&fifo);
    for cmd in [&[os("centroids"), fifo.as_os_str()][..], &[os("bench"), os("centroids"), fifo.as_os_str()][..]] {
        let o = cli_within(cmd, &[], 60);
        one_error(&o, &["not a regular file", &fifo.display().to_string()]);
    }
}

/// `index` reads and writes only where it is asked to (issue 51): a link out of the corpus
/// folder is skipped (its text was indexed and printed), a FIFO in the corpus is skipped, a
/// FIFO or a missing folder at `--out` is refused (a device was replaced), an `OUT.partial`
/// that links to another program's database is refused and left as it is (the index's tables
/// were added to it), a second build says another is running; file names are kept as bytes
/// (`caf\xe9.txt` and `caf\xe8.txt` were one document), an output name of 250 bytes is written,
/// skipped files are reported when stderr is not a terminal, and `centroids` prints the
/// corpus's escape sequences as visible text.
#[test]
fn index_reads_and_writes_only_where_asked() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "The SECRETWORD is never indexed.").unwrap();
    std::os::unix::fs::symlink("../outside/secret.txt", corpus.join("link.txt")).unwrap();
    std::fs::write(corpus.join("a.txt"), "The king \u{1b}[31mof\u{1b}[0m the north \u{1b}]0;pwned\u{7} said: of all the ships.").unwrap();
    let cafe = |b: u8| corpus.join(std::ffi::OsStr::from_bytes(&[b'c', b'a', b'f', b, b'.', b't', b'x', b't']));
    std::fs::write(cafe(0xe9), "One cafe of the town.").unwrap();
    std::fs::write(cafe(0xe8), "Another cafe of the harbour.").unwrap();
    mkfifo(&corpus.join("pipe.txt"));
    let a = adapter_dir();
    let out = tmp.path().join(format!("{}.idx", "n".repeat(246)));
    assert_eq!(out.file_name().unwrap().len(), 250);
    let index = |out: &Path| {
        let args = [os("index"), os("--adapter"), a.as_os_str(), os("--segment"), os("256"), os("--out"), out.as_os_str(), os("--json"), corpus.as_os_str()];
        cli_within(&args, &[], 600)
    };
    // Outputs refused before anything is written.
    let fifo = tmp.path().join("fifo.idx");
    mkfifo(&fifo);
    one_error(&index(&fifo), &["not a regular file", &fifo.display().to_string()]);
    let nowhere = tmp.path().join("missing/x.idx");
    one_error(&index(&nowhere), &["folder", "does not exist"]);
    let other = tmp.path().join("other.db");
    rusqlite::Connection::open(&other).unwrap().execute_batch("CREATE TABLE theirs(x); INSERT INTO theirs VALUES(1);").unwrap();
    let other_bytes = std::fs::read(&other).unwrap();
    let partial = focus_lens::index::build::partial_path(&out);
    assert!(partial.file_name().unwrap().len() <= 255 - 8, "{partial:?}");
    std::os::unix::fs::symlink(&other, &partial).unwrap();
    one_error(&index(&out), &["symbolic link"]);
    assert_eq!(std::fs::read(&other).unwrap(), other_bytes, "another program's database was written");
    assert!(std::fs::symlink_metadata(&partial).unwrap().is_symlink());
    std::fs::remove_file(&partial).unwrap();
    // A build under way (its lock held): a second says so.
    let held = std::fs::File::create(&partial).unwrap();
    held.lock().unwrap();
    one_error(&index(&out), &["another `focus-lens index`", "locked"]);
    drop(held);
    std::fs::remove_file(&partial).unwrap();

    let r = index(&out);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    // Without a terminal the notes are still printed.
    assert!(err.contains("skipped link.txt") && err.contains("skipped pipe.txt"), "{err}");
    let rep: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(rep["documents"].as_u64(), Some(3), "{rep}");
    let skipped = rep["skipped"].to_string();
    assert!(skipped.contains("outside the corpus folder") && skipped.contains("not a regular file"), "{skipped}");
    let ix = Index::open(&out).unwrap();
    let docs = ix.store.documents().unwrap();
    let names: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(names, ["a.txt", "caf\\xe8.txt", "caf\\xe9.txt"]);
    let texts: i64 = ix.store.conn.query_row("SELECT count(*) FROM documents WHERE text LIKE '%SECRETWORD%'", [], |r| r.get(0)).unwrap();
    assert_eq!(texts, 0);
    // Now up to date (two names that were one were never so).
    let r = index(&out);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&r.stdout).unwrap()["up_to_date"], true);
    // No control sequence reaches the terminal.
    let mut printed = cli_within(&[os("centroids"), out.as_os_str()], &[], 120).stdout;
    for g in 0..8 {
        let o = cli_within(&[os("centroids"), out.as_os_str(), os("--layer"), os("0"), os("--centroid"), os(&g.to_string())], &[], 120);
        assert!(o.status.success());
        printed.extend(o.stdout);
    }
    assert!(!printed.iter().any(|&b| b == 0x1b || b == 0x07), "{}", String::from_utf8_lossy(&printed));
    assert!(String::from_utf8_lossy(&printed).contains("\\u{1b}"), "the escapes are shown as text");
    let names: Vec<String> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.ends_with(".partial") && !n.contains("focus-tmp")), "{names:?}");
}

/// The build reads each text as it is when it is routed: a file grown past the 4 MiB limit
/// after the listing, or swapped for a link out of the folder, is refused then (the limit was
/// checked only when the folder was listed); names keep their bytes.
#[test]
fn corpus_texts_are_checked_when_read() {
    use focus_lens::index::build::{doc_name, read_document, MAX_DOC_BYTES};
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    std::fs::create_dir_all(&root).unwrap();
    let f = root.join("t.txt");
    std::fs::write(&f, "small").unwrap();
    assert_eq!(read_document(&f, &root).unwrap(), "small");
    std::fs::write(&f, vec![b'a'; MAX_DOC_BYTES as usize + 1]).unwrap();
    let e = read_document(&f, &root).unwrap_err().to_string();
    assert!(e.contains("at most 4194304"), "{e}");
    std::fs::write(tmp.path().join("secret.txt"), "secret").unwrap();
    std::fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink("../secret.txt", &f).unwrap();
    let e = read_document(&f, &root).unwrap_err().to_string();
    assert!(e.contains("outside the folder"), "{e}");
    let n = |b: &[u8]| doc_name(Path::new(std::ffi::OsStr::from_bytes(b)));
    assert_ne!(n(b"caf\xe9.txt"), n(b"caf\xe8.txt"));
    assert_ne!(n(b"a\\b.txt"), n(b"a/b.txt"));
    assert_eq!(n("sub/naïve.txt".as_bytes()), "sub/naïve.txt");
}

/// The corpus is streamed (issue 51: 1000 texts of 4 MiB were all read before routing began,
/// 4.9 GB): each text is read when its turn to be routed comes, and only it is held. While the
/// first document is routed, every other file is rewritten on disk; the index holds their new
/// texts, which a build that read (and kept) every text before routing could not have seen.
#[test]
fn the_corpus_is_read_one_text_at_a_time_as_it_is_routed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let names = ["a.txt", "b.txt", "c.txt"];
    let before = |n: &str| format!("The text {n} as it was listed: of all the ships, one of them is ours.");
    let after = |n: &str| format!("REWRITTEN {n} while the first document was routed, of course.");
    for n in names {
        std::fs::write(dir.join(n), before(n)).unwrap();
    }
    let out = tmp.path().join("s.focus-index");
    let ad = adapter_dir();
    let mut first: Option<String> = None;
    let report = build_index(&request(&dir, &out, &ad, adapter()), &AtomicBool::new(false), |_| {}, |p| {
        if first.is_none() && names.contains(&p.current.as_str()) {
            assert_eq!(p.docs_done, 0);
            first = Some(p.current.clone());
            for n in names.iter().filter(|n| **n != p.current) {
                std::fs::write(dir.join(n), after(n)).unwrap();
            }
        }
    })
    .unwrap();
    assert_eq!(report.routed, 3, "{report:?}");
    let first = first.expect("a document was routed");
    let ix = Index::open(&out).unwrap();
    for n in names {
        let text: String = ix.store.conn.query_row("SELECT text FROM documents WHERE path = ?1", [n], |r| r.get(0)).unwrap();
        let want = if n == first { before(n) } else { after(n) };
        assert_eq!(text, want, "{n} (the first routed: {first})");
    }
}

/// `index --out` into a folder that does not exist, or whose folder is a file: one error that
/// names the folder and says what is wrong (issue 51: "X.partial is not a readable Focus Lens
/// index"), nothing created. (A read-only folder cannot be tested here: the tests run as root,
/// who may write anywhere; that error is the system's "Permission denied" with the path.)
#[test]
fn index_output_folders_missing_or_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.txt"), "The king of the north said: of all the ships, one of them is ours.").unwrap();
    let a = adapter_dir();
    let index = |out: &Path| cli_within(&[os("index"), os("--adapter"), a.as_os_str(), os("--out"), out.as_os_str(), corpus.as_os_str()], &[], 300);
    let missing = tmp.path().join("missing");
    let e = one_error(&index(&missing.join("x.idx")), &[&format!("its folder {} does not exist", missing.display())]);
    assert!(!e.contains("partial") && !e.contains("readable"), "{e}");
    assert!(!missing.exists());
    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "a file").unwrap();
    let e = one_error(&index(&file.join("x.idx")), &[&format!("{} is not a folder", file.display())]);
    assert!(!e.contains("partial") && !e.contains("readable"), "{e}");
    one_error(&index(&file.join("sub/x.idx")), &["is not a folder", &format!("{} is a file", file.display())]);
    assert_eq!(std::fs::read(&file).unwrap(), b"a file");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "nothing else was created: {left:?}");
}
