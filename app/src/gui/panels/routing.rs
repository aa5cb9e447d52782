//! Routing space: a 2D PCA projection of the tokens' routing vectors h W_g with the centroids.
//! Needs `focus_core::projection` (branch `cats`); until it is merged this panel says so.

use crate::gui::app::FocusLensApp;

pub fn show(_app: &mut FocusLensApp, ui: &mut egui::Ui) {
    ui.label("The projection module (focus_core::projection) is not in this build yet.");
}
