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

/// Quality against length (issue 52) in the Speed view: run in the background with progress on
/// the loaded text, its table and both plots drawn from the result (the top-2 line has a point
/// per length that ran), a length above the model's context skipped and said, the dense
/// perplexity `ppl`'s own at that length; the SVG; a table loaded from `focus-lens ppl ... --json`
/// drawn the same way; and a run cancelled midway says so and keeps no finished table.
#[test]
fn quality_against_length_runs_draws_loads_and_cancels() {
    use crate::harness::{has, same_rgb, shapes};
    use egui::epaint::Shape;
    use focus_core::eval::ppl::perplexity_chunks;
    let (dir, mut h) = started(200);
    no_errors(&h);
    h.get_by_label("Speed").click();
    h.step();
    h.get_by_label("quality vs length").click();
    h.step();
    assert_eq!(h.state().settings.prefs.bench_kind, BenchKind::Quality);
    assert!(has(&h, "Run the benchmark, or load a table"));
    h.state_mut().settings.prefs.quality_lengths = "128,256,16384".into();
    h.state_mut().settings.prefs.quality_chunks = 1;
    h.step();
    h.get_by_label("Run benchmark").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Bench), "the run is in the background");
    settle(&mut h);
    no_errors(&h);
    let table = h.state().views.speed.quality.as_ref().and_then(|q| q.table.clone()).expect("a finished table");
    assert_eq!(table.rows.iter().map(|r| r.ctx).collect::<Vec<_>>(), vec![128, 256, 16384]);
    let modes: Vec<&str> = table.rows[0].modes.iter().map(|m| m.mode.as_str()).collect();
    assert_eq!(modes, ["dense", "soft", "top-1", "top-2", "top-3"], "K = 8: k = 1, 2, 3");
    assert!(table.rows[2].skipped.as_deref().is_some_and(|s| s.contains("above the model's context (8192 tokens)")), "{:?}", table.rows[2]);
    // The dense figure is `ppl`'s at that length, on the loaded text as `ppl` reads it.
    let (model, text) = {
        let s = &h.state().session;
        (s.model.as_ref().unwrap().model.clone(), s.text.as_ref().unwrap().text.clone())
    };
    let ids = model.tokenizer().unwrap().encode(text.strip_suffix('\n').unwrap_or(&text), false).unwrap().ids;
    assert_eq!(table.tokens, ids.len(), "the whole loaded text, not only the analysed 200 tokens");
    let dense = perplexity_chunks(&model, &ids, 256, Some(1), focus_core::Mode::Dense, None, None, |_, _| {}).unwrap();
    assert_eq!(table.rows[1].mode("dense").unwrap().ppl, Some(dense.ppl));
    for r in &table.rows[..2] {
        for m in &r.modes {
            assert!(m.ppl.is_some_and(|p| p.is_finite()) && m.tokens_per_s.is_some_and(|t| t > 0.0), "{m:?}");
        }
    }
    // Drawn from the result: the table's cells and the plots' lines.
    h.step();
    for label in ["top-2 ppl", "top-2 tok/s", "skipped: above the model's context (8192 tokens)", "perplexity vs dense (%): + is worse", "prefill tokens/s (the same runs)", "focus-lens ppl"] {
        assert!(has(&h, label), "{label:?} on screen");
    }
    let pct = table.rows[1].mode("top-2").unwrap().vs_dense_pct.unwrap();
    assert!(has(&h, &format!("({pct:+.2}%)")), "top-2's % vs dense in the table");
    let top2 = egui::Color32::from_rgb(0xff, 0x7f, 0x0e);
    // Top-2's lines (a path of a point per length that ran, in its colour).
    let lines = |h: &Harness<'static, FocusLensApp>, points: usize| {
        shapes(h).into_iter().filter(|s| matches!(s, Shape::Path(p) if matches!(p.stroke.color, egui::epaint::ColorMode::Solid(c) if same_rgb(c, top2)) && p.points.len() == points)).count()
    };
    assert!(lines(&h, 2) >= 2, "top-2's line in both plots");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-speed-layer{layer}.svg"))).unwrap();
    assert!(svg.contains("perplexity vs dense (%)") && svg.contains("prefill tokens/s") && svg.contains("top-2"), "the quality plots are exported");

    // A table from the command's JSON, loaded by its path.
    let mut loaded = table.clone();
    for (r, ctx) in loaded.rows.iter_mut().zip([1024, 4096, 8192]) {
        r.ctx = ctx;
        r.skipped = None;
        r.chunks = 1;
        r.modes = table.rows[1].modes.clone();
    }
    // A figure no run gave, so that the screen shows this table's.
    loaded.rows[2].modes[3].vs_dense_pct = Some(9.99);
    let path = dir.path().join("lengths.json");
    let json = serde_json::to_string_pretty(&loaded).unwrap();
    std::fs::write(&path, &json).unwrap();
    // As read back (serde_json's float parsing may move a last digit).
    let loaded: focus_core::eval::ppl::LengthTable = serde_json::from_str(&json).unwrap();
    h.state_mut().views.speed.quality_json = path.display().to_string();
    h.step();
    h.get_by_label("Load table").click();
    h.step();
    h.step();
    no_errors(&h);
    let q = h.state().views.speed.quality.as_ref().unwrap();
    assert_eq!(q.table.as_ref(), Some(&loaded));
    assert!(q.source.starts_with("loaded from"), "{}", q.source);
    assert!(has(&h, "loaded from") && has(&h, "+9.99%"), "the loaded table is drawn");
    assert!(lines(&h, 3) >= 2, "and plotted: three lengths");
    // Not a table: one error, the loaded table stays.
    std::fs::write(&path, "{\"bench\": \"forward\"}").unwrap();
    h.get_by_label("Load table").click();
    h.step();
    assert!(h.state().errors.iter().any(|e| e.contains("lengths.json") && e.contains("not a table")), "{:?}", h.state().errors);
    assert_eq!(h.state().views.speed.quality.as_ref().unwrap().table.as_ref(), Some(&loaded));
    h.state_mut().errors.clear();

    // Cancelled midway: said, no finished table, fewer lengths than asked.
    h.state_mut().settings.prefs.quality_lengths = "512,1024,2048".into();
    h.state_mut().settings.prefs.quality_chunks = 2;
    h.step();
    h.get_by_label("Run benchmark").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Bench));
    h.step();
    h.get_by_label("Cancel benchmark").click();
    h.step();
    settle(&mut h);
    let q = h.state().views.speed.quality.as_ref().unwrap();
    assert_eq!(q.error.as_deref(), Some("benchmark cancelled"));
    assert!(q.table.is_none() && q.current_rows().len() < 3, "{}", q.current_rows().len());
    h.step();
    assert!(h.query_by_label("benchmark cancelled").is_some());
}
