//! The slow work the GUI runs in the background (see `worker`), one file per job, plain
//! functions of their inputs so tests can call them directly too. This file is the folder's map
//! and its public face: the jobs' entry points are re-exported here (`jobs::analyze`,
//! `jobs::partners`, ...; the modules with several public items stay public: `jobs::bench::...`).
//! Its files import one way: `error` <- the jobs <- `msg` (which names their results) <- `load`
//! and `bench` (which make their own message); `grid` and `head_pattern` use `partners`' cache.
//!
//! - `error`: `JobError`, whose `Cancelled` tells a stop the user asked for from a failure;
//! - `msg`: `Msg`, the one message type that comes back (from these jobs, and from file dialogs
//!   and screenshots);
//! - `load`: the model, the adapter and the text;
//! - `analysis`: the analysis (a preview of a long text first), read back from `disk_cache`
//!   when a recent one matches; what it keeps of its passes (`Keep`: in memory, then in a
//!   scratch file);
//! - `disk_cache`: finished analyses kept on disk;
//! - `partners`: a token's or range's attention row and partners, and `HeadsCache` (the
//!   captured layers of one segment, shared with `grid` and `head_pattern`);
//! - `grid`: one token's attention in every layer and head (the attention view);
//! - `head_pattern`: one head's pattern over a range, or over a whole segment in blocks (the
//!   head view);
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
mod error;
mod grid;
mod head_pattern;
pub mod index;
pub mod intervene;
mod load;
mod mask;
mod msg;
mod partners;
pub mod streaming;
pub mod train;

pub use analysis::{analyze, preview_key, AnalysisJob, Keep, KEEP_BYTES, PREVIEW_TOKENS, SCRATCH_BYTES};
pub use baseline::{baseline, untrained_twin, Baseline};
pub use compare::{CompareJob, CompareRun};
pub use error::JobError;
pub use grid::{attention_grid, AttnGrid};
pub use head_pattern::{head_overview, head_pattern, HeadOverview, HeadPattern};
pub use load::{adapter_fingerprint, fetch_hint, load_adapter, load_model, load_text, read_text, read_text_as};
pub use mask::{mask_image, MaskImage};
pub use msg::Msg;
pub use partners::{partners, range_partners, HeadsCache};
