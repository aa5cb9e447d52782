//! The views, one module each, and what they share. Every view implements `View`: it draws from
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

use super::jobs::dialogs::Purpose;
use super::export::ExportKind;
use super::jobs::bench::BenchJob;
use super::jobs::Msg;
use super::session::Session;
use super::state::{AnalysisResult, InputKind, Selection, Setting, Settings, Tab, Timing};
use super::worker::{TaskKind, Worker};
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;

/// A view: its own state, drawn each frame from the context; what it wants done comes back as
/// commands (the model of egui's demo app and rerun's viewer). The central views other than
/// Generate are shown only with an analysis on screen (`ViewCtx::result`).
pub trait View {
    fn show(&mut self, cx: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command>;
}

/// What a view may read.
pub struct ViewCtx<'a> {
    pub settings: &'a Settings,
    /// The loaded inputs and the analysis on screen.
    pub session: &'a Session,
    pub selection: &'a Selection,
    /// What runs in the background (progress, `is_running`); read-only here.
    pub worker: &'a Worker<Msg>,
    pub errors: &'a [String],
    /// The last informational message.
    pub status: &'a str,
    pub timing: &'a Timing,
    /// A file dialog is open (its menu items are disabled until it answers).
    pub dialog_open: bool,
    /// The full analysis has arrived and waits for the mouse to move before it replaces the
    /// preview.
    pub pending_full: bool,
    /// A text refused as not UTF-8: the status bar offers to read it as Latin-1.
    pub lossy_offer: Option<&'a std::path::Path>,
    /// A token to scroll to (`Views::scroll_to`), handed to the central view: the token and
    /// layers views take it when they draw (and the token view's search sets it).
    pub scroll_to: Cell<Option<usize>>,
}

impl ViewCtx<'_> {
    pub fn result(&self) -> Option<&Arc<AnalysisResult>> {
        self.session.result.as_ref()
    }
    /// The selected layer, within `res`.
    pub fn layer(&self, res: &AnalysisResult) -> usize {
        self.settings.setup.layer.min(res.layers() - 1)
    }
    /// The index group `g` of `layer` is shown (and coloured) by: matched across layers, or raw.
    pub fn shown(&self, res: &AnalysisResult, layer: usize, g: usize) -> usize {
        res.shown_group(layer, g, self.settings.setup.raw_groups)
    }
}

/// What a view asks the app to do.
pub enum Command {
    /// Open a file as model, adapter or text.
    Open(InputKind, PathBuf),
    /// Reopen a saved session.
    OpenSession(PathBuf),
    /// Back to the embedded default for one input.
    UseDefault(InputKind),
    /// Show a native file dialog.
    Dialog(Purpose),
    /// Open the in-app file window.
    ShowFiles(files::FileTask),
    /// Export: to `export_dir` when set, else through the file window.
    Export(ExportKind),
    /// Write an export to this path.
    ExportTo(ExportKind, PathBuf),
    ShowGlossary,
    Set(Setting),
    /// Run the current analysis again after a cancel or failure.
    Rerun,
    /// Click a token (`None`: clicked beside the tokens).
    Select(Option<usize>),
    /// Select a range of tokens `[a, b]` (drag or shift-click).
    SelectRange(Option<(usize, usize)>),
    /// Analyse this result's tokens with its adapter's untrained twin (the purity baseline).
    BuildBaseline(Arc<AnalysisResult>),
    /// The token under the pointer this frame, and the layer of its column (layers view).
    Hover { token: Option<usize>, layer: Option<usize> },
    /// Scroll the token views to this token.
    ScrollTo(usize),
    /// Read this text (refused as not UTF-8) as Latin-1, saying so.
    OpenTextLossy(PathBuf),
    /// Show this token in the token view, selected (its partners computed) and scrolled to.
    Jump(usize),
    /// Scroll to this partner of the selection and single it out (the selection stays).
    JumpToPartner(usize),
    DismissErrors,
    /// Report an error in the window.
    Error(String),
    /// Cancel the running analysis (the previous result stays).
    CancelAnalysis,
    /// Cancel the running task of this kind.
    Cancel(TaskKind),
    StartBench(BenchJob),
    /// Build the mask image of this result's layer.
    BuildMask(Arc<AnalysisResult>, usize),
    /// Run the comparison of the analysis on screen with run B.
    StartCompare(super::state::CompareSpec),
    /// Compute the head x layer attention grid of a token.
    BuildAttnGrid(Arc<AnalysisResult>, usize),
    /// Compute one head's attention pattern over a range of tokens (layer, head, range).
    BuildHeadPattern(Arc<AnalysisResult>, usize, usize, (usize, usize)),
    /// Open the Intervene window (on this token: force it into a group).
    ShowIntervene(Option<usize>),
    /// Run an intervention; its comparison goes to the Compare view.
    StartIntervene(super::jobs::intervene::InterveneJob),
    /// Start a training run (stopped with its own flag, `TrainJob::stop`).
    StartTrain(super::jobs::train::TrainJob),
    /// Start a generation (stopped with `Cancel(TaskKind::Generate)`).
    StartGenerate(super::jobs::streaming::GenJob),
    /// Load this generated text as the app's text and analyse its first `tokens` tokens with
    /// `params`.
    AnalyseGenerated { text: String, params: super::state::RunParams, tokens: usize },
    /// Build (or resume) a corpus index (stopped with `Cancel(TaskKind::Index)`).
    StartIndex(super::jobs::index::IndexJob),
}

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
            Tab::Tokens => Ok(tokens::svg(res, layer, raw, range)),
            Tab::Layers => Ok(layers::svg(res, &settings.setup.side_layers, raw)),
            Tab::Balance => Ok(balance::svg(res, layer)),
            Tab::Mask => self.mask.svg(res, layer),
            Tab::Attention => self.attention.svg(res, selected),
            Tab::Head => Err("the head view exports as PNG (Export → Current view as PNG)".into()),
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
