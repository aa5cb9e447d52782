//! Linguistic categories, centroid profiles and the routing space, end to end: the categoriser's
//! accuracy on hand-labelled words of the sample text, categories of real tokenizer pieces, and
//! the profiles and projection of an analysis of the sample text with the sample adapter.

#[path = "common/mod.rs"]
mod common;

use focus_core::analysis::{analyze, AnalyzeOptions};
use focus_core::analysis::categories::{categorize_tokens, categorize_words, Category, Piece};
use focus_core::{Adapter, Model};

fn model() -> &'static Model {
    common::default_model()
}

fn sample() -> String {
    std::fs::read_to_string(common::root().join("assets/sample.txt")).unwrap()
}

/// Accuracy on tests/fixtures/categories_gold.tsv (words of the sample labelled by hand, in
/// context; a dev set and a held-out set). The categoriser works out of context, so it cannot be
/// perfect; the bar is 85% on words of each set (punctuation and digits, which are trivially right,
/// left out of that figure).
#[test]
fn accuracy_on_hand_labelled_words() {
    let text = sample();
    let words = categorize_words(&text);
    let gold = std::fs::read_to_string(common::fixture("categories_gold.tsv")).unwrap();
    for set in ["dev", "heldout", "test"] {
        let (mut all, mut all_ok, mut lex, mut lex_ok) = (0, 0, 0, 0);
        let mut errors = Vec::new();
        for line in gold.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 4, "{line}");
            if f[3] != set {
                continue;
            }
            let (i, word, want) = (f[0].parse::<usize>().unwrap(), f[1], Category::from_name(f[2]).expect(f[2]));
            let w = &words[i];
            assert_eq!(&text[w.start..w.end], word, "gold word {i} is not the text's word {i}");
            let ok = w.category == want;
            all += 1;
            all_ok += ok as usize;
            if !matches!(want, Category::Punctuation | Category::Number) {
                lex += 1;
                lex_ok += ok as usize;
            }
            if !ok {
                errors.push(format!("{word}: {} (gold {want})", w.category));
            }
        }
        let (acc_all, acc_words) = (all_ok as f64 / all as f64, lex_ok as f64 / lex as f64);
        println!("{set}: {all_ok}/{all} = {acc_all:.3} overall, {lex_ok}/{lex} = {acc_words:.3} on words");
        println!("{set} errors: {}", errors.join("; "));
        assert!(all >= 100, "{set} set too small: {all}");
        assert!(acc_words > 0.85, "{set}: accuracy on words {acc_words:.3}; errors: {errors:?}");
    }
}

/// A word the tokenizer cuts into pieces is categorised once, as a whole.
#[test]
fn real_tokenizer_pieces_share_their_word_category() {
    let text = "Sir Walter Elliot, of Kellynch Hall, was born in 1760; he walked to 1,200 houses.\n\n";
    let tok = model().tokenizer().unwrap();
    let enc = tok.encode(text, false).unwrap();
    let cats = categorize_tokens(text, &enc.offsets, &vec![false; enc.ids.len()]);
    let of = |word: &str| -> Vec<(Category, Piece)> {
        let at = text.find(word).unwrap();
        enc.offsets
            .iter()
            .zip(&cats)
            .filter(|((s, e), _)| *e > at && *s < at + word.len() && !text[*s..*e].trim().is_empty())
            .map(|(_, c)| (c.category, c.piece))
            .collect()
    };
    let kell = of("Kellynch");
    assert!(kell.len() >= 2, "Kellynch is one token? {kell:?}");
    assert_eq!(kell[0], (Category::Noun, Piece::First));
    assert!(kell[1..].iter().all(|&c| c == (Category::Noun, Piece::Continuation)), "{kell:?}");
    let num = of("1,200");
    assert!(num.len() >= 2 && num.iter().all(|c| c.0 == Category::Number), "{num:?}");
    assert_eq!(num[0].1, Piece::First);
    assert_eq!(of("walked"), vec![(Category::Verb, Piece::Whole)]);
    assert_eq!(of("houses"), vec![(Category::Noun, Piece::Whole)]);
    assert_eq!(of(";"), vec![(Category::Punctuation, Piece::Whole)]);
    // The trailing blank line is a whitespace token: other.
    assert_eq!(cats.last().unwrap().category, Category::Other);
    // Every token got a category, and the pieces of a word agree with its first piece.
    assert_eq!(cats.len(), enc.ids.len());
}

/// Records in a CSV text (RFC 4180: line breaks inside quotes do not end a record).
fn csv_records(s: &str) -> usize {
    let mut quoted = false;
    s.chars()
        .filter(|&c| {
            if c == '"' {
                quoted = !quoted;
            }
            c == '\n' && !quoted
        })
        .count()
}

#[test]
fn sample_analysis_profiles_and_routing_space() {
    let adapter_dir = common::root().join("sample_adapters/smollm2-135m-k8-init");
    let adapter = Adapter::load(&adapter_dir, &model().identity(), model().device()).unwrap();
    let text = sample();
    let opts = AnalyzeOptions { mode: focus_core::ModeKind::TopK, k: adapter.config.topk(2).unwrap(), segment_len: 1024, keep_tokens: false, cancel: None };
    let an = analyze(model(), &adapter, "sample", &text, &opts, |_, _| {}).unwrap();
    let (t, k, c) = (an.tokens.len(), an.groups, Category::COUNT);
    assert_eq!(an.profiles.len(), 30);
    // Token categories: every category that the sample must contain is there.
    for want in [Category::Punctuation, Category::Determiner, Category::Noun, Category::Verb, Category::Number] {
        assert!(an.tokens.iter().any(|tk| tk.category == want), "no {want} token");
    }
    assert!(an.tokens.iter().any(|tk| tk.piece == Piece::Continuation));
    for (l, p) in an.profiles.iter().enumerate() {
        assert_eq!(p.layer, l);
        assert_eq!(p.centroids.len(), k);
        assert_eq!(p.categories, Category::ALL.to_vec());
        let counted: usize = p.centroids.iter().map(|c| c.tokens).sum();
        assert_eq!(counted, t, "layer {l}: tokens counted {counted} of {t}");
        let mass: f64 = p.centroids.iter().flat_map(|c| c.mass_by_category.iter()).sum();
        assert!((mass - t as f64).abs() < 1e-3 * t as f64, "layer {l}: mass {mass}");
        for (g, cp) in p.centroids.iter().enumerate() {
            assert_eq!(cp.group, g);
            assert_eq!(cp.by_category.len(), c);
            assert_eq!(cp.by_category.iter().sum::<usize>(), cp.tokens);
            // The group's size by largest membership is the one the statistics report.
            assert_eq!(cp.tokens, an.layers[l].group_size[g], "layer {l} group {g}");
            assert!(!cp.label.is_empty());
            match cp.purity {
                Some(pur) => {
                    assert!((1.0 / c as f64 - 1e-12..=1.0).contains(&pur), "layer {l} group {g}: purity {pur}");
                    let top = cp.top_category.unwrap();
                    assert!(cp.label.contains(top.name()), "{}", cp.label);
                    let shares: f64 = cp.top_tokens.iter().map(|x| x.share).sum();
                    assert!(shares <= 1.0 + 1e-9 && !cp.top_tokens.is_empty());
                    assert!(cp.top_tokens.windows(2).all(|w| w[0].count >= w[1].count));
                }
                None => assert_eq!((cp.tokens, cp.label.as_str()), (0, "empty")),
            }
        }
    }
    // The exports carry categories and profiles.
    let json: serde_json::Value = serde_json::to_value(&an).unwrap();
    assert_eq!(json["profiles"].as_array().unwrap().len(), 30);
    assert!(json["tokens"][0]["category"].is_string() && json["tokens"][0]["piece"].is_string());
    // The statistics set's profiles (core's one writer), by raw centroid index.
    let shown = focus_core::analysis::shown::ShownAnalysis::new(an.clone());
    let structure = focus_core::analysis::structure::StructureReport::of_analysis(&an, None);
    let pcsv = focus_core::analysis::export::StatsExport::new(&shown, focus_core::analysis::shown::Numbering::Raw, &structure).profiles_csv();
    assert_eq!(pcsv.lines().count(), 1 + 30 * k);
    assert!(pcsv.lines().next().unwrap().starts_with("layer,group,group_raw,tokens,label,top_category,purity,n_punctuation"));
    assert_eq!(csv_records(&an.tokens_csv()), 1 + t);

    // Routing space of one layer: as many points as tokens, K centroids, variance shares that
    // are sorted and sum to at most 1; the points' variance along each axis is its eigenvalue.
    let p = an.projection(&adapter, 5).unwrap();
    assert_eq!((p.points.len(), p.centroids.len(), p.d_g), (t, k, 16));
    assert!(p.explained[0] >= p.explained[1] && p.explained[0] + p.explained[1] <= 1.0 + 1e-12 && p.explained[1] > 0.0);
    for a in 0..2 {
        let mean = p.points.iter().map(|x| x[a]).sum::<f64>() / t as f64;
        let var = p.points.iter().map(|x| (x[a] - mean).powi(2)).sum::<f64>() / (t - 1) as f64;
        assert!(mean.abs() < 1e-6 * p.eigenvalues[0].sqrt(), "axis {a} mean {mean}");
        assert!((var - p.eigenvalues[a]).abs() < 1e-6 * p.eigenvalues[0], "axis {a}: var {var} vs {}", p.eigenvalues[a]);
    }
    assert!(an.projection(&adapter, 30).is_err());
}

/// `focus-lens analyze --labels` prints the best layer's centroid table and writes the category CSVs.
#[test]
fn cli_prints_labels_and_writes_category_csvs() {
    let tmp = tempfile::tempdir().unwrap();
    let text: String = sample().chars().take(1500).collect();
    let f = tmp.path().join("s.txt");
    std::fs::write(&f, &text).unwrap();
    let out = tmp.path().join("stats.csv");
    let adapter = common::root().join("sample_adapters/smollm2-135m-k8-init");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens"))
        .env("FOCUS_LENS_MODEL", common::model_path())
        .args(["analyze", "--labels", "--adapter"])
        .arg(&adapter)
        .arg(&f)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8(o.stdout).unwrap();
    // The best layer's table: one row per group, G0..G7.
    assert!(stdout.contains("(best: highest token-weighted purity)") && stdout.contains("\nG7 "), "{stdout}");
    assert!(stdout.contains('%'), "{stdout}");
    let profiles = std::fs::read_to_string(tmp.path().join("stats.profiles.csv")).unwrap();
    assert_eq!(profiles.lines().count(), 1 + 30 * 8);
    let tokens = std::fs::read_to_string(tmp.path().join("stats.tokens.csv")).unwrap();
    assert!(tokens.lines().nth(1).unwrap().contains(",noun,"), "{}", tokens.lines().nth(1).unwrap());
}

/// The routing-space PCA against an independent reference: numpy.linalg.eigh in f64
/// (tests/fixtures/pca_reference.json, made by scripts/gen-pca-reference.py).
#[test]
fn pca_matches_numpy() {
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("pca_reference.json")).unwrap()).unwrap();
    let f32s = |key: &str| -> Vec<f32> { r[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect() };
    let f64s = |v: &serde_json::Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    let (t, d, k) = (r["t"].as_u64().unwrap() as usize, r["d"].as_u64().unwrap() as usize, r["k"].as_u64().unwrap() as usize);
    let p = focus_core::analysis::projection::pca_2d(&f32s("vectors"), t, d, &f32s("centroids"), k).unwrap();
    let close = |a: f64, b: f64, what: &str| assert!((a - b).abs() <= 1e-9 * (1.0 + b.abs()), "{what}: {a} vs numpy {b}");
    for (i, (a, b)) in p.eigenvalues.iter().zip(f64s(&r["eigenvalues"])).enumerate() {
        close(*a, b, &format!("eigenvalue {i}"));
    }
    for a in 0..2 {
        close(p.explained[a], f64s(&r["explained"])[a], "explained");
        for (j, b) in f64s(&r["axes"][a]).into_iter().enumerate() {
            close(p.axes[a][j], b, &format!("axis {a}[{j}]"));
        }
    }
    for (i, row) in r["points"].as_array().unwrap().iter().enumerate() {
        let b = f64s(row);
        close(p.points[i][0], b[0], "point x");
        close(p.points[i][1], b[1], "point y");
    }
    for (i, row) in r["centroid_points"].as_array().unwrap().iter().enumerate() {
        let b = f64s(row);
        close(p.centroids[i][0], b[0], "centroid x");
        close(p.centroids[i][1], b[1], "centroid y");
    }
}
