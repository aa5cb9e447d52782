//! The desktop app driven headlessly through egui_kittest, on its real state: the real default
//! model (SmolLM2-135M) and the embedded sample adapter, a few hundred tokens per analysis.

#[path = "common/mod.rs"]
mod common;
#[path = "common/gui_harness.rs"]
mod gui_harness;

use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use focus_lens::gui::state::{BenchKind, InputKind, ModeChoice, Settings, Tab};
use focus_lens::gui::worker::TaskKind;
use focus_lens::gui::FocusLensApp;
use std::path::Path;
use std::time::{Duration, Instant};
use gui_harness::{click_menu, harness, has, no_errors, settings, settle};

#[test]
fn gui_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());

    // Start-up: a finished analysis of the sample text without any click.
    settle(&mut h);
    no_errors(&h);
    let r = h.state().session.result.clone().expect("an analysis at start-up");
    assert_eq!(r.tokens(), 300);
    assert_eq!(r.layers(), 30);
    assert_eq!(r.analysis.mode, "topk(2)");

    // Open a text file as a user does: File → Open text…, click the path field, type, open.
    let text = dir.path().join("text.txt");
    let body = "The cat sat on the mat. ".repeat(40);
    std::fs::write(&text, &body).unwrap();
    type_path_and_open(&mut h, "Open text…", &text, "Open as text");
    settle(&mut h);
    no_errors(&h);
    let r = h.state().session.result.clone().unwrap();
    let joined: String = r.analysis.tokens.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(joined, body, "the view shows the opened text");
    assert!(h.state().settings.prefs.recent.iter().any(|(k, p)| *k == InputKind::Text && *p == text), "recent files list");

    // Switch mode (a control click re-runs in the background) and layer.
    h.get_by_label("dense").click();
    settle(&mut h);
    let r = h.state().session.result.clone().unwrap();
    assert_eq!(r.key.params.mode, ModeChoice::Dense);
    assert_eq!(r.analysis.mode, "dense");
    h.get_by_label("top-k").click();
    settle(&mut h);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "topk(2)");
    h.state_mut().settings.setup.layer = 7;
    h.step();

    // Each panel opens; the mask's exact counts agree with the analysis' pair statistics.
    for tab in Tab::ALL {
        h.get_by_label(tab.label()).click();
        settle(&mut h);
        assert_eq!(h.state().settings.setup.tab, tab);
        no_errors(&h);
        if tab == Tab::Mask {
            let app = h.state();
            let res = app.session.result.as_ref().unwrap();
            let m = app.views.mask.current(&res.key, 7).expect("mask image for layer 7");
            let p = &res.analysis.layers[7].pairs;
            assert_eq!((m.local, m.same_group), (p.local, p.same_group_distant));
            assert_eq!(m.local + m.same_group + m.pruned, p.causal);
            assert!(m.pruned > 0, "960 tokens with w = 128 prune some pairs");
        }
    }

    // Exports: statistics (CSV, JSON) and the current view as SVG (written atomically).
    h.get_by_label("Balance").click();
    h.step();
    for item in ["Statistics as CSV…", "Statistics as JSON…", "Current view as SVG…"] {
        click_menu(&mut h, "Export", item);
    }
    no_errors(&h);
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-stats.csv")).unwrap();
    assert!(csv.starts_with("layer,group,group_raw,size"));
    assert_eq!(csv.lines().count(), 1 + 30 * 8);
    // The CSV set of `focus-lens analyze`: category profiles and tokens beside it.
    let profiles = std::fs::read_to_string(dir.path().join("focus-lens-stats.profiles.csv")).expect("profiles CSV");
    assert!(profiles.starts_with("layer,group,group_raw,tokens,label,top_category,purity"));
    assert_eq!(profiles.lines().count(), 1 + 30 * 8);
    let tokens_csv = std::fs::read_to_string(dir.path().join("focus-lens-stats.tokens.csv")).expect("tokens CSV");
    assert_eq!(tokens_csv.lines().count(), 1 + r.tokens());
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json")).unwrap()).unwrap();
    assert_eq!(json["tokens"].as_array().unwrap().len(), r.tokens());
    // The JSON says where everything came from and how it ran.
    let pv = &json["provenance"];
    assert!(pv["adapter_path"].as_str().unwrap().contains("smollm2-135m-k8"), "{pv}");
    assert_eq!(pv["text_path"].as_str().unwrap(), text.display().to_string());
    assert_eq!(pv["text_sha256"].as_str().unwrap(), focus_lens::gui::export::sha256_hex(body.as_bytes()));
    assert_eq!(pv["settings"]["mode"], "topk(2)");
    assert_eq!(pv["settings"]["k"], 2);
    assert_eq!(pv["settings"]["layer"], 7);
    assert!(pv["settings"]["window"].as_u64().is_some() && pv["settings"]["causal_sinkhorn"].is_boolean() && pv["settings"]["max_tokens"].as_u64() == Some(300));
    let svg = std::fs::read_to_string(dir.path().join("focus-lens-balance-layer7.svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>") && svg.contains("dominance per layer"));
    assert!(svg.contains("rotate(-90"), "axis titles turned along the y axis");
    for tab in [Tab::Tokens, Tab::Mask] {
        h.get_by_label(tab.label()).click();
        settle(&mut h);
        click_menu(&mut h, "Export", "Current view as SVG…");
        no_errors(&h);
    }
    let tok_svg = std::fs::read_to_string(dir.path().join("focus-lens-tokens-layer7.svg")).unwrap();
    assert!(tok_svg.contains("cat") && tok_svg.contains("layer 7"));
    assert!(std::fs::read_to_string(dir.path().join("focus-lens-mask-layer7.svg")).unwrap().contains("retained"));

    // The speed panel's benchmark runs in the background and exports its plots.
    h.get_by_label("Speed").click();
    h.step();
    h.get_by_label("whole model").click();
    h.step();
    assert_eq!(h.state().settings.prefs.bench_kind, BenchKind::WholeModel);
    h.state_mut().settings.prefs.bench_lengths = "64,160".into();
    h.get_by_label("Run benchmark").click();
    settle(&mut h);
    no_errors(&h);
    {
        let b = h.state().views.speed.bench.as_ref().expect("benchmark state");
        assert!(b.error.is_none(), "{:?}", b.error);
        assert_eq!(b.rows.iter().map(|r| r.tokens).collect::<Vec<_>>(), vec![64, 160]);
        assert!(b.rows.iter().all(|r| r.dense_s > 0.0 && r.topk_s > 0.0));
        assert!(b.settings.contains("threads"));
        // The spread of the 3 default repeats: min <= median <= max of both modes and the speedup.
        for r in &b.rows {
            assert_eq!(r.repeats, Some(3), "{r:?}");
            for (lo, med, hi) in r.spread() {
                assert!(lo <= med && med <= hi && lo > 0.0, "{r:?}");
            }
            assert!(r.dense_min_s.is_some() && r.topk_max_s.is_some() && r.speedup_min.is_some());
        }
        assert!(b.settings.contains("median, with min and max"), "{}", b.settings);
    }
    // The measured numbers as a table, and why the gain is below K/k (the kept share of pairs).
    h.step();
    assert!(h.query_by_label("top-k tok/s").is_some(), "the benchmark table");
    assert_eq!(h.get_all_by_label("(min-max)").count(), 3, "the spread columns of the whole-model table");
    assert!(h.query_by_label_contains("% of causal pairs (mean over layers)").is_some());
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    assert!(std::fs::read_to_string(dir.path().join("focus-lens-speed-layer7.svg")).unwrap().contains("theoretical K/k"));

    // A token hovered in a layer column is described in that column's layer, not the selected one.
    h.get_by_label("Layers").click();
    h.step();
    h.state_mut().selection.hovered = Some(20);
    h.state_mut().selection.hovered_layer = Some(15);
    h.step();
    assert!(h.query_by_label_contains("layer 15: top groups").is_some(), "details follow the hovered column");
    h.step();
    assert!(h.query_by_label_contains("layer 15: top groups").is_none(), "nothing hovered any more");

    // Click a distant token: its long-range partners with exact attention weights.
    h.get_by_label("Tokens").click();
    h.step();
    h.state_mut().select_token(Some(250));
    settle(&mut h);
    no_errors(&h);
    {
        let app = h.state();
        let p = app.selection.partners.as_ref().expect("partners of token 250");
        let res = app.session.result.as_ref().unwrap();
        assert_eq!((p.token, p.layer), (250, 7));
        for &(j, w) in &p.partners {
            assert!(250 - j > res.window(), "partners lie beyond the window");
            assert!(res.masks[7][250] & res.masks[7][j] != 0, "partners share a group");
            assert!(w > 0.0);
        }
        assert!(p.partner_mass + p.local_mass <= 1.0 + 1e-4 && p.partner_mass + p.local_mass > 0.999);
    }

    // Cancel a long run: the previous result stays, nothing is left running. (Until the text has
    // loaded, an analysis of the previous text with the new token count may run: wait until the
    // running analysis is the one the long text asks for.)
    let long = dir.path().join("long.txt");
    std::fs::write(&long, "A rather long text about attention and groups. ".repeat(600)).unwrap();
    h.state_mut().open(InputKind::Text, long.clone());
    // A fast machine can finish the analysis between the check that it runs and the click (the
    // click then cancels nothing): try again with another token count (another analysis), up
    // to four times.
    let mut cancelled_run = None;
    for attempt in 0..4 {
        h.state_mut().settings.setup.params.max_tokens = 4000 - 10 * attempt;
        let t0 = Instant::now();
        while !(h.state().is_running(TaskKind::Analyze)
            && h.state().session.text.as_ref().is_some_and(|t| t.path.as_ref() == Some(&long))
            && h.state().running_analysis().is_some()
            && h.state().running_analysis().cloned() == h.state().wanted_key())
        {
            h.step();
            assert!(t0.elapsed() < Duration::from_secs(60), "the analysis did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        h.step();
        let before = h.state().session.result.as_ref().unwrap().key.clone();
        let cancelled = h.state().running_analysis().cloned();
        if !h.state().is_running(TaskKind::Analyze) {
            settle(&mut h);
            continue;
        }
        h.get_by_label("Cancel").click();
        settle(&mut h);
        if h.state().status.contains("cancelled") {
            cancelled_run = Some(before);
            break;
        }
        assert_eq!(h.state().session.result.as_ref().map(|r| &r.key), cancelled.as_ref(), "not cancelled, so finished: status {:?}, errors {:?}", h.state().status, h.state().errors);
    }
    let before = cancelled_run.expect("four analyses of the long text all finished before Cancel");
    assert_eq!(h.state().session.result.as_ref().unwrap().key, before, "the previous result stays after a cancel");
    assert!(!h.state().busy());
    h.state_mut().settings.setup.params.max_tokens = 300;

    // Corrupt inputs: a clear error in the window, and the app keeps its working state.
    let bad_model = dir.path().join("bad.gguf");
    std::fs::write(&bad_model, b"GGUF this is not a model").unwrap();
    h.state_mut().open(InputKind::Model, bad_model.clone());
    settle(&mut h);
    let errs = h.state().errors.join("\n");
    assert!(errs.contains("cannot open model") && errs.contains("bad.gguf"), "{errs}");
    assert_eq!(h.state().settings.inputs.model, Some(common::model_path()), "back to the working model");
    assert!(h.state().session.model.is_some());
    h.state_mut().errors.clear();

    let bad_text = dir.path().join("binary.txt");
    std::fs::write(&bad_text, b"abc\0def").unwrap();
    h.state_mut().open(InputKind::Text, bad_text);
    settle(&mut h);
    let errs = h.state().errors.join("\n");
    assert!(errs.contains("cannot open text") && errs.contains("binary"), "{errs}");
    h.state_mut().errors.clear();

    let bad_adapter = dir.path().join("bad_adapter");
    std::fs::create_dir(&bad_adapter).unwrap();
    std::fs::write(bad_adapter.join("adapter_config.json"), b"{ not json").unwrap();
    std::fs::write(bad_adapter.join("adapter_model.safetensors"), b"junk").unwrap();
    h.state_mut().open(InputKind::Adapter, bad_adapter);
    settle(&mut h);
    let errs = h.state().errors.join("\n");
    assert!(errs.contains("cannot open adapter"), "{errs}");
    assert!(h.state().session.result.is_some(), "a result is still shown");
    // The app still runs: the error can be dismissed through the window.
    h.get_by_label("dismiss").click();
    h.step();
    assert!(h.state().errors.is_empty());
}

/// File → Open KIND…, then the path field is clicked and typed into, and the button pressed:
/// what a user does (the field used to sit inside the File menu, which closed on the click).
fn type_path_and_open(h: &mut Harness<'static, FocusLensApp>, item: &str, path: &Path, button: &str) {
    click_menu(h, "File", item);
    h.get_by_label("Path:").click();
    h.step();
    h.step();
    h.get_by_label("Path:").type_text(&path.display().to_string());
    h.step();
    h.step();
    assert_eq!(h.state().views.files.path, path.display().to_string(), "typed text reaches the path field");
    h.get_by_label(button).click();
    h.step();
}

/// Without a system file dialog (no portal, no zenity, as on CI): the file window says so, the
/// typed path opens and exports, and the adapter picker lists the shipped adapters with what
/// their configs record.
#[test]
fn file_window_without_a_system_dialog() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    settle(&mut h);
    no_errors(&h);
    h.state_mut().views.files.native = false;
    h.state_mut().export_dir = None;

    // The adapter picker.
    click_menu(&mut h, "File", "Open adapter…");
    assert!(h.query_by_label_contains("No system file dialog on this display").is_some(), "the window says why it is there");
    assert!(h.get_by_label("System dialog…").accesskit_node().is_disabled());
    // The K = 4 adapter with what its config records (read from its raw JSON, so that a
    // retrained adapter needs no change here).
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::root().join("sample_adapters/smollm2-135m-k4/adapter_config.json")).unwrap()).unwrap();
    let ppl = &cfg["results"]["ppl"]["ctx1024"];
    let line = format!(
        "K = 4, k = 2 · {:.2}M training tokens · held-out PPL on ppl_persuasion_60k.txt, ctx 1024: dense {:.2}, soft {:.2}, top-2 {:.2}",
        cfg["training"]["tokens_seen"].as_f64().unwrap() / 1e6,
        ppl["dense"].as_f64().unwrap(),
        ppl["soft"].as_f64().unwrap(),
        ppl["topk2"].as_f64().unwrap()
    );
    assert!(has(&h, &line), "the K = 4 adapter with what its config records: {line}");
    assert!(h.query_by_label_contains("K = 8, k = 2 · untrained (random init)").is_some(), "the init adapter");
    h.get_by_label("smollm2-135m-k4").click();
    settle(&mut h);
    no_errors(&h);
    assert!(h.state().settings.inputs.adapter.as_ref().unwrap().ends_with("smollm2-135m-k4"));
    assert_eq!(h.state().session.result.as_ref().unwrap().groups(), 4);

    // Export through the typed path: the CSV set.
    click_menu(&mut h, "Export", "Statistics as CSV…");
    let out = dir.path().join("typed.csv");
    h.state_mut().views.files.path.clear();
    h.get_by_label("Path:").click();
    h.step();
    h.get_by_label("Path:").type_text(&out.display().to_string());
    h.step();
    h.get_by_label("Save").click();
    h.step();
    no_errors(&h);
    for f in ["typed.csv", "typed.profiles.csv", "typed.tokens.csv"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    assert!(h.state().status.contains("typed.tokens.csv"), "{}", h.state().status);

    // JSON and SVG through the typed path as well.
    for (item, name) in [("Statistics as JSON…", "typed.json"), ("Current view as SVG…", "typed.svg")] {
        click_menu(&mut h, "Export", item);
        h.state_mut().views.files.path.clear();
        h.get_by_label("Path:").click();
        h.step();
        h.get_by_label("Path:").type_text(&dir.path().join(name).display().to_string());
        h.step();
        h.get_by_label("Save").click();
        h.step();
        no_errors(&h);
        assert!(dir.path().join(name).exists(), "{name}");
    }
    assert!(std::fs::read_to_string(dir.path().join("typed.json")).unwrap().contains("text_sha256"));

    // A model through the typed path (another name for the same file, so that it loads again).
    let link = dir.path().join("linked-model.gguf");
    std::os::unix::fs::symlink(common::model_path(), &link).unwrap();
    type_path_and_open(&mut h, "Open model…", &link, "Open as model");
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().session.model.as_ref().unwrap().path.as_ref(), Some(&link));
    assert!(h.state().session.result.is_some());

    // A system dialog that answers "cancelled" at once never showed: the window opens instead.
    h.state_mut().dialogs.start(focus_lens::gui::jobs::dialogs::Purpose::Open(InputKind::Text), || None, None);
    wait_for_dialog(&mut h);
    h.step();
    assert!(h.query_by_label_contains("The system file dialog did not open").is_some());
    assert!(h.state().views.files.task.is_some());
}

/// After any re-analysis the selected token's partners are computed again (the panel used to
/// say "computing the attention row…" forever while nothing ran).
#[test]
fn partners_follow_a_reanalysis() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());
    settle(&mut h);
    h.state_mut().select_token(Some(250));
    settle(&mut h);
    assert!(h.state().selection.partners.is_some());
    h.get_by_label("dense").click();
    settle(&mut h);
    h.step();
    let app = h.state();
    let res = app.session.result.as_ref().unwrap();
    assert_eq!(res.analysis.mode, "dense");
    let p = app.selection.partners.as_ref().expect("partners recomputed");
    assert_eq!((p.token, &p.key), (250, &res.key), "for the analysis on screen");
    assert!(h.query_by_label_contains("computing the attention row").is_none());
    assert!(h.query_by_label_contains("same-group tokens beyond w").is_some());
}

/// k is re-fitted and said when another adapter comes (K = 8, k = 3 -> K = 4 used to keep k = 3:
/// every pair shares a group, silently dense); k beyond K/2 is flagged in the controls.
#[test]
fn k_follows_the_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(120);
    s.setup.params.k = 3;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "topk(3)", "the remembered k at start-up");
    let k8 = h.state().session.result.clone().unwrap();
    h.state_mut().open(InputKind::Adapter, common::root().join("sample_adapters/smollm2-135m-k4"));
    settle(&mut h);
    no_errors(&h);
    // Its groups are numbered by the K = 8 run's, layer by layer (the same tokens).
    let k4 = h.state().session.result.clone().unwrap();
    assert_eq!(k4.aligned, focus_core::analysis::align::to_reference(&k8.masks, &k8.aligned, &k4.masks, 4));
    assert!(k4.aligned_to.as_deref().is_some_and(|a| a.contains("smollm2-135m-k8")));
    h.step();
    assert!(has(&h, "matched, layer by layer, to the previous adapter's"));
    assert_eq!(h.state().settings.setup.params.k, 2);
    assert!(h.state().status.contains("k set to 2") && h.state().status.contains("K = 4"), "{}", h.state().status);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "topk(2)");
    h.state_mut().settings.setup.params.k = 3;
    settle(&mut h);
    assert!(h.query_by_label_contains("every pair shares a group (2k > K)").is_some());
}

/// The remembered layer and head survive the start-up (the sliders used to clamp them to 0
/// while no model was loaded).
#[test]
fn layer_and_head_are_restored() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(64);
    s.setup.layer = 12;
    s.setup.head = 5;
    let mut h = harness(s, dir.path());
    h.step();
    h.step();
    assert!(h.state().session.model.is_none(), "the first frames run before the model is loaded");
    settle(&mut h);
    assert_eq!((h.state().settings.setup.layer, h.state().settings.setup.head), (12, 5));
}

/// Colour by category swaps the legend for the categories'; the status line counts the tokens
/// of the text on screen (not the last one's note); errors share one line and one dismiss; the
/// status bar wraps within the window.
#[test]
fn legend_status_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(100), dir.path());
    settle(&mut h);
    assert!(has(&h, "g0 "), "the group legend first");
    h.get_by_label("colour by category").click();
    h.step();
    h.step();
    assert!(h.query_by_label("colour = linguistic category:").is_some(), "the category legend");
    let group_entry = |l: &str| l.starts_with('g') && l[1..].split(' ').next().is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())) && l.contains("%)");
    assert_eq!(h.query_all_by(|n| n.value().is_some_and(|l| group_entry(&l)) || n.label().is_some_and(|l| group_entry(&l))).count(), 0, "no group legend");

    // The sample has more than 100 tokens: the status says so; a short text then has its own count.
    let n_sample = h.state().session.result.as_ref().unwrap().text_tokens;
    assert!(h.query_by_label_contains(&format!("100 of {n_sample} tokens analysed")).is_some());
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Just a few words here.").unwrap();
    h.state_mut().open(InputKind::Text, short);
    settle(&mut h);
    let n = h.state().session.result.as_ref().unwrap().tokens();
    assert!(n < 20);
    assert!(h.query_by_label_contains(&format!("short.txt: {n} tokens analysed")).is_some());
    assert!(!has(&h, &n_sample.to_string()), "nothing of the previous text's count");

    for e in ["first problem", "second problem", "third problem"] {
        h.state_mut().errors.push(e.into());
    }
    h.step();
    assert_eq!(h.get_all_by_label("dismiss").count(), 1, "one dismiss button for all errors");
    assert!(h.query_by_label("3 errors; the last:").is_some());
    // The bottom panel has grown by the errors' lines: let it settle before clicking.
    h.step();
    h.step();
    h.get_by_label("dismiss").click();
    h.step();
    assert!(h.state().errors.is_empty());

    h.state_mut().status = "a very long message ".repeat(40);
    h.step();
    h.step();
    for node in h.get_all_by_label_contains("a very long message") {
        assert!(node.rect().right() <= 1400.0 + 1.0, "the status bar runs past the window: {:?}", node.rect());
    }
}

/// Compare mode, dense vs top-k, driven by clicks: per-token loss change, pruned attention mass
/// (top-k run) and group changes; a row click jumps to the token with its partners; the table
/// and the curves export.
#[test]
fn compare_dense_with_topk() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), dir.path());
    settle(&mut h);
    h.get_by_label("Compare").click();
    h.step();
    h.get_by_label("B = dense").click();
    h.step();
    h.state_mut().settings.setup.compare.max_tokens = 200;
    h.step();
    h.get_by_label("Run comparison").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Compare));
    settle(&mut h);
    no_errors(&h);
    {
        let c = h.state().views.compare.result.as_ref().expect("a comparison");
        assert_eq!(c.tokens(), 200);
        assert_eq!(c.layers(), 30);
        assert!(c.a.contains("topk(2)") && c.b.contains("dense"), "{} / {}", c.a, c.b);
        let pa = &c.pruned_a.as_ref().expect("run A is top-k: its pruned mass").mass;
        assert!(c.pruned_b.is_none(), "dense prunes nothing");
        assert_eq!((pa.len(), pa[0].len(), pa[0][0].len()), (30, 9, 200), "per layer, head and token");
        // Within the window (w = 128) nothing is pruned; beyond it some mass is.
        assert!(pa.iter().flatten().all(|h| h[..=128].iter().all(|&m| m == 0.0)));
        assert!(pa.iter().flatten().any(|h| h[150..].iter().any(|&m| m > 0.0)));
        assert!(pa.iter().flatten().flatten().all(|&m| (0.0..=1.0 + 1e-5).contains(&m)));
        // Up to the window top-k is exact dense attention: the losses agree there.
        for i in 0..100 {
            assert!((c.loss_a[i] - c.loss_b[i]).abs() < 2e-3, "token {i}: {} vs {}", c.loss_a[i], c.loss_b[i]);
        }
        assert!(c.loss_a[199].is_nan());
        assert!(c.loss_a[..199].iter().all(|x| x.is_finite() && *x >= 0.0));
    }
    let (layer, head) = (h.state().settings.setup.layer, h.state().settings.setup.head);
    // Sorted by Δ loss, largest first: the first row is the token that lost most.
    let order = {
        let v = &h.state().views.compare;
        v.order(v.result.as_ref().unwrap(), layer, head)
    };
    let c = h.state().views.compare.result.as_ref().unwrap();
    let best = (0..199).max_by(|&a, &b| c.delta(a).total_cmp(&c.delta(b))).unwrap();
    assert_eq!(order[0], best);
    h.step();
    // The column headers sit over their columns: monospace cells as wide as the values'.
    {
        use focus_lens::gui::views::compare::{header_cell, COLUMNS};
        let v = &h.state().views.compare;
        let row_prefix = format!("{:<7}", order[0]);
        let row = h.get_by(|n| n.label().is_some_and(|l| l.starts_with(&row_prefix)) || n.value().is_some_and(|l| l.starts_with(&row_prefix))).rect();
        let mut at = 0usize;
        let mut glyph = None;
        for (s, name, width, right) in COLUMNS {
            let mark = if v.sort == s { if v.descending { "↓" } else { "↑" } } else { "" };
            let cell = h.get_by_label(&header_cell(name, mark, width, right)).rect();
            let g = *glyph.get_or_insert(cell.width() / width as f32);
            assert!((cell.width() - g * width as f32).abs() < 0.5, "{name}: {cell:?}");
            assert!((cell.left() - (row.left() + g * at as f32)).abs() < 1.0, "header {name:?} at {} but its column at {}", cell.left(), row.left() + g * at as f32);
            at += width;
        }
    }
    let prefix = format!("{:<7}", best);
    h.get_by(|n| n.label().is_some_and(|l| l.starts_with(&prefix)) || n.value().is_some_and(|l| l.starts_with(&prefix))).click();
    h.step();
    settle(&mut h);
    assert_eq!(h.state().settings.setup.tab, Tab::Tokens);
    assert_eq!(h.state().selection.selected, Some(best));
    assert!(h.state().selection.partners.as_ref().is_some_and(|p| p.token == best));
    h.get_by_label("Compare").click();
    h.step();
    h.get_by_label("Export table (CSV)…").click();
    h.step();
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-compare.csv")).unwrap();
    assert!(csv.contains("index,token,loss_a,loss_b,delta_loss"));
    assert!((0..200).all(|i| csv.contains(&format!("\n{i},\""))), "one row per token");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    assert!(std::fs::read_to_string(dir.path().join(format!("focus-lens-compare-layer{layer}.svg"))).unwrap().contains("pruned mass A"));
}

/// The rows of the compare table on screen, top to bottom: their token indices.
fn compare_rows(h: &Harness<'static, FocusLensApp>) -> Vec<usize> {
    let n = h.state().views.compare.result.as_ref().map_or(0, |c| c.tokens());
    // A row starts with its index padded to the first column's 7 characters, then Δ loss.
    let mut rows: Vec<(f32, usize)> = h
        .query_all_by(|node| node.label().or(node.value()).is_some_and(|l| l.len() > 8 && l.contains("    \"")))
        .filter_map(|node| {
            let l = node.accesskit_node().label().or(node.accesskit_node().value())?;
            let i: usize = l.get(..7)?.trim().parse().ok()?;
            (i < n).then_some((node.rect().top(), i))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    rows.into_iter().map(|r| r.1).collect()
}

/// Compare mode's pruned mass per head and its per-layer curves, driven by clicks: the table
/// shows (and sorts by) the selected layer and head's pruned mass, which equals the attention
/// view's pruned share for that head (another computation of the same figure); the per-layer
/// curves are drawn over every layer and exported (CSV, JSON, SVG); the 20 tokens that lost most
/// are one header click away, and a click on one jumps to it with its partners.
#[test]
fn compare_per_head_and_per_layer() {
    use focus_core::analysis::compare::Scope;
    use focus_lens::gui::views::compare::{DELTA_PLOT, SHARES_PLOT};
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(300);
    (s.setup.layer, s.setup.head) = (20, 4);
    s.setup.tab = Tab::Compare;
    s.setup.compare.max_tokens = 300;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.get_by_label("B = dense").click();
    h.step();
    h.get_by_label("Run comparison").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let (l, hd) = (20, 4);

    // Per head: choose the selected layer and head, sort by run A's pruned mass.
    h.get_by_label("layer 20, head 4").click();
    h.step();
    assert_eq!(h.state().views.compare.scope, Scope::Head);
    use focus_lens::gui::views::compare::header_cell;
    h.get_by_label(&header_cell("pruned A", "", 10, true)).click();
    h.step();
    h.step();
    let (mass, top) = {
        let c = h.state().views.compare.result.as_ref().unwrap();
        let m = c.pruned_a.as_ref().unwrap().mass[l][hd].clone();
        let mut by_mass: Vec<usize> = (0..c.tokens()).collect();
        by_mass.sort_by(|&a, &b| m[b].total_cmp(&m[a]).then(a.cmp(&b)));
        (m, by_mass)
    };
    let rows = compare_rows(&h);
    assert!(rows.len() >= 10, "rows on screen: {rows:?}");
    assert_eq!(rows[..10], top[..10], "sorted by head {hd}'s pruned mass in layer {l}");
    // Head 4 alone, not the mean over heads: the order differs from the layer's mean.
    let mean: Vec<f32> = {
        let c = h.state().views.compare.result.as_ref().unwrap();
        (0..300).map(|i| c.pruned_at(i, Scope::Layer, l, hd).0.unwrap()).collect()
    };
    assert!((0..300).any(|i| (mean[i] - mass[i]).abs() > 0.02), "head {hd} differs from the mean over heads");
    // The row shows the figure.
    let first = h.get_by(|n| n.label().or(n.value()).is_some_and(|s| s.starts_with(&format!("{:<7}", top[0])))).accesskit_node();
    let first = first.label().or(first.value()).unwrap_or_default();
    assert!(first.contains(&format!("{:.1}%", 100.0 * mass[top[0]])), "{first:?}");
    // The same figure another way: the attention view's pruned share of that token's dense
    // softmax row in layer 20, head 4 (one row at a time, not the whole matrix).
    let handle = focus_lens::gui::worker::Handle::default();
    let cache = focus_lens::gui::jobs::HeadsCache::default();
    for &i in &top[..3] {
        let g = focus_lens::gui::jobs::attention_grid(&res, i, &cache, &handle).unwrap();
        assert!((g.cells[l][hd][2] - mass[i]).abs() < 1e-3, "token {i}: grid {} vs compare {}", g.cells[l][hd][2], mass[i]);
    }

    // Per layer: the curves are drawn over every layer (the plots' bounds cover them) and are
    // the means of the per-token figures.
    let rows_l = h.state().views.compare.result.as_ref().unwrap().layer_rows(hd);
    assert_eq!(rows_l.len(), 30);
    {
        let c = h.state().views.compare.result.as_ref().unwrap();
        let r = &rows_l[l];
        let changed: Vec<usize> = (0..300).filter(|&i| c.changed[l][i]).collect();
        assert_eq!(r.changed, changed.len());
        let pa = c.pruned_a.as_ref().unwrap();
        let want = pa.mass[l].iter().flatten().map(|&x| x as f64).sum::<f64>() / (9.0 * 300.0);
        assert!((r.pruned_a.unwrap() - want).abs() < 1e-6);
        assert!((r.pruned_a_head.unwrap() - mass.iter().map(|&x| x as f64).sum::<f64>() / 300.0).abs() < 1e-6);
        let stay: Vec<f64> = (0..299).filter(|&i| !c.changed[l][i]).map(|i| c.delta(i) as f64).collect();
        assert!((r.delta_unchanged - stay.iter().sum::<f64>() / stay.len() as f64).abs() < 1e-6);
    }
    let ctx = h.ctx.clone();
    for id in [SHARES_PLOT, DELTA_PLOT] {
        let mem = egui_plot::PlotMemory::load(&ctx, egui::Id::unique(id)).unwrap_or_else(|| panic!("{id} is drawn"));
        let b = mem.bounds();
        assert!(b.min()[0] <= 0.0 && b.max()[0] >= 29.0, "{id}: {b:?}");
    }
    let b = *egui_plot::PlotMemory::load(&ctx, egui::Id::unique(DELTA_PLOT)).unwrap().bounds();
    for r in &rows_l {
        for y in [r.delta_changed, r.delta_unchanged].into_iter().filter(|y| y.is_finite()) {
            assert!(b.min()[1] <= y && y <= b.max()[1], "layer {}: {y} outside {b:?}", r.layer);
        }
    }
    assert!(has(&h, "Δ loss of tokens whose groups change there, or stay"));

    // Exports: the table with the per-head columns, the per-layer CSV, the JSON, the SVG.
    h.get_by_label("Export table (CSV)…").click();
    h.step();
    h.get_by_label("Export as JSON…").click();
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-compare.csv")).unwrap();
    let header = csv.lines().find(|l| l.starts_with("index,")).unwrap();
    let col = header.split(',').position(|c| c == "pruned_mass_a_layer20_head4").expect("the per-head column");
    let row = csv.lines().find(|r| r.starts_with(&format!("{},", top[0]))).unwrap();
    // The fields after the (quoted) token are numbers: split them off from the right.
    let mut cells: Vec<&str> = row.rsplitn(header.split(',').count() - 1, ',').collect();
    cells.reverse();
    assert!((cells[col - 1].parse::<f32>().unwrap() - mass[top[0]]).abs() < 1e-5, "{row}");
    let layers = std::fs::read_to_string(dir.path().join("focus-lens-compare.layers.csv")).unwrap();
    let lh = layers.lines().find(|l| l.starts_with("layer,")).unwrap();
    assert!(lh.contains("pruned_mass_a_head4") && lh.contains("delta_loss_changed"), "{lh}");
    assert_eq!(layers.lines().filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit())).count(), 30, "one row per layer");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-compare.json")).unwrap()).unwrap();
    assert_eq!(json["per_layer"].as_array().unwrap().len(), 30);
    assert!((json["pruned_mass_a_layer_head_token"][l][hd][top[0]].as_f64().unwrap() - mass[top[0]] as f64).abs() < 1e-6);
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-compare-layer{l}.svg"))).unwrap();
    assert!(svg.contains("pruned mass A, head 4") && svg.contains("Δ loss, groups stay"), "the head's curve and the Δ loss curves");

    // The 20 tokens that lost most: one click on the Δ loss header.
    h.get_by_label(&header_cell("delta loss", "", 12, true)).click();
    h.step();
    h.step();
    let lost: Vec<usize> = {
        let c = h.state().views.compare.result.as_ref().unwrap();
        let mut v: Vec<usize> = (0..299).collect();
        v.sort_by(|&a, &b| c.delta(b).total_cmp(&c.delta(a)).then(a.cmp(&b)));
        v
    };
    let rows = compare_rows(&h);
    assert!(rows.len() >= 20, "rows on screen: {rows:?}");
    assert_eq!(rows[..20], lost[..20]);
    // A click on the 5th jumps to it in the text, with its partners.
    let i = lost[4];
    h.get_by(|n| n.label().or(n.value()).is_some_and(|s| s.starts_with(&format!("{i:<7}")))).click();
    h.step();
    settle(&mut h);
    assert_eq!((h.state().settings.setup.tab, h.state().selection.selected), (Tab::Tokens, Some(i)));
    assert!(h.state().selection.partners.as_ref().is_some_and(|p| p.token == i && p.layer == l && p.head == hd));
    assert!(h.state().views.tokens.token_center(i).is_some_and(|p| p.y > 0.0 && p.y < 900.0), "scrolled to the token");
}

/// The token x layer strip's header numbers its layer columns: each number is centred over its
/// column (the pointer on the strip below a number is on that layer), and the header stays
/// while the strip scrolls.
#[test]
fn strip_header_numbers_its_columns() {
    use focus_lens::gui::views::layers::STRIP_CORNER;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(400);
    s.setup.tab = Tab::Layers;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.get_by_label("token x layer strip").click();
    h.step();
    h.step();
    assert!(h.state().settings.setup.strip);
    let corner = h.get_by_label(STRIP_CORNER).rect();
    let header = |h: &Harness<'static, FocusLensApp>| -> Vec<(usize, egui::Rect)> {
        let mut v: Vec<(usize, egui::Rect)> = h
            .query_all_by(|n| n.bounding_box().is_some() && n.label().or(n.value()).is_some_and(|l| l.parse::<usize>().is_ok()))
            .filter(|n| (corner.top()..=corner.bottom()).contains(&n.rect().center().y))
            .map(|n| (n.accesskit_node().label().or(n.accesskit_node().value()).unwrap().parse().unwrap(), n.rect()))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    };
    let numbers = header(&h);
    assert!(numbers.len() >= 2, "the header's numbers: {numbers:?}");
    let every = numbers[1].0 - numbers[0].0;
    assert!(numbers[0].0 == 0 && [1, 2, 5].contains(&every), "{numbers:?}");
    assert_eq!(numbers.iter().map(|n| n.0).collect::<Vec<_>>(), (0..30).step_by(every).collect::<Vec<_>>());
    assert!(numbers.iter().all(|n| n.1.left() >= corner.right() - 1.0), "the numbers are right of the corner");
    // Below each number, on the strip, is its layer.
    let y = corner.bottom() + 60.0;
    for &(l, r) in &numbers {
        h.hover_at(egui::pos2(r.center().x, y));
        h.step();
        assert_eq!(h.state().selection.hovered_layer, Some(l), "under the header's {l} at x = {}", r.center().x);
    }
    let before = h.state().selection.hovered;
    assert!(before.is_some());
    // Scrolled down the strip, the header is where it was and the pointer is on later tokens.
    for _ in 0..4 {
        h.event(egui::Event::MouseWheel { unit: egui::MouseWheelUnit::Point, delta: egui::vec2(0.0, -300.0), phase: egui::TouchPhase::Move, source: egui::MouseWheelSource::Wheel, modifiers: egui::Modifiers::NONE });
        h.step();
    }
    for _ in 0..30 {
        h.step();
    }
    h.hover_at(egui::pos2(numbers[0].1.center().x, y + 1.0));
    h.step();
    assert!(h.state().selection.hovered.unwrap() > before.unwrap() + 50, "scrolled: {:?} then {:?}", before, h.state().selection.hovered);
    assert_eq!(h.get_by_label(STRIP_CORNER).rect(), corner, "the header stays");
    assert_eq!(header(&h), numbers);
}

/// The mask view: plain scrolling leaves the region on screen as it is (it used to pan into
/// negative indices); zoomed in with Ctrl + scroll to 512 tokens or fewer, the region on screen
/// is drawn at one pair per pixel, each pixel the class of its pair.
#[test]
fn mask_zoom_full_resolution() {
    use focus_lens::gui::paint::palette;
    use focus_lens::gui::views::mask::{full_resolution, pair_reason, MASK_PLOT};
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(1200);
    (s.setup.tab, s.setup.layer) = (Tab::Mask, 7);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    assert_eq!(res.tokens(), 1200);
    assert!(h.state().views.mask.current(&res.key, 7).is_some_and(|m| m.block > 1), "1200 tokens are shown in blocks");
    assert!(has(&h, "zoom in (Ctrl + scroll"));
    let ctx = h.ctx.clone();
    let mem = || egui_plot::PlotMemory::load(&ctx, egui::Id::unique(MASK_PLOT)).expect("the mask plot");
    let wheel = |h: &mut Harness<'static, FocusLensApp>, dy: f32, modifiers: egui::Modifiers| {
        for _ in 0..3 {
            h.event(egui::Event::MouseWheel { unit: egui::MouseWheelUnit::Point, delta: egui::vec2(0.0, dy), phase: egui::TouchPhase::Move, source: egui::MouseWheelSource::Wheel, modifiers });
            h.event(egui::Event::ModifiersChanged(modifiers));
            h.step();
        }
        // The wheel's delta is smoothed over frames.
        for _ in 0..30 {
            h.step();
        }
    };
    let frame = *mem().transform().frame();
    // Near the diagonal, halfway down: pairs of every class are on screen once zoomed in.
    let t = mem().transform();
    let at = t.position_from_point(&egui_plot::PlotPoint::new(560.0, 600.0));
    assert!(frame.contains(at), "{at:?} in {frame:?}");
    h.hover_at(at);
    h.step();
    let b0 = *mem().bounds();
    wheel(&mut h, -400.0, egui::Modifiers::NONE);
    wheel(&mut h, 400.0, egui::Modifiers::NONE);
    assert_eq!(*mem().bounds(), b0, "plain scrolling does not pan");
    assert!(h.state().views.mask.zoom.is_none(), "not zoomed in yet: blocks");
    for _ in 0..20 {
        let b = *mem().bounds();
        if b.width().max(b.height()) <= 512.0 {
            break;
        }
        wheel(&mut h, 120.0, egui::Modifiers::CTRL);
    }
    h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
    h.step();
    h.step();
    let b = *mem().bounds();
    assert!(b.width().max(b.height()) <= 512.0, "zoomed in: {b:?}");
    assert!(b.min()[0] >= 0.0 && b.min()[1] >= 0.0, "{b:?}");
    let z = h.state().views.mask.zoom.as_ref().expect("the full-resolution region").0.clone();
    let (i0, j0, n) = (z.2, z.3, z.4);
    assert_eq!((z.0.clone(), z.1), (res.key.clone(), 7));
    assert_eq!((i0, j0), (b.min()[1].floor() as usize, b.min()[0].floor() as usize), "the region on screen");
    assert!(n as f64 >= b.width().max(b.height()) && n <= 514, "{n}");
    assert!(has(&h, &format!("zoomed in: queries {i0}..{}", i0 + n)));
    // Plain scrolling does not pan the zoomed view either.
    wheel(&mut h, -400.0, egui::Modifiers::NONE);
    assert_eq!(*mem().bounds(), b);
    // One pixel per pair, each the colour of what the mask does with the pair.
    let img = full_resolution(&res, 7, i0, j0, n);
    assert_eq!(img.size, [n, n]);
    let mut seen = [0usize; 4];
    for di in (0..n).step_by(3) {
        for dj in (0..n).step_by(3) {
            let (i, j) = (i0 + di, j0 + dj);
            if i >= 1200 || j >= 1200 {
                continue;
            }
            let why = pair_reason(&res, 7, i, j, false);
            let (want, k) = if why.starts_with("kept: local") {
                (palette::LOCAL, 0)
            } else if why.starts_with("kept: both") {
                (palette::SAME_GROUP, 1)
            } else if why.starts_with("pruned") {
                (palette::PRUNED, 2)
            } else {
                (palette::NONE, 3)
            };
            assert_eq!(img.pixels[di * n + dj], want, "pair ({i}, {j}): {why}");
            seen[k] += 1;
        }
    }
    assert!(seen.iter().all(|&c| c > 0), "every class on screen: {seen:?}");
}

/// Groups line up: matched numbers make a layer's group with the most tokens in common with
/// the previous layer's group g show as g; the raw toggle shows the centroids' numbers; the
/// categories view has a layer x group purity heatmap with lift.
#[test]
fn groups_line_up_and_purity_heatmap() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());
    settle(&mut h);
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
    assert_eq!(routing::projection(&res, 7).unwrap(), if cosine { unit_pca(&res, 7) } else { raw(&res, 7) });
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
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-categories-layer{layer}.svg"))).unwrap();
    assert!(svg.contains("lift over its base rate") && svg.contains("layer 29"));
    assert!(svg.contains("det = determiner") && svg.contains(">100%<") && !svg.contains("othe ") && !svg.contains("dete "));

    // A cosine adapter (an untrained one written here: the shipped adapters score by dot
    // product): the routing space shows unit-length vectors and centroids, not the raw ones.
    let model = common::default_model();
    let spec = focus_core::AdapterSpec { score: focus_core::Score::Cosine, ..Default::default() };
    let cos_dir = dir.path().join("cosine-adapter");
    focus_core::Adapter::random(&model.identity(), &candle_core::Device::Cpu, &spec, 0).unwrap().save(&cos_dir).unwrap();
    h.state_mut().open(InputKind::Adapter, cos_dir);
    settle(&mut h);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    assert!(routing::cosine(&res), "the cosine adapter is drawn as one");
    let shown = routing::projection(&res, 7).unwrap();
    assert_eq!(shown, unit_pca(&res, 7));
    assert_ne!(shown, raw(&res, 7), "not the raw vectors");
}

/// The categories view's structure: per layer NMI(top group, category) against the untrained
/// twin and the permutation null, the other NMIs, and the best layer's table in the paper's
/// form, computed in the background once per analysis; the adapter's figures are core's
/// `structure::of_analysis` of the analysis on screen.
#[test]
fn structure_against_the_untrained_twin() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), dir.path());
    settle(&mut h);
    no_errors(&h);
    h.get_by_label("Categories").click();
    h.step();
    h.get_by_label("structure vs untrained").click();
    h.step();
    h.step();
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

/// Help → Glossary opens a window that explains the words the views use.
#[test]
fn glossary_opens() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(64), dir.path());
    settle(&mut h);
    click_menu(&mut h, "Help", "Glossary…");
    assert!(h.query_by_label("dominance").is_some() && h.query_by_label("pairs retained").is_some());
}

/// Huge text files are truncated with a visible note.
#[test]
fn huge_text_is_truncated_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge.txt");
    let line = "ab cd ef gh\n".repeat(1000);
    let mut f = String::new();
    while f.len() <= focus_lens::gui::state::MAX_TEXT_BYTES {
        f += &line;
    }
    f += "é";
    std::fs::write(&p, &f).unwrap();
    let (text, note) = focus_lens::gui::jobs::read_text(&Some(p)).unwrap();
    assert!(text.len() <= focus_lens::gui::state::MAX_TEXT_BYTES);
    assert!(note.unwrap().contains("only its first 4 MiB"));
}

/// Views stay interactive on long texts: a 10K-token result (the start-up analysis tiled) is
/// scrolled through in the token, layers and strip views; every frame's UI time is measured.
#[test]
fn scrolling_10k_tokens_stays_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());
    settle(&mut h);
    no_errors(&h);
    let n = 10_000;
    gui_harness::tile_result(&mut h, n);
    let report = gui_harness::assert_scrolling_fast(&mut h, n);
    eprintln!("frame times while scrolling {n} tokens (egui pass incl. tessellation, no GPU):\n{}", report.join("\n"));
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), n, "the tiled result stays (no re-analysis)");
}

/// Settings survive a round trip through eframe's storage format (RON via serde).
#[test]
fn settings_persist() {
    let mut s = Settings::default();
    s.inputs.text = Some("/tmp/x.txt".into());
    s.remember(InputKind::Text, "/tmp/x.txt".into());
    s.setup.params.mode = ModeChoice::Soft;
    s.setup.layer = 12;
    s.setup.tab = Tab::Mask;
    let json = serde_json::to_string(&s).unwrap();
    let back: Settings = serde_json::from_str(&json).unwrap();
    assert_eq!((back.inputs.text, back.setup.params, back.setup.layer, back.setup.tab), (s.inputs.text.clone(), s.setup.params.clone(), 12, Tab::Mask));
    assert_eq!(back.prefs.recent, s.prefs.recent);
    // Older or partial stored settings fall back to defaults field by field.
    let partial: Settings = serde_json::from_str(r#"{"layer": 3}"#).unwrap();
    assert_eq!((partial.setup.layer, partial.setup.params.max_tokens), (3, Settings::default().setup.params.max_tokens));
}

/// PNG export crops the screenshot to the view (points to pixels) and writes a valid PNG.
#[test]
fn png_export_crops_the_view() {
    let dir = tempfile::tempdir().unwrap();
    let (w, h) = (40usize, 30usize);
    let pixels = (0..w * h).map(|n| if n % w >= 10 { egui::Color32::RED } else { egui::Color32::BLUE }).collect();
    let img = egui::ColorImage::new([w, h], pixels);
    let path = dir.path().join("view.png");
    // Points (5, 0)-(20, 10) at 2 pixels per point: pixels (10, 0)-(40, 20).
    let rect = egui::Rect::from_min_max(egui::pos2(5.0, 0.0), egui::pos2(20.0, 10.0));
    focus_lens::gui::export::save_png(&img, rect, 2.0, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (30, 20));
}

/// Dropped paths are opened as what they look like.
#[test]
fn dropped_files_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("ad");
    std::fs::create_dir(&adapter).unwrap();
    std::fs::write(adapter.join("adapter_config.json"), "{}").unwrap();
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    std::fs::write(hf.join("config.json"), "{}").unwrap();
    assert_eq!(FocusLensApp::classify(&adapter), InputKind::Adapter);
    assert_eq!(FocusLensApp::classify(&adapter.join("adapter_config.json")), InputKind::Adapter);
    assert_eq!(FocusLensApp::classify(&hf), InputKind::Model);
    assert_eq!(FocusLensApp::classify(Path::new("/x/model.GGUF")), InputKind::Model);
    assert_eq!(FocusLensApp::classify(Path::new("/x/notes.txt")), InputKind::Text);
    let mut app = FocusLensApp::new(Settings::default());
    app.open_dropped(adapter.join("adapter_config.json"));
    assert_eq!(app.settings.inputs.adapter, Some(adapter));
}

/// A text longer than the preview: a finished analysis of its first `PREVIEW_TOKENS` tokens is
/// shown (and said so) while the full one runs with per-layer progress; then the full result
/// replaces it, and the preview stays cached under its own key.
#[test]
fn long_texts_show_a_preview_first() {
    use focus_lens::gui::jobs::PREVIEW_TOKENS;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(PREVIEW_TOKENS + 100);
    s.setup.params.causal = Some(true); // causal routing: the preview is exactly the full run's prefix
    let mut h = harness(s, dir.path());
    let t0 = Instant::now();
    let mut layer_steps = std::collections::BTreeSet::new();
    let mut preview = None;
    while h.state().session.result.as_ref().is_none_or(|r| r.tokens() == PREVIEW_TOKENS) {
        h.step();
        for (kind, done, total, what, _) in h.state().worker.progress() {
            if kind == TaskKind::Analyze && total > 0 {
                assert_eq!(total, 30, "one progress step per layer: {what}");
                layer_steps.insert(done);
            }
        }
        if preview.is_none() {
            if let Some(r) = h.state().session.result.clone() {
                assert_eq!(r.tokens(), PREVIEW_TOKENS);
                assert!(h.state().is_running(TaskKind::Analyze), "the full analysis goes on");
                assert_eq!(h.state().showing_preview(), Some((PREVIEW_TOKENS, PREVIEW_TOKENS + 100)));
                h.step();
                assert!(h.query_by_label_contains("showing the first 512 tokens").is_some(), "the status line says it is a preview");
                assert!(h.query_by_label_contains("PROVISIONAL: the first 512 of 612 tokens").is_some(), "the view says it is provisional");
                preview = Some(r);
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "no result");
        std::thread::sleep(Duration::from_millis(10));
    }
    settle(&mut h);
    no_errors(&h);
    let preview = preview.expect("a preview before the full result");
    let full = h.state().session.result.clone().unwrap();
    assert_eq!(full.tokens(), PREVIEW_TOKENS + 100);
    assert!(h.state().showing_preview().is_none());
    assert!(layer_steps.iter().any(|&d| d > 0 && d < 30), "progress moved within the forward pass: {layer_steps:?}");
    for (a, b) in preview.analysis.tokens.iter().zip(&full.analysis.tokens) {
        assert_eq!((a.id, a.start, a.end), (b.id, b.start, b.end));
    }
    // Layer 0's routing sees only embeddings: the preview's rows are the full run's rows.
    let (p0, f0) = (&preview.analysis.routing[0], &full.analysis.routing[0]);
    let n = PREVIEW_TOKENS * p0.groups;
    let err = p0.memberships.iter().zip(&f0.memberships[..n]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err < 1e-4, "layer 0 memberships differ by {err}");
    // Asking for the preview's length is answered from the cache, without a run.
    h.state_mut().settings.setup.params.max_tokens = PREVIEW_TOKENS;
    h.step();
    assert!(!h.state().is_running(TaskKind::Analyze));
    assert!(Arc::ptr_eq(h.state().session.result.as_ref().unwrap(), &preview));
}

/// The full analysis does not replace the preview under a still mouse: while the pointer rests
/// on a token it waits (and says so); when the pointer moves, it comes.
#[test]
fn nothing_flips_under_a_still_mouse() {
    use focus_lens::gui::jobs::PREVIEW_TOKENS;
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(PREVIEW_TOKENS + 100), dir.path());
    let t0 = Instant::now();
    while h.state().session.result.is_none() {
        h.step();
        assert!(t0.elapsed() < Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), PREVIEW_TOKENS);
    // Rest the pointer on a token of the preview.
    let view = h.state().views.rect.unwrap();
    let mut at = None;
    'find: for dy in (60..400).step_by(20) {
        for dx in (10..300).step_by(30) {
            let p = view.min + egui::vec2(dx as f32, dy as f32);
            h.hover_at(p);
            h.step();
            h.step();
            if h.state().selection.hovered.is_some() {
                at = Some(p);
                break 'find;
            }
        }
    }
    let at = at.expect("a token under the pointer");
    assert!(h.state().is_running(TaskKind::Analyze), "the full analysis still runs");
    while h.state().is_running(TaskKind::Analyze) {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..5 {
        h.step();
    }
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), PREVIEW_TOKENS, "nothing changed under the still mouse");
    assert!(h.state().pending_full.is_some());
    assert!(h.query_by_label_contains("replaces the preview when the mouse moves").is_some());
    h.hover_at(at + egui::vec2(3.0, 0.0));
    h.step();
    h.step();
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), PREVIEW_TOKENS + 100, "the full result once the mouse moved");
}

/// File dialogs answer in a later frame: the UI keeps running while one is open, its menu items
/// are disabled, and the chosen path opens the file or receives the export.
#[test]
fn file_dialog_answers_arrive_asynchronously() {
    use focus_lens::gui::jobs::dialogs::Purpose;
    use focus_lens::gui::export::ExportKind;
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), dir.path());
    settle(&mut h);
    h.state_mut().export_dir = None; // exports go through the dialog path
    let text = dir.path().join("picked.txt");
    std::fs::write(&text, "Words chosen in a dialog. ".repeat(10)).unwrap();
    // A stand-in for the native dialog that stays open until we answer it.
    let (answer, wait) = std::sync::mpsc::channel::<Option<std::path::PathBuf>>();
    h.state_mut().dialogs.start(Purpose::Open(InputKind::Text), move || wait.recv().unwrap(), None);
    click_menu(&mut h, "File", "Open text…");
    h.step();
    h.state_mut().views.files.native = true;
    h.step();
    let item = h.get_by_label("System dialog…");
    assert!(item.accesskit_node().is_disabled(), "no second dialog while one is open");
    h.get_by_label("Cancel").click();
    h.step();
    let t0 = Instant::now();
    for _ in 0..5 {
        h.step();
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "frames run while the dialog is open");
    answer.send(Some(text.clone())).unwrap();
    let t0 = Instant::now();
    while h.state().dialogs.open().is_some() {
        h.step();
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().settings.inputs.text, Some(text));
    assert!(h.state().session.result.as_ref().unwrap().analysis.tokens[0].text.starts_with("Words"));

    // A cancelled dialog changes nothing; a chosen export path receives the file.
    let key = h.state().session.result.as_ref().unwrap().key.clone();
    h.state_mut().dialogs.start(Purpose::Open(InputKind::Model), || None, None);
    let out = dir.path().join("chosen.csv");
    let out2 = out.clone();
    wait_for_dialog(&mut h);
    assert_eq!(h.state().session.result.as_ref().unwrap().key, key);
    h.state_mut().dialogs.start(Purpose::Export(ExportKind::StatsCsv), move || Some(out2), None);
    for _ in 0..100 {
        h.step();
        if out.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    no_errors(&h);
    assert!(std::fs::read_to_string(&out).unwrap().starts_with("layer,group,group_raw,size"));

    // The model-folder dialog (Hugging Face directories) answers with a folder, opened as the model.
    let folder = dir.path().join("hf_model");
    std::fs::create_dir(&folder).unwrap();
    let folder2 = folder.clone();
    h.state_mut().dialogs.start(Purpose::OpenModelFolder, move || Some(folder2), None);
    wait_for_dialog(&mut h);
    assert_eq!(h.state().settings.inputs.model, Some(folder));
}

/// Steps frames until the open dialog's answer has been taken (at most ~1 s).
fn wait_for_dialog(h: &mut Harness<'static, FocusLensApp>) {
    for _ in 0..100 {
        h.step();
        if h.state().dialogs.open().is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The text input showing `value`.
fn lengths_field<'a>(h: &'a Harness<'static, FocusLensApp>, value: &'a str) -> egui_kittest::Node<'a> {
    h.get_by(|n| n.role() == egui::accesskit::Role::TextInput && n.value().as_deref() == Some(value))
}

/// The speed panel's default benchmark, the attention kernels, runs in the background to the
/// end with real rows; its lengths field takes typed text (and keeps the focus between frames).
#[test]
fn speed_panel_attention_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), dir.path());
    settle(&mut h);
    no_errors(&h);
    h.get_by_label("Speed").click();
    h.step();
    assert_eq!(h.state().settings.prefs.bench_kind, BenchKind::Attention, "attention kernels by default");
    assert!(h.query_by_label_contains("bounded by 1 / (fraction of causal pairs kept)").is_some());

    // Typing into the lengths field, in two bursts with frames in between.
    let before = h.state().settings.prefs.attn_bench_lengths.clone();
    lengths_field(&h, &before).click();
    h.step();
    h.step();
    assert!(lengths_field(&h, &before).is_focused(), "the lengths field has the focus after a click");
    lengths_field(&h, &before).type_text("9");
    h.step();
    h.step();
    let once = h.state().settings.prefs.attn_bench_lengths.clone();
    assert_eq!(once.len(), before.len() + 1, "typed text reaches the field: {once:?}");
    lengths_field(&h, &once).type_text("7");
    h.step();
    assert_eq!(h.state().settings.prefs.attn_bench_lengths.len(), before.len() + 2, "the field keeps the focus");
    assert_eq!(h.state().settings.prefs.bench_lengths, Settings::default().prefs.bench_lengths, "the other mode's field is untouched");

    // Bad lengths are refused with a message, not run.
    h.state_mut().settings.prefs.attn_bench_lengths = "256,x".into();
    h.get_by_label("Run benchmark").click();
    h.step();
    assert!(h.state().errors.iter().any(|e| e.contains("benchmark lengths")), "{:?}", h.state().errors);
    h.state_mut().errors.clear();

    h.state_mut().settings.prefs.attn_bench_lengths = "256, 512".into();
    h.get_by_label("Run benchmark").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Bench), "the benchmark runs in the background");
    settle(&mut h);
    no_errors(&h);
    let (groups, k) = {
        let r = h.state().session.result.as_ref().unwrap();
        (r.groups(), r.key.params.k)
    };
    {
        let b = h.state().views.speed.attn_bench.as_ref().expect("attention benchmark state");
        assert!(b.error.is_none(), "{:?}", b.error);
        assert_eq!(b.rows.iter().map(|r| r.n).collect::<Vec<_>>(), vec![256, 512]);
        for r in &b.rows {
            assert_eq!((r.groups, r.k), (groups, k), "the adapter's K and the selected k");
            assert!(r.dense_ms.unwrap() > 0.0 && r.focus_ms.unwrap() > 0.0, "{r:?}");
            let s = r.speedup.unwrap();
            assert!(s.is_finite() && s > 0.0, "{r:?}");
            assert!(r.pairs_fraction > 0.0 && r.pairs_fraction <= 1.0, "{r:?}");
            assert!((r.bound * r.pairs_fraction - 1.0).abs() < 1e-9, "{r:?}");
        }
        if k < groups {
            // Beyond the window, top-k keeps only part of the causal pairs.
            assert!(b.rows[1].pairs_fraction < 1.0 && b.rows[1].pairs_fraction < b.rows[0].pairs_fraction + 1e-12, "{:?}", b.rows);
        }
        assert!(b.settings.contains("threads") && b.settings.contains("f32") && b.settings.contains("KV heads"), "{}", b.settings);
        assert!(b.cli.starts_with("focus-lens bench attention") && b.cli.contains("--lengths 256,512"), "{}", b.cli);
        // 3 repeats by default, with their spread per length.
        assert!(b.settings.contains("3 timed repeat(s)"), "{}", b.settings);
        let spreads = b.spreads.lock().unwrap().clone();
        assert_eq!(spreads.iter().map(|s| (s.n, s.repeats)).collect::<Vec<_>>(), vec![(256, 3), (512, 3)]);
        for (s, r) in spreads.iter().zip(&b.rows) {
            assert!(s.dense_ms.0 <= s.dense_ms.1 && s.dense_ms.1 <= s.dense_ms.2);
            assert!((s.dense_ms.1 - r.dense_ms.unwrap()).abs() < 1e-9, "the row shows the median");
        }
    }
    h.step();
    assert!(h.query_by_label("pairs fraction").is_some(), "the table of figures");
    assert_eq!(h.get_all_by_label("(min-max)").count(), 3, "the spread columns");
    assert!(h.query_by_label_contains("focus-lens bench attention").is_some(), "the equivalent command");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-speed-layer{layer}.svg"))).unwrap();
    assert!(svg.contains("bound 1/pairs") && svg.contains("theoretical K/k"), "the attention plots are exported");

    // A longer run can be cancelled: the panel says so and keeps no finished rows.
    h.state_mut().settings.prefs.attn_bench_lengths = "2048,4096,8192,8192".into();
    h.get_by_label("Run benchmark").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Bench));
    h.step();
    h.get_by_label("Cancel benchmark").click();
    h.step();
    settle(&mut h);
    let b = h.state().views.speed.attn_bench.as_ref().unwrap();
    assert_eq!(b.error.as_deref(), Some("benchmark cancelled"));
    assert!(b.rows.is_empty() && b.current_rows().len() < 4, "{:?}", b.current_rows().len());
}

/// The categories matrix and its per-group lines fit the central view at 1400 x 900 (they used
/// to run off to the right, behind a horizontal scroll bar).
#[test]
fn categories_fit_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());
    settle(&mut h);
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

/// A session saved from the menu reopens, from the menu, what was on screen: inputs, settings,
/// layer, tab and the selection (a range of tokens) with its partners.
#[test]
fn sessions_save_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(150), dir.path());
    settle(&mut h);
    h.state_mut().export_dir = None;
    h.state_mut().settings.setup.layer = 9;
    h.state_mut().settings.setup.params.mode = ModeChoice::Soft;
    settle(&mut h);
    h.state_mut().select_range(Some((140, 145)));
    settle(&mut h);
    h.get_by_label("Balance").click();
    h.step();
    let path = dir.path().join("my.session.json");
    click_menu(&mut h, "File", "Save session…");
    h.state_mut().views.files.path.clear();
    h.get_by_label("Path:").click();
    h.step();
    h.get_by_label("Path:").type_text(&path.display().to_string());
    h.step();
    h.get_by_label("Save").click();
    h.step();
    no_errors(&h);
    assert!(std::fs::read_to_string(&path).unwrap().contains("focus-lens-session"));

    // A fresh window on other settings, then File → Open session….
    let mut h = harness(settings(100), dir.path());
    settle(&mut h);
    type_path_and_open(&mut h, "Open session…", &path, "Open this session");
    settle(&mut h);
    h.step();
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    assert_eq!((app.settings.setup.layer, app.settings.setup.tab, app.settings.setup.params.mode, app.settings.setup.params.max_tokens), (9, Tab::Balance, ModeChoice::Soft, 150));
    assert_eq!(app.session.result.as_ref().unwrap().analysis.mode, "soft");
    assert_eq!((app.selection.selected, app.selection.range), (Some(140), Some((140, 145))), "the token and its range");
    assert!(app.selection.partners.as_ref().is_some_and(|p| p.token == 140 && p.range == Some((140, 145)) && p.layer == 9));
}

/// Ctrl+F opens the search: typing finds every occurrence (case folded) and scrolls to the
/// first; Enter goes to the next; matches are underlined.
#[test]
fn ctrl_f_searches_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());
    settle(&mut h);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    h.step();
    h.step();
    let field = h.get_by_label("Find:");
    assert!(field.is_focused(), "Ctrl+F puts the keyboard in the search field");
    field.type_text("the");
    h.step();
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let text: String = res.analysis.tokens.iter().map(|t| t.text.to_ascii_lowercase()).collect();
    let n = text.matches("the").count();
    assert!(n > 3);
    assert_eq!(h.state().views.tokens.matches.len(), n);
    assert!(h.query_by_label(&format!("match 1 of {n}")).is_some());
    let first = h.state().views.tokens.matches[0];
    assert!(res.analysis.tokens[first].text.to_ascii_lowercase().contains("th"));
    h.key_press(egui::Key::Enter);
    h.step();
    h.step();
    assert!(h.query_by_label(&format!("match 2 of {n}")).is_some());
}

/// Arrow keys move the layer and the head (not while a text field has the keyboard).
#[test]
fn arrow_keys_move_layer_and_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(64), dir.path());
    settle(&mut h);
    let (l, hd) = (h.state().settings.setup.layer, h.state().settings.setup.head);
    h.key_press(egui::Key::ArrowRight);
    h.step();
    h.key_press(egui::Key::ArrowDown);
    h.step();
    assert_eq!((h.state().settings.setup.layer, h.state().settings.setup.head), (l + 1, hd + 1));
    h.key_press(egui::Key::ArrowLeft);
    h.step();
    h.key_press(egui::Key::ArrowUp);
    h.step();
    assert_eq!((h.state().settings.setup.layer, h.state().settings.setup.head), (l, hd));
}

/// The colour-blind option switches the group colours to Okabe-Ito.
#[test]
fn colour_blind_palette() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(64), dir.path());
    settle(&mut h);
    h.get_by_label("colour-blind palette").click();
    h.step();
    h.step();
    assert!(h.state().settings.setup.colour_blind);
    let c = focus_lens::gui::paint::palette::OKABE_ITO[0];
    assert_eq!(focus_lens::gui::paint::palette::group(0), egui::Color32::from_rgb(c[0], c[1], c[2]));
    h.get_by_label("colour-blind palette").click();
    h.step();
    h.step();
    assert_ne!(focus_lens::gui::paint::palette::group(0), egui::Color32::from_rgb(c[0], c[1], c[2]));
}

/// The attention view: a clicked token's head x layer grid, each cell's attention split into
/// local, shared-group and pruned shares (of the dense softmax), consistent with the partners
/// view's exact row in the selected layer and head.
#[test]
fn attention_grid_of_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(300);
    s.setup.params.mode = ModeChoice::Dense;
    s.setup.layer = 7;
    s.setup.head = 2;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.state_mut().select_token(Some(250));
    h.get_by_label("Attention").click();
    h.step();
    settle(&mut h);
    h.step();
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    let res = app.session.result.as_ref().unwrap();
    let g = app.views.attention.current(res, 250).expect("the grid");
    assert_eq!((g.cells.len(), g.cells[0].len()), (30, 9));
    for row in &g.cells {
        for c in row {
            assert!((c.iter().sum::<f32>() - 1.0).abs() < 1e-4, "{c:?}");
        }
    }
    // In dense mode the partners' row is the dense softmax: its mass on same-group distant
    // tokens and on the window is the grid's cell.
    let p = app.selection.partners.as_ref().expect("partners");
    let c = g.cells[7][2];
    assert!((p.local_mass - c[0]).abs() < 1e-3 && (p.partner_mass - c[1]).abs() < 1e-3, "{p:?} vs {c:?}", p = (p.local_mass, p.partner_mass));
}

/// The categories view's purity curve: per layer, the token-weighted purity of the adapter on
/// screen against its untrained twin (a random init with the same config and seed), computed in
/// the background; the twin's figures equal an analysis with `Adapter::random` made here.
#[test]
fn purity_curve_against_the_untrained_adapter() {
    use focus_lens::gui::views::categories::purity_curve;
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), dir.path());
    settle(&mut h);
    no_errors(&h);
    h.get_by_label("Categories").click();
    h.step();
    h.get_by_label("purity by layer vs untrained").click();
    h.step();
    h.step();
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
    let twin = focus_core::Adapter::random(&res.model.identity(), res.model.device(), &spec, 0).unwrap();
    let text: String = res.analysis.tokens.iter().map(|t| t.text.as_str()).collect();
    let opts = focus_core::analysis::AnalyzeOptions { mode: res.mode, k: res.key.params.k, segment_len: res.analysis.segment_len, keep_tokens: false, cancel: None };
    let want = focus_core::analysis::analyze(&res.model, &twin, "twin", &text, &opts, |_, _| {}).unwrap();
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
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-categories-layer{layer}.svg"))).unwrap();
    assert!(svg.contains("token-weighted purity per layer") && svg.contains("untrained (seed 0)"), "the curve is exported");
}

/// The token view's legend names each group by its centroid label, as the categories view does
/// ("g3 determiner 71% · 120 tokens (12%)"), not by its number alone.
#[test]
fn legend_shows_centroid_labels() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(200), dir.path());
    settle(&mut h);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let layer = h.state().settings.setup.layer;
    let profile = &res.analysis.profiles[layer];
    for c in &profile.centroids {
        let shown = res.shown_group(layer, c.group, false);
        assert_eq!(res.labels[layer][c.group], c.label, "the legend's label is the centroid profile's");
        let entry = format!("g{shown} {} · {} tokens", c.label, c.tokens);
        assert!(has(&h, &entry), "legend entry {entry:?}");
    }
    h.get_by_label("Categories").click();
    h.step();
    h.step();
    for c in &profile.centroids {
        let shown = res.shown_group(layer, c.group, false);
        assert!(has(&h, &format!("g{shown} ({}): ", c.label)), "the categories view names g{shown} the same way");
    }
}

/// Range selection in the token view: a drag over tokens, or a click and then a shift-click,
/// selects the range; the details panel shows its group and category make-up; its partners are
/// the mean over its queries of each query's own partners; the token view's SVG covers it.
#[test]
fn range_selection_by_drag_and_shift_click() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), dir.path());
    settle(&mut h);
    no_errors(&h);
    h.step();
    let center = |h: &Harness<'static, FocusLensApp>, i: usize| h.state().views.tokens.token_center(i).expect("the token view is drawn");
    // Drag from token 3 to token 12.
    let (a, b) = (center(&h, 3), center(&h, 12));
    h.hover_at(a);
    h.step();
    h.drag_at(a);
    h.step();
    h.hover_at(a + egui::vec2(8.0, 0.0));
    h.step();
    h.hover_at(b);
    h.step();
    assert_eq!(h.state().views.tokens.dragging, Some((3, 12)), "the range follows the pointer");
    h.drop_at(b);
    h.step();
    h.step();
    assert_eq!(h.state().selection.range, Some((3, 12)));
    assert_eq!(h.state().selection.selected, Some(3));
    settle(&mut h);
    no_errors(&h);
    h.step();
    assert!(h.query_by_label_contains("#3-#12: 10 tokens, layer 0").is_some(), "the range's make-up in the details panel");
    let res = h.state().session.result.clone().unwrap();
    for line in focus_lens::gui::views::tokens::range_summary(&res, 0, (3, 12), false) {
        assert!(has(&h, &line), "{line}");
    }
    // A plain click selects one token again.
    let c = center(&h, 20);
    h.hover_at(c);
    h.step();
    h.get_by_label("Tokens").hover();
    h.hover_at(c);
    h.event(egui::Event::PointerButton { pos: c, button: egui::PointerButton::Primary, pressed: true, modifiers: egui::Modifiers::NONE });
    h.step();
    h.event(egui::Event::PointerButton { pos: c, button: egui::PointerButton::Primary, pressed: false, modifiers: egui::Modifiers::NONE });
    h.step();
    h.step();
    assert_eq!((h.state().selection.selected, h.state().selection.range), (Some(20), None));

    // Click token 200, then shift-click token 215 (beyond the window: they have partners).
    h.state_mut().views.scroll_to = Some(200);
    h.step();
    h.step();
    let click = |h: &mut Harness<'static, FocusLensApp>, i: usize, shift: bool| {
        let p = h.state().views.tokens.token_center(i).unwrap();
        let m = if shift { egui::Modifiers::SHIFT } else { egui::Modifiers::NONE };
        h.event(egui::Event::ModifiersChanged(m));
        h.hover_at(p);
        h.step();
        h.event(egui::Event::PointerButton { pos: p, button: egui::PointerButton::Primary, pressed: true, modifiers: m });
        h.step();
        h.event(egui::Event::PointerButton { pos: p, button: egui::PointerButton::Primary, pressed: false, modifiers: m });
        h.step();
        h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
        h.step();
    };
    click(&mut h, 200, false);
    assert_eq!(h.state().selection.selected, Some(200));
    click(&mut h, 215, true);
    assert_eq!(h.state().selection.range, Some((200, 215)), "shift-click extends the selection to a range");
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    let res = app.session.result.clone().unwrap();
    let p = app.selection.partners.as_ref().expect("the range's partners");
    assert_eq!((p.range, p.layer, p.key.clone()), (Some((200, 215)), 0, res.key.clone()));
    // Each partner's weight is the mean over the range's queries of that query's own weight.
    let handle = focus_lens::gui::worker::Handle::default();
    let cache = focus_lens::gui::jobs::HeadsCache::default();
    let mut sum: std::collections::HashMap<usize, f64> = Default::default();
    let (mut pm, mut lm) = (0f64, 0f64);
    for i in 200..=215 {
        let one = focus_lens::gui::jobs::partners(&res, i, 0, app.settings.setup.head, &cache, &handle).unwrap();
        for (j, w) in one.partners {
            *sum.entry(j).or_default() += w as f64 / 16.0;
        }
        pm += one.partner_mass as f64 / 16.0;
        lm += one.local_mass as f64 / 16.0;
    }
    assert!(!p.partners.is_empty(), "tokens 200-215 have partners beyond w = 128");
    assert_eq!(p.partners.len(), sum.len());
    for &(j, w) in &p.partners {
        assert!((w as f64 - sum[&j]).abs() < 1e-5, "partner {j}: {w} vs {}", sum[&j]);
    }
    assert!((p.partner_mass as f64 - pm).abs() < 1e-5 && (p.local_mass as f64 - lm).abs() < 1e-5);
    h.step();
    assert!(h.query_by_label_contains("#200-#215 (16 queries, weights averaged over them)").is_some());
    // The token view's SVG covers the range.
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let svg = std::fs::read_to_string(dir.path().join("focus-lens-tokens-layer0.svg")).unwrap();
    assert!(svg.contains("tokens #200-#215 (16 of 300)"), "the SVG shows the range");
    // The JSON export records the selection: the range, its byte span and its group make-up.
    click_menu(&mut h, "Export", "Statistics as JSON…");
    no_errors(&h);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json")).unwrap()).unwrap();
    let sel = &json["provenance"]["selection"];
    assert_eq!((sel["token"].as_u64(), sel["range"].clone()), (Some(200), serde_json::json!([200, 215])), "{sel}");
    let n: Vec<u64> = sel["range_group_tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(n.iter().sum::<u64>(), 16);
    for (g, &c) in n.iter().enumerate() {
        assert_eq!(c as usize, res.argmax[0][200..=215].iter().filter(|&&x| x as usize == g).count());
    }
    assert_eq!(sel["range_bytes"], serde_json::json!([res.analysis.tokens[200].start, res.analysis.tokens[215].end]));
    // The range can be cleared from the panel.
    h.get_by_label("clear the range").click();
    h.step();
    assert_eq!(h.state().selection.range, None);
}

/// Hostile inputs given through the file window, typed as a user does: a FIFO (as session, text
/// and model), a corrupt GGUF, an adapter that does not fit the model, a binary text and an empty
/// file. Each gives one clear error in the window within seconds (nothing hangs on the FIFO),
/// the app keeps its working inputs and result, and keeps running.
#[test]
fn hostile_inputs_through_the_file_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    settle(&mut h);
    no_errors(&h);
    h.state_mut().views.files.native = false;
    let before = h.state().session.result.as_ref().unwrap().key.clone();
    let d = dir.path();
    let fifo = d.join("pipe.txt");
    let fifo_model = d.join("pipe.gguf");
    for f in [&fifo, &fifo_model] {
        assert!(std::process::Command::new("mkfifo").arg(f).status().unwrap().success());
    }
    let corrupt = d.join("corrupt.gguf");
    std::fs::write(&corrupt, b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f junk").unwrap();
    let misfit = d.join("misfit-adapter");
    std::fs::create_dir(&misfit).unwrap();
    let init = common::root().join("sample_adapters/smollm2-135m-k8-init");
    let cfg = std::fs::read_to_string(init.join("adapter_config.json")).unwrap();
    assert!(cfg.contains("\"n_layers\": 30"));
    std::fs::write(misfit.join("adapter_config.json"), cfg.replace("\"n_layers\": 30", "\"n_layers\": 2")).unwrap();
    std::fs::copy(init.join("adapter_model.safetensors"), misfit.join("adapter_model.safetensors")).unwrap();
    let binary = d.join("binary.txt");
    std::fs::write(&binary, b"text\0\x01\x02 with a NUL").unwrap();
    let empty = d.join("empty.txt");
    std::fs::write(&empty, b"").unwrap();
    let fifo_session = d.join("pipe.session.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo_session).status().unwrap().success());
    let cases: [(&str, &Path, &str, &[&str]); 7] = [
        ("Open session…", &fifo_session, "Open this session", &["cannot open session", "pipe.session.json", "not a regular file"]),
        ("Open text…", &fifo, "Open as text", &["cannot open text", "pipe.txt", "not a regular file"]),
        ("Open model…", &fifo_model, "Open as model", &["cannot open model", "pipe.gguf", "not a regular file"]),
        ("Open model…", &corrupt, "Open as model", &["cannot open model", "corrupt.gguf"]),
        ("Open adapter…", &misfit, "Open as adapter", &["cannot open adapter", "misfit-adapter", "does not fit the model"]),
        ("Open text…", &binary, "Open as text", &["cannot open text", "binary"]),
        ("Open text…", &empty, "Open as text", &["cannot open text", "empty"]),
    ];
    for (item, path, button, words) in cases {
        let t0 = Instant::now();
        type_path_and_open(&mut h, item, path, button);
        while h.state().busy() || h.state().errors.is_empty() {
            h.step();
            assert!(t0.elapsed() < Duration::from_secs(60), "{}: no answer after 60 s (a hang?): {:?}", path.display(), h.state().worker.progress());
            std::thread::sleep(Duration::from_millis(10));
        }
        settle(&mut h);
        h.step();
        let errs = h.state().errors.clone();
        assert_eq!(errs.len(), 1, "{}: one error, got {errs:?}", path.display());
        for w in words {
            assert!(errs[0].contains(w), "{}: {w:?} not in {:?}", path.display(), errs[0]);
        }
        assert!(!errs[0].contains("panicked") && !errs[0].contains("internal error"), "{}", errs[0]);
        assert!(h.query_by_label_contains(&errs[0]).is_some(), "the error shows in the window");
        // The working inputs and the result on screen stay.
        let app = h.state();
        assert_eq!(app.settings.inputs.model, Some(common::model_path()));
        assert_eq!((app.settings.inputs.adapter.as_ref(), app.settings.inputs.text.as_ref()), (None, None));
        assert_eq!(app.session.result.as_ref().unwrap().key, before, "{}", path.display());
        h.get_by_label("dismiss").click();
        h.step();
        assert!(h.state().errors.is_empty());
    }
    // Still running: a control click re-analyses.
    h.get_by_label("dense").click();
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "dense");
}

/// Issue 29, item 1: the exported group numbers are the ones on screen (matched across layers),
/// each with its raw centroid index; a tidy per-token per-layer CSV; a truthful provenance.
#[test]
fn exports_use_the_shown_group_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    settle(&mut h);
    no_errors(&h);
    let r = h.state().session.result.clone().unwrap();
    // A layer whose shown numbers differ from the raw ones (matched to the layer before).
    let layer = (0..r.layers()).find(|&l| (0..r.groups()).any(|g| r.shown_group(l, g, false) != g)).expect("some layer renumbered");
    h.state_mut().settings.setup.layer = layer;
    h.step();
    for item in ["Statistics as CSV…", "Statistics as JSON…"] {
        click_menu(&mut h, "Export", item);
    }
    no_errors(&h);
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-stats.csv")).unwrap();
    assert!(csv.starts_with("layer,group,group_raw,size,"), "{}", csv.lines().next().unwrap());
    let profiles = std::fs::read_to_string(dir.path().join("focus-lens-stats.profiles.csv")).unwrap();
    for g in 0..r.groups() {
        let shown = r.shown_group(layer, g, false);
        let size = r.argmax[layer].iter().filter(|&&a| a as usize == g).count();
        // The row of shown group `shown` is raw group `g`, with the size the screen shows for it.
        let row = csv.lines().find(|l| l.starts_with(&format!("{layer},{shown},"))).unwrap();
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!((f[2], f[3]), (g.to_string().as_str(), size.to_string().as_str()), "{row}");
        let prow = profiles.lines().find(|l| l.starts_with(&format!("{layer},{shown},"))).unwrap();
        assert!(prow.starts_with(&format!("{layer},{shown},{g},{size},")), "{prow}");
    }
    // Rows in the order the screen shows them.
    let shown_col: Vec<usize> = csv.lines().skip(1).filter(|l| l.starts_with(&format!("{layer},"))).map(|l| l.split(',').nth(1).unwrap().parse().unwrap()).collect();
    assert_eq!(shown_col, (0..r.groups()).collect::<Vec<_>>());
    // Tidy: one row per token and layer.
    let tidy = std::fs::read_to_string(dir.path().join("focus-lens-stats.groups.csv")).expect("per-token per-layer CSV");
    assert!(tidy.starts_with("token,text,layer,group,group_raw,confidence,category\n"));
    // Records, not lines: a token's text may hold a quoted line break.
    let mut quoted = false;
    let records = tidy.chars().filter(|&c| {
        if c == '"' {
            quoted = !quoted;
        }
        c == '\n' && !quoted
    });
    assert_eq!(records.count(), 1 + r.tokens() * r.layers());
    let g5 = r.argmax[layer][5] as usize;
    let t5 = &r.analysis.tokens[5].text;
    let t5 = if t5.contains([',', '"', '\n', '\r']) { format!("\"{}\"", t5.replace('"', "\"\"")) } else { t5.clone() };
    let row5 = tidy.lines().find(|l| l.starts_with(&format!("5,{t5},{layer},"))).unwrap().to_string();
    assert!(row5.contains(&format!(",{layer},{},{g5},", r.shown_group(layer, g5, false))), "{row5}");
    // JSON: arrays by shown number, the mapping, and a provenance that says so.
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json")).unwrap()).unwrap();
    let lj = &json["layers"][layer];
    for g in 0..r.groups() {
        let shown = r.shown_group(layer, g, false);
        assert_eq!(lj["group_raw_of_shown"][shown].as_u64(), Some(g as u64));
        assert_eq!(lj["group_size"][shown].as_u64(), Some(r.analysis.layers[layer].group_size[g] as u64));
    }
    let pv = &json["provenance"];
    assert_eq!(pv["settings"]["raw_group_indices"], false);
    assert!(pv["group_numbers"].as_str().unwrap().starts_with("shown"), "{pv}");
    let c0 = &json["profiles"][layer]["centroids"][0];
    assert_eq!(c0["group"].as_u64(), Some(0));
    assert_eq!(r.shown_group(layer, c0["group_raw"].as_u64().unwrap() as usize, false), 0);
}

/// Issue 29, item 2: `focus-lens gui --adapter A` after the app was last used on another model
/// opens A's own base model (here the default SmolLM2) instead of an empty window.
#[test]
fn adapter_alone_opens_its_base_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut stored = settings(120);
    stored.inputs.model = Some(common::gemma3_model_path());
    let args = focus_lens::gui::StartArgs {
        inputs: focus_lens::gui::Inputs { adapter: Some(common::root().join("sample_adapters/smollm2-135m-k4")), ..Default::default() },
        ..Default::default()
    };
    let s = focus_lens::gui::startup_settings(stored, &args);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    let r = h.state().session.result.clone().expect("an analysis, not an empty window");
    assert_eq!(r.groups(), 4);
    assert_eq!(r.layers(), 30, "SmolLM2, the adapter's base model");
    assert!(!has(&h, "no adapter"));
}

/// Issue 29, item 2: `--adapter A` alone, when no local model is A's base model, opens the
/// default model (not the remembered one): the adapter is refused with one error naming it.
#[test]
fn adapter_alone_without_its_base_model_opens_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = focus_core::Model::load(&common::fixture("hf_tiny/llama"), &candle_core::Device::Cpu).unwrap();
    let ad = dir.path().join("tiny-adapter");
    focus_core::Adapter::random(&tiny.identity(), tiny.device(), &focus_core::AdapterSpec { groups: 4, ..Default::default() }, 1).unwrap().save(&ad).unwrap();
    let mut stored = settings(120);
    stored.inputs.model = Some(common::gemma3_model_path());
    let args = focus_lens::gui::StartArgs { inputs: focus_lens::gui::Inputs { adapter: Some(ad.clone()), ..Default::default() }, ..Default::default() };
    let s = focus_lens::gui::startup_settings(stored, &args);
    assert_eq!(s.inputs.model, None, "the default model, not the remembered Gemma 3");
    let mut h = harness(s, dir.path());
    settle(&mut h);
    let app = h.state();
    assert_eq!(app.session.model.as_ref().unwrap().model.config().n_layers, 30, "the default SmolLM2");
    assert!(app.errors.iter().any(|e| e.contains("tiny-adapter")), "{:?}", app.errors);
}

/// Issue 29, item 3: opening a model that the loaded adapter does not fit stops the running
/// analysis and drops the adapter with a message; no frame shows the old analysis or the old
/// adapter under the new model.
#[test]
fn another_model_never_mixes_with_the_old_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    settle(&mut h);
    no_errors(&h);
    // A longer analysis running when the model changes.
    h.state_mut().settings.setup.params.max_tokens = 400;
    h.step();
    assert!(h.state().session.running_analysis().is_some());
    type_path_and_open(&mut h, "Open model…", &common::gemma3_model_path(), "Open as model");
    let t0 = Instant::now();
    loop {
        h.step();
        let app = h.state();
        if let (Some(m), Some(r)) = (&app.session.model, &app.session.result) {
            assert_eq!(r.key.model_gen, m.gen, "an analysis of the previous model on screen under {}", m.model.config().name);
        }
        if app.session.model.as_ref().is_some_and(|m| m.model.config().n_layers == 18) {
            assert!(!has(&h, "smollm2-135m-k8"), "the SmolLM2 adapter named beside Gemma");
        }
        if !app.busy() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300));
        std::thread::sleep(Duration::from_millis(20));
    }
    settle(&mut h);
    let app = h.state();
    assert_eq!(app.session.model.as_ref().unwrap().model.config().n_layers, 18);
    assert!(app.session.adapter.is_none() && app.session.result.is_none() && app.session.running_analysis().is_none());
    assert!(app.errors.iter().any(|e| e.contains("no adapter is loaded: open one made for")), "{:?}", app.errors);
}

/// Issue 29, item 4: an adapter that does not fit is refused and changes nothing: the Sinkhorn
/// and window settings stay, no analysis runs, the result on screen stays.
#[test]
fn a_refused_adapter_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    h.state_mut().settings.setup.params.causal = Some(true);
    h.state_mut().settings.setup.params.window = Some(64);
    settle(&mut h);
    no_errors(&h);
    let before = h.state().session.result.clone().unwrap();
    h.state_mut().open(InputKind::Adapter, common::root().join("sample_adapters/gemma3-270m-k8"));
    let t0 = Instant::now();
    loop {
        h.step();
        assert!(h.state().session.running_analysis().is_none(), "a re-analysis started");
        if !h.state().busy() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(20));
    }
    settle(&mut h);
    let app = h.state();
    assert!(app.errors.iter().any(|e| e.contains("gemma3-270m-k8")), "{:?}", app.errors);
    assert_eq!((app.settings.setup.params.causal, app.settings.setup.params.window), (Some(true), Some(64)));
    assert!(std::sync::Arc::ptr_eq(app.session.result.as_ref().unwrap(), &before));
    assert_eq!(app.settings.inputs.adapter, None);
}

/// Issue 29, item 5: from 1024x640 up every tab is on screen, inside the central area, and
/// opens; the tab bar wraps, the details panel starts hidden in a narrow window and both side
/// panels can be hidden and shown again.
#[test]
fn every_tab_is_reachable_from_1024x640_up() {
    let dir = tempfile::tempdir().unwrap();
    for (w, hgt) in [(1024.0, 640.0), (1280.0, 800.0), (1600.0, 1000.0)] {
        let mut h = gui_harness::harness_at(settings(120), dir.path(), egui::vec2(w, hgt));
        settle(&mut h);
        no_errors(&h);
        assert_eq!(has(&h, "Hover a token"), w >= 1300.0, "the details panel at {w}x{hgt}");
        for tab in Tab::ALL {
            h.step();
            let view = h.state().views.rect.expect("the central view");
            assert!(view.width() >= 0.6 * w, "the central view is {} of {w} points wide", view.width());
            let r = h.get_by_label(tab.label()).rect();
            assert!(view.contains_rect(r), "{tab:?} at {r:?}, outside the central view {view:?} at {w}x{hgt}");
            h.get_by_label(tab.label()).click();
            h.step();
            h.step();
            assert_eq!(h.state().settings.setup.tab, tab, "{tab:?} at {w}x{hgt}");
        }
        // The panels' toggles.
        h.get_by_label("Details panel").click();
        h.step();
        h.step();
        assert_eq!(has(&h, "Hover a token"), w < 1300.0);
        let before = h.state().views.rect.unwrap();
        h.get_by_label("Controls panel").click();
        h.step();
        h.step();
        assert!(!has(&h, "causal Sinkhorn"));
        assert!(h.state().views.rect.unwrap().width() > before.width() + 100.0, "hiding the controls gives the view their room");
    }
}

/// Issue 29, item 6: comparing adapters of different K (K = 8 on screen, K = 4 as run B) warns
/// that their group numbers do not correspond and reports no "layers changed".
#[test]
fn compare_of_different_k_warns() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(64), dir.path());
    settle(&mut h);
    h.get_by_label("Compare").click();
    h.step();
    h.state_mut().settings.setup.compare.max_tokens = 64;
    h.step();
    h.get_by_label("adapter B:").click();
    h.step();
    h.get_by_label("adapter B:").type_text(&common::root().join("sample_adapters/smollm2-135m-k4").display().to_string());
    h.step();
    h.step();
    h.get_by_label("Run comparison").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    let c = h.state().views.compare.result.as_ref().expect("a comparison");
    assert_eq!(c.groups, (8, 4));
    assert!(has(&h, "their group numbers do not correspond"));
    assert!(!has(&h, &format!("/{}", c.layers())), "a 'layers changed' count in the table");
    let svg = h.state().views.compare.svg(0).unwrap();
    assert!(!svg.contains("top-k groups change") && !svg.contains("Δ loss, groups change"));
}

/// Issue 29, item 7: the mask's zoom resets on a new result, and the zoomed header and tooltip
/// say what a pixel really is (screen pixels per pair, no block in the full-resolution region).
#[test]
fn mask_zoom_resets_and_says_its_scale() {
    use focus_lens::gui::views::mask::MASK_PLOT;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(1200);
    (s.setup.tab, s.setup.layer) = (Tab::Mask, 7);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    let ctx = h.ctx.clone();
    let mem = || egui_plot::PlotMemory::load(&ctx, egui::Id::unique(MASK_PLOT)).expect("the mask plot");
    let t = mem().transform();
    let at = t.position_from_point(&egui_plot::PlotPoint::new(560.0, 600.0));
    h.hover_at(at);
    h.step();
    for _ in 0..40 {
        let b = *mem().bounds();
        if b.width().max(b.height()) <= 120.0 {
            break;
        }
        for _ in 0..3 {
            h.event(egui::Event::MouseWheel { unit: egui::MouseWheelUnit::Point, delta: egui::vec2(0.0, 120.0), phase: egui::TouchPhase::Move, source: egui::MouseWheelSource::Wheel, modifiers: egui::Modifiers::CTRL });
            h.event(egui::Event::ModifiersChanged(egui::Modifiers::CTRL));
            h.step();
        }
        for _ in 0..30 {
            h.step();
        }
    }
    h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
    h.step();
    h.step();
    let tr = mem().transform();
    let px = tr.frame().width() as f64 / tr.bounds().width() * ctx.pixels_per_point() as f64;
    assert!(px > 2.0, "zoomed in to several pixels per pair: {px}");
    assert!(h.state().views.mask.zoom.is_some());
    assert!(!has(&h, "one pair per pixel"));
    assert!(has(&h, &format!("one pair = {px:.1} x {px:.1} screen pixels")), "the header says {px:.1} px per pair");
    // The tooltip of a pair in the full-resolution region names no block.
    h.hover_at(at + egui::vec2(1.0, 1.0));
    h.step();
    h.step();
    assert!(has(&h, "query #"), "a tooltip");
    assert!(!has(&h, "block of"), "the tooltip describes a block inside the full-resolution region");
    // A new result (fewer tokens): the whole mask again, not an empty corner of the old zoom.
    h.state_mut().settings.setup.params.max_tokens = 600;
    settle(&mut h);
    h.step();
    settle(&mut h);
    h.step();
    h.step();
    assert!(h.state().views.mask.zoom.is_none());
    let b = *mem().bounds();
    assert!(b.min()[0] <= 1.0 && b.max()[0] >= 599.0 && b.min()[1] <= 1.0 && b.max()[1] >= 599.0, "the new mask whole: {b:?}");
}

/// Issue 29, item 9: no stale text. An export error goes once a retry succeeds, and the file
/// window keeps the typed path after the error; "analysis cancelled" goes with the next result;
/// "Sinkhorn set to …" goes when another input opens; the glossary closes on Escape.
#[test]
fn no_stale_status_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(64), dir.path());
    h.state_mut().export_dir = None;
    settle(&mut h);
    no_errors(&h);
    // An export to a folder that does not exist, through the file window.
    let bad = dir.path().join("missing/stats.json");
    click_menu(&mut h, "Export", "Statistics as JSON…");
    h.state_mut().views.files.path.clear();
    h.get_by_label("Path:").click();
    h.step();
    h.get_by_label("Path:").type_text(&bad.display().to_string());
    h.step();
    h.get_by_label("Save").click();
    h.step();
    h.step();
    assert!(h.state().errors.iter().any(|e| e.starts_with("export to")), "{:?}", h.state().errors);
    assert!(h.state().views.files.task.is_some(), "the file window is back");
    assert_eq!(h.state().views.files.path, bad.display().to_string(), "with the typed path");
    // Corrected (the folder made), saved again: the old error goes.
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    h.get_by_label("Save").click();
    h.step();
    h.step();
    assert!(bad.is_file());
    no_errors(&h);
    assert!(h.state().status.starts_with("wrote"));
    // Cancel an analysis, then run it: the cancel message goes. 1000 tokens, so that it mostly
    // runs when the click comes; the jobs the export left (the untrained twin's) end first, so
    // that the one Cancel button is the analysis'.
    settle(&mut h);
    // A fast machine can still finish it between the check that it runs and the click: then
    // another token count (another analysis) is tried, up to four times.
    let mut tokens = 0;
    for attempt in 0..4 {
        tokens = 1000 - 10 * attempt;
        h.state_mut().settings.setup.params.max_tokens = tokens;
        // Up to a minute for the new analysis itself to start (not another job: the Cancel
        // clicked must be the analysis'); the whole suite runs beside this test on two cores.
        let mut started = false;
        for _ in 0..6000 {
            h.step();
            if h.state().is_running(TaskKind::Analyze) {
                started = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(started, "the {tokens}-token analysis never started");
        // The status bar's one Cancel button can belong to a short job that started beside the
        // analysis (under the whole suite's load it did once): click again while the analysis runs.
        for _ in 0..3 {
            if !h.state().is_running(TaskKind::Analyze) || h.state().status.starts_with("analysis cancelled") {
                break;
            }
            h.get_by_label("Cancel").click();
            for _ in 0..1000 {
                h.step();
                if h.state().status.starts_with("analysis cancelled") {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        if h.state().status.starts_with("analysis cancelled") {
            break;
        }
        settle(&mut h);
    }
    assert!(h.state().status.starts_with("analysis cancelled"), "{}", h.state().status);
    h.step();
    h.step();
    h.get_by_label("Run analysis").click();
    settle(&mut h);
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), tokens);
    assert!(!h.state().status.contains("cancelled"), "{}", h.state().status);
    // A status about the generated text's Sinkhorn goes when another text opens.
    h.state_mut().status = "analysing the generated text, saved as g.txt; Sinkhorn set to causal as generated".into();
    let text = dir.path().join("t.txt");
    std::fs::write(&text, "A short text to open. ".repeat(10)).unwrap();
    type_path_and_open(&mut h, "Open text…", &text, "Open as text");
    settle(&mut h);
    assert!(!h.state().status.contains("Sinkhorn set to"), "{}", h.state().status);
    // The glossary closes on Escape.
    click_menu(&mut h, "Help", "Glossary…");
    assert!(h.query_by_label("dominance").is_some());
    h.key_press(egui::Key::Escape);
    h.step();
    h.step();
    assert!(!h.state().views.glossary.open && h.query_by_label("dominance").is_none());
}
