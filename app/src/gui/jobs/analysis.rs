//! The analysis job: tokenise once, a quick preview of the first `PREVIEW_TOKENS` tokens of a
//! long text, then core's analysis (`focus_core::analysis`) with the passes it keeps for the
//! views; a recent analysis of the same inputs is read back from the disk cache instead. The
//! result is the `AnalysisResult` the views draw: core's `ShownAnalysis` (groups, masks, labels,
//! the numbering), made there.

use super::disk_cache;
use super::error::JobError;
use crate::gui::state::*;
use crate::gui::worker::Handle;
use focus_core::analysis::shown::ShownAnalysis;
use focus_core::analysis::kept::{KeptPass, Scratch, SpilledPass};
use focus_core::analysis::{analyze_tokens_spilling, AnalyzeOptions, Tokens};
use focus_core::{Adapter, Mode, Model};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

pub struct AnalysisJob {
    pub model: Arc<Model>,
    pub adapter: Arc<Adapter>,
    pub adapter_label: String,
    pub text_label: String,
    pub text: Arc<String>,
    pub key: AnalysisKey,
    /// Where finished analyses are kept (`None`: not kept), and the adapter's file identity for
    /// their key (`disk_cache::adapter_identity`).
    pub disk: Option<disk_cache::DiskCache>,
    pub adapter_file: String,
    /// The adapter's fingerprint (`load::adapter_fingerprint`).
    pub adapter_sha256: String,
    /// What the analysis keeps of its passes, and where.
    pub keep: Keep,
}

/// What an analysis keeps of its own passes (`AnalysisResult::kept` and `::spilled`): in memory
/// up to `memory` bytes (segments in order), the rest in a scratch file in `scratch_dir` (an
/// unnamed file, gone when the result is dropped), all the session's scratch files together at
/// most `SCRATCH_BYTES`; `None`: the rest is not kept (its first look runs a pass, as before
/// issue 50). So partners, grids and head views of any segment of a 10K-token text come without
/// a model pass: a spilled segment is read back (about 190 MB for 2048 tokens of SmolLM2-135M,
/// a fraction of a second) instead of run again (12-20 s on 2 cores).
#[derive(Clone, Debug)]
pub struct Keep {
    pub memory: usize,
    pub scratch_dir: Option<PathBuf>,
    /// The bytes the session's live scratch files hold.
    pub pool: Arc<AtomicU64>,
}

impl Default for Keep {
    fn default() -> Self {
        Keep { memory: KEEP_BYTES, scratch_dir: Some(crate::defaults::cache_dir().join("scratch")), pool: Arc::default() }
    }
}

/// The scratch files' budget on disk: a 32K-token text of SmolLM2-135M spills about 2.7 GB
/// (14 segments of 2048 tokens beyond the memory budget).
pub const SCRATCH_BYTES: u64 = 4 << 30;

impl Keep {
    /// A scratch file for one analysis (`None` when off, or when none can be made there).
    fn scratch(&self) -> Option<Arc<Scratch>> {
        let dir = self.scratch_dir.as_ref()?;
        std::fs::create_dir_all(dir).ok()?;
        let f = tempfile::tempfile_in(dir).ok()?;
        Some(Scratch::new(f, self.pool.clone(), SCRATCH_BYTES))
    }
}

/// Texts longer than this are first analysed up to here, so that a finished view appears after
/// a fraction of the full run (the forward pass is most of an analysis' time).
pub const PREVIEW_TOKENS: usize = 512;

/// The key of the quick preview of `key`'s analysis, when the text is long enough to need one.
pub fn preview_key(key: &AnalysisKey) -> Option<AnalysisKey> {
    (key.params.max_tokens > PREVIEW_TOKENS).then(|| {
        let mut k = key.clone();
        k.params.max_tokens = PREVIEW_TOKENS;
        k
    })
}

/// Analyses the first `max_tokens` tokens of the text. With `preview`, a text longer than
/// `PREVIEW_TOKENS` is first analysed up to there and that result sent through `interim`
/// (it is the analysis of `preview_key`: the same tokens, parameters and segmenting).
pub fn analyze(job: AnalysisJob, preview: bool, h: &Handle, interim: &dyn Fn(AnalysisResult)) -> Result<AnalysisResult, JobError> {
    let params = &job.key.params;
    let mode = params.mode(job.adapter.config.groups).map_err(|e| JobError::Failed(e.to_string()))?;
    // A recent analysis of the same inputs and settings is read back instead of run again.
    let disk = job.disk.as_ref().map(|c| (c, disk_cache::key(&job.model, &job.adapter_file, &job.adapter, &job.text, params)));
    if let Some((c, k)) = &disk {
        h.set_progress(0, 0, "looking for this analysis in the cache");
        let t0 = Instant::now();
        if let Some(hit) = c.load(k, job.model.config().n_layers) {
            return Ok(from_cache(&job, mode, hit, t0.elapsed().as_secs_f64()));
        }
    }
    let r = analyze_run(&job, mode, preview, h, interim)?;
    if let Some((c, k)) = disk {
        // Written on a thread of its own, so that the result shows without waiting for it.
        let (c, k, entry) = (c.clone(), k, disk_cache::Cached::new(&r));
        std::thread::spawn(move || c.store(&k, &entry));
    }
    Ok(r)
}

/// An analysis read from the disk cache, as the job would have made it.
fn from_cache(job: &AnalysisJob, mode: Mode, c: disk_cache::Cached, seconds: f64) -> AnalysisResult {
    let mut analysis = c.analysis;
    analysis.routing = c.routing;
    AnalysisResult {
        key: job.key.clone(),
        mode,
        shown: ShownAnalysis::from_parts(analysis, c.argmax, c.masks, c.labels),
        adapter: job.adapter.clone(),
        model: job.model.clone(),
        seconds,
        note: c.note,
        text_tokens: c.text_tokens,
        text_label: job.text_label.clone(),
        from_disk: true,
        kept: Vec::new(),
        spilled: Vec::new(),
        adapter_sha256: job.adapter_sha256.clone(),
    }
}

/// `analyze` without the cache: tokenise, the preview when asked for, the analysis.
fn analyze_run(job: &AnalysisJob, mode: Mode, preview: bool, h: &Handle, interim: &dyn Fn(AnalysisResult)) -> Result<AnalysisResult, JobError> {
    let params = &job.key.params;
    h.set_progress(0, 0, "tokenising");
    let tok = job.model.tokenizer()?;
    let enc = tok.encode(&job.text, false)?;
    let n = enc.ids.len();
    let take = n.min(params.max_tokens.max(1));
    // The preview's pass is kept in the full result too: it is run A of a compare over the
    // first PREVIEW_TOKENS tokens (the compare view's default), exactly.
    let mut kept = Vec::new();
    if preview && take > PREVIEW_TOKENS {
        let key = preview_key(&job.key).expect("max_tokens > PREVIEW_TOKENS");
        let p = analyze_prefix(job, key, mode, &enc.ids, &enc.offsets, PREVIEW_TOKENS, &[], h, "preview")?;
        kept = p.kept.clone();
        interim(p);
    }
    analyze_prefix(job, job.key.clone(), mode, &enc.ids, &enc.offsets, take, &kept, h, "")
}

/// Refuses, before the model runs, an analysis whose memory estimate exceeds what is available
/// (CPU; on a GPU the passes live in device memory), naming both figures: the segment's
/// activations (they grow with the segment: issue 52 lets it reach the model's context), the
/// routing of every token, and the kept passes: the memory budget, the segment being written
/// to the scratch file beside it, and the segment a first look reads back (`HeadsCache`), each
/// `pass` bytes (~750 MB for an 8192-token segment of SmolLM2-135M).
fn check_memory(job: &AnalysisJob, take: usize, seg: usize, mode: Mode, pass: usize) -> Result<(), JobError> {
    use focus_core::model::memory::{self, ModelHeader, RoutingKept, Workload};
    if !job.model.device().is_cpu() {
        return Ok(());
    }
    // A model whose header cannot be read again (moved since it loaded) is not checked.
    let Ok(header) = ModelHeader::open(&job.model.path) else { return Ok(()) };
    let c = &job.adapter.config;
    let routing = RoutingKept { tokens: take, groups: c.groups, d_g: c.d_g, copies: 1 };
    let kept = (job.keep.memory + 2 * pass) as u64;
    let w = Workload::analysis(take, seg, mode == Mode::Soft, routing, kept);
    let what = format!("an analysis of {take} tokens in segments of {seg}");
    memory::check_fits(&what, &header.estimate(&w), memory::available().as_ref()).map_err(|e| JobError::Failed(e.to_string()))
}

/// What an analysis keeps of its own passes (`AnalysisResult::kept`), at most: two 2048-token
/// segments of SmolLM2-135M, Qwen2.5-0.5B or Gemma 3 270M (~190-200 MB each) and the preview's
/// 512 tokens (~47 MB). Longer texts keep their first segments; the others' first look runs a
/// pass.
pub const KEEP_BYTES: usize = 480 << 20;

/// The analysis of the first `take` tokens (`ids` and `offsets`: every token of the text, as
/// tokenised once by `analyze`, and its byte range).
#[allow(clippy::too_many_arguments)]
fn analyze_prefix(
    job: &AnalysisJob,
    key: AnalysisKey,
    mode: Mode,
    ids: &[u32],
    offsets: &[(usize, usize)],
    take: usize,
    kept_before: &[Arc<KeptPass>],
    h: &Handle,
    what: &str,
) -> Result<AnalysisResult, JobError> {
    let t0 = Instant::now();
    let params = &key.params;
    let n = offsets.len();
    let note = (take < n).then(|| format!("the text has {n} tokens: the first {take} are analysed (raise \"tokens\" to see more)"));
    let text = if take < offsets.len() { &job.text[..offsets[take - 1].1] } else { job.text.as_str() };
    if h.cancelled() {
        return Err(JobError::Cancelled);
    }
    let seg = params.segment_for(&job.model);
    let label = if what.is_empty() { format!("{take} tokens") } else { format!("{take} tokens ({what})") };
    h.set_progress(0, 0, label.clone());
    let k = params.topk(job.adapter.config.groups).map_err(|e| JobError::Failed(e.to_string()))?;
    let opts = AnalyzeOptions { mode: mode.kind(), k, segment_len: seg, keep_tokens: true, cancel: Some(&h.cancel) };
    let layers = job.model.config().n_layers;
    let pass = focus_core::analysis::kept::pass_bytes(job.model.config(), job.adapter.config.groups, take.min(seg));
    check_memory(job, take, seg, mode, pass)?;
    let tokens = Tokens { ids: &ids[..take], offsets: &offsets[..take] };
    let budget = job.keep.memory.saturating_sub(kept_before.iter().map(|k| k.bytes()).sum());
    // Only a text longer than the memory budget needs a scratch file.
    let scratch = if budget < focus_core::analysis::kept::pass_bytes(job.model.config(), job.adapter.config.groups, take) { job.keep.scratch() } else { None };
    let (analysis, kept, spilled) = analyze_tokens_spilling(&job.model, &job.adapter, &job.adapter_label, text, &tokens, &opts, budget, scratch.as_ref(), |d, t| {
        // Steps are layers of segments: say which layer (and segment, for long texts) runs.
        let segs = t / layers.max(1);
        let at = if segs > 1 { format!(", segment {} of {segs}", d / layers + 1) } else { String::new() };
        let layer = if d < t { format!("layer {} of {layers}{at}", d % layers + 1) } else { "statistics".into() };
        h.set_progress(d, t, format!("{label}: {layer}"))
    })?;
    Ok(AnalysisResult {
        key,
        mode,
        shown: ShownAnalysis::new(analysis),
        adapter: job.adapter.clone(),
        model: job.model.clone(),
        seconds: t0.elapsed().as_secs_f64(),
        note,
        text_tokens: n,
        text_label: job.text_label.clone(),
        from_disk: false,
        kept: kept_before.iter().cloned().chain(kept.into_iter().map(Arc::new)).collect(),
        spilled: spilled.into_iter().map(Arc::new).collect::<Vec<Arc<SpilledPass>>>(),
        adapter_sha256: job.adapter_sha256.clone(),
    })
}
