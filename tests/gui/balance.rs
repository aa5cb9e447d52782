//! The Balance view's charts: reference lines drawn apart from grid lines.

use crate::harness::{same_rgb, shapes, started};
use egui::epaint::Shape;
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_lens::gui::FocusLensApp;

/// Reference lines are dashed, in their own colour, and labelled on the chart.
#[test]
fn reference_lines_stand_apart_from_grid_lines() {
    use focus_lens::gui::paint::reference::REFERENCE;
    let (_dir, mut h) = started(120);
    h.get_by_label("Balance").click();
    h.step();
    h.step();
    h.step();
    let all = shapes(&h);
    let dashes = all.iter().filter(|s| matches!(s, Shape::LineSegment { stroke, .. } if same_rgb(stroke.color, REFERENCE))).count();
    // Four charts with a reference line each, every line cut into many dashes.
    assert!(dashes >= 4 * 5, "{dashes} dashes in the reference colour");
    let labels: Vec<String> = all.iter().filter_map(|s| if let Shape::Text(t) = s { Some(t.galley.text().to_string()) } else { None }).collect();
    for l in ["ideal 1/K = 0.125", "uniform 1/K = 0.125", "uniform ln K = 2.08"] {
        assert!(labels.iter().any(|t| t == l), "the label {l:?} on a chart: {labels:?}");
    }
    // The labels stay put (placed by the charts' own bounds, they widened them every frame).
    let at = |h: &Harness<'static, FocusLensApp>| -> Vec<egui::Pos2> {
        shapes(h).iter().filter_map(|s| if let Shape::Text(t) = s { t.galley.text().starts_with("ideal 1/K").then_some(t.pos) } else { None }).collect()
    };
    let before = at(&h);
    for _ in 0..20 {
        h.step();
    }
    assert_eq!(at(&h), before, "the charts moved");
}
