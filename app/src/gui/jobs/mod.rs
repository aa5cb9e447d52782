//! The slow work the GUI runs in the background (see `worker`), one file per job, plain
//! functions of their inputs so tests can call them directly too. This file holds `Msg`, the one
//! message type that comes back (from these jobs, and from file dialogs and screenshots), and
//! `JobError`, whose `Cancelled` tells a stop the user asked for from a real failure; the jobs'
//! entry points are re-exported here (`jobs::analyze`, `jobs::partners`, ...).
//!
//! - `load`: the model, the adapter and the text;
//! - `analysis`: the analysis (a preview of a long text first), read back from `disk_cache`
//!   when a recent one matches;
//! - `disk_cache`: finished analyses kept on disk;
//! - `partners`: a token's or range's attention row and partners, and `HeadsCache` (the
//!   captured layers of one segment, shared with `grid` and `head_pattern`);
//! - `grid`: one token's attention in every layer and head (the attention view);
//! - `head_pattern`: one head's pattern over a range (the head view);
//! - `compare`: run A beside run B (the compare view);
//! - `intervene`: the Intervene window's run, shown as a comparison;
//! - `baseline`: the untrained twin's analysis (the categories view);
//! - `mask`: one layer's mask as an image (the mask view);
//! - `bench`: the speed view's benchmarks;
//! - `streaming`: the Generate view's job;
//! - `train`: the Train view's run;
//! - `index`: a corpus index build (the centroids view);
//! - `dialogs`: native file dialogs, which wait on a thread of their own.

mod analysis;
mod baseline;
pub mod bench;
mod compare;
pub mod dialogs;
pub mod disk_cache;
mod grid;
mod head_pattern;
pub mod index;
pub mod intervene;
mod load;
mod mask;
mod partners;
pub mod streaming;
pub mod train;

pub use analysis::{analyze, group_labels, preview_key, AnalysisJob, KEEP_BYTES, PREVIEW_TOKENS};
pub use baseline::{baseline, untrained_twin, Baseline};
pub use compare::{CompareJob, CompareRun};
pub use grid::{attention_grid, AttnGrid};
pub use head_pattern::{head_pattern, HeadPattern};
pub use load::{load_adapter, load_model, load_text, read_text, read_text_as};
pub use mask::{mask_image, MaskImage};
pub use partners::{partners, range_partners, HeadsCache};

use crate::gui::compared::Compared;
use crate::gui::state::*;
use dialogs::{Answer, Purpose};
use focus_core::bench::{AttentionRow, BenchRow};
use focus_core::{Adapter, Error, Model};
use std::path::PathBuf;
use std::sync::Arc;

/// Why a job returned no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// Stopped on request (its cancel flag).
    Cancelled,
    /// Failed, with the reason in one line.
    Failed(String),
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Cancelled => f.write_str("cancelled"),
            JobError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        match e {
            Error::Cancelled => JobError::Cancelled,
            e => JobError::Failed(e.to_string()),
        }
    }
}

impl From<String> for JobError {
    fn from(e: String) -> Self {
        JobError::Failed(e)
    }
}

/// Everything that comes back to the UI thread, over the worker's one channel.
pub enum Msg {
    Model(Result<Arc<Model>, JobError>, Option<PathBuf>, DeviceChoice),
    Adapter(Result<Arc<Adapter>, JobError>, Option<PathBuf>, u64),
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
    AttnBench(Result<Vec<AttentionRow>, JobError>),
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
