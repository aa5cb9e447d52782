//! Focus centroid adapters, stored like a PEFT adapter: `adapter_config.json` (hyper-parameters,
//! the base model's identity, provenance) and `adapter_model.safetensors` (`layers.N.proj`
//! d_model x d_g, `layers.N.centroids` K x d_g). Loading checks the adapter against the model and
//! names the first field that does not fit.

use crate::error::{Error, Result};
use crate::focus::router::{one_row_scores, LayerRouting, Router};
// `Score` is the router's (below this file); re-exported here where the adapter's config names it.
pub use crate::focus::router::Score;
use crate::focus::sinkhorn::{sinkhorn, SinkhornGrad, SinkhornOp};
use crate::focus::identity::BaseModel;
use crate::focus::mask::TopK;
use candle_core::{Device, Tensor};
use rand::{rngs::StdRng, SeedableRng};
pub(crate) use rand_distr_normal::normal;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

pub const CONFIG_FILE: &str = "adapter_config.json";
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";
pub const FORMAT: &str = "focus-lens-adapter";
/// The largest adapter weights file read: K <= 64 and d_g <= 4096 keep real adapters far below
/// this (SmolLM2 K=8 d_g=16: 1.8 MB; a 100-layer, d_model 16384 model at d_g 64: 420 MB would
/// not fit, and is refused with this limit named).
pub const MAX_WEIGHTS_BYTES: u64 = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gate {
    /// s_ij = logit * sigmoid(lambda * a_ij) on distant pairs (the paper's gate).
    Paper,
    /// s_ij = logit + ln(a_ij + eps) on distant pairs [ours]: tends to the hard mask.
    Log,
}

/// Which layers of a model with interleaved sliding-window and global layers (Gemma 2/3) the
/// routers act on [ours: the paper does not say]. Every layer has a router either way (the
/// weights file keeps one per layer, and routing is computed and shown for every layer); with
/// `global`, a sliding layer attends with its own window only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RouterLayers {
    /// Every layer, sliding ones included: there the Focus mask composes with the window (a
    /// pair is kept when both keep it). Adapters written before this field existed route every
    /// layer.
    #[default]
    All,
    /// Only the global layers; the sliding layers keep their window's pairs.
    Global,
}

impl RouterLayers {
    /// Whether a layer (sliding or not) is routed.
    pub fn routes(self, sliding: bool) -> bool {
        self == RouterLayers::All || !sliding
    }
}

impl std::str::FromStr for RouterLayers {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "all" => Ok(RouterLayers::All),
            "global" => Ok(RouterLayers::Global),
            other => Err(format!("router layers {other:?}: expected all or global")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdapterConfig {
    pub format: String,
    pub format_version: u32,
    /// K
    pub groups: usize,
    pub d_g: usize,
    pub tau: f64,
    pub sinkhorn_iters: usize,
    /// Local window w: pairs with i - j <= w always attend.
    pub window: usize,
    /// Attention sinks s [ours]: the first s tokens of the sequence are always attendable by
    /// every later query, like local pairs (ungated, always kept by top-k). 0 (the default, and
    /// what adapters written before this field existed have) is the paper's mask.
    #[serde(default)]
    pub sink: usize,
    pub gate: Gate,
    /// Slope of the paper gate.
    pub lambda: f64,
    /// eps of the log gate.
    pub log_eps: f64,
    /// Default k for hard top-k inference.
    pub top_k: usize,
    pub causal_sinkhorn: bool,
    /// Dot-product or cosine scores; adapters written before this field existed used `dot`.
    #[serde(default)]
    pub score: Score,
    /// Which hidden state feeds the router [ours]: the normalised input of attention.
    pub router_input: String,
    /// [ours] Whether each layer's router multiplies its input by a fixed per-channel scale
    /// (`layers.{l}.input_scale`, (1, d_model); `Router::input_scale`). Adapters written before
    /// this field existed have none: the paper's h W_g.
    #[serde(default)]
    pub input_scale: bool,
    /// Which layers the routers act on (models with sliding-window layers).
    #[serde(default)]
    pub router_layers: RouterLayers,
    pub base_model: BaseModel,
    /// Set by `Adapter::rebase` [ours]: the router weights were made for another model of the
    /// same shape (`rebased_from.base_model`) and moved to `base_model` without retraining.
    /// Absent in adapters never rebased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebased_from: Option<RebasedFrom>,
    /// Set by `Adapter::derive` [ours]: the router weights are another adapter's, copied
    /// unchanged, with inference settings changed (the local window, say). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<DerivedFrom>,
    /// How the router weights were initialised.
    pub init: String,
    /// Training provenance (data, split, steps, tokens, seed, time, device), once trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<serde_json::Value>,
    /// Measured results, once evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<serde_json::Value>,
}

/// Where a rebased adapter came from (`Adapter::rebase`): the base model its router weights were
/// made (trained) for, which loading checked until the rebase, and the folder it was copied from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RebasedFrom {
    /// The `base_model` the adapter recorded before the rebase.
    pub base_model: BaseModel,
    /// The adapter folder it was copied from (absolute when it could be resolved).
    pub adapter: String,
    /// The day of the rebase, UTC (YYYY-MM-DD).
    #[serde(default)]
    pub date: String,
    /// The rebase before this one, when the adapter had been rebased already: the chain leads
    /// back to the model the weights were made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebased_from: Option<Box<RebasedFrom>>,
}

/// Where a derived adapter came from (`Adapter::derive`): the folder its router weights were
/// copied from and which settings changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerivedFrom {
    /// The adapter folder it was copied from (absolute when it could be resolved).
    pub adapter: String,
    /// The day it was derived, UTC (YYYY-MM-DD).
    pub date: String,
    /// What changed, one entry a setting: "window 128 -> 512".
    pub changed: Vec<String>,
    /// The derivation before this one, when the source was derived already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<Box<DerivedFrom>>,
}

/// The inference settings `Adapter::derive` may change (`None`: kept as they are). Each is
/// read where the adapter runs, so the router weights stay valid under any of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// The local window w: pairs with i - j <= w always attend.
    pub window: Option<usize>,
    /// Attention sinks: the first N tokens stay attendable by every query.
    pub sink: Option<usize>,
    /// The default k of top-k inference.
    pub top_k: Option<usize>,
    /// Sinkhorn iterations at inference.
    pub sinkhorn_iters: Option<usize>,
}

/// How much of the model's identity loading checks. `Shape` is for `Adapter::rebase` only: the
/// weights' fingerprint may differ; the architecture and every dimension may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BaseCheck {
    /// Everything, the weights' fingerprint included (`Adapter::load`).
    Exact,
    /// Everything but the fingerprint.
    Shape,
}

/// The hyper-parameters a user picks; everything else comes from the model. Serialisable so
/// that a training recipe (the app's `training::Recipe`) can be recorded and remembered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSpec {
    pub groups: usize,
    pub d_g: usize,
    pub tau: f64,
    pub sinkhorn_iters: usize,
    pub window: usize,
    /// Attention sinks [ours]: the first `sink` tokens always attend (0: none).
    pub sink: usize,
    pub gate: Gate,
    pub lambda: f64,
    pub top_k: usize,
    pub causal_sinkhorn: bool,
    pub score: Score,
    pub router_layers: RouterLayers,
}

impl Default for AdapterSpec {
    /// The paper's ablation defaults: K=8, d_g=16, tau=0.1, N=10, w=128.
    fn default() -> Self {
        AdapterSpec { groups: 8, d_g: 16, tau: 0.1, sinkhorn_iters: 10, window: 128, sink: 0, gate: Gate::Log, lambda: 10.0, top_k: 2, causal_sinkhorn: false, score: Score::Dot, router_layers: RouterLayers::All }
    }
}

#[derive(Debug, Clone)]
pub struct Adapter {
    pub config: AdapterConfig,
    pub layers: Vec<Router>,
}

mod rand_distr_normal {
    use rand::Rng;
    /// A standard normal sample (Box-Muller), so that no extra crate is needed for init.
    pub fn normal(rng: &mut impl Rng) -> f32 {
        let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
        let u2: f64 = rng.gen();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

impl AdapterConfig {
    /// k of hard top-k for this adapter, checked against its K.
    pub fn topk(&self, k: usize) -> Result<TopK> {
        TopK::new(k, self.groups)
    }

    /// The adapter's own k (`top_k`, checked when the adapter was made or loaded).
    pub fn default_topk(&self) -> TopK {
        TopK::new(self.top_k, self.groups).expect("an adapter's top_k is checked when it is made or loaded")
    }

    /// The settings a new adapter of this configuration is made from (`Adapter::random`).
    pub fn spec(&self) -> AdapterSpec {
        AdapterSpec {
            groups: self.groups,
            d_g: self.d_g,
            tau: self.tau,
            sinkhorn_iters: self.sinkhorn_iters,
            window: self.window,
            sink: self.sink,
            gate: self.gate,
            lambda: self.lambda,
            top_k: self.top_k,
            causal_sinkhorn: self.causal_sinkhorn,
            score: self.score,
            router_layers: self.router_layers,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::BadAdapter(m));
        if self.format != FORMAT {
            return bad(format!("format is {:?}, expected {FORMAT:?}", self.format));
        }
        if self.format_version != 1 {
            return bad(format!("format_version {} is not supported (1)", self.format_version));
        }
        if !(1..=64).contains(&self.groups) {
            return bad(format!("groups (K) = {} must be in 1..=64", self.groups));
        }
        if !(1..=4096).contains(&self.d_g) {
            return bad(format!("d_g = {} must be in 1..=4096", self.d_g));
        }
        let weights = (self.base_model.n_layers as u64) * ((self.base_model.d_model as u64 + self.groups as u64) * self.d_g as u64 + self.input_scale as u64 * self.base_model.d_model as u64) * 4;
        if weights > MAX_WEIGHTS_BYTES {
            return bad(format!("d_g = {} gives {} MiB of router weights for this model; at most {} MiB", self.d_g, weights >> 20, MAX_WEIGHTS_BYTES >> 20));
        }
        if self.window > 1 << 24 {
            return bad(format!("window = {} is more than 16M tokens", self.window));
        }
        if self.sink > crate::focus::mask::MAX_SINK {
            return bad(format!("sink = {} is more than {} tokens (attention sinks are the first few tokens)", self.sink, crate::focus::mask::MAX_SINK));
        }
        // Scores are divided by tau: a tiny tau overflows them (tau = 5e-324 passes `> 0`).
        if !(self.tau.is_finite() && (1e-4..=1e4).contains(&self.tau)) {
            return bad(format!("tau = {} must be in [1e-4, 1e4]", self.tau));
        }
        if self.sinkhorn_iters > 1000 {
            return bad(format!("sinkhorn_iters = {} is more than 1000", self.sinkhorn_iters));
        }
        if TopK::new(self.top_k, self.groups).is_err() {
            return bad(format!("top_k = {} must be in 1..={}", self.top_k, self.groups));
        }
        if !(self.lambda.is_finite() && self.lambda.abs() <= 1e6) || !(self.log_eps.is_finite() && self.log_eps > 0.0 && self.log_eps < 1.0) {
            return bad(format!("lambda = {} must be finite (|lambda| <= 1e6) and log_eps = {} in (0, 1)", self.lambda, self.log_eps));
        }
        Ok(())
    }
}

/// The first 12 hex digits of a weights' fingerprint, for messages (`-` when none is recorded).
pub fn short_fingerprint(fingerprint: &str) -> &str {
    match fingerprint.get(..12) {
        Some(s) => s,
        None if fingerprint.is_empty() => "-",
        None => fingerprint,
    }
}

/// Whether `path` is the folder `dir` or lies inside it (links resolved, as far as `path` exists).
fn inside(path: &Path, dir: &Path) -> bool {
    let (Ok(dir), Ok(path)) = (std::fs::canonicalize(dir), std::path::absolute(path)) else { return false };
    path.ancestors().find_map(|a| std::fs::canonicalize(a).ok()).is_some_and(|a| a.starts_with(&dir))
}

/// Today's date, UTC, as YYYY-MM-DD (the civil date of the days since 1970-01-01: H. Hinnant's
/// `civil_from_days`).
fn today_utc() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    civil_date((secs / 86_400) as i64)
}

fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}")
}

fn mismatch(field: &str, adapter: impl ToString, model: impl ToString) -> Error {
    Error::AdapterMismatch { field: field.into(), adapter: adapter.to_string(), model: model.to_string() }
}

/// The base model an adapter folder's `adapter_config.json` records, read through the guarded
/// reader (a regular file of at most `MAX_JSON_BYTES`: a FIFO there blocked the app's window
/// before it painted). For callers that only look (the app picking a model to go with an
/// adapter); `Adapter::load` reads the whole config with its errors.
pub fn recorded_base_model(dir: &Path) -> Result<BaseModel> {
    let path = dir.join(CONFIG_FILE);
    let text = crate::io::read_capped_string(&path, crate::io::MAX_JSON_BYTES, "adapter config")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(&path, e.to_string()))?;
    let base = v.get("base_model").ok_or_else(|| Error::bad_file(&path, "no base_model"))?;
    serde_json::from_value(base.clone()).map_err(|e| Error::bad_file(&path, format!("base_model: {e}")))
}

impl Adapter {
    /// Makes every router's W_g and centroids trainable: each is replaced by a variable over the
    /// same values, returned in layer order (W_g, C, W_g, C, ...), the tensors the trainer's
    /// optimiser updates and the tests differentiate against.
    pub fn trainable_vars(&mut self) -> Result<Vec<candle_core::Var>> {
        let mut vars = Vec::with_capacity(2 * self.layers.len());
        for r in self.layers.iter_mut() {
            let (p, c) = (candle_core::Var::from_tensor(&r.proj)?, candle_core::Var::from_tensor(&r.centroids)?);
            r.proj = p.as_tensor().clone();
            r.centroids = c.as_tensor().clone();
            vars.extend([p, c]);
        }
        Ok(vars)
    }

    /// A randomly initialised adapter for the model `base` on `dev`: W_g ~ N(0, 1/d_model),
    /// C ~ N(0, 1/d_g) with unit-norm rows. Everything works with it before any training.
    pub fn random(base: &BaseModel, dev: &Device, spec: &AdapterSpec, seed: u64) -> Result<Adapter> {
        // The config is built and checked first: every allocation below depends on its fields.
        let config = AdapterConfig {
            format: FORMAT.into(),
            format_version: 1,
            groups: spec.groups,
            d_g: spec.d_g,
            tau: spec.tau,
            sinkhorn_iters: spec.sinkhorn_iters,
            window: spec.window,
            sink: spec.sink,
            gate: spec.gate,
            lambda: spec.lambda,
            log_eps: 1e-6,
            top_k: spec.top_k,
            causal_sinkhorn: spec.causal_sinkhorn,
            score: spec.score,
            router_input: "attention input after the layer's norm".into(),
            input_scale: false,
            router_layers: spec.router_layers,
            base_model: base.clone(),
            rebased_from: None,
            derived_from: None,
            init: format!("random: W_g ~ N(0, 1/d_model), centroids ~ N(0, 1) rows normalised to 1; seed {seed}"),
            training: None,
            results: None,
        };
        config.check()?;
        let cfg = base;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for _ in 0..cfg.n_layers {
            let s = 1.0 / (cfg.d_model as f32).sqrt();
            let proj: Vec<f32> = (0..cfg.d_model * spec.d_g).map(|_| normal(&mut rng) * s).collect();
            let mut cent: Vec<f32> = (0..spec.groups * spec.d_g).map(|_| normal(&mut rng)).collect();
            for row in cent.chunks_mut(spec.d_g) {
                let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|x| *x /= n);
            }
            layers.push(Router {
                proj: Tensor::from_vec(proj, (cfg.d_model, spec.d_g), dev)?,
                centroids: Tensor::from_vec(cent, (spec.groups, spec.d_g), dev)?,
                input_scale: None,
            });
        }
        Ok(Adapter { config, layers })
    }

    /// The untrained twin of this adapter (issue 28's baseline): a random init (`random`) with its
    /// settings and `seed`, on the same device, carrying what initialisation fixed before any
    /// training: the router input scale [ours] and the log gate's eps.
    pub fn untrained_twin(&self, seed: u64) -> Result<Adapter> {
        let dev = self.layers.first().map_or(Device::Cpu, |r| r.proj.device().clone());
        let mut twin = Adapter::random(&self.config.base_model, &dev, &self.config.spec(), seed)?;
        twin.config.log_eps = self.config.log_eps;
        if self.config.input_scale {
            twin.config.input_scale = true;
            twin.config.router_input = self.config.router_input.clone();
            for (t, r) in twin.layers.iter_mut().zip(&self.layers) {
                t.input_scale = r.input_scale.clone();
            }
        }
        Ok(twin)
    }

    /// Loads an adapter directory onto `dev` and checks it against the model `base`. The config
    /// is checked before the weights are read, so an adapter for another model is named as such.
    pub fn load(dir: &Path, base: &BaseModel, dev: &Device) -> Result<Adapter> {
        let (text, bytes) = Self::read(dir, base, BaseCheck::Exact)?;
        Self::from_bytes_checked(&text, &bytes, base, dev, dir, BaseCheck::Exact)
    }

    /// An adapter folder's two files, the config checked against `base` (as `check` says)
    /// before the weights are read.
    fn read(dir: &Path, base: &BaseModel, check: BaseCheck) -> Result<(String, Vec<u8>)> {
        let cfg_path = dir.join(CONFIG_FILE);
        let text = crate::io::read_capped_string(&cfg_path, crate::io::MAX_JSON_BYTES, "adapter config")?;
        Self::parse_config(&text, base, dir, check)?;
        let w_path = dir.join(WEIGHTS_FILE);
        let bytes = crate::io::read_capped(&w_path, MAX_WEIGHTS_BYTES, "adapter weights")?;
        Ok((text, bytes))
    }

    /// Copies the adapter folder `from` to the new folder `out` as an adapter of the model `base`:
    /// for weights of the same model in other bytes (a GGUF quantization of the safetensors
    /// the routers were trained on) or a stand-in of the same shape, which `load` refuses by
    /// the weights' fingerprint. Everything else is checked as `load` checks it (the
    /// architecture and every dimension must match; the weights must be a valid adapter's).
    /// The copy's `base_model` is `base`; `rebased_from` records the old one (and any earlier
    /// rebase), the folder and the day; `results` go (they were measured on the other weights);
    /// `training` stays; the weights file is copied byte for byte. `out` is written at once
    /// (`io::write_new_dir`): it must not exist or be an empty folder, and may not be `from` or
    /// lie inside it. Returns the new adapter (on the CPU).
    pub fn rebase(from: &Path, base: &BaseModel, out: &Path) -> Result<Adapter> {
        if inside(out, from) {
            return Err(Error::write(out, std::io::Error::other(format!("it is the adapter folder {} or inside it: a rebase writes a new folder, never into the adapter's", from.display()))));
        }
        let (text, bytes) = Self::read(from, base, BaseCheck::Shape)?;
        let mut adapter = Self::from_bytes_checked(&text, &bytes, base, &Device::Cpu, from, BaseCheck::Shape)?;
        let old = adapter.config.base_model.clone();
        if old.fingerprint == base.fingerprint {
            return Err(Error::Invalid(format!(
                "{} already fits {} (the same weights' fingerprint {}): there is nothing to rebase",
                from.display(),
                base.name,
                short_fingerprint(&base.fingerprint)
            )));
        }
        let earlier = adapter.config.rebased_from.take().map(Box::new);
        let source = std::fs::canonicalize(from).unwrap_or_else(|_| from.to_path_buf());
        adapter.config.rebased_from = Some(RebasedFrom { base_model: old, adapter: source.display().to_string(), date: today_utc(), rebased_from: earlier });
        adapter.config.base_model = base.clone();
        // Measured results describe the weights they were measured on (as in
        // `Trainer::from_adapter`): a rebased adapter must not carry them as its own.
        adapter.config.results = None;
        let config = serde_json::to_string_pretty(&adapter.config)?;
        crate::io::write_new_dir(out, &[(WEIGHTS_FILE, &bytes), (CONFIG_FILE, config.as_bytes())])?;
        Ok(adapter)
    }

    /// Copies the adapter folder `from` (an adapter of the model `base`, checked as `load`
    /// checks it) to the new folder `out` with the inference settings `set` changed: the local
    /// window, the sinks, the default k or the Sinkhorn iterations. The router weights are
    /// copied byte for byte; `derived_from` records the source, the day and what changed (and
    /// any earlier derivation); `results` go (they were measured at the old settings);
    /// `training` stays (how the weights were trained). A setting given at its current value
    /// is no change, and a copy that changes nothing is refused. `out` is written at once
    /// (`io::write_new_dir`): it must not exist or be an empty folder, and may not be `from` or
    /// lie inside it. Returns the new adapter (on the CPU).
    pub fn derive(from: &Path, base: &BaseModel, set: Settings, out: &Path) -> Result<Adapter> {
        if inside(out, from) {
            return Err(Error::write(out, std::io::Error::other(format!("it is the adapter folder {} or inside it: a derived adapter is a new folder, never the adapter's", from.display()))));
        }
        let (text, bytes) = Self::read(from, base, BaseCheck::Exact)?;
        let mut adapter = Self::from_bytes_checked(&text, &bytes, base, &Device::Cpu, from, BaseCheck::Exact)?;
        let c = &mut adapter.config;
        let mut changed = Vec::new();
        for (name, field, new) in [("window", &mut c.window, set.window), ("sink", &mut c.sink, set.sink), ("top_k", &mut c.top_k, set.top_k), ("sinkhorn_iters", &mut c.sinkhorn_iters, set.sinkhorn_iters)] {
            if let Some(v) = new.filter(|v| *v != *field) {
                changed.push(format!("{name} {field} -> {v}"));
                *field = v;
            }
        }
        if changed.is_empty() {
            return Err(Error::Invalid("every setting given is the adapter's already: there is nothing to change".into()));
        }
        c.check()?;
        let earlier = c.derived_from.take().map(Box::new);
        let source = std::fs::canonicalize(from).unwrap_or_else(|_| from.to_path_buf());
        c.derived_from = Some(DerivedFrom { adapter: source.display().to_string(), date: today_utc(), changed, derived_from: earlier });
        // Measured results describe the settings they were measured at (as in `rebase`).
        c.results = None;
        let config = serde_json::to_string_pretty(&adapter.config)?;
        crate::io::write_new_dir(out, &[(WEIGHTS_FILE, &bytes), (CONFIG_FILE, config.as_bytes())])?;
        Ok(adapter)
    }

    /// Parses a config and checks that it fits the model `want` (all of it, or as `check` says).
    fn parse_config(config_json: &str, want: &BaseModel, origin: &Path, check: BaseCheck) -> Result<AdapterConfig> {
        let cfg_path = origin.join(CONFIG_FILE);
        let config: AdapterConfig = serde_json::from_str(config_json).map_err(|e| {
            let field = crate::io::json_key_at(config_json, e.line(), e.column()).map_or(String::new(), |k| format!("field {k:?}: "));
            Error::bad_file(&cfg_path, format!("invalid adapter config: {field}{e}"))
        })?;
        config.check()?;
        let have = &config.base_model;
        if have.arch != want.arch {
            return Err(mismatch("base_model.arch", &have.arch, &want.arch));
        }
        for (field, a, m) in [
            ("base_model.n_layers", have.n_layers, want.n_layers),
            ("base_model.d_model", have.d_model, want.d_model),
            ("base_model.n_heads", have.n_heads, want.n_heads),
            ("base_model.n_kv_heads", have.n_kv_heads, want.n_kv_heads),
            ("base_model.vocab", have.vocab, want.vocab),
        ] {
            if a != m {
                return Err(mismatch(field, a, m));
            }
        }
        if check == BaseCheck::Exact && have.fingerprint != want.fingerprint {
            return Err(mismatch("base_model.fingerprint (the base weights differ)", &have.fingerprint, &want.fingerprint));
        }
        Ok(config)
    }

    /// Parses an adapter from its two files' contents (`origin` names them in errors).
    pub fn from_bytes(config_json: &str, weights: &[u8], want: &BaseModel, dev: &Device, origin: &Path) -> Result<Adapter> {
        Self::from_bytes_checked(config_json, weights, want, dev, origin, BaseCheck::Exact)
    }

    fn from_bytes_checked(config_json: &str, weights: &[u8], want: &BaseModel, dev: &Device, origin: &Path, check: BaseCheck) -> Result<Adapter> {
        let config = Self::parse_config(config_json, want, origin, check)?;
        let w_path = origin.join(WEIGHTS_FILE);
        let st = safetensors::SafeTensors::deserialize(weights)
            .map_err(|e| Error::bad_file(&w_path, format!("invalid safetensors file: {e}")))?;
        let tensor = |name: &str, shape: [usize; 2]| -> Result<Tensor> {
            let v = st.tensor(name).map_err(|_| Error::BadAdapter(format!("{}: missing tensor {name}", w_path.display())))?;
            if v.shape() != shape {
                return Err(mismatch(&format!("tensor {name} shape"), format!("{:?}", v.shape()), format!("{shape:?}")));
            }
            if v.dtype() != safetensors::Dtype::F32 {
                return Err(Error::BadAdapter(format!("tensor {name} is {:?}, expected F32", v.dtype())));
            }
            let vals: Vec<f32> = v.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            if vals.iter().any(|x| !x.is_finite()) {
                return Err(Error::BadAdapter(format!("tensor {name} holds NaN or infinite values")));
            }
            Ok(Tensor::from_vec(vals, (shape[0], shape[1]), dev)?)
        };
        let n_tensors = st.names().len();
        let per_layer = if config.input_scale { 3 } else { 2 };
        if n_tensors != per_layer * want.n_layers {
            return Err(mismatch(
                if config.input_scale { "number of router tensors (W_g, centroids and input scale per layer)" } else { "number of router tensors" },
                n_tensors,
                per_layer * want.n_layers,
            ));
        }
        let layers = (0..want.n_layers)
            .map(|l| {
                let input_scale = match config.input_scale {
                    true => Some(tensor(&format!("layers.{l}.input_scale"), [1, want.d_model])?.flatten_all()?),
                    false => None,
                };
                Ok(Router {
                    proj: tensor(&format!("layers.{l}.proj"), [want.d_model, config.d_g])?,
                    centroids: tensor(&format!("layers.{l}.centroids"), [config.groups, config.d_g])?,
                    input_scale,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Adapter { config, layers })
    }

    /// Writes the adapter directory; each file goes to a temporary name first and is renamed
    /// into place, so a reader never sees half a file.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::write(dir, e))?;
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        for (l, r) in self.layers.iter().enumerate() {
            tensors.insert(format!("layers.{l}.proj"), r.proj.to_device(&Device::Cpu)?);
            tensors.insert(format!("layers.{l}.centroids"), r.centroids.to_device(&Device::Cpu)?);
            match (&r.input_scale, self.config.input_scale) {
                (Some(s), true) => {
                    tensors.insert(format!("layers.{l}.input_scale"), s.to_device(&Device::Cpu)?.reshape((1, s.elem_count()))?);
                }
                (None, false) => {}
                _ => return Err(Error::Invalid(format!("layer {l}: the config's input_scale = {} does not match the router", self.config.input_scale))),
            }
        }
        let w_path = dir.join(WEIGHTS_FILE);
        let tmp = crate::io::temp_path(&w_path);
        candle_core::safetensors::save(&tensors, &tmp)?;
        std::fs::rename(&tmp, &w_path).map_err(|e| Error::write(&w_path, e))?;
        crate::io::write_atomic(&dir.join(CONFIG_FILE), serde_json::to_string_pretty(&self.config)?.as_bytes())
    }
}

/// Routing: a layer's scores, then Sinkhorn (the router's parameters and scores are
/// `router.rs`'s).
impl Adapter {
    /// Differentiable routing for training: memberships (B x T x K, `h` stacking B = `seqs`
    /// sequences) as a tensor built from candle ops, so gradients reach `proj` and
    /// `centroids` when they are trainable variables.
    /// With `grad == SinkhornGrad::Detached` the Sinkhorn iterations run outside the graph.
    /// `balance`: the differentiable Sinkhorn (candle's ops, or training's fused op).
    pub fn route_tensor(&self, l: usize, h: &Tensor, seqs: usize, grad: SinkhornGrad, balance: SinkhornOp) -> Result<Tensor> {
        let r = &self.layers[l];
        let c = &self.config;
        let scores = c.score.scores(&r.input(h)?.matmul(&r.proj)?, &r.centroids)?;
        // `h` stacks `seqs` sequences (B*T rows): each is balanced on its own.
        let scores = scores.reshape((seqs, scores.dim(0)? / seqs, c.groups))?;
        balance(&scores, c.tau, c.sinkhorn_iters, c.causal_sinkhorn, grad)
    }

    /// Routes the normalised attention input `h` (T x d_model) of layer `l`.
    pub fn route(&self, l: usize, h: &Tensor, keep_vectors: bool) -> Result<LayerRouting> {
        let (vecs, scores) = self.scores(l, h)?;
        self.route_scores(l, vecs, scores, keep_vectors)
    }

    /// `route` from `scores`' output (T x K scores): Sinkhorn on the host, the memberships
    /// checked. Apart so that a pass can queue device work between the two (`Decoder::run`).
    pub fn route_scores(&self, l: usize, vecs: Tensor, scores: Vec<f32>, keep_vectors: bool) -> Result<LayerRouting> {
        let c = &self.config;
        let t = scores.len() / c.groups;
        let memberships = sinkhorn(&scores, t, c.groups, c.tau, c.sinkhorn_iters, c.causal_sinkhorn);
        self.check_memberships(l, &memberships)?;
        let vectors = if keep_vectors { Some(vecs.flatten_all()?.to_vec1::<f32>()?) } else { None };
        Ok(LayerRouting { t, groups: c.groups, scores, memberships, vectors, d_g: c.d_g })
    }

    /// Layer `l`'s routing vectors h W_g (T x d_g) and raw scores (T x K, row-major) of `h`
    /// (T x d_model), before Sinkhorn (generation balances them incrementally).
    pub fn scores(&self, l: usize, h: &Tensor) -> Result<(Tensor, Vec<f32>)> {
        let r = &self.layers[l];
        if let Some((vecs, scores)) = one_row_scores(self.config.score, r, h)? {
            let d_g = vecs.len();
            return Ok((Tensor::from_vec(vecs, (1, d_g), h.device())?, scores));
        }
        let (vecs, scores) = self.score_tensors(l, h)?;
        Ok((vecs, scores.flatten_all()?.to_vec1::<f32>()?))
    }

    /// `scores` left where `h` is: the routing vectors (T x d_g) and raw scores (T x K).
    pub fn score_tensors(&self, l: usize, h: &Tensor) -> Result<(Tensor, Tensor)> {
        let r = &self.layers[l];
        let vecs = r.input(h)?.matmul(&r.proj)?;
        let scores = self.config.score.scores(&vecs, &r.centroids)?;
        Ok((vecs, scores))
    }

    /// `attention::device_topk_masks`' masks on the host; a mask 0 (a token whose memberships
    /// are NaN or infinite) is `check_memberships`' error.
    pub fn masks_on_host(&self, l: usize, masks: &Tensor) -> Result<Vec<u64>> {
        let m = masks.to_vec1::<u32>()?;
        if m.contains(&0) {
            return Err(self.non_finite_memberships(l));
        }
        Ok(m.into_iter().map(u64::from).collect())
    }

    /// NaN memberships would give every token every group (silently dense) or none.
    pub fn check_memberships(&self, l: usize, memberships: &[f32]) -> Result<()> {
        if memberships.iter().any(|x| !x.is_finite()) {
            return Err(self.non_finite_memberships(l));
        }
        Ok(())
    }

    fn non_finite_memberships(&self, l: usize) -> crate::error::Error {
        crate::error::Error::NonFinite(format!(
            "layer {l}: the router's group memberships are NaN or infinite (its scores overflow: the model's activations or the adapter's weights are too large for tau = {})",
            self.config.tau
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::focus::identity::BaseModel;

    /// The app's adapter picker reads the base model through the guarded reader: a FIFO at
    /// `adapter_config.json` is refused at once (issue 51: `gui --adapter` never painted).
    #[test]
    fn recorded_base_model_refuses_a_fifo() {
        let dir = std::env::temp_dir().join(format!("focus-adapter-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = std::ffi::CString::new(dir.join(CONFIG_FILE).as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.clone();
        std::thread::spawn(move || tx.send(recorded_base_model(&d).map(|_| ()).map_err(|e| e.to_string())));
        let e = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("reading a FIFO hung").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn base() -> BaseModel {
        BaseModel { arch: "llama".into(), name: "t".into(), n_layers: 2, d_model: 8, n_heads: 1, n_kv_heads: 1, vocab: 8, fingerprint: String::new() }
    }

    /// `sink` [ours] is written with the config; a config written before it existed loads with
    /// s = 0; a sink above `MAX_SINK` is refused, naming the field.
    #[test]
    fn sink_is_saved_defaults_to_zero_and_is_bounded() {
        let a = Adapter::random(&base(), &Device::Cpu, &AdapterSpec { sink: 4, ..Default::default() }, 1).unwrap();
        assert_eq!(a.config.sink, 4);
        assert_eq!(a.config.spec().sink, 4);
        let mut json: serde_json::Value = serde_json::to_value(&a.config).unwrap();
        assert_eq!(json["sink"], 4);
        json.as_object_mut().unwrap().remove("sink");
        let old = Adapter::parse_config(&json.to_string(), &base(), Path::new("x"), BaseCheck::Exact).unwrap();
        assert_eq!(old.sink, 0);
        json["sink"] = serde_json::json!(crate::focus::mask::MAX_SINK + 1);
        let e = Adapter::parse_config(&json.to_string(), &base(), Path::new("x"), BaseCheck::Exact).unwrap_err().to_string();
        assert!(e.contains("sink"), "{e}");
        assert!(Adapter::random(&base(), &Device::Cpu, &AdapterSpec { sink: crate::focus::mask::MAX_SINK + 1, ..Default::default() }, 1).is_err());
    }

    /// A fresh folder of this process's own under the temporary directory.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("focus-adapter-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// `rebase` moves an adapter to other weights of the same shape: the fingerprint is the one
    /// check it skips (an arch or dimension mismatch is refused as `load` refuses it, naming the
    /// field); the copy records where it came from (chained over two rebases), loses `results`,
    /// keeps `training` and the weights' bytes; an old config without `rebased_from` parses
    /// and is written back without it.
    #[test]
    fn rebase_skips_only_the_fingerprint_and_records_where_it_came_from() {
        let d = scratch("rebase");
        let a_id = BaseModel { fingerprint: "aaaaaaaaaaaaaaaaaaaaaaaa".into(), ..base() };
        let b_id = BaseModel { name: "b".into(), fingerprint: "bbbbbbbbbbbbbbbbbbbbbbbb".into(), ..base() };
        let mut a = Adapter::random(&a_id, &Device::Cpu, &AdapterSpec { groups: 4, ..Default::default() }, 7).unwrap();
        a.config.training = Some(serde_json::json!({ "steps": 10 }));
        a.config.results = Some(serde_json::json!({ "ppl": 12.5 }));
        let src = d.join("a");
        a.save(&src).unwrap();
        let json = std::fs::read_to_string(src.join(CONFIG_FILE)).unwrap();
        assert!(!json.contains("rebased_from"), "a config never rebased writes no rebased_from: {json}");
        let e = Adapter::load(&src, &b_id, &Device::Cpu).unwrap_err().to_string();
        assert!(e.contains("base_model.fingerprint (the base weights differ)"), "{e}");

        let out = d.join("b");
        let r = Adapter::rebase(&src, &b_id, &out).unwrap();
        assert_eq!(r.config.base_model, b_id);
        let loaded = Adapter::load(&out, &b_id, &Device::Cpu).unwrap();
        assert_eq!(loaded.config.base_model, b_id);
        let from = loaded.config.rebased_from.as_ref().expect("rebased_from");
        assert_eq!(from.base_model, a_id);
        assert_eq!(from.adapter, std::fs::canonicalize(&src).unwrap().display().to_string());
        assert_eq!(from.date.len(), 10);
        assert!(from.rebased_from.is_none());
        assert!(loaded.config.results.is_none());
        assert_eq!(loaded.config.training, a.config.training);
        assert_eq!(std::fs::read(out.join(WEIGHTS_FILE)).unwrap(), std::fs::read(src.join(WEIGHTS_FILE)).unwrap());
        assert_eq!(loaded.config.spec(), a.config.spec());
        assert!(Adapter::load(&out, &a_id, &Device::Cpu).is_err(), "the rebased adapter fits b, no longer a");

        // Back again: the chain leads to a.
        let back = Adapter::rebase(&out, &a_id, &d.join("c")).unwrap();
        let from = back.config.rebased_from.as_ref().unwrap();
        assert_eq!(from.base_model, b_id);
        assert_eq!(from.rebased_from.as_ref().unwrap().base_model, a_id);
        let text = std::fs::read_to_string(d.join("c").join(CONFIG_FILE)).unwrap();
        let again: AdapterConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(again.rebased_from, back.config.rebased_from);

        // Nothing to rebase onto the same weights; a dimension or arch that differs is refused.
        let e = Adapter::rebase(&src, &a_id, &d.join("same")).unwrap_err().to_string();
        assert!(e.contains("nothing to rebase"), "{e}");
        let wide = BaseModel { d_model: 16, ..b_id.clone() };
        let e = Adapter::rebase(&src, &wide, &d.join("wide")).unwrap_err().to_string();
        assert!(e.contains("base_model.d_model") && e.contains("adapter has 8, model has 16"), "{e}");
        let other = BaseModel { arch: "qwen2".into(), ..b_id.clone() };
        let e = Adapter::rebase(&src, &other, &d.join("other")).unwrap_err().to_string();
        assert!(e.contains("base_model.arch"), "{e}");
        for refused in ["same", "wide", "other"] {
            assert!(!d.join(refused).exists(), "a refused rebase made {refused}");
        }
        // Never into the adapter's own folder, nor over a folder that holds anything.
        let before = std::fs::read(src.join(CONFIG_FILE)).unwrap();
        for o in [src.clone(), src.join("sub")] {
            let e = Adapter::rebase(&src, &b_id, &o).unwrap_err().to_string();
            assert!(e.contains("inside it"), "{e}");
        }
        assert_eq!(std::fs::read(src.join(CONFIG_FILE)).unwrap(), before);
        assert!(!src.join("sub").exists());
        let e = Adapter::rebase(&src, &b_id, &out).unwrap_err().to_string();
        assert!(e.contains("not empty"), "{e}");
        // An empty folder is taken.
        std::fs::create_dir(d.join("empty")).unwrap();
        Adapter::rebase(&src, &b_id, &d.join("empty")).unwrap();
        Adapter::load(&d.join("empty"), &b_id, &Device::Cpu).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// `derive` copies an adapter with inference settings changed: the weights' bytes and
    /// `training` kept, `results` dropped, `derived_from` naming the source and each change
    /// (chained over two derivations); a setting at its current value is no change, a copy
    /// that changes nothing or sets an invalid value is refused and writes nothing, and so is
    /// one into the source's folder.
    #[test]
    fn derive_changes_only_the_settings_given_and_records_them() {
        let d = scratch("derive");
        let mut a = Adapter::random(&base(), &Device::Cpu, &AdapterSpec { groups: 8, window: 128, ..Default::default() }, 3).unwrap();
        a.config.training = Some(serde_json::json!({ "steps": 10 }));
        a.config.results = Some(serde_json::json!({ "ppl": 12.5 }));
        let src = d.join("a");
        a.save(&src).unwrap();
        assert!(!std::fs::read_to_string(src.join(CONFIG_FILE)).unwrap().contains("derived_from"));

        let w512 = Settings { window: Some(512), top_k: Some(a.config.top_k), ..Default::default() };
        let out = d.join("w512");
        Adapter::derive(&src, &base(), w512, &out).unwrap();
        let b = Adapter::load(&out, &base(), &Device::Cpu).unwrap();
        assert_eq!(b.config.window, 512);
        assert_eq!((b.config.top_k, b.config.sink, b.config.sinkhorn_iters, b.config.groups), (a.config.top_k, a.config.sink, a.config.sinkhorn_iters, 8));
        let from = b.config.derived_from.as_ref().expect("derived_from");
        assert_eq!(from.changed, vec!["window 128 -> 512".to_string()], "top_k at its own value is no change");
        assert_eq!(from.adapter, std::fs::canonicalize(&src).unwrap().display().to_string());
        assert!(from.derived_from.is_none());
        assert!(b.config.results.is_none());
        assert_eq!(b.config.training, a.config.training);
        assert_eq!(std::fs::read(out.join(WEIGHTS_FILE)).unwrap(), std::fs::read(src.join(WEIGHTS_FILE)).unwrap());

        let c = Adapter::derive(&out, &base(), Settings { sink: Some(4), top_k: Some(3), ..Default::default() }, &d.join("c")).unwrap();
        let from = c.config.derived_from.as_ref().unwrap();
        assert_eq!(from.changed, vec![format!("sink {} -> 4", a.config.sink), format!("top_k {} -> 3", a.config.top_k)]);
        assert_eq!(from.derived_from.as_ref().unwrap().changed, vec!["window 128 -> 512".to_string()]);
        assert_eq!(Adapter::load(&d.join("c"), &base(), &Device::Cpu).unwrap().config.window, 512);

        let e = Adapter::derive(&src, &base(), Settings { window: Some(128), ..Default::default() }, &d.join("same")).unwrap_err().to_string();
        assert!(e.contains("nothing to change"), "{e}");
        let e = Adapter::derive(&src, &base(), Settings { top_k: Some(9), ..Default::default() }, &d.join("k9")).unwrap_err().to_string();
        assert!(e.contains("top_k = 9"), "{e}");
        let e = Adapter::derive(&src, &base(), w512, &src.join("sub")).unwrap_err().to_string();
        assert!(e.contains("inside it"), "{e}");
        for refused in ["same", "k9"] {
            assert!(!d.join(refused).exists(), "a refused derive made {refused}");
        }
        assert!(!src.join("sub").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(-1), "1969-12-31");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(19_782), "2024-02-29");
        assert_eq!(civil_date(20_453), "2025-12-31");
    }
}
