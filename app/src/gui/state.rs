//! What the app remembers: persisted settings (eframe storage) and the loaded inputs and results
//! of the session. Panels read these; only the app's reconcile step and the controls change them.

use focus_core::analysis::Analysis;
use focus_core::bench::BenchRow;
use focus_core::{Adapter, Mode, Model};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModeChoice {
    Dense,
    Soft,
    TopK,
}

impl ModeChoice {
    pub const ALL: [ModeChoice; 3] = [ModeChoice::Dense, ModeChoice::Soft, ModeChoice::TopK];
    pub fn label(self) -> &'static str {
        match self {
            ModeChoice::Dense => "dense",
            ModeChoice::Soft => "soft",
            ModeChoice::TopK => "top-k",
        }
    }
}

/// Everything an analysis depends on besides the three inputs. Changing one re-runs it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunParams {
    pub device: DeviceChoice,
    pub mode: ModeChoice,
    /// k of hard top-k (and of the top-k groups reported in every mode).
    pub k: usize,
    /// Local window w; `None` keeps the adapter's.
    pub window: Option<usize>,
    /// Causal (prefix) Sinkhorn; `None` keeps the adapter's.
    pub causal: Option<bool>,
    pub max_tokens: usize,
}

impl Default for RunParams {
    fn default() -> Self {
        RunParams { device: DeviceChoice::Cpu, mode: ModeChoice::TopK, k: 2, window: None, causal: None, max_tokens: 2048 }
    }
}

impl RunParams {
    pub fn mode(&self) -> Mode {
        match self.mode {
            ModeChoice::Dense => Mode::Dense,
            ModeChoice::Soft => Mode::Soft,
            ModeChoice::TopK => Mode::TopK(self.k),
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
    Categories,
    Routing,
    Speed,
}

impl Tab {
    pub const ALL: [Tab; 7] = [Tab::Tokens, Tab::Layers, Tab::Balance, Tab::Mask, Tab::Categories, Tab::Routing, Tab::Speed];
    pub fn label(self) -> &'static str {
        match self {
            Tab::Tokens => "Tokens",
            Tab::Layers => "Layers",
            Tab::Balance => "Balance",
            Tab::Mask => "Mask",
            Tab::Categories => "Categories",
            Tab::Routing => "Routing space",
            Tab::Speed => "Speed",
        }
    }
}

/// Persisted between runs (eframe storage). Paths `None` mean the embedded defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub model: Option<PathBuf>,
    pub adapter: Option<PathBuf>,
    pub text: Option<PathBuf>,
    pub recent: Vec<(InputKind, PathBuf)>,
    pub params: RunParams,
    pub layer: usize,
    pub head: usize,
    pub tab: Tab,
    /// Layers shown side by side.
    pub side_layers: Vec<usize>,
    /// Show the token x layer strip instead of the side-by-side columns.
    pub strip: bool,
    pub bench_lengths: String,
    pub bench_repeats: usize,
    /// What the speed panel times: attention kernels alone, or whole-model prefill.
    pub bench_kind: BenchKind,
    /// Lengths of the attention-kernel benchmark (its own, longer, defaults).
    pub attn_bench_lengths: String,
    /// Device of the attention-kernel benchmark.
    pub attn_bench_device: DeviceChoice,
    pub color_by_category: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            model: None,
            adapter: None,
            text: None,
            recent: Vec::new(),
            params: RunParams::default(),
            layer: 0,
            head: 0,
            tab: Tab::Tokens,
            side_layers: vec![0, 15, 29],
            strip: false,
            bench_lengths: "256,512,1024,2048".into(),
            bench_repeats: 1,
            bench_kind: BenchKind::Attention,
            attn_bench_lengths: "1024,2048,4096,8192".into(),
            attn_bench_device: DeviceChoice::Cpu,
            color_by_category: false,
        }
    }
}

impl Settings {
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
    pub fn remember(&mut self, kind: InputKind, path: PathBuf) {
        self.recent.retain(|(k, p)| !(*k == kind && *p == path));
        self.recent.insert(0, (kind, path));
        self.recent.truncate(RECENT_LEN);
    }
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

pub struct AnalysisResult {
    pub key: AnalysisKey,
    pub analysis: Analysis,
    /// The adapter as run (window and Sinkhorn overrides applied).
    pub adapter: Arc<Adapter>,
    pub model: Arc<Model>,
    pub seconds: f64,
    /// Set when the text had more tokens than `max_tokens`.
    pub note: Option<String>,
    /// Tokens in the whole text (the analysis covers the first `max_tokens` of them).
    pub text_tokens: usize,
    /// `argmax[layer][token]`: the token's top group.
    pub argmax: Vec<Vec<u8>>,
    /// `masks[layer][token]`: bitmask of the token's top-k groups.
    pub masks: Vec<Vec<u64>>,
    /// `labels[layer][group]`: a short automatic label per group.
    pub labels: Vec<Vec<String>>,
}

impl AnalysisResult {
    pub fn tokens(&self) -> usize {
        self.analysis.tokens.len()
    }
    pub fn layers(&self) -> usize {
        self.analysis.layers.len()
    }
    pub fn groups(&self) -> usize {
        self.analysis.groups
    }
    pub fn window(&self) -> usize {
        self.analysis.window
    }
    pub fn token_routing(&self, layer: usize, i: usize) -> Option<&focus_core::stats::TokenRouting> {
        self.analysis.layers.get(layer)?.tokens.as_ref()?.get(i)
    }
}

/// The long-range partners of one clicked token, with the attention weight each receives.
pub struct Partners {
    pub token: usize,
    pub layer: usize,
    pub head: usize,
    pub key: AnalysisKey,
    /// (key token, weight), sorted by weight, largest first: same-group tokens beyond the window.
    pub partners: Vec<(usize, f32)>,
    /// Attention mass on all partners, and on the local window.
    pub partner_mass: f32,
    pub local_mass: f32,
}

/// The speed panel's two benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BenchKind {
    /// `focus_core::bench::run_attention_bench`: one attention call, dense vs Focus top-k.
    Attention,
    /// `focus_core::bench::forward_bench`: prefill of the whole model.
    WholeModel,
}

impl BenchKind {
    pub const ALL: [BenchKind; 2] = [BenchKind::Attention, BenchKind::WholeModel];
    pub fn label(self) -> &'static str {
        match self {
            BenchKind::Attention => "attention kernels",
            BenchKind::WholeModel => "whole model",
        }
    }
}

/// The attention-kernel benchmark: finished rows, rows so far, and what was run.
#[derive(Default)]
pub struct AttnBenchState {
    pub rows: Vec<focus_core::bench::AttentionRow>,
    pub live: std::sync::Arc<std::sync::Mutex<Vec<focus_core::bench::AttentionRow>>>,
    /// Machine, threads, dtype, shapes and settings, in words.
    pub settings: String,
    /// The equivalent `focus-lens bench attention` command.
    pub cli: String,
    pub error: Option<String>,
}

impl AttnBenchState {
    pub fn current_rows(&self) -> Vec<focus_core::bench::AttentionRow> {
        if !self.rows.is_empty() {
            return self.rows.clone();
        }
        self.live.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
pub struct BenchState {
    /// The finished benchmark's rows.
    pub rows: Vec<BenchRow>,
    /// Rows as they finish, shared with the running task (shown while it runs or after a cancel).
    pub live: std::sync::Arc<std::sync::Mutex<Vec<BenchRow>>>,
    pub settings: String,
    pub error: Option<String>,
}

impl BenchState {
    /// The rows to show: the finished run's, else those measured so far.
    pub fn current_rows(&self) -> Vec<BenchRow> {
        if !self.rows.is_empty() {
            return self.rows.clone();
        }
        self.live.lock().map(|v| v.clone()).unwrap_or_default()
    }
}
