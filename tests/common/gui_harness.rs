//! The GUI tests' harness: the app on the real default model (its state driven through
//! egui_kittest at the window's size), stepped until its background work ends.
#![allow(dead_code)]

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_lens::gui::state::Settings;
use focus_lens::gui::FocusLensApp;
use std::path::Path;
use std::time::{Duration, Instant};

/// The default settings on the default model, analysing at most `max_tokens` tokens.
pub fn settings(max_tokens: usize) -> Settings {
    let mut s = Settings::default();
    s.inputs.model = Some(super::common::model_path());
    s.setup.params.max_tokens = max_tokens;
    s
}

/// The app with `s`, writing exports (and generated texts) into `export_dir`.
pub fn harness(s: Settings, export_dir: &Path) -> Harness<'static, FocusLensApp> {
    let mut app = FocusLensApp::new(s);
    app.export_dir = Some(export_dir.to_path_buf());
    Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut FocusLensApp| app.show(ui), app)
}

/// The app with `s` in a window of `size` points.
pub fn harness_at(s: Settings, export_dir: &Path, size: egui::Vec2) -> Harness<'static, FocusLensApp> {
    let mut app = FocusLensApp::new(s);
    app.export_dir = Some(export_dir.to_path_buf());
    Harness::builder().with_size(size).build_ui_state(|ui, app: &mut FocusLensApp| app.show(ui), app)
}

/// Steps frames until no background work is left.
pub fn settle(h: &mut Harness<'static, FocusLensApp>) {
    let t0 = Instant::now();
    loop {
        h.step();
        if !h.state().busy() {
            h.step();
            if !h.state().busy() {
                return;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "background work did not finish: {:?}", h.state().worker.progress());
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn no_errors(h: &Harness<'static, FocusLensApp>) {
    assert!(h.state().errors.is_empty(), "errors: {:?}", h.state().errors);
}

/// Some node's label contains `s`.
pub fn has(h: &Harness<'static, FocusLensApp>, s: &str) -> bool {
    h.query_all_by_label_contains(s).next().is_some()
}

/// The app's current result tiled to `n` tokens (tokens, groups, masks and argmax repeated), so
/// that the views can be timed on a long text without analysing one.
pub fn tile_result(h: &mut Harness<'static, FocusLensApp>, n: usize) {
    use focus_lens::gui::state::AnalysisResult;
    let r = h.state().session.result.clone().expect("a result to tile");
    let tile = |v: &Vec<u8>| v.iter().cycle().take(n).cloned().collect::<Vec<u8>>();
    let mut an = r.analysis.clone();
    an.tokens = r.analysis.tokens.iter().cycle().take(n).cloned().collect();
    for l in &mut an.layers {
        if let Some(t) = &mut l.tokens {
            *t = t.iter().cycle().take(n).cloned().collect();
        }
    }
    let big = AnalysisResult {
        key: r.key.clone(),
        mode: r.mode,
        shown: focus_core::analysis::shown::ShownAnalysis {
            analysis: an,
            argmax: r.argmax.iter().map(tile).collect(),
            masks: r.masks.iter().map(|m| m.iter().cycle().take(n).cloned().collect()).collect(),
            labels: r.labels.clone(),
            aligned: r.aligned.clone(),
            aligned_to: None,
        },
        adapter: r.adapter.clone(),
        model: r.model.clone(),
        seconds: r.seconds,
        note: None,
        text_tokens: n,
        text_label: r.text_label.clone(),
        from_disk: false,
        kept: Vec::new(),
    };
    h.state_mut().session.result = Some(std::sync::Arc::new(big));
}

/// Scrolls the current result (`n` tokens) through the token view, the layers view and the
/// strip, 40 frames each, and asserts that no frame's UI pass takes 0.5 s or more. Returns a
/// line per view: the first frame after the layout one, the median and the worst.
pub fn assert_scrolling_fast(h: &mut Harness<'static, FocusLensApp>, n: usize) -> Vec<String> {
    use focus_lens::gui::state::Tab;
    let mut report = Vec::new();
    for (tab, strip) in [(Tab::Tokens, false), (Tab::Layers, false), (Tab::Layers, true)] {
        h.state_mut().settings.setup.tab = tab;
        h.state_mut().settings.setup.strip = strip;
        h.step(); // first frame lays out (measured separately)
        let t0 = Instant::now();
        h.step();
        let first = t0.elapsed().as_secs_f64();
        let mut times = Vec::new();
        for f in 0..40 {
            h.state_mut().views.scroll_to = Some((f * 250) % n);
            let t0 = Instant::now();
            h.step();
            times.push(t0.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let (median, worst) = (times[times.len() / 2], times[times.len() - 1]);
        report.push(format!("{tab:?} strip={strip}: first {:.1} ms, median {:.1} ms, worst {:.1} ms", first * 1e3, median * 1e3, worst * 1e3));
        assert!(worst < 0.5, "{tab:?}: a frame took {worst:.3} s while scrolling {n} tokens");
    }
    report
}

/// Clicks the text field labelled `label` and types `text` into it (appended to what it holds).
pub fn type_into(h: &mut Harness<'static, FocusLensApp>, label: &str, text: &str) {
    h.get_by_label(label).click();
    h.step();
    h.step();
    h.get_by_label(label).type_text(text);
    h.step();
    h.step();
}

/// Opens the menu `menu` and clicks its item `item`, then steps three frames, so that a window
/// the item opens is laid out and sized before the caller looks for it.
pub fn click_menu(h: &mut Harness<'static, FocusLensApp>, menu: &str, item: &str) {
    h.get_by_label(menu).click();
    h.step();
    h.step();
    h.get_by_label(item).click();
    h.step();
    h.step();
    h.step();
}
