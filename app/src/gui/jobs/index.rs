//! The Centroids view's background job: build (or resume, or bring up to date) a corpus index
//! with the loaded model and adapter, as `focus-lens index` does with its defaults (top-k with
//! the adapter's k, segments of `INDEX_SEGMENT` tokens), so that the CLI and the app share
//! index files and resume each other's builds.

use super::error::JobError;
use crate::gui::worker::Handle;
use crate::index::{build_index, BuildReport, BuildRequest};
use focus_core::{Adapter, Mode, Model};
use std::path::PathBuf;
use std::sync::Arc;

/// Tokens per segment, `focus-lens index --segment`'s default.
pub const INDEX_SEGMENT: usize = 1024;

pub struct IndexJob {
    pub model: Arc<Model>,
    pub adapter: Arc<Adapter>,
    /// `None`: the embedded sample adapter.
    pub adapter_path: Option<PathBuf>,
    pub corpus: PathBuf,
    pub out: PathBuf,
}

/// A finished build and the notes it made on the way (files skipped, resumed, replaced).
pub type Built = (BuildReport, Vec<String>);

impl IndexJob {
    /// The build; the app sends its outcome as `Msg::Index`.
    pub fn run(&self, h: &Handle) -> Result<Built, JobError> {
        let k = self.adapter.config.top_k;
        let mode = Mode::TopK(self.adapter.config.topk(k).map_err(|e| JobError::Failed(e.to_string()))?);
        let req = BuildRequest {
            model: &self.model,
            adapter: &self.adapter,
            adapter_path: self.adapter_path.as_deref(),
            corpus: &self.corpus,
            out: &self.out,
            mode,
            k,
            segment_len: INDEX_SEGMENT,
        };
        let mut notes = Vec::new();
        h.set_progress(0, 0, "indexing: reading the corpus");
        let r = build_index(&req, &h.cancel, |m| notes.push(m.to_string()), |p| {
            let rate = if p.seconds > 0.0 { p.tokens_routed as f64 / p.seconds } else { 0.0 };
            let what = format!("indexing: {}/{} documents, {} tokens routed ({rate:.0}/s), {}", p.docs_done, p.docs_total, p.tokens_routed, p.current);
            h.set_progress(p.bytes_done as usize, p.bytes_total as usize, what);
        });
        match r {
            Ok(report) => Ok((report, notes)),
            Err(_) if h.cancelled() => Err(JobError::Cancelled),
            Err(e) => Err(JobError::Failed(format!("{e:#}"))),
        }
    }
}
