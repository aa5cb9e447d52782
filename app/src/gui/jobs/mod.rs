//! The slow work the GUI runs in the background (see `worker`): loading inputs, analysing,
//! attention rows for the partners view, mask images and benchmarks (`bench`: the speed view's;
//! `streaming`: the Generate view's job), and the native file dialogs (`dialogs`), which wait on
//! a thread of their own. Plain functions of their inputs, so tests can call them directly too.
//! `Msg` is the one message type that comes back (from these jobs, and from file dialogs and
//! screenshots); failures are a `JobError`, whose `Cancelled` tells a stop the user asked for from
//! a real failure.

pub mod bench;
pub mod dialogs;
pub mod disk_cache;
pub mod intervene;
pub mod index;
pub mod streaming;
pub mod train;

use dialogs::{Answer, Purpose};
use super::state::*;
use super::worker::Handle;
use focus_core::analysis::compare::{self, Comparison};
use focus_core::analysis::shown::ShownAnalysis;
use focus_core::analysis::{analyze as core_analyze, analyze_tokens_keeping, AnalyzeOptions, Tokens, DEFAULT_SEGMENT};
use focus_core::bench::{AttentionRow, BenchRow};
use focus_core::focus::mask::{classify, PairClass};
use focus_core::Mode;
use focus_core::{Adapter, Error, Model};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

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

pub fn load_model(path: Option<PathBuf>, device: DeviceChoice, h: &Handle) -> Msg {
    h.set_progress(0, 0, "loading the model");
    let r = (|| -> Result<Arc<Model>, JobError> {
        let p = match &path {
            Some(p) => p.clone(),
            None => {
                let p = crate::defaults::default_model_path();
                if !p.exists() {
                    return Err(JobError::Failed(format!("the default model is not at {}: run scripts/fetch-model.sh, or open a model file", p.display())));
                }
                p
            }
        };
        let dev = device.device()?;
        Ok(Arc::new(Model::load(&p, &dev)?))
    })();
    Msg::Model(r, path, device)
}

pub fn load_adapter(model: Arc<Model>, path: Option<PathBuf>, model_gen: u64, h: &Handle) -> Msg {
    h.set_progress(0, 0, "loading the adapter");
    let r = match &path {
        Some(p) => Adapter::load(p, &model.identity(), model.device()),
        None => crate::defaults::sample_adapter(&model),
    };
    Msg::Adapter(r.map(Arc::new).map_err(JobError::from), path, model_gen)
}

/// Reads and checks a text; files over `MAX_TEXT_BYTES` are truncated (at a character
/// boundary) with a note that the window shows.
pub fn read_text(path: &Option<PathBuf>) -> Result<(String, Option<String>), JobError> {
    read_text_as(path, false)
}

/// `read_text`, or with `latin1` a file that is not UTF-8 read as Latin-1 (ISO-8859-1: each
/// byte one character, U+0000-U+00FF), with a note that says so: lossy for any other encoding.
pub fn read_text_as(path: &Option<PathBuf>, latin1: bool) -> Result<(String, Option<String>), JobError> {
    let Some(p) = path else { return Ok((crate::defaults::SAMPLE_TEXT.to_string(), None)) };
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    if meta.is_dir() {
        return Err(JobError::Failed(format!("{} is a folder, not a text file", p.display())));
    }
    // A FIFO (or socket, or device) would block the reader forever, or never end.
    focus_core::io::check_regular(p, "text")?;
    let mut bytes = Vec::new();
    use std::io::Read;
    std::fs::File::open(p)
        .and_then(|f| f.take(MAX_TEXT_BYTES as u64 + 4).read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let mut note = None;
    if meta.len() > MAX_TEXT_BYTES as u64 {
        bytes.truncate(MAX_TEXT_BYTES);
        // Drop a character cut in half at the end.
        while !bytes.is_empty() && std::str::from_utf8(&bytes).is_err_and(|e| e.error_len().is_none()) {
            bytes.pop();
        }
        note = Some(format!(
            "{} is {:.1} MiB: only its first {} MiB are used",
            p.display(),
            meta.len() as f64 / (1 << 20) as f64,
            MAX_TEXT_BYTES >> 20
        ));
    }
    if latin1 {
        if let Err(e) = std::str::from_utf8(&bytes) {
            let at = e.valid_up_to();
            bytes = bytes.iter().map(|&b| b as char).collect::<String>().into_bytes();
            let read = format!("{} is not UTF-8 (first invalid byte at offset {at}): read as Latin-1, lossy: characters of another encoding show wrongly", p.display());
            note = Some(match note {
                Some(n) => format!("{read}; {n}"),
                None => read,
            });
        }
    }
    let text = focus_core::io::text::text_from_bytes(bytes, &p.display().to_string())?;
    Ok((text, note))
}

pub fn load_text(path: Option<PathBuf>, latin1: bool, h: &Handle) -> Msg {
    h.set_progress(0, 0, "reading the text");
    Msg::Text(read_text_as(&path, latin1).map(|(t, n)| (Arc::new(t), n)), path)
}

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
    kept_before: &[Arc<focus_core::analysis::kept::KeptPass>],
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
    let seg = DEFAULT_SEGMENT.min(job.model.config().context);
    let label = if what.is_empty() { format!("{take} tokens") } else { format!("{take} tokens ({what})") };
    h.set_progress(0, 0, label.clone());
    let opts = AnalyzeOptions { mode, k: params.k, segment_len: seg, keep_tokens: true, cancel: Some(&h.cancel) };
    let layers = job.model.config().n_layers;
    let tokens = Tokens { ids: &ids[..take], offsets: &offsets[..take] };
    let budget = KEEP_BYTES.saturating_sub(kept_before.iter().map(|k| k.bytes()).sum());
    let (analysis, kept) = analyze_tokens_keeping(&job.model, &job.adapter, &job.adapter_label, text, &tokens, &opts, budget, |d, t| {
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
    })
}

/// The attention row of token `i` in `layer`/`head` and its same-group partners beyond the
/// window, in the segment that holds it.
pub fn partners(res: &AnalysisResult, i: usize, layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<Partners, JobError> {
    let an = &res.analysis;
    if i >= an.tokens.len() || layer >= an.layers.len() {
        return Err(JobError::Failed("token or layer out of range".into()));
    }
    h.set_progress(0, 0, format!("token {i}, layer {layer}, head {head}"));
    segment_partners(res, (i, i), None, layer, head, cache, h)
}

/// The long-range partners of a range of tokens `[a, b]` in `layer`/`head`
/// (`partners::partners`: a key's weight and the masses are means over the range's queries, so
/// a range of one token gives that token's partners). A range is cut to the segment of its
/// first token (pairs never cross segments).
pub fn range_partners(res: &AnalysisResult, range: (usize, usize), layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<Partners, JobError> {
    let an = &res.analysis;
    let (a, b) = (range.0.min(range.1), range.0.max(range.1));
    if b >= an.tokens.len() || layer >= an.layers.len() {
        return Err(JobError::Failed("range or layer out of range".into()));
    }
    let (_, end) = segment(res, a);
    let b = b.min(end - 1);
    h.set_progress(0, 0, format!("tokens {a}-{b}, layer {layer}, head {head}"));
    segment_partners(res, (a, b), Some((a, b)), layer, head, cache, h)
}

/// Every layer's queries, keys and routing of the segment the user looks into
/// (`partners::SequenceHeads`), shared by the partners and attention-grid jobs: the first job for
/// a segment of a result reads them in one model pass; every later one (another token, range,
/// layer or head, the grid) computes its rows from them without running the model. One segment
/// is kept (about 190 MB for SmolLM2-135M at 2048 tokens).
#[derive(Clone, Default)]
pub struct HeadsCache(Arc<std::sync::Mutex<Option<(AnalysisKey, usize, usize, Arc<focus_core::analysis::partners::SequenceHeads>)>>>);

impl HeadsCache {
    /// The heads of segment `[start, end)` of `res`: the analysis' own pass when it kept it,
    /// else read now unless kept here.
    pub fn get(&self, res: &AnalysisResult, (start, end): (usize, usize), h: &Handle) -> Result<Arc<focus_core::analysis::partners::SequenceHeads>, JobError> {
        if let Some(k) = res.kept.iter().find(|k| k.start == start && k.tokens() == end - start) {
            return Ok(k.heads.clone());
        }
        // Held while the pass runs: a second job for the same segment waits and reuses it.
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // The key with the token count: a preview and its full result differ in their routing.
        if let Some((k, n, s, heads)) = slot.as_ref() {
            if *k == res.key && *n == res.tokens() && *s == start {
                return Ok(heads.clone());
            }
        }
        // The old segment's memory goes before the new one is read.
        *slot = None;
        let ids: Vec<u32> = res.analysis.tokens[start..end].iter().map(|t| t.id).collect();
        let layers = res.layers();
        let what = format!("every layer's queries and keys for tokens {start}-{} (once; then no model run)", end - 1);
        h.set_progress(0, layers, what.clone());
        let heads = focus_core::analysis::partners::sequence_heads(&res.model, Some(&res.adapter), &ids, res.mode, Some(&h.cancel), &|l| h.set_progress(l, layers, what.clone()))?;
        let heads = Arc::new(heads);
        *slot = Some((res.key.clone(), res.tokens(), start, heads.clone()));
        Ok(heads)
    }
}

fn segment_partners(res: &AnalysisResult, (a, b): (usize, usize), range: Option<(usize, usize)>, layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<Partners, JobError> {
    let (start, end) = segment(res, a);
    let masks = &res.masks[layer][start..end];
    // From the segment's captured layers: a model pass only for the first look into a segment.
    let heads = cache.get(res, (start, end), h)?;
    let p = heads.partners(&res.adapter.config, res.mode, masks, layer, head, (a - start, b - start), Some(&h.cancel))?;
    let partners = p.partners.into_iter().map(|(j, w)| (start + j, w)).collect();
    Ok(Partners { token: a, range, layer, head, key: res.key.clone(), partners, partner_mass: p.partner_mass, local_mass: p.local_mass })
}

/// A comparison and what it compared: the analysis on screen (run A) and the spec of run B.
pub struct Compared {
    pub key: AnalysisKey,
    pub spec: CompareSpec,
    pub result: Comparison,
    /// K of run A's adapter and of run B's.
    pub groups: (usize, usize),
    /// What an intervention did (`intervene::InterveneJob`: A is the intervened run, B the
    /// original); None for a comparison of two runs.
    pub note: Option<String>,
}

impl Compared {
    /// Do the runs' group numbers name the same groups? Not when their adapters have different
    /// K: then "top-k groups change" means nothing and is not reported.
    pub fn groups_correspond(&self) -> bool {
        self.groups.0 == self.groups.1
    }

    /// The warning shown (and exported) when they do not.
    pub fn groups_warning(&self) -> Option<String> {
        (!self.groups_correspond()).then(|| {
            format!(
                "Run A has K = {} groups and run B K = {}: their group numbers do not correspond, so whether a token's groups change is not reported (loss and pruned mass compare as usual).",
                self.groups.0, self.groups.1
            )
        })
    }
}

/// The exports. When the runs' groups do not correspond (adapters of different K) the exports
/// say so, as the screen does, and leave out every group-change figure (a count of "layers
/// changed" between unrelated group numbers means nothing); loss and pruned mass stay.
impl Compared {
    /// The per-token table as CSV (`Comparison::csv`).
    pub fn csv(&self, layer: usize, head: usize) -> String {
        let s = self.result.csv(layer, head);
        match self.groups_warning() {
            None => s,
            // Its last two columns are the group-change counts.
            Some(w) => format!("# {w}\n{}", drop_last_fields(&s, 2)),
        }
    }

    /// The per-layer figures as CSV (`Comparison::layers_csv`).
    pub fn layers_csv(&self, head: usize) -> String {
        let s = self.result.layers_csv(head);
        let Some(w) = self.groups_warning() else { return s };
        // Every field is a number: drop tokens_changed, changed_share (columns 1-2) and
        // delta_loss_changed / unchanged (the last two).
        let mut out = format!("# {w}\n");
        for line in s.lines() {
            if line.starts_with('#') {
                if !line.contains("delta_loss_*") {
                    out += line;
                    out.push('\n');
                }
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            let keep: Vec<&str> = f.iter().enumerate().filter(|&(i, _)| i != 1 && i != 2 && i + 2 < f.len()).map(|(_, x)| *x).collect();
            out += &keep.join(",");
            out.push('\n');
        }
        out
    }

    /// Everything as JSON (`Comparison::json`), with both runs' K and whether their groups
    /// correspond.
    pub fn json(&self, layer: usize, head: usize) -> String {
        let mut v: serde_json::Value = serde_json::from_str(&self.result.json(layer, head)).expect("the comparison's own JSON");
        v["groups"] = serde_json::json!({ "k_a": self.groups.0, "k_b": self.groups.1, "correspond": self.groups_correspond() });
        if let Some(w) = self.groups_warning() {
            v["groups"]["warning"] = w.into();
            for t in v["per_token"].as_array_mut().into_iter().flatten() {
                t.as_object_mut().map(|o| o.remove("groups_changed_layers"));
            }
            for l in v["per_layer"].as_array_mut().into_iter().flatten() {
                if let Some(o) = l.as_object_mut() {
                    for k in ["tokens_changed", "changed_share", "delta_loss_changed", "delta_loss_unchanged"] {
                        o.remove(k);
                    }
                }
            }
            v.as_object_mut().map(|o| o.remove("per_layer_note"));
        }
        serde_json::to_string_pretty(&v).expect("JSON of numbers and strings")
    }
}

/// `csv` without the last `n` fields of each record; comment lines (`#`) stay. Quote-aware: a
/// token's text is quoted and may hold commas and newlines.
pub fn drop_last_fields(csv: &str, n: usize) -> String {
    let cut = |record: &str, commas: &[usize]| -> String {
        if record.starts_with('#') || commas.len() < n {
            record.to_string()
        } else {
            record[..commas[commas.len() - n]].to_string()
        }
    };
    let mut out = String::with_capacity(csv.len());
    let (mut record, mut commas, mut quoted) = (String::new(), Vec::new(), false);
    for c in csv.chars() {
        if c == '"' {
            quoted = !quoted;
        }
        if c == '\n' && !quoted {
            out += &cut(&record, &commas);
            out.push('\n');
            record.clear();
            commas.clear();
            continue;
        }
        if c == ',' && !quoted {
            commas.push(record.len());
        }
        record.push(c);
    }
    out + &cut(&record, &commas)
}

impl std::ops::Deref for Compared {
    type Target = Comparison;
    fn deref(&self) -> &Comparison {
        &self.result
    }
}

/// One run of a comparison, as the compare view prepares it.
#[derive(Clone)]
pub struct CompareRun {
    pub label: String,
    /// `None`: top-k with run B's own adapter, whose K is known once it has loaded.
    pub mode: Option<Mode>,
    /// k of the mask in top-k mode (and of the groups compared, with the other run's).
    pub k: usize,
    /// The adapter as run (window and Sinkhorn variant applied).
    pub adapter: Arc<Adapter>,
}

/// Everything a comparison needs, prepared on the UI thread.
pub struct CompareJob {
    pub res: Arc<AnalysisResult>,
    pub spec: CompareSpec,
    pub a: CompareRun,
    /// Run B, or the path of its adapter still to load (with the rest of run B).
    pub b: CompareRun,
    pub b_adapter_path: Option<PathBuf>,
}

impl CompareJob {
    /// Over the start of the analysed text (`compare::compare`).
    pub fn run(mut self, h: &Handle) -> Result<Compared, JobError> {
        let model = self.res.model.clone();
        if let Some(p) = &self.b_adapter_path {
            h.set_progress(0, 0, "loading adapter B");
            let mut a = Adapter::load(p, &model.identity(), model.device())?;
            if let Some(c) = self.spec.causal {
                a.config.causal_sinkhorn = c;
            }
            if self.b.mode.is_none() {
                let k = a.config.topk(self.b.k).map_err(|e| JobError::Failed(format!("run B (adapter B): {e}")))?;
                self.b.mode = Some(Mode::TopK(k));
            }
            self.b.adapter = Arc::new(a);
        }
        let mode_b = self.b.mode.ok_or_else(|| JobError::Failed("run B: top-k needs adapter B's K, and it has not loaded".into()))?;
        let n = self.res.tokens().min(self.spec.max_tokens.max(2)).min(model.config().context);
        let ids: Vec<u32> = self.res.analysis.tokens[..n].iter().map(|t| t.id).collect();
        let texts = self.res.analysis.tokens[..n].iter().map(|t| t.text.clone()).collect();
        let a = compare::Run { label: &self.a.label, mode: self.res.mode, k: self.a.k, adapter: &self.a.adapter };
        let a = compare::Run { mode: self.a.mode.unwrap_or(a.mode), ..a };
        let b = compare::Run { label: &self.b.label, mode: mode_b, k: self.b.k, adapter: &self.b.adapter };
        // Run A is the analysis on screen: read from its kept pass when one covers these tokens
        // as they were analysed (only run B then runs the model).
        let kept_a = self.res.kept.iter().find(|k| Arc::ptr_eq(&self.a.adapter, &self.res.adapter) && k.serves(a.mode, n)).map(|k| &**k);
        let result = compare::compare_reusing(&model, &ids, texts, &a, kept_a, &b, self.b_adapter_path.is_none(), Some(&h.cancel), |d, t, what| h.set_progress(d, t, what))?;
        let groups = (self.a.adapter.config.groups, self.b.adapter.config.groups);
        Ok(Compared { key: self.res.key.clone(), spec: self.spec, result, groups, note: None })
    }
}

/// One token's attention in every layer and head, split by what the top-k mask does with each
/// pair: for the attention view's head x layer grid.
pub struct AttnGrid {
    pub key: AnalysisKey,
    pub token: usize,
    /// `cells[layer][head]` = (local, shared-group, pruned) shares of the token's dense softmax
    /// attention (summing to 1).
    pub cells: Vec<Vec<[f32; 3]>>,
}

/// The head x layer grid of token `i` of `res` (its segment, run in `res`'s mode;
/// `compare::attention_grid`).
pub fn attention_grid(res: &AnalysisResult, i: usize, cache: &HeadsCache, h: &Handle) -> Result<AttnGrid, JobError> {
    let an = &res.analysis;
    if i >= an.tokens.len() {
        return Err(JobError::Failed("token out of range".into()));
    }
    h.set_progress(0, 0, format!("token {i}, every layer and head"));
    let (start, end) = segment(res, i);
    // From the segment's captured layers (shared with the partners: no model pass when they
    // were computed for this segment).
    let heads = cache.get(res, (start, end), h)?;
    let c = &res.adapter.config;
    let cells = heads.grid(res.key.params.k, c.window, c.sink, i - start)?;
    Ok(AttnGrid { key: res.key.clone(), token: i, cells })
}

/// One head's full attention pattern over a range of tokens, dense and Focus, for the head view
/// (`head_pattern::head_pattern`), and what it was computed for.
pub struct HeadPattern {
    pub key: AnalysisKey,
    /// The range as asked for (the pattern covers it cut to its first token's segment and to
    /// `head_pattern::MAX_RANGE` tokens).
    pub asked: (usize, usize),
    /// Indices within the text (`pattern`'s are within its segment).
    pub range: (usize, usize),
    pub pattern: focus_core::analysis::head_pattern::HeadPattern,
}

/// The head view's pattern of `layer`/`head` over tokens `[a, b]` of `res`: cut to the segment
/// of `a` and to `MAX_RANGE` tokens, from the segment's kept layers (`HeadsCache`).
pub fn head_pattern(res: &AnalysisResult, (a, b): (usize, usize), layer: usize, head: usize, cache: &HeadsCache, h: &Handle) -> Result<HeadPattern, JobError> {
    use focus_core::analysis::head_pattern::{head_pattern, MAX_RANGE};
    let n = res.tokens();
    if a > b || b >= n || layer >= res.layers() {
        return Err(JobError::Failed(format!("tokens {a}-{b} or layer {layer} out of range")));
    }
    let (start, end) = segment(res, a);
    let b2 = b.min(end - 1).min(a + MAX_RANGE - 1);
    h.set_progress(0, 0, format!("layer {layer}, head {head}, tokens {a}-{b2}"));
    let heads = cache.get(res, (start, end), h)?;
    let (hd, routing) = heads.layers.get(layer).ok_or_else(|| JobError::Failed(format!("layer {layer} out of range")))?;
    let routing = routing.as_ref().ok_or_else(|| JobError::Failed("the run has no routing (no adapter)".into()))?;
    let pattern = head_pattern(hd, routing, &res.adapter.config, res.mode, res.key.params.k, layer, head, (a - start, b2 - start))?;
    Ok(HeadPattern { key: res.key.clone(), asked: (a, b), range: (a, b2), pattern })
}

/// The segment `[start, end)` of `res` that holds token `i`.
fn segment(res: &AnalysisResult, i: usize) -> (usize, usize) {
    let seg = res.analysis.segment_len.max(1);
    let start = i / seg * seg;
    (start, (start + seg).min(res.analysis.tokens.len()))
}

/// The untrained twin of an adapter: a random init with its configuration (K, d_g, tau,
/// Sinkhorn, window, gate, score) and the seed its `init` records (0 when it records none),
/// i.e. what `adapter init` with those flags writes. Returns it and the seed.
pub fn untrained_twin(a: &Adapter) -> Result<(Adapter, u64), JobError> {
    let c = &a.config;
    let seed = c
        .init
        .split("seed")
        .nth(1)
        .and_then(|r| r.trim_start_matches([' ', '=', ':']).split(|ch: char| !ch.is_ascii_digit()).next().and_then(|d| d.parse().ok()))
        .unwrap_or(0);
    Ok((a.untrained_twin(seed)?, seed))
}

/// Per-layer purity of the untrained twin of the analysis' adapter, on the same tokens, mode
/// and k: the baseline the categories view draws the trained purity against.
pub struct Baseline {
    /// The analysis it was computed for.
    pub key: AnalysisKey,
    /// Token-weighted purity per layer (`LayerProfile::purity`).
    pub purity: Vec<Option<f64>>,
    pub seed: u64,
    /// Whether the analysed adapter records any training (else it may itself be untrained).
    pub trained: bool,
    pub seconds: f64,
    /// Structure (`analysis::structure`) of the analysis beside the twin's, with the best
    /// layer's paper-form table.
    pub structure: focus_core::analysis::structure::StructureReport,
}

/// Analyses the same text prefix as `res` with the untrained twin of its adapter (same mode, k
/// and segmenting). `text`: the text `res` was analysed from.
pub fn baseline(res: &AnalysisResult, text: &str, h: &Handle) -> Result<Baseline, JobError> {
    let t0 = Instant::now();
    h.set_progress(0, 0, "untrained adapter: initialising");
    let (twin, seed) = untrained_twin(&res.adapter)?;
    let end = res.analysis.tokens.last().map(|t| t.end).unwrap_or(0);
    let text = text.get(..end).filter(|t| !t.is_empty()).ok_or_else(|| JobError::Failed("the analysed text is not at hand".into()))?;
    let opts = AnalyzeOptions { mode: res.mode, k: res.key.params.k, segment_len: res.analysis.segment_len, keep_tokens: false, cancel: Some(&h.cancel) };
    let layers = res.layers();
    let an = core_analyze(&res.model, &twin, "untrained", text, &opts, |d, t| h.set_progress(d, t, format!("untrained adapter: layer {} of {layers}", (d % layers.max(1)) + 1)))?;
    if an.tokens.len() != res.tokens() {
        return Err(JobError::Failed(format!("the untrained run saw {} tokens, the analysis {}", an.tokens.len(), res.tokens())));
    }
    use focus_core::analysis::structure::{of_analysis, of_tops, PaperTable, StructureReport};
    let tops: Vec<Vec<usize>> = res.argmax.iter().map(|l| l.iter().map(|&g| g as usize).collect()).collect();
    let mine = of_tops(&res.analysis.tokens, &tops, res.groups(), &res.analysis.routed_layers());
    let table = PaperTable::best(&mine, &tops, &res.analysis.tokens);
    let structure = StructureReport::new(mine, Some((of_analysis(&an), seed)), table);
    Ok(Baseline {
        structure,
        key: res.key.clone(),
        purity: an.profiles.iter().map(|p| p.centroids.iter().any(|c| c.tokens > 0).then(|| p.purity())).collect(),
        seed,
        trained: res.adapter.config.training.is_some(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The hard mask of one layer as an image of at most `max_side` x `max_side` blocks. Each
/// block's colour mixes local, same-group and pruned pairs by their counts; the counts are
/// exact and cover every causal pair within a segment.
pub struct MaskImage {
    pub key: AnalysisKey,
    pub layer: usize,
    pub tokens: usize,
    /// Tokens per block side.
    pub block: usize,
    pub side: usize,
    /// Per block: (local, same_group, pruned) pair counts, row-major (query block, key block).
    pub counts: Vec<[u32; 3]>,
    pub local: u64,
    pub same_group: u64,
    pub pruned: u64,
}

impl MaskImage {
    pub fn retained(&self) -> f64 {
        let all = self.local + self.same_group + self.pruned;
        if all == 0 {
            0.0
        } else {
            (self.local + self.same_group) as f64 / all as f64
        }
    }

    pub fn color(&self, b: usize) -> egui::Color32 {
        use super::paint::palette::*;
        let [l, s, p] = self.counts[b];
        mix(&[(LOCAL, l as f32), (SAME_GROUP, s as f32), (PRUNED, p as f32)])
    }
}

pub fn mask_image(res: &AnalysisResult, layer: usize, max_side: usize, h: &Handle) -> Result<MaskImage, JobError> {
    let masks = res.masks.get(layer).ok_or_else(|| JobError::Failed(format!("no layer {layer}")))?;
    let t = masks.len();
    let (w, s, seg) = (res.window(), res.sink(), res.analysis.segment_len.max(1));
    let block = t.div_ceil(max_side.max(1)).max(1);
    let side = t.div_ceil(block);
    let mut counts = vec![[0u32; 3]; side * side];
    let (mut local, mut same, mut pruned) = (0u64, 0u64, 0u64);
    for i in 0..t {
        if i % 256 == 0 {
            if h.cancelled() {
                return Err(JobError::Cancelled);
            }
            h.set_progress(i, t, format!("layer {layer}"));
        }
        let seg_start = i / seg * seg;
        let row = (i / block) * side;
        let mi = masks[i];
        for (j, &mj) in masks.iter().enumerate().take(i + 1).skip(seg_start) {
            // Positions within the segment: the sink is its first tokens.
            let c = match classify(i - seg_start, j - seg_start, mi, mj, w, s) {
                PairClass::Local => {
                    local += 1;
                    0
                }
                PairClass::SharedGroup(_) => {
                    same += 1;
                    1
                }
                PairClass::Pruned => {
                    pruned += 1;
                    2
                }
                // j <= i here.
                PairClass::Future => continue,
            };
            counts[row + j / block][c] += 1;
        }
    }
    Ok(MaskImage { key: res.key.clone(), layer, tokens: t, block, side, counts, local, same_group: same, pruned })
}

#[cfg(test)]
mod tests {
    #[test]
    fn drop_last_fields_keeps_quoted_commas_and_newlines() {
        let csv = "# a, b\nindex,token,x,y\n0,\"a,b\",1,2\n1,\"c\nd,e\",3,4\n2,\"\"\"\",5,6";
        assert_eq!(super::drop_last_fields(csv, 2), "# a, b\nindex,token\n0,\"a,b\"\n1,\"c\nd,e\"\n2,\"\"\"\"");
    }
}
