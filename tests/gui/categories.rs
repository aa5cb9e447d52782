//! The Categories view: groups lined up across layers, the purity heatmap and curve, the structure
//! against the untrained twin (run once per result), and its fit in the window.

use crate::common::{self, TestResult};
use crate::harness::{click_menu, no_errors, settle, started};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_lens::gui::state::InputKind;
use focus_lens::gui::worker::TaskKind;
use focus_lens::gui::FocusLensApp;

/// Groups line up: matched numbers make a layer's group with the most tokens in common with
/// the previous layer's group g show as g; the raw toggle shows the centroids' numbers; the
/// categories view has a layer x group purity heatmap with lift.
#[test]
fn groups_line_up_and_purity_heatmap() -> TestResult {
    let (dir, mut h) = started(300);
    let res = h.state().session.result.clone().unwrap();
    for l in 1..res.layers() {
        let m = &res.aligned[l];
        let mut sorted = m.clone();
        sorted.sort();
        assert_eq!(sorted, (0..res.groups()).collect::<Vec<_>>(), "layer {l}: a permutation");
    }
    // Matched numbers agree more across adjacent layers than raw ones do.
    let agree = |raw: bool| -> usize {
        (1..res.layers())
            .map(|l| (0..res.tokens()).filter(|&i| res.shown_group(l, res.argmax[l][i] as usize, raw) == res.shown_group(l - 1, res.argmax[l - 1][i] as usize, raw)).count())
            .sum()
    };
    assert!(agree(false) > agree(true), "matched {} vs raw {}", agree(false), agree(true));
    // The mask's tooltip says whether a pair is kept, and why.
    use focus_lens::gui::views::mask::pair_reason;
    let w = res.window();
    assert!(pair_reason(&res, 7, 20, 10, false).starts_with("kept: local (i - j = 10"));
    assert!(pair_reason(&res, 7, 10, 20, false).contains("causal"));
    let m = &res.masks[7];
    // (Keys among the adapter's first `sink` tokens are always kept.)
    let pruned = (w + 1..res.tokens()).find_map(|i| (res.sink()..i - w).find(|&j| m[i] & m[j] == 0).map(|j| (i, j))).expect("a pruned pair");
    assert!(pair_reason(&res, 7, pruned.0, pruned.1, false).starts_with("pruned: no shared group"));
    // The routing space projects what the scores use: for a dot-product adapter the raw vectors
    // and centroids; for a cosine one, the PCA of them normalised to unit length (made here).
    // The sample adapter is checked with its own score, the cosine path again at the end (an
    // untrained cosine adapter).
    use focus_lens::gui::state::AnalysisResult;
    use focus_lens::gui::views::routing;
    let unit_pca = |res: &AnalysisResult, l: usize| {
        let r = &res.analysis.routing[l];
        let unit = |v: &[f32], d: usize| -> Vec<f32> { v.chunks(d).flat_map(|r| { let n = r.iter().map(|x| x * x).sum::<f32>().sqrt(); r.iter().map(move |x| x / n) }).collect() };
        let cent = res.adapter.layers[l].centroids.to_dtype(candle_core::DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        focus_core::analysis::projection::pca_2d(&unit(r.vectors.as_ref().unwrap(), r.d_g), r.t, r.d_g, &unit(&cent, r.d_g), res.groups()).unwrap()
    };
    let raw = |res: &AnalysisResult, l: usize| res.analysis.projection(&res.adapter, l).unwrap();
    let cosine = res.adapter.config.score == focus_core::Score::Cosine;
    assert_eq!(routing::cosine(&res), cosine);
    assert_eq!(routing::projection(&res, 7)?, if cosine { unit_pca(&res, 7) } else { raw(&res, 7) });
    let shared = (w + 1..res.tokens()).find_map(|i| (res.sink()..i - w).find(|&j| m[i] & m[j] != 0).map(|j| (i, j))).expect("a shared pair");
    let g = (m[shared.0] & m[shared.1]).trailing_zeros() as usize;
    assert!(pair_reason(&res, 7, shared.0, shared.1, false).starts_with(&format!("kept: both in group g{}", res.shown_group(7, g, false))));
    h.get_by_label("raw group indices").click();
    h.step();
    assert!(h.state().settings.setup.raw_groups);

    h.get_by_label("Categories").click();
    h.step();
    h.get_by_label("all layers: purity heatmap").click();
    h.step();
    h.step();
    assert!(h.query_by_label_contains("Base rates in this text").is_some());
    // Whole abbreviations with their key (not "othe", "dete"), and a colour scale.
    assert!(h.query_by_label_contains("abbreviations: punct = punctuation, det = determiner").is_some());
    assert!(h.query_by_label("purity:").is_some(), "the colour scale's legend");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-categories-layer{layer}.svg")))?;
    assert!(svg.contains("lift over its base rate") && svg.contains("layer 29"));
    assert!(svg.contains("det = determiner") && svg.contains(">100%<") && !svg.contains("othe ") && !svg.contains("dete "));

    // A cosine adapter (an untrained one written here: the shipped adapters score by dot
    // product): the routing space shows unit-length vectors and centroids, not the raw ones.
    let model = common::default_model();
    let spec = focus_core::AdapterSpec { score: focus_core::Score::Cosine, ..Default::default() };
    let cos_dir = dir.path().join("cosine-adapter");
    focus_core::Adapter::random(&model.identity(), &candle_core::Device::Cpu, &spec, 0)?.save(&cos_dir)?;
    h.state_mut().open(InputKind::Adapter, cos_dir);
    settle(&mut h);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    assert!(routing::cosine(&res), "the cosine adapter is drawn as one");
    let shown = routing::projection(&res, 7)?;
    assert_eq!(shown, unit_pca(&res, 7));
    assert_ne!(shown, raw(&res, 7), "not the raw vectors");
    Ok(())
}

/// Opens the Categories view's chart `label` (one drawn against the untrained twin) and steps
/// two frames.
fn twin_chart(h: &mut Harness<'static, FocusLensApp>, label: &str) {
    h.get_by_label("Categories").click();
    h.step();
    h.get_by_label(label).click();
    h.step();
    h.step();
}

/// The categories view's structure: per layer NMI(top group, category) against the untrained
/// twin and the permutation null, the other NMIs, and the best layer's table in the paper's
/// form, computed in the background once per analysis; the adapter's figures are core's
/// `structure::of_analysis` of the analysis on screen.
#[test]
fn structure_against_the_untrained_twin() {
    let (dir, mut h) = started(200);
    no_errors(&h);
    twin_chart(&mut h, "structure vs untrained");
    assert!(h.state().is_running(TaskKind::Baseline), "the twin is a background task");
    assert!(h.query_by_label_contains("analysing the same tokens with the untrained adapter").is_some());
    settle(&mut h);
    no_errors(&h);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let b = h.state().views.categories.baseline_for(&res).expect("the twin of the analysis on screen");
    let r = &b.structure;
    let twin = r.twin.as_ref().expect("the twin's structure");
    assert_eq!((r.adapter.layers.len(), twin.layers.len(), r.twin_seed), (30, 30, Some(0)));
    let want = focus_core::analysis::structure::of_analysis(&res.analysis);
    assert_eq!(r.adapter, want, "the view measures what core measures on the analysis");
    assert!(r.adapter.layers.iter().zip(&twin.layers).any(|(a, t)| a.category.value != t.category.value), "the trained sample differs from its twin");
    let t = r.table.as_ref().expect("the best layer's table");
    assert_eq!(t.layer, r.adapter.best_layer().unwrap().layer);
    assert_eq!(t.rows.iter().map(|r| r.tokens).sum::<usize>(), res.tokens());
    for text in ["median NMI(top group, category) over layers >= 1", &format!("paper-form table of the best layer ({})", t.layer)] {
        assert!(h.query_by_label_contains(text).is_some(), "{text:?} is not shown");
    }
    for header in ["most frequent tokens (count)", "NMI(cat)", "NMI(repeat)", "dominance"] {
        assert!(h.query_by_label(header).is_some(), "no column {header:?}");
    }
    // The largest group's row: its most frequent tokens with their counts.
    let big = t.rows.iter().max_by_key(|r| (r.tokens, std::cmp::Reverse(r.group))).unwrap();
    assert!(h.query_by_label(&focus_core::analysis::structure::PaperTable::tokens_of(big)).is_some());
    // Once per analysis: the purity curve uses the same twin, and starts nothing.
    h.get_by_label("purity by layer vs untrained").click();
    h.step();
    h.step();
    assert!(!h.state().is_running(TaskKind::Baseline));
    h.get_by_label("structure vs untrained").click();
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-categories-layer{layer}.svg"))).unwrap();
    assert!(svg.contains("NMI(top group, category) per layer") && svg.contains("untrained (seed 0)") && svg.contains("null (max)"));
}

/// The categories view's purity curve: per layer, the token-weighted purity of the adapter on
/// screen against its untrained twin (a random init with the same config and seed), computed in
/// the background; the twin's figures equal an analysis with `Adapter::random` made here.
#[test]
fn purity_curve_against_the_untrained_adapter() -> TestResult {
    use focus_lens::gui::views::categories::purity_curve;
    let (dir, mut h) = started(200);
    no_errors(&h);
    twin_chart(&mut h, "purity by layer vs untrained");
    assert!(h.state().is_running(TaskKind::Baseline), "the untrained run is a background task");
    assert!(h.query_by_label_contains("analysing the same tokens with the untrained adapter").is_some());
    settle(&mut h);
    no_errors(&h);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let b = h.state().views.categories.baseline_for(&res).expect("the baseline of the analysis on screen");
    assert_eq!((b.purity.len(), b.seed), (30, 0));
    assert!(b.trained, "the sample adapter records its training");
    // The same figures from an independent run: the untrained adapter built by hand.
    let c = &res.adapter.config;
    let spec = c.spec();
    let twin = focus_core::Adapter::random(&res.model.identity(), res.model.device(), &spec, 0)?;
    let text: String = res.analysis.tokens.iter().map(|t| t.text.as_str()).collect();
    let opts = focus_core::analysis::AnalyzeOptions { mode: res.mode.kind(), k: res.key.params.topk(res.adapter.config.groups).unwrap(), segment_len: res.analysis.segment_len, keep_tokens: false, cancel: None };
    let want = focus_core::analysis::analyze(&res.model, &twin, "twin", &text, &opts, |_, _| {})?;
    for (l, p) in want.profiles.iter().enumerate() {
        let got = b.purity[l].unwrap();
        assert!((got - p.purity()).abs() < 1e-12, "layer {l}: {got} vs {}", p.purity());
    }
    // The trained curve is the analysis' own profiles; they differ from the twin's.
    let trained = purity_curve(&res);
    assert_eq!(trained.len(), 30);
    assert!(trained.iter().zip(&b.purity).any(|(a, b)| (a.unwrap() - b.unwrap()).abs() > 1e-6));
    assert!(h.query_by_label_contains("Untrained twin (a random init with this adapter's config and seed 0").is_some());
    // Computed once per analysis: showing the view again starts nothing.
    h.step();
    assert!(!h.state().is_running(TaskKind::Baseline));
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-categories-layer{layer}.svg")))?;
    assert!(svg.contains("token-weighted purity per layer") && svg.contains("untrained (seed 0)"), "the curve is exported");
    Ok(())
}

/// The categories matrix and its per-group lines fit the central view at 1400 x 900 (they used
/// to run off to the right, behind a horizontal scroll bar).
#[test]
fn categories_fit_the_window() {
    let (_dir, mut h) = started(300);
    h.get_by_label("Categories").click();
    h.step();
    h.step();
    let view = h.state().views.rect.expect("the central view");
    let purity = h.get_by_label("purity").rect();
    assert!(purity.right() <= view.right() + 1.0, "purity column at {purity:?}, view {view:?}");
    let lines = h.get_all_by_label_contains("(mixed").chain(h.get_all_by_label_contains("%): ")).map(|n| n.rect()).collect::<Vec<_>>();
    assert!(!lines.is_empty(), "the label and top tokens of each group");
    for r in lines {
        assert!(r.right() <= view.right() + 1.0, "a group's line at {r:?} runs past the view {view:?}");
    }
}

/// The untrained twin runs once per result: visiting Categories again, switching its modes or
/// exporting does not start it again.
#[test]
fn the_untrained_twin_runs_once_per_result() {
    use focus_lens::gui::worker::TaskKind;
    let (_dir, mut h) = started(120);
    twin_chart(&mut h, "purity by layer vs untrained");
    assert!(h.state().is_running(TaskKind::Baseline));
    settle(&mut h);
    let res = h.state().session.result.clone().unwrap();
    assert!(h.state().views.categories.baseline_for(&res).is_some());
    for tab in ["Tokens", "Balance", "Categories", "Mask", "Categories"] {
        h.get_by_label(tab).click();
        for _ in 0..4 {
            h.step();
            assert!(!h.state().is_running(TaskKind::Baseline), "the twin ran again after visiting {tab}");
        }
        settle(&mut h);
    }
    h.get_by_label("structure vs untrained").click();
    for _ in 0..4 {
        h.step();
        assert!(!h.state().is_running(TaskKind::Baseline), "the twin ran again for the structure view");
    }
}
