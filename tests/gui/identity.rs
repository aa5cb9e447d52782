//! One identity per group (issue 50, item 1): a group has one number and one colour on every
//! surface (the views, their SVG exports, Intervene, Generate, the Centroids view), kept when k,
//! the mode or the text change (the same adapter's centroids), and raw indices, when asked
//! for, are named raw (c0, c1, ...) everywhere at once.

use crate::common::TestResult;
use crate::harness::{click_menu, has, harness, harness_at, no_errors, settings, settle, started, type_into};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_core::analysis::shown::Numbering;
use focus_core::ModeKind;
use focus_lens::gui::paint::palette;
use focus_lens::gui::state::Tab;
use focus_lens::gui::views::intervene::Kind;
use focus_lens::gui::FocusLensApp;
use std::path::Path;

type H = Harness<'static, FocusLensApp>;

/// The contents of an SVG's text elements, in document order.
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text ").skip(1).filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.to_string())).collect()
}

/// The one SVG file the last export wrote into `dir` whose name contains `part`.
fn exported_svg(dir: &Path, part: &str) -> String {
    let f = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|e| e == "svg") && p.file_name().unwrap().to_string_lossy().contains(part));
    std::fs::read_to_string(f.unwrap_or_else(|| panic!("no SVG named *{part}* in {}", dir.display()))).unwrap()
}

/// A layer whose groups are not shown by their raw indices (layer 0 always is).
fn permuted_layer(h: &H) -> usize {
    let res = h.state().session.result.clone().unwrap();
    (1..res.layers()).find(|&l| (0..res.groups()).filter(|&g| res.shown_group(l, g, false) != g).count() >= 4).expect("a layer whose numbers are not the raw indices")
}

/// The Balance and Categories SVGs name, order and colour groups as the screen does; the
/// Intervene dialog and its result line use the screen's numbers; the Centroids view numbers
/// an index built with the loaded adapter as every other view does.
#[test]
fn every_surface_names_a_group_as_the_screen_does() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let mut h = harness_at(settings(300), tmp.path(), egui::vec2(1600.0, 1400.0));
    settle(&mut h);
    no_errors(&h);
    let layer = permuted_layer(&h);
    h.state_mut().settings.setup.layer = layer;
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let (_, raw_of) = res.numbers(layer, Numbering::Shown);
    let raw_of: Vec<usize> = raw_of.into_iter().map(Option::unwrap).collect();

    // Balance SVG: bars under g0, g1, ... in order, each with the mass of the raw centroid the
    // screen shows under that number, and a swatch in that number's colour.
    h.state_mut().settings.setup.tab = Tab::Balance;
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let svg = exported_svg(tmp.path(), "balance");
    let chart = svg.split("dominance per layer").next().unwrap();
    let names: Vec<String> = svg_texts(chart).into_iter().filter(|t| t.starts_with('g') && t[1..].parse::<usize>().is_ok()).collect();
    assert_eq!(names, (0..res.groups()).map(|n| format!("g{n}")).collect::<Vec<_>>(), "the bars in shown order");
    for n in 0..res.groups() {
        assert!(chart.contains(&format!("fill=\"{}\"", palette::hex(palette::group(n)))), "g{n}'s swatch in its colour");
    }
    // The "before Sinkhorn" bars' heights are proportional to the shown groups' masses.
    let heights: Vec<f64> = chart
        .split("<rect ")
        // The bars, not the legend's key (right of the plot, x >= 480).
        .filter(|r| r.contains("fill=\"#9ecae1\"") && r.split("x=\"").nth(1).unwrap().split('"').next().unwrap().parse::<f64>().unwrap() < 470.0)
        .map(|r| r.split("height=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
        .collect();
    let mass = &res.analysis.layers[layer].mass_before;
    assert_eq!(heights.len(), res.groups());
    for n in 1..res.groups() {
        let (got, want) = (heights[n] / heights[0], mass[raw_of[n]] / mass[raw_of[0]]);
        assert!((got - want).abs() < 2e-3 * want.max(1.0), "g{n}: bar ratio {got} vs mass ratio {want}");
    }

    // Categories SVG (one layer): rows g0, g1, ... each with the category counts of the raw
    // centroid shown by that number.
    h.state_mut().settings.setup.tab = Tab::Categories;
    h.step();
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let svg = exported_svg(tmp.path(), "categories");
    let texts = svg_texts(&svg);
    let profile = &res.analysis.profiles[layer];
    let ncat = profile.categories.len();
    for n in 0..res.groups() {
        let at = texts.iter().position(|t| *t == format!("g{n}")).unwrap_or_else(|| panic!("a row g{n}: {texts:?}"));
        let counts: Vec<usize> = texts[at + 1..at + 1 + ncat].iter().map(|t| t.parse().unwrap()).collect();
        let c = profile.centroids.iter().find(|c| c.group == raw_of[n]).unwrap();
        assert_eq!(counts, c.by_category, "row g{n} is centroid {}", raw_of[n]);
    }

    // Intervene: ablate g3; the result line names g3 and its centroid, never a bare raw index.
    h.get_by_label("Intervene…").click();
    for _ in 0..4 {
        h.step();
    }
    h.state_mut().views.intervene.kind = Kind::Ablate;
    h.state_mut().views.intervene.group = 3;
    h.step();
    assert!(has(&h, &format!("g3 of layer {layer} is the router's group {}", raw_of[3])));
    h.get_by_label("Run intervention").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    let note = h.state().views.compare.result.as_ref().unwrap().note.clone().unwrap();
    assert!(note.contains(&format!("Intervention: ablate g3 (centroid {}) at layer {layer}", raw_of[3])), "{note}");
    assert!(!note.contains("G3") && !note.contains("router group indices"), "{note}");
    h.state_mut().views.intervene.open = false;

    // Centroids: an index built with the loaded adapter names its centroids by the screen's
    // numbers, in the screen's colours, and its layer box is the app's layer.
    h.get_by_label(Tab::Centroids.label()).click();
    h.step();
    let dir = tmp.path().join("corpus");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("a.txt"), res.analysis.tokens.iter().map(|t| t.text.as_str()).collect::<String>())?;
    type_into(&mut h, "Corpus folder:", &dir.display().to_string());
    type_into(&mut h, "Index file:", &tmp.path().join("c.focus-index").display().to_string());
    h.get_by_label("Build index").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().views.centroids.layer, layer, "the layer box is the app's layer");
    h.state_mut().views.centroids.select(layer, raw_of[3]);
    h.step();
    h.step();
    assert!(has(&h, "numbered and coloured as in every other view"));
    assert!(has(&h, &format!("layer {layer} g3 (centroid {}): ", raw_of[3])), "the dashboard's heading names g3");
    Ok(())
}

/// Another k, another mode, a generation: the same adapter's centroids keep their numbers (and
/// so their colours) in every layer.
#[test]
fn numbers_stay_with_k_mode_and_generation() {
    let (_dir, mut h) = started(300);
    no_errors(&h);
    let first = h.state().session.result.clone().unwrap();
    assert_eq!(first.key.params.k, 2);
    h.state_mut().settings.setup.params.k = 3;
    settle(&mut h);
    no_errors(&h);
    let k3 = h.state().session.result.clone().unwrap();
    assert_eq!(k3.key.params.k, 3);
    assert_ne!(k3.masks, first.masks, "k = 3 routes other top-k sets");
    assert_eq!(k3.aligned, first.aligned, "k = 3 keeps every centroid's number");
    h.state_mut().settings.setup.params.mode = ModeKind::Soft;
    settle(&mut h);
    no_errors(&h);
    let soft = h.state().session.result.clone().unwrap();
    assert_eq!(soft.aligned, first.aligned, "soft mode keeps every centroid's number");

    // A generation (its own tokens) numbers its groups as the analysis does.
    h.state_mut().settings.setup.params.mode = ModeKind::TopK;
    h.state_mut().settings.setup.params.k = 2;
    settle(&mut h);
    h.get_by_label("Generate").click();
    h.step();
    h.state_mut().views.generate.prompt = "The letter came on a Tuesday, and she read it twice before she".into();
    h.state_mut().settings.prefs.generate.sampling.max_tokens = 4;
    h.step();
    h.get_by_label("Start generating").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    let run = h.state().views.generate.run.clone().expect("a generation");
    for (l, gl) in run.layers.iter().enumerate() {
        assert_eq!(gl.aligned, first.aligned[l], "layer {l}: Generate numbers the groups as the analysis");
    }
}

/// "raw group indices": every surface says raw indices as c0, c1, ..., never as a g-number.
#[test]
fn raw_indices_are_named_raw_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), tmp.path());
    settle(&mut h);
    no_errors(&h);
    h.get_by_label("raw group indices").click();
    h.step();
    h.step();
    assert!(h.state().settings.setup.raw_groups);
    let res = h.state().session.result.clone().unwrap();
    let layer = h.state().settings.setup.layer.min(res.layers() - 1);
    let g = res.argmax[layer][0] as usize;
    assert!(has(&h, &format!("c{g} {}", res.labels[layer][g])), "the Tokens legend names raw c{g}");
    assert!(!has(&h, &format!("g{g} {}", res.labels[layer][g])));
    h.state_mut().settings.setup.tab = Tab::Balance;
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let texts = svg_texts(&exported_svg(tmp.path(), "balance"));
    assert!(texts.iter().any(|t| t == "c0") && !texts.iter().any(|t| t == "g0"), "{texts:?}");
    h.get_by_label("Intervene…").click();
    for _ in 0..4 {
        h.step();
    }
    assert!(has(&h, "is the router's own index"), "the Intervene window says its numbers are raw");
}

/// A pinned run numbers later runs: another adapter on the same tokens by its match to the
/// pinned run, and the pinned adapter again by the pinned numbers, whatever ran in between.
#[test]
fn a_pinned_run_numbers_later_runs() {
    let (_dir, mut h) = started(300);
    no_errors(&h);
    let first = h.state().session.result.clone().unwrap();
    h.get_by_label("pin these group numbers").click();
    h.step();
    assert!(h.state().session.ids.as_ref().is_some_and(|i| i.pinned));
    h.state_mut().open(focus_lens::gui::state::InputKind::Adapter, crate::common::root().join("sample_adapters/smollm2-135m-k4"));
    settle(&mut h);
    no_errors(&h);
    let k4 = h.state().session.result.clone().unwrap();
    assert_eq!(k4.groups(), 4);
    assert_eq!(k4.aligned, focus_core::analysis::align::to_reference(&first.masks, &first.aligned, &k4.masks, 4), "K = 4 numbered by its match to the pinned run");
    assert!(k4.aligned_to.is_some());
    h.step();
    assert!(has(&h, "matched, layer by layer, to the reference run"));
    // Back to the pinned adapter: its pinned numbers, not a match to the K = 4 run.
    h.state_mut().use_default(focus_lens::gui::state::InputKind::Adapter);
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().session.result.as_ref().unwrap().aligned, first.aligned);
}
