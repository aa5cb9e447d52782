//! The mask view: its zoom to full resolution, reset on a new result, and the scale it states.

use crate::harness::{harness, has, no_errors, settings, settle};
use egui_kittest::Harness;
use focus_lens::gui::state::Tab;
use focus_lens::gui::FocusLensApp;

/// The mask view of layer 7 over a 1,200-token analysis, settled without an error.
fn mask_of_layer_7() -> (tempfile::TempDir, Harness<'static, FocusLensApp>) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(1200);
    (s.setup.tab, s.setup.layer) = (Tab::Mask, 7);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    (dir, h)
}

/// The mask view: plain scrolling leaves the region on screen as it is (it used to pan into
/// negative indices); zoomed in with Ctrl + scroll to 512 tokens or fewer, the region on screen
/// is drawn at one pair per pixel, each pixel the class of its pair.
#[test]
fn mask_zoom_full_resolution() {
    use focus_lens::gui::paint::palette;
    use focus_lens::gui::views::mask::{full_resolution, pair_reason, MASK_PLOT};
    let (_dir, mut h) = mask_of_layer_7();
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

/// Issue 29, item 7: the mask's zoom resets on a new result, and the zoomed header and tooltip
/// say what a pixel really is (screen pixels per pair, no block in the full-resolution region).
#[test]
fn mask_zoom_resets_and_says_its_scale() {
    use focus_lens::gui::views::mask::MASK_PLOT;
    let (_dir, mut h) = mask_of_layer_7();
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

/// The mask's zoom is bounded (issue 50): Ctrl + scroll in stops at `MIN_SPAN` tokens a side
/// (it went in to half a token), out at 1.5 times the mask with its centre on the mask (it went
/// out to -3,000,000 tokens).
#[test]
fn mask_zoom_is_bounded() {
    use focus_lens::gui::views::mask::{MASK_PLOT, MIN_SPAN};
    let (_dir, mut h) = mask_of_layer_7();
    let ctx = h.ctx.clone();
    let mem = || egui_plot::PlotMemory::load(&ctx, egui::Id::unique(MASK_PLOT)).expect("the mask plot");
    let frame = *mem().transform().frame();
    h.hover_at(frame.center());
    h.step();
    let wheel = |h: &mut Harness<'static, FocusLensApp>, dy: f32, times: usize| {
        for _ in 0..times {
            h.event(egui::Event::MouseWheel { unit: egui::MouseWheelUnit::Point, delta: egui::vec2(0.0, dy), phase: egui::TouchPhase::Move, source: egui::MouseWheelSource::Wheel, modifiers: egui::Modifiers::CTRL });
            h.event(egui::Event::ModifiersChanged(egui::Modifiers::CTRL));
            h.step();
        }
        for _ in 0..30 {
            h.step();
        }
    };
    wheel(&mut h, 800.0, 60);
    let b = *mem().bounds();
    assert!(b.width().max(b.height()) >= MIN_SPAN - 1e-6, "zoomed in past {MIN_SPAN} tokens: {b:?}");
    wheel(&mut h, -800.0, 120);
    let b = *mem().bounds();
    assert!(b.width().max(b.height()) <= 1.5 * 1200.0 + 1e-6, "zoomed out past the mask: {b:?}");
    let c = b.center();
    assert!((0.0..=1200.0).contains(&c.x) && (0.0..=1200.0).contains(&c.y), "the centre left the mask: {b:?}");
}
