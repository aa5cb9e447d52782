//! Reference lines on the charts ("ideal 1/K", "one group for all tokens", the mean Δ loss):
//! dashed, in a colour of their own and labelled on the chart at the line, so that they never
//! pass for grid lines (which are thin, solid and grey).

use egui::{Align2, Color32, RichText};
use egui_plot::{HLine, LineStyle, PlotPoint, PlotUi, Text};

/// The reference lines' colour (no group colour and no grid grey).
pub const REFERENCE: Color32 = Color32::from_rgb(190, 80, 10);

/// A horizontal reference line at `y`, named `name` in the legend and labelled at `x`: the
/// data's left edge (a label placed by the plot's own bounds would widen them every frame).
pub fn hline(p: &mut PlotUi, name: impl Into<String>, y: f64, x: f64) {
    let name = name.into();
    p.hline(HLine::new(name.clone(), y).color(REFERENCE).width(1.5).style(LineStyle::dashed_loose()));
    // The same name and colour as the line: one legend entry, in the line's colour.
    let label = RichText::new(name.clone()).color(REFERENCE).small();
    p.text(Text::new(name, PlotPoint::new(x, y), label).color(REFERENCE).anchor(Align2::LEFT_BOTTOM));
}
