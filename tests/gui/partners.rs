//! A token's partners and its attention grid: recomputed after a re-analysis, consistent with each
//! other, singled out when jumped to, and read from the analysis' kept layers (no model pass),
//! in memory or, beyond its budget, in the analysis' scratch file.

use crate::common::TestResult;
use crate::harness::{filled, harness, no_errors, settings, settle, shapes, started};
use egui::epaint::Shape;
use egui::Rect;
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use focus_core::ModeKind;
use focus_lens::gui::FocusLensApp;
use std::time::{Duration, Instant};

/// After any re-analysis the selected token's partners are computed again (the panel used to
/// say "computing the attention row…" forever while nothing ran).
#[test]
fn partners_follow_a_reanalysis() {
    let (_dir, mut h) = started(300);
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

/// The attention view: a clicked token's head x layer grid, each cell's attention split into
/// local, shared-group and pruned shares (of the dense softmax), consistent with the partners
/// view's exact row in the selected layer and head.
#[test]
fn attention_grid_of_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(300);
    s.setup.params.mode = ModeKind::Dense;
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

/// A partner picked in the partners list is scrolled to and singled out: ringed in the text and
/// marked in the list.
#[test]
fn a_partner_jumped_to_is_singled_out() {
    use focus_lens::gui::views::tokens::JUMPED_RING;
    let (_dir, mut h) = started(300);
    h.state_mut().views.scroll_to = Some(260);
    h.step();
    h.step();
    let p = h.state().views.tokens.token_center(260).unwrap();
    h.hover_at(p);
    h.step();
    h.event(egui::Event::PointerButton { pos: p, button: egui::PointerButton::Primary, pressed: true, modifiers: egui::Modifiers::NONE });
    h.step();
    h.event(egui::Event::PointerButton { pos: p, button: egui::PointerButton::Primary, pressed: false, modifiers: egui::Modifiers::NONE });
    h.step();
    settle(&mut h);
    h.step();
    let partners = h.state().selection.partners.as_ref().expect("the partners of #260").partners.clone();
    assert!(!partners.is_empty());
    // The first row's partner (the list shows its first rows at least).
    let j = partners[0].0;
    assert!(filled(&h, JUMPED_RING).is_empty());
    let row = format!("  #{j} ");
    h.get_by_label_contains(&row).click();
    h.step();
    h.step();
    h.step();
    let c = h.state().views.tokens.token_center(j).unwrap();
    let view = h.state().views.rect.unwrap();
    assert!(view.contains(c), "scrolled to #{j}: {c:?} in {view:?}");
    let rings: Vec<Rect> = shapes(&h)
        .into_iter()
        .filter_map(|s| if let Shape::Rect(r) = s { (r.stroke.color == JUMPED_RING && r.stroke.width >= 2.0).then_some(r.rect) } else { None })
        .collect();
    assert_eq!(rings.len(), 1, "one ring");
    assert!(rings[0].contains(c), "around #{j}");
    assert_eq!(h.get_by_label_contains(&row).accesskit_node().toggled(), Some(egui::accesskit::Toggled::True), "marked in the list");
    assert_eq!(h.state().selection.selected, Some(260), "the selection stays");
}

/// Partners and the attention grid reuse the segment's layers (issue 29, item 8): the first look
/// into a segment reads every layer once; another layer, head, token or the grid then runs no
/// model pass. The rows are those of a pass up to the layer (the way they were computed before).
#[test]
fn partners_and_grid_reuse_the_segments_layers() -> TestResult {
    use focus_lens::gui::jobs::{self, HeadsCache};
    let (_dir, mut h) = started(400);
    // As a user: click a token, then move the layer with the arrow key.
    h.state_mut().select_token(Some(350));
    settle(&mut h);
    assert_eq!(h.state().selection.partners.as_ref().unwrap().layer, 0);
    let t0 = Instant::now();
    h.key_press(egui::Key::ArrowRight);
    h.step();
    settle(&mut h);
    let warm = t0.elapsed();
    let p = h.state().selection.partners.as_ref().expect("the partners in layer 1");
    assert_eq!((p.token, p.layer), (350, 1));
    assert!(warm < Duration::from_secs(1), "partners in another layer took {warm:?}: the model ran again");
    // The rows against a pass up to the layer, and the grid against a full pass's hook.
    let res = h.state().session.result.clone().unwrap();
    let (handle, cache) = (focus_lens::gui::worker::Handle::default(), HeadsCache::default());
    let ids: Vec<u32> = res.analysis.tokens.iter().map(|t| t.id).collect();
    for (i, layer, head) in [(350, 12, 3), (200, 29, 8), (399, 0, 0)] {
        let got = jobs::partners(&res, i, layer, head, &cache, &handle).unwrap();
        let want = focus_core::analysis::partners::partners(&res.model, &res.adapter, &ids, res.mode, &res.masks[layer], layer, head, (i, i), true, None)?;
        assert_eq!(got.partners.len(), want.partners.len(), "#{i} layer {layer}");
        for ((a, wa), (b, wb)) in got.partners.iter().zip(&want.partners) {
            assert!(a == b && (wa - wb).abs() < 1e-4, "#{i} layer {layer}: {a} {wa} vs {b} {wb}");
        }
        assert!((got.partner_mass - want.partner_mass).abs() < 1e-4 && (got.local_mass - want.local_mass).abs() < 1e-4);
    }
    let t0 = Instant::now();
    let grid = jobs::attention_grid(&res, 300, &cache, &handle).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "the grid ran the model");
    let want = focus_core::analysis::compare::attention_grid(&res.model, &res.adapter, &ids, res.mode, res.key.params.k, 300, None)?;
    for (l, (a, b)) in grid.cells.iter().zip(&want).enumerate() {
        for (hd, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(x.iter().zip(y).all(|(p, q)| (p - q).abs() < 1e-3), "layer {l} head {hd}: {x:?} vs {y:?}");
        }
    }
    Ok(())
}

/// The first look into a segment needs no model pass (issue 29, item 8): the analysis keeps its
/// own pass (every layer's queries, keys and routing), so a token's partners and its attention
/// grid, right after the analysis, run the model zero times; they equal those of a fresh pass.
#[test]
fn first_look_into_a_segment_runs_no_model_pass() -> TestResult {
    use focus_core::analysis::partners::sequence_heads;
    let (_dir, mut h) = started(400);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    let passes = || res.model.decoder.passes.get();
    let before = passes();
    // As a user: click a token, then open the attention grid.
    h.state_mut().select_token(Some(350));
    h.step();
    settle(&mut h);
    // (token, layer, head, partners, partner mass, local mass) as shown.
    let shown = |h: &Harness<'static, FocusLensApp>| {
        let p = h.state().selection.partners.as_ref().expect("partners");
        (p.token, p.layer, p.head, p.partners.clone(), p.partner_mass, p.local_mass)
    };
    let got = shown(&h);
    assert_eq!((got.0, got.1), (350, 0));
    h.key_press(egui::Key::ArrowRight);
    h.step();
    settle(&mut h);
    let got1 = shown(&h);
    assert_eq!((got1.0, got1.1), (350, 1));
    h.get_by_label("Attention").click();
    h.step();
    settle(&mut h);
    let grid = h.state().views.attention.current(&res, 350).expect("the grid of #350").cells.clone();
    no_errors(&h);
    assert_eq!(passes(), before, "the partners or the grid ran the model");
    // A fresh pass gives the same partners and grid.
    let ids: Vec<u32> = res.analysis.tokens.iter().map(|t| t.id).collect();
    let fresh = sequence_heads(&res.model, Some(&res.adapter), &ids, res.mode, None, &|_| {})?;
    assert_eq!(passes(), before + 1);
    for (_, layer, head, partners, partner_mass, local_mass) in [got, got1] {
        let want = fresh.partners(&res.adapter.config, res.mode, &res.masks[layer], layer, head, (350, 350), None)?;
        assert!(!partners.is_empty(), "layer {layer}: no partners to compare");
        assert_eq!(partners, want.partners, "layer {layer}");
        assert_eq!((partner_mass, local_mass), (want.partner_mass, want.local_mass));
    }
    let want = fresh.grid(res.key.params.k, res.adapter.config.window, res.adapter.config.sink, 350)?;
    assert_eq!(grid, want);
    Ok(())
}

/// A segment beyond the memory budget is kept in the analysis' scratch file (issue 50, item 5:
/// the first click into a later segment of a 10K-token text waited ~21 s for a model pass): its
/// first look reads the segment back and runs no model pass, and its partners and grid are a
/// fresh pass's. (The budget set to nothing here, so that a 400-token text spills.)
#[test]
fn a_segment_beyond_the_memory_budget_is_read_back_not_run() -> TestResult {
    use focus_core::analysis::partners::sequence_heads;
    let dir = tempfile::tempdir()?;
    let scratch = dir.path().join("scratch");
    let mut h = harness(settings(400), dir.path());
    h.state_mut().session.keep.memory = 0;
    h.state_mut().session.keep.scratch_dir = Some(scratch.clone());
    settle(&mut h);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    assert!(res.kept.is_empty(), "nothing kept in memory");
    assert_eq!(res.spilled.iter().map(|s| (s.start, s.tokens())).collect::<Vec<_>>(), vec![(0, 400)], "the segment is in the scratch file");
    assert_eq!(std::fs::read_dir(&scratch)?.count(), 0, "the scratch file has no name: nothing is left behind");
    let passes = || res.model.decoder.passes.get();
    let before = passes();
    h.state_mut().select_token(Some(350));
    h.step();
    settle(&mut h);
    let p = h.state().selection.partners.as_ref().map(|p| (p.layer, p.head, p.partners.clone(), p.partner_mass, p.local_mass)).expect("partners");
    h.get_by_label("Attention").click();
    h.step();
    settle(&mut h);
    let grid = h.state().views.attention.current(&res, 350).expect("the grid of #350").cells.clone();
    no_errors(&h);
    assert_eq!(passes(), before, "the first look ran the model");
    let ids: Vec<u32> = res.analysis.tokens.iter().map(|t| t.id).collect();
    let fresh = sequence_heads(&res.model, Some(&res.adapter), &ids, res.mode, None, &|_| {})?;
    let (layer, head, partners, partner_mass, local_mass) = p;
    let want = fresh.partners(&res.adapter.config, res.mode, &res.masks[layer], layer, head, (350, 350), None)?;
    assert!(!partners.is_empty());
    assert_eq!((&partners, partner_mass, local_mass), (&want.partners, want.partner_mass, want.local_mass));
    assert_eq!(grid, fresh.grid(res.key.params.k, res.adapter.config.window, res.adapter.config.sink, 350)?);
    // Without a scratch folder (as before), the same first look runs one pass.
    h.state_mut().session.keep.scratch_dir = None;
    h.state_mut().select_token(None);
    h.state_mut().settings.setup.params.k = 3;
    settle(&mut h);
    let res3 = h.state().session.result.clone().unwrap();
    assert!(res3.kept.is_empty() && res3.spilled.is_empty());
    let before = passes();
    h.state_mut().select_token(Some(300));
    settle(&mut h);
    assert!(h.state().selection.partners.is_some());
    assert_eq!(passes(), before + 1);
    drop(h);
    Ok(())
}
