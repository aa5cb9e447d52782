//! The Intervene window driven headlessly through egui_kittest on the real default model and
//! the sample adapter: an ablation (opened from the menu bar) and a forced token (opened from
//! the right panel on the selected token) run in the background and land in the Compare view
//! (A: intervened, B: original), whose per-token losses are core's `analysis::intervene` on
//! the same tokens (itself tested against the masked reference in tests/intervene.rs); groups
//! chosen by their numbers on screen reach core as the router's indices; a bad choice is one
//! error and runs nothing.


use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_core::analysis::intervene::{intervene, Intervention};
use focus_lens::gui::state::Tab;
use focus_lens::gui::views::intervene::{raw_group, Kind};
use focus_lens::gui::FocusLensApp;
use crate::harness::{harness, has, no_errors, settings, settle};

type H = Harness<'static, FocusLensApp>;

/// The Compare view's result against core's intervention on the analysis' first `n` tokens.
fn matches_core(h: &H, layer: usize, what: Intervention, n: usize) {
    let app = h.state();
    let res = app.session.result.clone().unwrap();
    let c = app.views.compare.result.as_ref().expect("a comparison in the Compare view");
    let note = c.note.clone().expect("the intervention is described");
    assert!(note.contains(&format!(" at layer {layer}")), "{note}");
    let ids: Vec<u32> = res.analysis.tokens[..n].iter().map(|t| t.id).collect();
    let texts = res.analysis.tokens[..n].iter().map(|t| t.text.clone()).collect();
    let want = intervene(&res.model, &res.adapter, &ids, texts, res.mode, layer, what, None, |_, _| {}).unwrap();
    assert_eq!(c.result.tokens(), n);
    for (name, got, want) in [("after", &c.result.loss_a, &want.comparison.loss_a), ("before", &c.result.loss_b, &want.comparison.loss_b)] {
        for i in 0..n - 1 {
            assert!((got[i] - want[i]).abs() < 1e-4, "loss {name} at {i}: {} vs core {}", got[i], want[i]);
        }
    }
    assert!((0..n - 1).any(|i| c.result.delta(i).abs() > 1e-5), "{what} changed no token's loss");
}

#[test]
fn ablate_and_force_show_their_change_in_the_compare_view() {
    let tmp = tempfile::tempdir().unwrap();
    let mut h = harness(settings(300), tmp.path());
    settle(&mut h);
    no_errors(&h);
    h.state_mut().settings.setup.layer = 9;
    h.step();
    h.get_by_label("Intervene…").click();
    for _ in 0..4 {
        h.step();
    }
    assert!(has(&h, "Edit one layer's routing"), "the window opened");

    // A bad choice: one error, nothing runs.
    h.state_mut().views.intervene.kind = Kind::Swap;
    (h.state_mut().views.intervene.group, h.state_mut().views.intervene.other) = (2, 2);
    h.step();
    h.get_by_label("Run intervention").click();
    h.step();
    h.step();
    assert_eq!(h.state().views.intervene.error.as_deref(), Some("cannot intervene: swap needs two different groups"));
    assert!(h.state().views.compare.result.is_none());

    // Ablate g3 of layer 9 (its number on screen).
    h.get_by_label("ablate a group").click();
    h.state_mut().views.intervene.group = 3;
    h.step();
    h.get_by_label("Run intervention").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().settings.setup.tab, Tab::Compare);
    let res = h.state().session.result.clone().unwrap();
    let raw = raw_group(&res, 9, 3, false).unwrap();
    assert_eq!(res.shown_group(9, raw, false), 3);
    matches_core(&h, 9, Intervention::Ablate { group: raw }, 300);
    assert!(has(&h, &format!("Intervention: ablate g3 (centroid {raw}) at layer 9")), "the Compare view says what was done, in the screen's numbers");
    assert!(has(&h, "A = intervened, B = original"));

    // Force token 260 (beyond the window) into a group, from the right panel on the selected token.
    h.state_mut().select_token(Some(260));
    h.state_mut().settings.setup.tab = Tab::Tokens;
    settle(&mut h);
    h.get_by_label("Intervene on this token…").click();
    for _ in 0..4 {
        h.step();
    }
    assert_eq!(h.state().views.intervene.kind, Kind::Force);
    // A group the token is not in (forcing it into its own would change nothing).
    let shown = (0..res.groups()).find(|&s| res.masks[9][260] >> raw_group(&res, 9, s, false).unwrap() & 1 == 0).unwrap();
    h.state_mut().views.intervene.group = shown;
    h.step();
    h.get_by_label("Run intervention").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    let raw1 = raw_group(&res, 9, shown, false).unwrap();
    matches_core(&h, 9, Intervention::Force { token: 260, group: raw1 }, 300);
}
