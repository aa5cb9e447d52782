//! What the app remembers: persisted settings (eframe storage) and the `Setting` edits views ask
//! for, the loaded inputs and analysis results, the hovered and selected token with its
//! partners, and frame timing. Views read these through their context (`views::ViewCtx`); only
//! the app changes them.

use focus_core::analysis::shown::ShownAnalysis;
use focus_core::focus::mask::TopK;
use focus_core::{Adapter, Mode, ModeKind, Model};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Texts larger than this are truncated (with a visible note) before tokenising: the GUI analyses
/// at most `MAX_TOKENS_LIMIT` tokens anyway.
pub const MAX_TEXT_BYTES: usize = 4 << 20;
/// Upper bound of the "tokens to analyse" control.
pub const MAX_TOKENS_LIMIT: usize = 32_768;
/// At most this many entries in the recent-files list.
pub const RECENT_LEN: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeviceChoice {
    Cpu,
    Cuda,
}

impl DeviceChoice {
    pub fn label(self) -> &'static str {
        match self {
            DeviceChoice::Cpu => "CPU",
            DeviceChoice::Cuda => "CUDA",
        }
    }
    /// CUDA only exists in binaries built with `--features cuda`.
    pub fn available() -> Vec<DeviceChoice> {
        if cfg!(feature = "cuda") {
            vec![DeviceChoice::Cpu, DeviceChoice::Cuda]
        } else {
            vec![DeviceChoice::Cpu]
        }
    }
    pub fn device(self) -> focus_core::Result<candle_core::Device> {
        match self {
            DeviceChoice::Cpu => Ok(candle_core::Device::Cpu),
            DeviceChoice::Cuda => focus_core::device::cuda(0),
        }
    }
}

/// A mode's name on the GUI's buttons.
pub fn mode_label(m: ModeKind) -> &'static str {
    match m {
        ModeKind::Dense => "dense",
        ModeKind::Soft => "soft",
        ModeKind::TopK => "top-k",
    }
}

/// Everything an analysis depends on besides the three inputs. Changing one re-runs it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunParams {
    pub device: DeviceChoice,
    pub mode: ModeKind,
    /// k of hard top-k (and of the top-k groups reported in every mode).
    pub k: usize,
    /// Local window w; `None` keeps the adapter's.
    pub window: Option<usize>,
    /// Causal (prefix) Sinkhorn; `None` keeps the adapter's.
    pub causal: Option<bool>,
    pub max_tokens: usize,
    /// Tokens per analysis segment (each runs from position 0; pairs never cross one), capped at
    /// the model's context when the analysis runs (issue 52: up to 8192 on SmolLM2, 32K on
    /// Qwen2.5). Settings and sessions saved before it existed read as `DEFAULT_SEGMENT`.
    #[serde(default = "default_segment")]
    pub segment: usize,
}

fn default_segment() -> usize {
    focus_core::analysis::DEFAULT_SEGMENT
}

impl Default for RunParams {
    fn default() -> Self {
        RunParams { device: DeviceChoice::Cpu, mode: ModeKind::TopK, k: 2, window: None, causal: None, max_tokens: 2048, segment: default_segment() }
    }
}

impl RunParams {
    /// The mode for an adapter of `groups` groups: top-k's k checked against its K, once, when
    /// a job starts (the result keeps it: `AnalysisResult::mode`).
    pub fn mode(&self, groups: usize) -> focus_core::Result<Mode> {
        Ok(match self.mode {
            ModeKind::Dense => Mode::Dense,
            ModeKind::Soft => Mode::Soft,
            ModeKind::TopK => Mode::TopK(self.topk(groups)?),
        })
    }

    /// The segment length an analysis of `model` runs in: `segment`, within 1..=its context.
    pub fn segment_for(&self, model: &Model) -> usize {
        self.segment.clamp(1, model.config().context.max(1))
    }

    /// `k` checked against an adapter of `groups` groups.
    pub fn topk(&self, groups: usize) -> focus_core::Result<TopK> {
        TopK::new(self.k, groups)
    }

    /// The mode as the controls name it ("topk(2)").
    pub fn mode_label(&self) -> String {
        match self.mode {
            ModeKind::TopK => format!("topk({})", self.k),
            m => mode_label(m).to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InputKind {
    Model,
    Adapter,
    Text,
}

impl InputKind {
    pub fn label(self) -> &'static str {
        match self {
            InputKind::Model => "model",
            InputKind::Adapter => "adapter",
            InputKind::Text => "text",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tab {
    Tokens,
    Layers,
    Balance,
    Mask,
    Attention,
    /// One head's full attention pattern with the Focus mask (`views::head`).
    Head,
    Categories,
    Routing,
    Compare,
    Speed,
    Generate,
    Train,
    Centroids,
}

impl Tab {
    pub const ALL: [Tab; 13] = [Tab::Tokens, Tab::Layers, Tab::Balance, Tab::Mask, Tab::Attention, Tab::Head, Tab::Categories, Tab::Routing, Tab::Compare, Tab::Speed, Tab::Generate, Tab::Train, Tab::Centroids];
    pub fn label(self) -> &'static str {
        match self {
            Tab::Tokens => "Tokens",
            Tab::Layers => "Layers",
            Tab::Balance => "Balance",
            Tab::Mask => "Mask",
            Tab::Attention => "Attention",
            Tab::Head => "Head view",
            Tab::Categories => "Categories",
            Tab::Routing => "Routing space",
            Tab::Compare => "Compare",
            Tab::Speed => "Speed",
            Tab::Generate => "Generate",
            Tab::Train => "Train",
            Tab::Centroids => "Centroids",
        }
    }
}

/// The three inputs of an analysis as paths (`None`: the embedded default), declared once: what
/// `focus-lens gui` opens (`StartArgs`), the settings remember and a session file stores.
#[derive(clap::Args, Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Inputs {
    /// A .gguf file or a Hugging Face model folder.
    #[arg(long, short)]
    pub model: Option<PathBuf>,
    /// An adapter folder (adapter_config.json + adapter_model.safetensors).
    #[arg(long, short)]
    pub adapter: Option<PathBuf>,
    /// A text file to analyse.
    pub text: Option<PathBuf>,
}

impl Inputs {
    pub fn path(&self, kind: InputKind) -> &Option<PathBuf> {
        match kind {
            InputKind::Model => &self.model,
            InputKind::Adapter => &self.adapter,
            InputKind::Text => &self.text,
        }
    }
    pub fn path_mut(&mut self, kind: InputKind) -> &mut Option<PathBuf> {
        match kind {
            InputKind::Model => &mut self.model,
            InputKind::Adapter => &mut self.adapter,
            InputKind::Text => &mut self.text,
        }
    }
}

/// The settings that belong with the inputs: how they are run and shown (declared once: the
/// settings remember them and a session file stores them, beside the `Inputs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Setup {
    pub params: RunParams,
    pub layer: usize,
    pub head: usize,
    pub tab: Tab,
    /// Layers shown side by side.
    pub side_layers: Vec<usize>,
    /// Show the token x layer strip instead of the side-by-side columns.
    pub strip: bool,
    pub color_by_category: bool,
    /// Show the centroids' own group numbers instead of numbers matched across layers.
    pub raw_groups: bool,
    /// Colour-blind-safe group colours (Okabe-Ito).
    pub colour_blind: bool,
    /// Run B of the compare view.
    pub compare: CompareSpec,
    /// The adapter k belongs to (its path; empty: the embedded default): another adapter
    /// loaded, even with another model or at start-up over the remembered one, brings its own
    /// k. `None`: not known yet (settings of an earlier version).
    pub k_adapter: Option<String>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            params: RunParams::default(),
            layer: 0,
            head: 0,
            tab: Tab::Tokens,
            side_layers: vec![0, 15, 29],
            strip: false,
            color_by_category: false,
            raw_groups: false,
            colour_blind: false,
            compare: CompareSpec::default(),
            k_adapter: None,
        }
    }
}

/// Persisted between runs (eframe storage): the inputs and their setup (what a session file
/// stores too) and the app's own preferences. Each group is flattened: the stored fields are
/// the settings' fields, as before they were grouped.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    #[serde(flatten)]
    pub inputs: Inputs,
    #[serde(flatten)]
    pub setup: Setup,
    #[serde(flatten)]
    pub prefs: Prefs,
}

/// What the app remembers besides a session's inputs and setup.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Prefs {
    pub recent: Vec<(InputKind, PathBuf)>,
    pub bench_lengths: String,
    pub bench_repeats: usize,
    /// What the speed view times: attention kernels alone, or whole-model prefill.
    pub bench_kind: BenchKind,
    /// Lengths of the attention-kernel benchmark (its own, longer, defaults).
    pub attn_bench_lengths: String,
    /// Device of the attention-kernel benchmark.
    pub attn_bench_device: DeviceChoice,
    /// Lengths of the quality-against-length run, and at most how many chunks per length.
    pub quality_lengths: String,
    pub quality_chunks: usize,
    /// The Generate view's settings.
    pub generate: GenSettings,
    /// The last export's folder (the next export starts there), the Centroids view's corpus
    /// folder and index file, and the Train view's form: remembered between runs
    /// (`FocusLensApp::remember_views`, restored by `FocusLensApp::new`).
    pub export_folder: Option<PathBuf>,
    pub index_corpus: String,
    pub index_path: String,
    /// The Train form (`views::train::TrainForm`) as JSON: `state` imports no view.
    pub train: Option<serde_json::Value>,
}

/// How the Generate view generates; mode, k and window are the Run controls' (`RunParams`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenSettings {
    pub sampling: crate::sampling::Sampling,
    /// Wrap the prompt as a user turn in the model's chat template.
    pub chat: bool,
    /// Route with causal Sinkhorn, whatever the analysis uses: its KV cache makes each token one
    /// step. Off: the analysis' Sinkhorn variant, which for whole-sequence Sinkhorn in soft or
    /// top-k mode reruns the whole sequence for every token.
    pub causal: bool,
}

impl Default for GenSettings {
    fn default() -> Self {
        GenSettings { sampling: Default::default(), chat: false, causal: true }
    }
}

/// Run B of a comparison: what differs from the analysis on screen (run A).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompareSpec {
    pub mode: ModeKind,
    pub k: usize,
    /// `None`: run A's Sinkhorn variant.
    pub causal: Option<bool>,
    /// `None`: run A's adapter.
    pub adapter: Option<PathBuf>,
    /// At most this many tokens (the start of run A's text).
    pub max_tokens: usize,
}

impl Default for CompareSpec {
    fn default() -> Self {
        CompareSpec { mode: ModeKind::Dense, k: 2, causal: None, adapter: None, max_tokens: 512 }
    }
}

impl Default for Prefs {
    fn default() -> Self {
        Prefs {
            recent: Vec::new(),
            bench_lengths: "256,512,1024,2048".into(),
            bench_repeats: 3,
            bench_kind: BenchKind::Attention,
            attn_bench_lengths: "1024,2048,4096,8192".into(),
            attn_bench_device: DeviceChoice::Cpu,
            quality_lengths: "1024,2048,4096,8192".into(),
            quality_chunks: 1,
            generate: GenSettings::default(),
            export_folder: None,
            index_corpus: String::new(),
            index_path: String::new(),
            train: None,
        }
    }
}

impl Settings {
    /// The settings eframe stored (the defaults where there are none). Written as a RON map (the
    /// groups are flattened); settings stored before the groups are a RON struct (`(model: …,
    /// params: …, recent: …)`), which each group reads on its own.
    pub fn stored(storage: &dyn eframe::Storage) -> Settings {
        fn get<T: serde::de::DeserializeOwned + Default>(storage: &dyn eframe::Storage) -> T {
            eframe::get_value(storage, eframe::APP_KEY).unwrap_or_default()
        }
        eframe::get_value(storage, eframe::APP_KEY).unwrap_or_else(|| Settings { inputs: get(storage), setup: get(storage), prefs: get(storage) })
    }
    pub fn remember(&mut self, kind: InputKind, path: PathBuf) {
        let recent = &mut self.prefs.recent;
        recent.retain(|(k, p)| !(*k == kind && *p == path));
        recent.insert(0, (kind, path));
        recent.truncate(RECENT_LEN);
    }
    pub fn set(&mut self, s: Setting) {
        match s {
            Setting::Params(p) => self.setup.params = p,
            Setting::Layer(l) => self.setup.layer = l,
            Setting::Head(h) => self.setup.head = h,
            Setting::Tab(t) => self.setup.tab = t,
            Setting::SideLayers(v) => self.setup.side_layers = v,
            Setting::Strip(b) => self.setup.strip = b,
            Setting::ColorByCategory(b) => self.setup.color_by_category = b,
            Setting::RawGroups(b) => self.setup.raw_groups = b,
            Setting::ColourBlind(b) => self.setup.colour_blind = b,
            Setting::Compare(c) => self.setup.compare = c,
            Setting::BenchKind(k) => self.prefs.bench_kind = k,
            Setting::BenchLengths(s) => self.prefs.bench_lengths = s,
            Setting::AttnBenchLengths(s) => self.prefs.attn_bench_lengths = s,
            Setting::BenchRepeats(n) => self.prefs.bench_repeats = n,
            Setting::AttnBenchDevice(d) => self.prefs.attn_bench_device = d,
            Setting::QualityLengths(s) => self.prefs.quality_lengths = s,
            Setting::QualityChunks(n) => self.prefs.quality_chunks = n,
            Setting::Generate(g) => self.prefs.generate = g,
        }
    }
}

/// One edit of the settings, as a view asks for it (the app applies it with `Settings::set`).
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    Params(RunParams),
    Layer(usize),
    Head(usize),
    Tab(Tab),
    SideLayers(Vec<usize>),
    Strip(bool),
    ColorByCategory(bool),
    RawGroups(bool),
    ColourBlind(bool),
    Compare(CompareSpec),
    BenchKind(BenchKind),
    BenchLengths(String),
    AttnBenchLengths(String),
    BenchRepeats(usize),
    AttnBenchDevice(DeviceChoice),
    QualityLengths(String),
    QualityChunks(usize),
    Generate(GenSettings),
}

/// Where an input came from: a file, or the default embedded in the binary.
pub fn source_label(path: &Option<PathBuf>, default: &str) -> String {
    match path {
        Some(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string()),
        None => default.to_string(),
    }
}

pub struct LoadedModel {
    pub model: Arc<Model>,
    pub path: Option<PathBuf>,
    pub device: DeviceChoice,
    pub gen: u64,
}

pub struct LoadedAdapter {
    pub adapter: Arc<Adapter>,
    pub path: Option<PathBuf>,
    pub label: String,
    /// The model generation it was loaded for.
    pub model_gen: u64,
    pub gen: u64,
    /// Its fingerprint (`jobs::load::adapter_fingerprint`).
    pub sha256: String,
}

pub struct LoadedText {
    pub text: Arc<String>,
    pub path: Option<PathBuf>,
    pub label: String,
    /// Set when the file was truncated.
    pub note: Option<String>,
    pub gen: u64,
}

/// Identifies an analysis: which loaded inputs and which parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnalysisKey {
    pub model_gen: u64,
    pub adapter_gen: u64,
    pub text_gen: u64,
    pub params: RunParams,
}

/// An analysis as the GUI holds it: core's `ShownAnalysis` (the analysis, its top groups, masks,
/// labels and numbering, which it dereferences to) with what the GUI ran it from and keeps of it.
pub struct AnalysisResult {
    pub key: AnalysisKey,
    /// The mode as run (`key.params.mode`, k checked against the adapter's K).
    pub mode: Mode,
    pub shown: ShownAnalysis,
    /// The adapter as run (window and Sinkhorn overrides applied).
    pub adapter: Arc<Adapter>,
    pub model: Arc<Model>,
    pub seconds: f64,
    /// Set when the text had more tokens than `max_tokens`.
    pub note: Option<String>,
    /// Tokens in the whole text (the analysis covers the first `max_tokens` of them).
    pub text_tokens: usize,
    /// The analysed text's name (file name or the embedded sample).
    pub text_label: String,
    /// Read from the disk cache (`jobs::disk_cache`) rather than computed; `seconds` is then
    /// the time the reading took.
    pub from_disk: bool,
    /// The analysis' own model passes, kept within `jobs::KEEP_BYTES` (every layer's queries,
    /// keys and routing, the last residual): the partners, the attention grid and a compare's
    /// run A read them instead of running the model. Empty when read from the disk cache.
    pub kept: Vec<Arc<focus_core::analysis::kept::KeptPass>>,
    /// The passes of the segments beyond `kept`'s budget, in a scratch file
    /// (`jobs::analysis::Keep`): read back on a segment's first look instead of run again.
    pub spilled: Vec<Arc<focus_core::analysis::kept::SpilledPass>>,
    /// The adapter's fingerprint (`jobs::load::adapter_fingerprint`): what the group numbers
    /// (`analysis::identity`) and the exports name it by.
    pub adapter_sha256: String,
}

/// The views read core's result through the GUI's (`res.analysis`, `res.argmax`,
/// `res.shown_group(..)`): one type of what is shown, held, not copied field by field.
impl std::ops::Deref for AnalysisResult {
    type Target = ShownAnalysis;
    fn deref(&self) -> &ShownAnalysis {
        &self.shown
    }
}

impl AnalysisResult {
    /// The same analysis with its group numbers matched, layer by layer, to `reference`'s (the
    /// same tokens run with another adapter), so that a colour keeps meaning the same tokens
    /// when the adapter changes.
    pub fn aligned_to(&self, reference: &AnalysisResult) -> AnalysisResult {
        self.with_shown(self.shown.aligned_to(&reference.shown))
    }

    /// The same analysis shown as `shown` (another numbering of it).
    pub fn with_shown(&self, shown: ShownAnalysis) -> AnalysisResult {
        AnalysisResult {
            key: self.key.clone(),
            mode: self.mode,
            shown,
            adapter: self.adapter.clone(),
            model: self.model.clone(),
            seconds: self.seconds,
            note: self.note.clone(),
            text_tokens: self.text_tokens,
            text_label: self.text_label.clone(),
            from_disk: self.from_disk,
            kept: self.kept.clone(),
            spilled: self.spilled.clone(),
            adapter_sha256: self.adapter_sha256.clone(),
        }
    }
}

/// The token under the pointer and the clicked one, with the clicked one's partners.
#[derive(Default)]
pub struct Selection {
    pub hovered: Option<usize>,
    /// The layer of the column the hovered token is in (layers view); else the selected layer.
    pub hovered_layer: Option<usize>,
    pub selected: Option<usize>,
    /// A selected range of tokens `[a, b]` (drag, or shift-click after a click); its partners
    /// replace the token's.
    pub range: Option<(usize, usize)>,
    pub partners: Option<Partners>,
    /// The partner last jumped to from the partners list: ringed in the token views and marked
    /// in the list, until another token is selected.
    pub jumped: Option<usize>,
}

/// The long-range partners of one clicked token, with the attention weight each receives.
pub struct Partners {
    /// The token (the first of a range).
    pub token: usize,
    /// The range these are the partners of (mean over its queries), or None for one token.
    pub range: Option<(usize, usize)>,
    pub layer: usize,
    pub head: usize,
    pub key: AnalysisKey,
    /// (key token, weight), sorted by weight, largest first: same-group tokens beyond the window.
    pub partners: Vec<(usize, f32)>,
    /// Attention mass on all partners, and on the local window.
    pub partner_mass: f32,
    pub local_mass: f32,
}

/// The speed view's benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BenchKind {
    /// `focus_core::bench::run_attention_bench`: one attention call, dense vs Focus top-k.
    Attention,
    /// `focus_core::bench::forward_bench`: prefill of the whole model.
    WholeModel,
    /// `focus_core::eval::ppl::length_table`: perplexity and prefill speed of each mode against
    /// length (`focus-lens ppl --ctx A,B --modes ...`).
    Quality,
}

impl BenchKind {
    pub const ALL: [BenchKind; 3] = [BenchKind::Attention, BenchKind::WholeModel, BenchKind::Quality];
    pub fn label(self) -> &'static str {
        match self {
            BenchKind::Attention => "attention kernels",
            BenchKind::WholeModel => "whole model",
            BenchKind::Quality => "quality vs length",
        }
    }
}

/// How long things take, for the status bar.
pub struct Timing {
    /// Seconds our UI code took in recent frames (not counting rendering).
    pub frame_times: VecDeque<f32>,
    /// Seconds from the app's start to the first analysis on screen (a preview counts).
    pub first_view_seconds: Option<f64>,
    started: Instant,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { frame_times: VecDeque::new(), first_view_seconds: None, started: Instant::now() }
    }
}

impl Timing {
    pub fn frame(&mut self, seconds: f32) {
        self.frame_times.push_back(seconds);
        if self.frame_times.len() > 120 {
            self.frame_times.pop_front();
        }
    }
    /// Notes the first result on screen.
    pub fn first_view(&mut self) {
        self.first_view_seconds.get_or_insert_with(|| self.started.elapsed().as_secs_f64());
    }
    /// The last frame's UI time, in seconds.
    pub fn last_frame(&self) -> f32 {
        self.frame_times.back().cloned().unwrap_or(0.0)
    }
    /// Worst UI time over the recent frames, in seconds.
    pub fn worst_frame(&self) -> f32 {
        self.frame_times.iter().cloned().fold(0.0, f32::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One value in memory, as eframe stores it.
    #[derive(Default)]
    struct Memory(Option<String>);

    impl eframe::Storage for Memory {
        fn get_string(&self, _: &str) -> Option<String> {
            self.0.clone()
        }
        fn set_string(&mut self, _: &str, value: String) {
            self.0 = Some(value);
        }
        fn remove_string(&mut self, _: &str) {
            self.0 = None;
        }
        fn flush(&mut self) {}
    }

    /// Settings stored before the groups (a RON struct) keep every field; today's (a RON map)
    /// round-trip.
    #[test]
    fn stored_settings_of_either_shape_load() {
        let old = Memory(Some(r#"(model:Some("/m.gguf"),adapter:None,text:Some("/t.txt"),recent:[(Text,"/t.txt")],layer:7,tab:Mask,bench_repeats:5)"#.into()));
        let s = Settings::stored(&old);
        assert_eq!(s.inputs, Inputs { model: Some("/m.gguf".into()), adapter: None, text: Some("/t.txt".into()) });
        assert_eq!((s.setup.layer, s.setup.tab, s.prefs.bench_repeats), (7, Tab::Mask, 5));
        assert_eq!(s.prefs.recent, vec![(InputKind::Text, PathBuf::from("/t.txt"))]);
        let mut now = Memory::default();
        let mut t = Settings::default();
        t.inputs.adapter = Some("/ad".into());
        t.setup.layer = 4;
        eframe::set_value(&mut now, eframe::APP_KEY, &t);
        let back = Settings::stored(&now);
        assert_eq!((back.inputs, back.setup.layer, back.prefs.bench_lengths), (t.inputs, 4, t.prefs.bench_lengths));
        assert_eq!(Settings::stored(&Memory::default()).inputs, Inputs::default());
    }
}
