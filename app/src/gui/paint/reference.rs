//! Reference lines on the charts ("ideal 1/K", "one group for all tokens", the mean Δ loss):
//! dashed, in a colour of their own and labelled on the chart at the line, so that they never
//! pass for grid lines (which are thin, solid and grey).

use egui::{Align2, Color32, RichText};
use egui_plot::{HLine, LineStyle, PlotPoint, PlotUi, Text};

/// The reference lines' colour (no group colour and no grid grey).
pub const REFERENCE: Color32 = Color32::from_rgb(190, 80, 10);

/// A horizontal reference line at `y`, named `name` in the legend and labelled at its left end.
pub fn hline(p: &mut PlotUi, name: impl Into<String>, y: f64) {
    let name = name.into();
    p.hline(HLine::new(name.clone(), y).color(REFERENCE).width(1.5).style(LineStyle::dashed_loose()));
    // The label sits on the line at the chart's left edge (the same name: one legend entry).
    // (The bounds are the last frame's: none yet in a plot's first frame.)
    let left = p.plot_bounds().min()[0];
    if left.is_finite() {
        let label = RichText::new(name.clone()).color(REFERENCE).small();
        p.text(Text::new(name, PlotPoint::new(left, y), label).anchor(Align2::LEFT_BOTTOM));
    }
}
