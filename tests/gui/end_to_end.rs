//! The whole app once, as a user meets it: start-up on the sample text, every tab, the exports.

use crate::common::{self, TestResult};
use crate::harness::{click_menu, harness, no_errors, settings, settle, type_path_and_open};
use egui_kittest::kittest::Queryable;
use focus_lens::gui::state::{BenchKind, InputKind, Tab};
use focus_core::ModeKind;
use focus_lens::gui::worker::TaskKind;
use std::time::{Duration, Instant};

#[test]
fn gui_end_to_end() -> TestResult {
    let dir = tempfile::tempdir()?;
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
    std::fs::write(&text, &body)?;
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
    assert_eq!(r.key.params.mode, ModeKind::Dense);
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
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-stats.csv"))?;
    assert!(csv.starts_with("layer,group,group_raw,size"));
    assert_eq!(csv.lines().count(), 1 + 30 * 8);
    // The CSV set of `focus-lens analyze`: category profiles and tokens beside it.
    let profiles = std::fs::read_to_string(dir.path().join("focus-lens-stats.profiles.csv")).expect("profiles CSV");
    assert!(profiles.starts_with("layer,group,group_raw,tokens,label,top_category,purity"));
    assert_eq!(profiles.lines().count(), 1 + 30 * 8);
    let tokens_csv = std::fs::read_to_string(dir.path().join("focus-lens-stats.tokens.csv")).expect("tokens CSV");
    assert_eq!(tokens_csv.lines().count(), 1 + r.tokens());
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json"))?)?;
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
    let svg = std::fs::read_to_string(dir.path().join("focus-lens-balance-layer7.svg"))?;
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>") && svg.contains("dominance per layer"));
    assert!(svg.contains("rotate(-90"), "axis titles turned along the y axis");
    for tab in [Tab::Tokens, Tab::Mask] {
        h.get_by_label(tab.label()).click();
        settle(&mut h);
        click_menu(&mut h, "Export", "Current view as SVG…");
        no_errors(&h);
    }
    let tok_svg = std::fs::read_to_string(dir.path().join("focus-lens-tokens-layer7.svg"))?;
    assert!(tok_svg.contains("cat") && tok_svg.contains("layer 7"));
    assert!(std::fs::read_to_string(dir.path().join("focus-lens-mask-layer7.svg"))?.contains("retained"));

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
    assert!(std::fs::read_to_string(dir.path().join("focus-lens-speed-layer7.svg"))?.contains("theoretical K/k"));

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
    std::fs::write(&long, "A rather long text about attention and groups. ".repeat(600))?;
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
    std::fs::write(&bad_model, b"GGUF this is not a model")?;
    h.state_mut().open(InputKind::Model, bad_model.clone());
    settle(&mut h);
    let errs = h.state().errors.join("\n");
    assert!(errs.contains("cannot open model") && errs.contains("bad.gguf"), "{errs}");
    assert_eq!(h.state().settings.inputs.model, Some(common::model_path()), "back to the working model");
    assert!(h.state().session.model.is_some());
    h.state_mut().errors.clear();

    let bad_text = dir.path().join("binary.txt");
    std::fs::write(&bad_text, b"abc\0def")?;
    h.state_mut().open(InputKind::Text, bad_text);
    settle(&mut h);
    let errs = h.state().errors.join("\n");
    assert!(errs.contains("cannot open text") && errs.contains("binary"), "{errs}");
    h.state_mut().errors.clear();

    let bad_adapter = dir.path().join("bad_adapter");
    std::fs::create_dir(&bad_adapter)?;
    std::fs::write(bad_adapter.join("adapter_config.json"), b"{ not json")?;
    std::fs::write(bad_adapter.join("adapter_model.safetensors"), b"junk")?;
    h.state_mut().open(InputKind::Adapter, bad_adapter);
    settle(&mut h);
    let errs = h.state().errors.join("\n");
    assert!(errs.contains("cannot open adapter"), "{errs}");
    assert!(h.state().session.result.is_some(), "a result is still shown");
    // The app still runs: the error can be dismissed through the window.
    h.get_by_label("dismiss").click();
    h.step();
    assert!(h.state().errors.is_empty());
    Ok(())
}
