//! `Msg`: everything that comes back to the UI thread over the worker's one channel (the jobs'
//! results, file dialogs' answers, PNG screenshots). It names the jobs' result types, so it sits
//! above them; a job that makes its own message (`load`, `bench`) imports it.

use super::baseline::Baseline;
use super::dialogs::{Answer, Purpose};
use super::error::JobError;
use super::grid::AttnGrid;
use super::head_pattern::{HeadOverview, HeadPattern};
use super::mask::MaskImage;
use super::{index, streaming, train};
use crate::gui::compared::Compared;
use crate::gui::state::*;
use focus_core::bench::{AttentionRow, BenchRow};
use focus_core::{Adapter, Model};
use std::path::PathBuf;
use std::sync::Arc;

/// Everything that comes back to the UI thread, over the worker's one channel.
pub enum Msg {
    Model(Result<Arc<Model>, JobError>, Option<PathBuf>, DeviceChoice),
    /// The adapter and its fingerprint (`load::adapter_fingerprint`).
    Adapter(Result<(Arc<Adapter>, String), JobError>, Option<PathBuf>, u64),
    Text(Result<(Arc<String>, Option<String>), JobError>, Option<PathBuf>),
    Analysis(Result<AnalysisResult, JobError>),
    /// A finished analysis of the first `PREVIEW_TOKENS` tokens while the full one runs.
    Preview(AnalysisResult),
    Partners(Result<Partners, JobError>),
    /// The untrained adapter's per-layer purity, for the categories view.
    Baseline(Result<Baseline, JobError>),
    Mask(Result<MaskImage, JobError>),
    Bench(Result<(Vec<BenchRow>, String), JobError>),
    Compare(Result<Compared, JobError>),
    AttnGrid(Result<AttnGrid, JobError>),
    HeadPattern(Result<HeadPattern, JobError>),
    /// One head over a whole segment in blocks (the head view's "whole segment").
    HeadOverview(Result<HeadOverview, JobError>),
    AttnBench(Result<Vec<AttentionRow>, JobError>),
    /// Quality and speed against length (`bench::quality`).
    Quality(Result<focus_core::eval::ppl::LengthTable, JobError>),
    /// The running generation's state as it grows, and its last.
    GenStep(streaming::Generated),
    Generated(Result<streaming::Generated, JobError>),
    /// The running training's log rows as they come, and its end.
    TrainStep(train::TrainUpdate),
    Trained(Result<train::TrainEnd, JobError>),
    /// A file dialog closed: what it was for, and the chosen path (`None`: the user cancelled).
    Dialog(Purpose, Option<PathBuf>),
    /// A PNG export was written to this path, or failed.
    Png(Result<PathBuf, String>),
    /// A corpus index build ended (`index::IndexJob`).
    Index(Result<index::Built, JobError>),
}

impl From<Answer> for Msg {
    fn from(Answer(purpose, path): Answer) -> Msg {
        Msg::Dialog(purpose, path)
    }
}
