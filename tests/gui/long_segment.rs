//! The app at length (issue 52, item 3): one analysis segment of 8,192 tokens, SmolLM2-135M's
//! whole context (the GUI's segment was fixed at 2,048), on held-out Persuasion: analysed with
//! its pass kept (in the scratch file: ~750 MB is beyond the memory budget), the partners of a
//! token deep in the segment with partners farther back than a 2,048-token segment could reach
//! (and no model pass), and the mask (8192 x 8192, in blocks; zoomed in, at full resolution)
//! and the head view (a range deep in the segment, and the whole segment in blocks) drawn within
//! a 16 ms frame.

use crate::harness::{harness, no_errors, settings, settle};
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_lens::gui::state::Tab;
use focus_lens::gui::FocusLensApp;
use std::time::Instant;

/// The frame budget: 60 frames per second.
const FRAME: f64 = 0.016;

/// `time_frames` of steady frames (nothing changes between them) until a series has no frame
/// over `FRAME`, at most three series: on the project's loaded 2-core machine the UI thread is
/// now and then preempted mid-frame (a wall-clock frame of 16.7 ms among 0.3 ms ones, at load
/// 6-7), which no code can prevent; a view whose frames cost more fails every series.
fn steady_frames(h: &mut Harness<'static, FocusLensApp>, frames: usize) -> [(f64, f64); 2] {
    let mut last = [(0.0, 0.0); 2];
    for _ in 0..3 {
        last = time_frames(h, frames, |_, _| {});
        if last[0].1 < FRAME {
            break;
        }
        eprintln!("a frame took {:.1} ms (median {:.2} ms): measured again", last[0].1 * 1e3, last[0].0 * 1e3);
    }
    last
}

/// `frames` frames, each `before` it: (median, worst) of the app's own UI time per frame (what
/// `Timing` records: our code, not egui_kittest's accessibility tree) and of the whole step.
fn time_frames(h: &mut Harness<'static, FocusLensApp>, frames: usize, mut before: impl FnMut(&mut Harness<'static, FocusLensApp>, usize)) -> [(f64, f64); 2] {
    let (mut ui, mut step) = (Vec::new(), Vec::new());
    for f in 0..frames {
        before(h, f);
        let t0 = Instant::now();
        h.step();
        step.push(t0.elapsed().as_secs_f64());
        ui.push(h.state().timing.last_frame() as f64);
    }
    let stats = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        (v[v.len() / 2], v[v.len() - 1])
    };
    [stats(ui), stats(step)]
}

#[test]
fn an_8k_segment_is_analysed_and_its_views_keep_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(8192);
    s.inputs.text = Some(crate::common::fixture("ppl_persuasion_60k.txt"));
    s.setup.params.segment = 8192;
    s.setup.layer = 9;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    let res = h.state().session.result.clone().expect("the analysis");
    assert_eq!((res.tokens(), res.analysis.segment_len), (8192, 8192), "one segment of the model's whole context");
    assert!(res.analysis.tokens.iter().all(|t| t.segment == 0));
    assert_eq!(res.key.params.segment, 8192);
    let whole = |k: usize, n: usize| k == 0 && n == 8192;
    assert!(
        res.kept.iter().any(|k| whole(k.start, k.tokens())) || res.spilled.iter().any(|k| whole(k.start, k.tokens())),
        "the segment's pass is kept (in memory or the scratch file)"
    );

    // Partners of a token deep in the segment: from the kept pass (no model run), reaching
    // farther back than any 2,048-token segment could.
    let passes = || res.model.decoder.passes.get();
    let before = passes();
    let t0 = Instant::now();
    h.state_mut().select_token(Some(8000));
    settle(&mut h);
    let took = t0.elapsed().as_secs_f64();
    no_errors(&h);
    {
        let p = h.state().selection.partners.as_ref().expect("the partners of #8000");
        assert_eq!((p.token, p.layer), (8000, 9));
        let far = p.partners.iter().filter(|&&(j, _)| 8000 - j > 2048).count();
        assert!(far > 0, "partners beyond 2,048 tokens back: {} of {}", far, p.partners.len());
        assert!(p.partners.iter().all(|&(j, w)| j < 8000 - res.window() && (0.0..=1.0).contains(&w)));
        assert!(p.partner_mass > 0.0 && p.partner_mass + p.local_mass <= 1.0 + 1e-4, "{} {}", p.partner_mass, p.local_mass);
        eprintln!("partners of #8000 in layer 9: {} ({far} beyond 2,048 tokens back), {:.2} s (the segment read back)", p.partners.len(), took);
    }
    assert_eq!(passes(), before, "partners ran the model");

    // The mask: 8192 x 8192 causal pairs in 512 x 512 blocks of 16 x 16, then zoomed in.
    h.state_mut().settings.setup.tab = Tab::Mask;
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    {
        let m = h.state().views.mask.current(&res.key, 9).expect("the mask image");
        assert_eq!((m.tokens, m.block, m.side), (8192, 16, 512));
        let causal = 8192u64 * 8193 / 2;
        assert_eq!(m.local + m.same_group + m.pruned, causal, "every causal pair of the one segment");
    }
    let [ui, step] = steady_frames(&mut h, 30);
    eprintln!("mask, 8192 tokens in blocks: UI {:.2} ms median, {:.2} ms worst; step {:.2} / {:.2} ms", ui.0 * 1e3, ui.1 * 1e3, step.0 * 1e3, step.1 * 1e3);
    assert!(ui.1 < FRAME, "a frame of the 8K mask took {:.1} ms", ui.1 * 1e3);
    // Zoomed in (Ctrl + scroll) near the end of the segment to 512 tokens or fewer a side: the
    // region at one pair per pixel; every zoom step changes the region drawn.
    let ctx = h.ctx.clone();
    let id = egui::Id::unique(focus_lens::gui::views::mask::MASK_PLOT);
    let mem = || egui_plot::PlotMemory::load(&ctx, id).expect("the mask plot");
    let at = mem().transform().position_from_point(&egui_plot::PlotPoint::new(7400.0, 7900.0));
    h.hover_at(at);
    h.step();
    let mut zoom_ui = Vec::new();
    for _ in 0..60 {
        let b = *mem().bounds();
        if b.width().max(b.height()) <= 400.0 {
            break;
        }
        h.event(egui::Event::MouseWheel { unit: egui::MouseWheelUnit::Point, delta: egui::vec2(0.0, 120.0), phase: egui::TouchPhase::Move, source: egui::MouseWheelSource::Wheel, modifiers: egui::Modifiers::CTRL });
        h.event(egui::Event::ModifiersChanged(egui::Modifiers::CTRL));
        let [ui, _] = time_frames(&mut h, 4, |_, _| {});
        zoom_ui.push(ui.1);
    }
    h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
    let [ui, step] = steady_frames(&mut h, 20);
    let b = *mem().bounds();
    assert!(b.width().max(b.height()) <= 512.0, "zoomed in: {b:?}");
    let z = h.state().views.mask.zoom.as_ref().expect("the region at full resolution");
    assert!(z.0 .2 > 6000 && z.0 .4 <= 514, "deep in the segment: {:?}", (z.0 .2, z.0 .3, z.0 .4));
    let worst_zoom = zoom_ui.iter().cloned().fold(0f64, f64::max);
    eprintln!(
        "mask zoomed in to full resolution: UI {:.2} ms median, {:.2} ms worst (while zooming: {:.2} ms worst over {} steps); step {:.2} / {:.2} ms",
        ui.0 * 1e3,
        ui.1 * 1e3,
        worst_zoom * 1e3,
        zoom_ui.len(),
        step.0 * 1e3,
        step.1 * 1e3
    );
    assert!(ui.1 < FRAME && worst_zoom < FRAME, "a zoomed frame took {:.1} ms (zooming: {:.1} ms)", ui.1 * 1e3, worst_zoom * 1e3);

    // The head view of the 256 tokens ending at #8000, every query's row over the whole
    // segment before it.
    h.state_mut().settings.setup.tab = Tab::Head;
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    {
        let hp = h.state().views.head.pattern.as_ref().expect("the head pattern");
        assert_eq!((hp.range, hp.pattern.layer), ((7745, 8000), 9));
        assert!(hp.pattern.before.iter().all(|b| b[0] > 0.0), "rows reach the keys before the range");
    }
    assert_eq!(passes(), before, "the head view ran the model");
    let [ui, step] = steady_frames(&mut h, 30);
    eprintln!("head view, tokens 7745-8000 of the 8K segment: UI {:.2} ms median, {:.2} ms worst; step {:.2} / {:.2} ms", ui.0 * 1e3, ui.1 * 1e3, step.0 * 1e3, step.1 * 1e3);
    assert!(ui.1 < FRAME, "a frame of the head view took {:.1} ms", ui.1 * 1e3);

    // The whole segment in the head view: 8192 x 8192 in 512 x 512 blocks, every row exact.
    h.get_by_label("whole segment").click();
    h.step();
    let t0 = Instant::now();
    settle(&mut h);
    h.step();
    no_errors(&h);
    {
        let o = &h.state().views.head.overview.as_ref().expect("the whole segment's overview").overview;
        assert_eq!((o.tokens, o.block, o.side, o.layer), (8192, 16, 512, 9));
        let pairs: u64 = o.counts.iter().map(|c| (c[0] + c[1] + c[2]) as u64).sum();
        assert_eq!(pairs, 8192 * 8193 / 2, "every causal pair in a block");
        // Each query's row sums to 1, dense and Focus.
        let (d, f): (f64, f64) = (o.dense.iter().map(|&x| x as f64).sum(), o.focus.iter().map(|&x| x as f64).sum());
        assert!((d - 8192.0).abs() < 0.5 && (f - 8192.0).abs() < 0.5, "{d} {f}");
        let pruned: u64 = o.counts.iter().map(|c| c[2] as u64).sum();
        assert!(pruned > 0 && o.mass_focus[2] == 0.0 && o.mass_dense[2] > 0.0, "top-k prunes pairs the dense head attends");
        eprintln!("head view, whole 8K segment in blocks: computed in {:.1} s; masses dense {:?}, focus {:?}", t0.elapsed().as_secs_f64(), o.mass_dense, o.mass_focus);
    }
    assert!(crate::harness::has(&h, "in 512 x 512 blocks of 16 x 16 tokens"));
    assert_eq!(passes(), before, "the overview ran the model");
    let [ui, step] = steady_frames(&mut h, 30);
    eprintln!("head view, whole 8K segment: UI {:.2} ms median, {:.2} ms worst; step {:.2} / {:.2} ms", ui.0 * 1e3, ui.1 * 1e3, step.0 * 1e3, step.1 * 1e3);
    assert!(ui.1 < FRAME, "a frame of the whole-segment head view took {:.1} ms", ui.1 * 1e3);
}
