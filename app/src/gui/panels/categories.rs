//! Categories: per layer, a K x category matrix of the tokens' linguistic categories.
//! Needs `focus_core::categories` (branch `cats`); until it is merged this panel says so.

use crate::gui::app::FocusLensApp;
use crate::gui::state::AnalysisResult;

/// The linguistic category of token `i`.
pub fn category_of(_res: &AnalysisResult, _i: usize) -> String {
    "(categories not available in this build)".into()
}

pub fn category_color(_res: &AnalysisResult, _i: usize) -> egui::Color32 {
    egui::Color32::LIGHT_GRAY
}

pub fn show(_app: &mut FocusLensApp, ui: &mut egui::Ui) {
    ui.label("The categories module (focus_core::categories) is not in this build yet.");
}
