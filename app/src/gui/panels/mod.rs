//! One module per panel. `central` shows the tab bar and the selected view; views keep their
//! caches (layouts, textures) in `PanelState`.

pub mod balance;
pub mod busy;
pub mod categories;
pub mod controls;
pub mod details;
pub mod layers;
pub mod mask;
pub mod menu;
pub mod routing;
pub mod speed;
pub mod status;
pub mod tokens;

use super::app::FocusLensApp;
use super::state::Tab;

#[derive(Default)]
pub struct PanelState {
    pub tokens: tokens::TokenLayout,
    pub side: tokens::TokenLayout,
    pub mask: mask::MaskView,
    pub routing: routing::RoutingView,
    /// Scroll to this token in the token view on the next frame.
    pub scroll_to: Option<usize>,
}

pub fn central(app: &mut FocusLensApp, ui: &mut egui::Ui) {
    ui.horizontal(|ui| {
        for tab in Tab::ALL {
            if ui.selectable_label(app.settings.tab == tab, tab.label()).clicked() {
                app.settings.tab = tab;
            }
        }
    });
    ui.separator();
    if app.result.is_none() {
        ui.centered_and_justified(|ui| {
            if app.busy() {
                busy::busy(ui);
            } else {
                ui.label("Nothing analysed yet: open a model, an adapter and a text (File menu, or drop files on the window).");
            }
        });
        return;
    }
    // Views that draw tokens set these again; in the others nothing is hovered.
    app.hovered = None;
    app.hovered_layer = None;
    match app.settings.tab {
        Tab::Tokens => tokens::show(app, ui),
        Tab::Layers => layers::show(app, ui),
        Tab::Balance => balance::show(app, ui),
        Tab::Mask => mask::show(app, ui),
        Tab::Categories => categories::show(app, ui),
        Tab::Routing => routing::show(app, ui),
        Tab::Speed => speed::show(app, ui),
    }
}

