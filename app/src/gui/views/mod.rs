//! The views, one module each, and what they share (`view`: the `View` trait, `ViewCtx`,
//! `Command`). Every view implements `View`: it draws from
//! a read-only `ViewCtx` (settings, what is loaded and analysed, selection, running work,
//! messages) and its own state (`&mut self`: layouts, textures, its benchmark), and returns
//! `Command`s, which the app applies once per frame (`FocusLensApp::apply`). Views never change
//! the app, start workers or cancel tasks themselves. Each view's SVG export sits next to its
//! drawing code.
//!
//! Panels around the window: `menu` (top), `status` (bottom), `controls` (left), `details`
//! (right); windows: `files` (open and export paths, browser, adapter picker), `glossary` and
//! `intervene` (edit one layer's routing, shown in the Compare view).
//! The central area (`Views::central`) shows the tab bar and one of `tokens`, `layers`,
//! `balance`, `mask`, `attention`, `head`, `categories`, `routing`, `compare`, `speed` (which show the
//! analysis on screen), `generate` (which needs only the model and the adapter), `train` (only
//! the model) or `centroids` (a corpus index, built with the model and adapter or opened from a
//! file).

pub mod attention;
pub mod balance;
pub mod categories;
pub mod centroids;
pub mod compare;
pub mod controls;
pub mod details;
pub mod files;
pub mod generate;
pub mod glossary;
pub mod head;
pub mod intervene;
pub mod layers;
pub mod mask;
pub mod menu;
pub mod routing;
pub mod speed;
pub mod status;
pub mod tokens;
pub mod train;
pub mod view;

pub use view::{Command, FileTask, View, ViewCtx};

use super::state::{AnalysisResult, Setting, Settings, Tab};
use std::cell::Cell;

/// Every view's own state.
#[derive(Default)]
pub struct Views {
    pub menu: menu::MenuView,
    pub status: status::StatusView,
    pub controls: controls::ControlsView,
    pub details: details::DetailsView,
    pub files: files::FilesView,
    pub glossary: glossary::GlossaryView,
    pub intervene: intervene::InterveneView,
    pub balance: balance::BalanceView,
    pub categories: categories::CategoriesView,
    pub compare: compare::CompareView,
    pub attention: attention::AttentionView,
    pub head: head::HeadView,
    pub tokens: tokens::TokensView,
    pub layers: layers::LayersView,
    pub mask: mask::MaskView,
    pub routing: routing::RoutingView,
    pub speed: speed::SpeedView,
    pub generate: generate::GenerateView,
    pub train: train::TrainView,
    pub centroids: centroids::CentroidsView,
    /// Scroll to this token in the token view (or layers view) shown next.
    pub scroll_to: Option<usize>,
    /// The central area's rectangle, for PNG exports of the current view.
    pub rect: Option<egui::Rect>,
    /// The side panels shown or hidden by the user (None: by the window's width, the details
    /// panel hidden below `NARROW` points so that the view keeps its room).
    pub controls_open: Option<bool>,
    pub details_open: Option<bool>,
}

/// Below this window width the details panel starts hidden.
pub const NARROW: f32 = 1300.0;

impl Views {
    /// The whole window: the side panels, then the central area.
    pub fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        let mut out = Vec::new();
        let wide = ui.max_rect().width() >= NARROW;
        let (controls, details) = (self.controls_open.unwrap_or(true), self.details_open.unwrap_or(wide));
        out.extend(self.menu.show(cx, ui));
        out.extend(self.status.show(cx, ui));
        if controls {
            out.extend(self.controls.show(cx, ui));
        }
        if details {
            out.extend(self.details.show(cx, ui));
        }
        out.extend(self.files.show(cx, ui));
        out.extend(self.glossary.show(cx, ui));
        out.extend(self.intervene.show(cx, ui));
        let central = egui::CentralPanel::default().show(ui, |ui| self.central(cx, ui, (controls, details)));
        out.extend(central.inner);
        self.rect = Some(central.response.rect);
        out
    }

    /// The tab bar (wrapped onto more rows in a narrow window, with the side panels' toggles)
    /// and the selected view.
    fn central(&mut self, cx: &ViewCtx, ui: &mut egui::Ui, (controls, details): (bool, bool)) -> Vec<Command> {
        let mut out = Vec::new();
        let mut tab = cx.settings.setup.tab;
        ui.horizontal_wrapped(|ui| {
            for t in Tab::ALL {
                if ui.selectable_label(tab == t, t.label()).clicked() {
                    tab = t;
                }
            }
            ui.separator();
            if ui.selectable_label(controls, "Controls panel").on_hover_text("show or hide the left panel (run and view controls)").clicked() {
                self.controls_open = Some(!controls);
            }
            if ui.selectable_label(details, "Details panel").on_hover_text("show or hide the right panel (the hovered token's routing, partners)").clicked() {
                self.details_open = Some(!details);
            }
        });
        if tab != cx.settings.setup.tab {
            out.push(Command::Set(Setting::Tab(tab)));
        }
        ui.separator();
        // Nothing hovered, unless a view that draws tokens says otherwise (applied in order).
        out.push(Command::Hover { token: None, layer: None });
        // Generation needs only the model and the adapter, training only the model, Centroids an
        // index; the other views, an analysis.
        let standalone = matches!(tab, Tab::Generate | Tab::Train | Tab::Centroids);
        if standalone || cx.result().is_some() {
            // Every view of the analysis says when it shows the provisional preview (its groups
            // and figures change when the full result comes), not only the token view.
            if let (Some(res), false) = (cx.result(), standalone) {
                tokens::provisional_banner(cx, res, ui);
            }
            let cx = ViewCtx { scroll_to: Cell::new(self.scroll_to.take()), ..*cx };
            out.extend(self.view(tab).show(&cx, ui));
            self.scroll_to = cx.scroll_to.take();
        } else {
            ui.centered_and_justified(|ui| {
                if cx.worker.busy() {
                    super::paint::busy::busy(ui);
                } else {
                    ui.label("Nothing analysed yet: open a model, an adapter and a text (File menu, or drop files on the window).");
                }
            });
        }
        out
    }

    /// The central view of `tab`.
    fn view(&mut self, tab: Tab) -> &mut dyn View {
        match tab {
            Tab::Tokens => &mut self.tokens,
            Tab::Layers => &mut self.layers,
            Tab::Balance => &mut self.balance,
            Tab::Mask => &mut self.mask,
            Tab::Attention => &mut self.attention,
            Tab::Head => &mut self.head,
            Tab::Categories => &mut self.categories,
            Tab::Routing => &mut self.routing,
            Tab::Compare => &mut self.compare,
            Tab::Speed => &mut self.speed,
            Tab::Generate => &mut self.generate,
            Tab::Train => &mut self.train,
            Tab::Centroids => &mut self.centroids,
        }
    }

    /// The SVG of the current tab (`Err`: why there is none yet).
    pub fn svg(&self, settings: &Settings, res: &AnalysisResult, selected: Option<usize>, range: Option<(usize, usize)>) -> Result<String, String> {
        let layer = settings.setup.layer.min(res.layers() - 1);
        let raw = settings.setup.raw_groups;
        match settings.setup.tab {
            Tab::Tokens => Ok(tokens::svg(res, layer, raw, range, self.tokens.first_visible)),
            Tab::Layers => Ok(layers::svg(res, &settings.setup.side_layers, raw)),
            Tab::Balance => Ok(balance::svg(res, layer, raw)),
            Tab::Mask => self.mask.svg(res, layer),
            Tab::Attention => self.attention.svg(res, selected),
            Tab::Head => Err("the head view exports as PNG (Export menu, Current view as PNG)".into()),
            Tab::Speed => self.speed.svg(settings.prefs.bench_kind, res),
            Tab::Categories => self.categories.svg(res, layer, raw),
            Tab::Routing => routing::svg(res, layer, raw),
            Tab::Compare => self.compare.svg(settings.setup.head.min(res.model.config().n_heads.saturating_sub(1))),
            Tab::Generate => Err("the Generate view has no SVG: press Analyse this, then export the Tokens view".into()),
            Tab::Train => Err("the Train view has no SVG: export it as PNG".into()),
            Tab::Centroids => Err("the Centroids view has no SVG: `focus-lens centroids INDEX --layer L --centroid G --json` exports a centroid".into()),
        }
    }
}
