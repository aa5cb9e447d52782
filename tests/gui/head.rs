//! Issue 31, item 3: the head view, driven through the window as a user would (egui_kittest on
//! the real default model): one head's full attention pattern over a range, dense and Focus side
//! by side with the mask's classes and the mass each holds, from the analysis' kept layers.


use egui::epaint::Shape;
use egui_kittest::kittest::Queryable;
use focus_core::analysis::head_pattern::head_pattern;
use focus_core::analysis::partners::sequence_heads;
use focus_lens::gui::state::AnalysisResult;
use focus_lens::gui::views::head::masses;
use crate::harness::{has, no_errors, settle, started};

/// The view's pattern against `head_pattern` on a fresh pass of the text.
fn assert_fresh(res: &AnalysisResult, layer: usize, head: usize, (a, b): (usize, usize), got: &focus_core::analysis::head_pattern::HeadPattern) {
    let ids: Vec<u32> = res.analysis.tokens.iter().map(|t| t.id).collect();
    let fresh = sequence_heads(&res.model, Some(&res.adapter), &ids, res.mode, None, &|_| {}).unwrap();
    let (hd, routing) = &fresh.layers[layer];
    let want = head_pattern(hd, routing.as_ref().unwrap(), &res.adapter.config, res.mode, res.key.params.k, layer, head, (a, b)).unwrap();
    assert_eq!(got, &want);
}

/// A clicked token: the 256 tokens ending at it, in the left panel's layer and head, as two
/// matrices (two textured images) with both masses written out; no model pass (the analysis'
/// kept layers); the numbers those of a fresh pass. The arrow key moves the head.
#[test]
fn head_view_shows_dense_and_focus_with_the_mask() {
    let (_dir, mut h) = started(400);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    let before = res.model.decoder.passes.get();
    h.state_mut().settings.setup.layer = 12;
    h.state_mut().select_token(Some(380));
    h.step();
    h.get_by_label("Head view").click();
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    let hp = h.state().views.head.current(&res, 12, 0, (125, 380)).expect("the pattern of layer 12, head 0, tokens 125-380");
    assert_eq!(hp.range, (125, 380));
    let p = hp.pattern.clone();
    assert_eq!((p.len(), p.dense.len(), p.dense[255].len()), (256, 256, 256));
    // Both masses on screen; the range reaches beyond the window (128), so the mask prunes.
    assert!(p.mass_dense[2] > 0.0 && p.mass_focus[2] == 0.0, "{:?} {:?}", p.mass_dense, p.mass_focus);
    assert!(has(&h, &format!("dense attention mass: {}", masses(&p.mass_dense))));
    assert!(has(&h, &format!("topk(2) attention mass: {}", masses(&p.mass_focus))));
    // Two matrices side by side: two textured meshes, the right one to the right of the left.
    let images: Vec<egui::Rect> = h
        .output()
        .shapes
        .iter()
        .filter_map(|c| match &c.shape {
            Shape::Mesh(m) if m.texture_id != egui::TextureId::default() => Some(m.calc_bounds()),
            _ => None,
        })
        .collect();
    assert_eq!(images.len(), 2, "{images:?}");
    assert!(images[1].left() > images[0].right() && (images[0].width() - images[1].width()).abs() < 1.0 && images[0].width() > 200.0, "{images:?}");
    assert_eq!(res.model.decoder.passes.get(), before, "the head view ran the model");
    assert_fresh(&res, 12, 0, (125, 380), &p);
    // Another head (arrow key down), the same tokens.
    h.key_press(egui::Key::ArrowDown);
    h.step();
    settle(&mut h);
    let p1 = h.state().views.head.current(&res, 12, 1, (125, 380)).expect("head 1").pattern.clone();
    assert_ne!(p1.dense, p.dense);
    assert_eq!(p1.kind, p.kind, "the mask is the layer's, not the head's");
}

/// A selected range is the view's range; one longer than 512 tokens is cut to 512 and says so.
#[test]
fn head_view_follows_the_range_and_caps_it() {
    let (_dir, mut h) = started(700);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    h.get_by_label("Head view").click();
    h.step();
    h.state_mut().select_range(Some((40, 699)));
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    let hp = h.state().views.head.current(&res, 0, 0, (40, 699)).expect("the pattern of the range");
    assert_eq!((hp.range, hp.pattern.len()), ((40, 551), 512));
    assert!(has(&h, "(of 40-699: one segment, at most 512 tokens)"));
    assert_fresh(&res, 0, 0, (40, 551), &hp.pattern.clone());
}
