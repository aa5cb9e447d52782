//! The window as a whole: the legend and status line, errors, the glossary, tabs at small sizes,
//! the preview of a long text and its provisional banner, no stale text.

use crate::common::TestResult;
use crate::harness::{self, click_menu, harness, has, no_errors, settings, settle, started, type_path_and_open, type_path_and_save};
use egui_kittest::kittest::Queryable;
use focus_lens::gui::state::{InputKind, Tab};
use focus_lens::gui::worker::TaskKind;
use std::time::{Duration, Instant};

/// Colour by category swaps the legend for the categories'; the status line counts the tokens
/// of the text on screen (not the last one's note); errors share one line and one dismiss; the
/// status bar wraps within the window.
#[test]
fn legend_status_and_errors() {
    let (dir, mut h) = started(100);
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

/// Help → Glossary opens a window that explains the words the views use.
#[test]
fn glossary_opens() {
    let (_dir, mut h) = started(64);
    click_menu(&mut h, "Help", "Glossary…");
    assert!(h.query_by_label("dominance").is_some() && h.query_by_label("pairs retained").is_some());
}

/// Issue 29, item 5: from 1024x640 up every tab is on screen, inside the central area, and
/// opens; the tab bar wraps, the details panel starts hidden in a narrow window and both side
/// panels can be hidden and shown again.
#[test]
fn every_tab_is_reachable_from_1024x640_up() {
    let dir = tempfile::tempdir().unwrap();
    for (w, hgt) in [(1024.0, 640.0), (1280.0, 800.0), (1600.0, 1000.0)] {
        let mut h = harness::harness_at(settings(120), dir.path(), egui::vec2(w, hgt));
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

/// Issue 29, item 9: no stale text. An export error goes once a retry succeeds, and the file
/// window keeps the typed path after the error; "analysis cancelled" goes with the next result;
/// "Sinkhorn set to …" goes when another input opens; the glossary closes on Escape.
#[test]
fn no_stale_status_text() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut h = harness(settings(64), dir.path());
    h.state_mut().export_dir = None;
    settle(&mut h);
    no_errors(&h);
    // An export to a folder that does not exist, through the file window.
    let bad = dir.path().join("missing/stats.json");
    type_path_and_save(&mut h, "Export", "Statistics as JSON…", &bad);
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
    std::fs::write(&text, "A short text to open. ".repeat(10))?;
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
    Ok(())
}

/// The provisional banner shows over every view of the preview, not only the token view (Generate,
/// Train and Centroids show no analysis).
#[test]
fn provisional_banner_in_every_tab() {
    use focus_lens::gui::jobs::PREVIEW_TOKENS;
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(2048), dir.path());
    let t0 = Instant::now();
    while h.state().session.result.is_none() {
        h.step();
        assert!(t0.elapsed() < Duration::from_secs(600), "no preview");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), PREVIEW_TOKENS);
    let banner = format!("PROVISIONAL: the first {PREVIEW_TOKENS} of 2048 tokens");
    for tab in Tab::ALL.into_iter().filter(|&t| !matches!(t, Tab::Generate | Tab::Train | Tab::Centroids)) {
        h.get_by_label(tab.label()).click();
        h.step();
        h.step();
        assert!(h.state().showing_preview().is_some(), "the full result came before {tab:?} was checked: the test needs a slower analysis");
        assert!(has(&h, &banner), "no provisional banner in {tab:?}");
    }
    settle(&mut h);
    h.step();
    assert!(!has(&h, "PROVISIONAL"), "the banner goes with the preview");
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

/// With no window set, the analysis runs at the adapter's own (the default adapter's, read from
/// its config: 512 since 2026-12-07), and the controls offer no way back to it (there is nothing
/// to go back from). The other tests pin 128 (`harness::settings`).
#[test]
fn the_default_window_is_the_adapters() -> TestResult {
    let mut s = settings(64);
    s.setup.params.window = None;
    let dir = tempfile::tempdir()?;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(crate::common::root().join("sample_adapters/smollm2-135m-k8/adapter_config.json"))?)?;
    let w = cfg["window"].as_u64().unwrap() as usize;
    let res = h.state().session.result.clone().expect("an analysis");
    assert_eq!((res.window(), res.adapter.config.window), (w, w));
    assert!(h.query_by_label("adapter's").is_none(), "no override to undo");
    Ok(())
}
