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
    s.model = Some(super::common::model_path());
    s.params.max_tokens = max_tokens;
    s
}

/// The app with `s`, writing exports (and generated texts) into `export_dir`.
pub fn harness(s: Settings, export_dir: &Path) -> Harness<'static, FocusLensApp> {
    let mut app = FocusLensApp::new(s);
    app.export_dir = Some(export_dir.to_path_buf());
    Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut FocusLensApp| app.show(ui), app)
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
