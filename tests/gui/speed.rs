//! The Speed view: the attention kernels' benchmark run in the background, its lengths field.

use crate::harness::{click_menu, no_errors, settle, started};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_lens::gui::state::{BenchKind, Settings};
use focus_lens::gui::worker::TaskKind;
use focus_lens::gui::FocusLensApp;

/// The text input showing `value`.
fn lengths_field<'a>(h: &'a Harness<'static, FocusLensApp>, value: &'a str) -> egui_kittest::Node<'a> {
    h.get_by(|n| n.role() == egui::accesskit::Role::TextInput && n.value().as_deref() == Some(value))
}

/// The speed panel's default benchmark, the attention kernels, runs in the background to the
/// end with real rows; its lengths field takes typed text (and keeps the focus between frames).
#[test]
fn speed_panel_attention_kernels() {
    let (dir, mut h) = started(200);
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
