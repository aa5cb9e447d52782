//! The GUI tests' one harness: the app on the real default model (its state driven through
//! egui_kittest at the window's size), stepped until its background work ends; the clicking and
//! typing every view's tests share, and the shapes a frame painted.

use egui::epaint::Shape;
use egui::{Color32, Rect};
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
    // The tests' texts are a few hundred tokens: at the default adapter's own window (512 since
    // 2026-12-07) every pair of them is local and nothing is routed, so they run at the window
    // the views were built around, 128, as the controls' "window w" sets it (a new adapter
    // brings its own; `window::the_default_window_is_the_adapters` checks the default itself).
    s.setup.params.window = Some(128);
    s
}

/// The app with `s`, writing exports (and generated texts) into `export_dir`.
pub fn harness(s: Settings, export_dir: &Path) -> Harness<'static, FocusLensApp> {
    let mut app = FocusLensApp::new(s);
    app.export_dir = Some(export_dir.to_path_buf());
    Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut FocusLensApp| app.show(ui), app)
}

/// The app on the default model with at most `max_tokens` tokens, writing into a fresh
/// temporary folder (kept as long as the returned `TempDir`), settled after its start-up
/// analysis: how most tests begin.
pub fn started(max_tokens: usize) -> (tempfile::TempDir, Harness<'static, FocusLensApp>) {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(max_tokens), dir.path());
    settle(&mut h);
    (dir, h)
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
        spilled: Vec::new(),
        adapter_sha256: r.adapter_sha256.clone(),
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

/// File → Open KIND…, then the path field is clicked and typed into, and the button pressed:
/// what a user does (the field used to sit inside the File menu, which closed on the click).
pub fn type_path_and_open(h: &mut Harness<'static, FocusLensApp>, item: &str, path: &Path, button: &str) {
    click_menu(h, "File", item);
    h.get_by_label("Path:").click();
    h.step();
    h.state_mut().views.files.path.clear();
    h.step();
    h.get_by_label("Path:").type_text(&path.display().to_string());
    h.step();
    h.step();
    assert_eq!(h.state().views.files.path, path.display().to_string(), "typed text reaches the path field");
    h.get_by_label(button).click();
    h.step();
}

/// Every shape the last frame painted, nested ones included.
pub fn shapes(h: &Harness<'static, FocusLensApp>) -> Vec<Shape> {
    fn flat(s: &Shape, out: &mut Vec<Shape>) {
        match s {
            Shape::Vec(v) => v.iter().for_each(|s| flat(s, out)),
            s => out.push(s.clone()),
        }
    }
    let mut out = Vec::new();
    for c in &h.output().shapes {
        flat(&c.shape, &mut out);
    }
    out
}

/// Filled rectangles of colour `c`.
pub fn filled(h: &Harness<'static, FocusLensApp>, c: Color32) -> Vec<Rect> {
    shapes(h).into_iter().filter_map(|s| if let Shape::Rect(r) = s { (r.fill == c).then_some(r.rect) } else { None }).collect()
}

pub fn same_rgb(a: Color32, b: Color32) -> bool {
    (a.r(), a.g(), a.b()) == (b.r(), b.g(), b.b())
}

/// `menu` → `item` (a save or an export), then `path` typed into the File window's cleared path
/// field and Save pressed.
pub fn type_path_and_save(h: &mut Harness<'static, FocusLensApp>, menu: &str, item: &str, path: &Path) {
    click_menu(h, menu, item);
    h.state_mut().views.files.path.clear();
    h.get_by_label("Path:").click();
    h.step();
    h.get_by_label("Path:").type_text(&path.display().to_string());
    h.step();
    h.get_by_label("Save").click();
    h.step();
}
