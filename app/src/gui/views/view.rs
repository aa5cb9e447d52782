//! What every view shares: the `View` trait, the read-only `ViewCtx` a view draws from, and the
//! `Command`s it returns, which the app applies once per frame. Below every view and `Views`.

use crate::gui::jobs::dialogs::Purpose;
use crate::gui::export::ExportKind;
use crate::gui::jobs::bench::BenchJob;
use crate::gui::jobs::Msg;
use crate::gui::session::Session;
use crate::gui::state::{AnalysisResult, InputKind, Selection, Setting, Settings, Timing};
use crate::gui::worker::{TaskKind, Worker};
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
    /// The name group `g` of `layer` goes by: "g3" (its shown number), or "c5" (raw, when
    /// asked), as every view and export names it (`analysis::identity::group_name`).
    pub fn name(&self, res: &AnalysisResult, layer: usize, g: usize) -> String {
        res.group_name(layer, g, self.settings.setup.raw_groups)
    }
    /// The numbering asked for (shown, or raw).
    pub fn numbering(&self) -> focus_core::analysis::shown::Numbering {
        focus_core::analysis::shown::Numbering::raw_if(self.settings.setup.raw_groups)
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
    ShowFiles(FileTask),
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
    /// Pin (or unpin) the group numbering of the result on screen (`analysis::identity`).
    PinNumbers(bool),
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
    StartCompare(crate::gui::state::CompareSpec),
    /// Compute the head x layer attention grid of a token.
    BuildAttnGrid(Arc<AnalysisResult>, usize),
    /// Compute one head's attention pattern over a range of tokens (layer, head, range).
    BuildHeadPattern(Arc<AnalysisResult>, usize, usize, (usize, usize)),
    /// Compute one head's pattern over the whole segment holding a token, in blocks (layer,
    /// head, token).
    BuildHeadOverview(Arc<AnalysisResult>, usize, usize, usize),
    /// Open the Intervene window (on this token: force it into a group).
    ShowIntervene(Option<usize>),
    /// Run an intervention; its comparison goes to the Compare view.
    StartIntervene(crate::gui::jobs::intervene::InterveneJob),
    /// Start a training run (stopped with its own flag, `TrainJob::stop`).
    StartTrain(crate::gui::jobs::train::TrainJob),
    /// Start a generation (stopped with `Cancel(TaskKind::Generate)`).
    StartGenerate(crate::gui::jobs::streaming::GenJob),
    /// Load this generated text as the app's text and analyse its first `tokens` tokens with
    /// `params`.
    AnalyseGenerated { text: String, params: crate::gui::state::RunParams, tokens: usize },
    /// Build (or resume) a corpus index (stopped with `Cancel(TaskKind::Index)`).
    StartIndex(crate::gui::jobs::index::IndexJob),
}

/// What the files window is for (`Command::ShowFiles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileTask {
    Open(InputKind),
    /// A Hugging Face model folder.
    OpenModelFolder,
    /// A session file.
    OpenSession,
    Export(ExportKind),
}

impl FileTask {
    pub fn title(self) -> String {
        match self {
            FileTask::Open(k) => format!("Open {}", k.label()),
            FileTask::OpenModelFolder => "Open a Hugging Face model folder".into(),
            FileTask::OpenSession => "Open session".into(),
            FileTask::Export(k) => format!("Export: {}", k.label().trim_end_matches('…')),
        }
    }
    pub fn purpose(self) -> Purpose {
        match self {
            FileTask::Open(k) => Purpose::Open(k),
            FileTask::OpenModelFolder => Purpose::OpenModelFolder,
            FileTask::OpenSession => Purpose::OpenSession,
            FileTask::Export(k) => Purpose::Export(k),
        }
    }
}
