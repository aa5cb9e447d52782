//! Options and helpers shared by the subcommands.

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::Args as ClapArgs;
use focus_core::focus::mask::TopK;
use focus_core::model::memory::{self, Available, Estimate, ModelHeader, RoutingKept, Workload};
use focus_core::{Adapter, Mode, ModeKind, Model};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

// Flag parsers with the documented ranges: a value outside is a usage error (exit 2) that names
// the flag and its range, before anything is loaded or allocated.

/// A whole number in `LO..=HI`.
pub fn count<const LO: usize, const HI: usize>(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|_| format!("{s:?} is not a whole number"))?;
    if (LO..=HI).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside the accepted range {LO}..={HI}"))
    }
}

fn real_in(s: &str, lo: f64, hi: f64, lo_open: bool) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    let above = if lo_open { v > lo } else { v >= lo };
    if v.is_finite() && above && v <= hi {
        Ok(v)
    } else {
        Err(format!("{v} is outside the accepted range {}{lo}, {hi}]", if lo_open { "(" } else { "[" }))
    }
}
/// A learning rate: (0, 10].
pub fn learning_rate(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 10.0, true)
}
/// A non-negative factor up to 10 (weight decay).
pub fn factor(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 10.0, false)
}
/// Sinkhorn temperature: [1e-4, 1e4], as the adapter format accepts.
pub fn temperature(s: &str) -> Result<f64, String> {
    real_in(s, 1e-4, 1e4, false)
}
/// A sampling temperature: [0, 100] (0: greedy).
pub fn sampling_temperature(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 100.0, false)
}
/// A share of probability mass: (0, 1].
pub fn share(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 1.0, true)
}
/// The paper gate's slope: [-1e6, 1e6].
pub fn slope(s: &str) -> Result<f64, String> {
    real_in(s, -1e6, 1e6, false)
}
/// A time limit in minutes: 0 (none) or up to 1e6.
pub fn factor_minutes(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 1e6, false)
}
/// A gain on the router projection: (0, 100].
pub fn gain(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 100.0, true)
}
/// A duration in minutes or a size in GiB: (0, 1e6].
pub fn positive(s: &str) -> Result<f64, String> {
    real_in(s, 0.0, 1e6, true)
}

/// The source and destination of `adapter rebase` and `adapter derive`: an adapter copied to a
/// new folder (`Adapter::rebase`, `Adapter::derive`).
#[derive(clap::Args)]
pub struct CopyArgs {
    /// The adapter folder (read only: never written to).
    pub adapter: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The new adapter folder: must not exist, or be empty.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(ClapArgs, Clone)]
pub struct ModelArgs {
    /// A .gguf file or a Hugging Face directory (config.json + *.safetensors). Default: the
    /// SmolLM2-135M model fetched by scripts/fetch-model.sh.
    #[arg(long, short)]
    pub model: Option<PathBuf>,
    /// cpu, or cuda (binaries built with --features cuda).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// How the CPU multiplies by weights in GGUF blocks: exact (dequantized exactly, f32
    /// products: results move only by f32 rounding) or int8 (llama.cpp's route: inputs
    /// quantized to 8 bits, integer dot products on AVX-512 VNNI / AMX; 2-4x faster, with
    /// ~0.1% perplexity noise between computations that should agree). Float weights and GPUs
    /// are unaffected.
    #[arg(long, default_value = "exact", value_parser = ["exact", "int8"])]
    pub products: String,
}

impl ModelArgs {
    pub fn device(&self) -> Result<Device> {
        match self.device.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => focus_core::device::cuda(0).context("cannot open CUDA device 0 (was this binary built with --features cuda?)"),
            other => bail!("unknown device {other:?} (cpu or cuda)"),
        }
    }
    /// The model's path: `--model`, or the default model when it has been fetched.
    pub fn path(&self) -> Result<PathBuf> {
        Ok(match &self.model {
            Some(p) => p.clone(),
            None => {
                let p = crate::defaults::default_model_path();
                if !p.exists() {
                    bail!("the default model is not at {}: run scripts/fetch-model.sh first, or pass --model", p.display());
                }
                p
            }
        })
    }

    pub fn load(&self) -> Result<Model> {
        let mut m = Model::load(&self.path()?, &self.device()?)?;
        if self.products == "int8" {
            m.decoder.set_products(focus_core::model::qmatmul::Products::Int8);
        }
        Ok(m)
    }

    /// Refuses, before anything is loaded, a CPU run whose memory estimate (`memory`) exceeds
    /// what is available, naming both figures; `workload` gets the model's header (its
    /// tokenizer counts a text's tokens). Runs on a GPU are not checked here: their weights
    /// and activations live in device memory.
    pub fn check_memory(&self, what: &str, workload: impl FnOnce(&ModelHeader) -> Result<Workload>) -> Result<()> {
        if self.device != "cpu" {
            return Ok(());
        }
        let h = ModelHeader::open(&self.path()?)?;
        let w = workload(&h)?;
        memory::check_fits(what, &h.estimate(&w), memory::available().as_ref())?;
        Ok(())
    }
}

/// The workload of an analysis of `tokens` tokens in segments of `segment`, keeping
/// `kept_pass_bytes` of passes: the routing of `adapter` (its groups and d_g), else of the
/// shipped adapters' shape (8 groups, d_g 16), in `copies` analyses (the CLI's `analyze` also
/// analyses the untrained twin). Also says what it is, for a table's title.
pub fn analysis_workload(adapter: Option<&Path>, tokens: usize, segment: usize, copies: usize, soft: bool, kept_pass_bytes: u64) -> Result<(Workload, String)> {
    let routing = match adapter {
        Some(p) => RoutingKept::of_adapter(p, tokens, copies).with_context(|| format!("adapter {}", p.display()))?,
        None => RoutingKept::shipped(tokens, copies),
    };
    let what = format!("analyze over {tokens} tokens ({} groups, d_g {}, segments of {segment})", routing.groups, routing.d_g);
    Ok((Workload::analysis(tokens, segment, soft, routing, kept_pass_bytes), what))
}

/// The estimate as a table, with the memory available.
pub fn memory_table(e: &Estimate, avail: Option<&Available>) -> Result<()> {
    for (name, bytes, note) in e.rows() {
        crate::outln!("  {name:<12} {:>10}  {note}", memory::human(bytes))?;
    }
    crate::outln!("  {:<12} {:>10}", "total", memory::human(e.total()))?;
    match avail {
        Some(a) => crate::outln!("  {:<12} {:>10}  {}{}", "available", memory::human(a.bytes), a.source, if e.total() > a.bytes { ": does not fit" } else { "" })?,
        None => crate::outln!("  available    unknown")?,
    }
    Ok(())
}

/// `--mode`: one of core's `ModeKind` names.
fn mode_kind(s: &str) -> Result<ModeKind, String> {
    s.parse().map_err(|e: focus_core::Error| e.to_string())
}

/// The Focus options of `generate`, `ppl`, `eval` and `analyze`: the adapter and the attention
/// mode it runs in.
#[derive(ClapArgs, Clone)]
pub struct FocusArgs {
    /// A Focus adapter directory (needed for soft and topk).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Attention: dense (the base model), soft (Focus soft gates) or topk (exact hard top-k).
    #[arg(long, value_parser = mode_kind, default_value = "dense")]
    pub mode: ModeKind,
    /// k for topk (default: the adapter's top_k); 1..=K.
    #[arg(long, value_parser = count::<1, 64>)]
    pub k: Option<usize>,
}

impl FocusArgs {
    /// The adapter (checked against `model`) and the mode asked for.
    pub fn load(&self, model: &Model) -> Result<(Option<Adapter>, Mode)> {
        let adapter = load_adapter(self.adapter.as_deref(), model)?;
        let mode = self.resolve(adapter.as_ref())?;
        Ok((adapter, mode))
    }

    pub fn resolve(&self, adapter: Option<&Adapter>) -> Result<Mode> {
        Ok(match self.mode {
            ModeKind::Dense => Mode::Dense,
            ModeKind::Soft => Mode::Soft,
            ModeKind::TopK => Mode::TopK(self.topk(adapter.context("--mode topk needs --adapter")?)?),
        })
    }

    /// `--k` (default: the adapter's top_k), checked against the adapter's K.
    pub fn topk(&self, adapter: &Adapter) -> Result<TopK> {
        Ok(adapter.config.topk(self.k.unwrap_or(adapter.config.top_k))?)
    }
}

pub fn load_adapter(path: Option<&Path>, model: &Model) -> Result<Option<Adapter>> {
    path.map(|p| Adapter::load(p, &model.identity(), model.device()).with_context(|| format!("adapter {}", p.display()))).transpose()
}

pub fn progress(total: u64, what: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, ETA {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

pub fn print_json(v: &impl serde::Serialize) -> Result<()> {
    crate::outln!("{}", serde_json::to_string_pretty(v)?)?;
    Ok(())
}

/// Adapter hyper-parameters shared by `adapter init` and `train`.
#[derive(ClapArgs, Clone)]
pub struct SpecArgs {
    /// K, the number of groups per layer, 1..=64 [default: 8; `train`: the recipe's].
    #[arg(long, value_parser = count::<1, 64>)]
    pub groups: Option<usize>,
    /// Routing dimension d_g, 1..=4096 [default: 16; `train`: the recipe's].
    #[arg(long, value_parser = count::<1, 4096>)]
    pub dg: Option<usize>,
    /// Sinkhorn temperature, [1e-4, 1e4] [default: 0.1; `train`: the recipe's].
    #[arg(long, value_parser = temperature)]
    pub tau: Option<f64>,
    /// Sinkhorn iterations, 0..=1000 [default: 10; `train`: the recipe's].
    #[arg(long, value_parser = count::<0, 1000>)]
    pub sinkhorn_iters: Option<usize>,
    /// Local window w (pairs with i - j <= w always attend), 0..=16777216 [default: 128;
    /// `train`: the recipe's, which may widen it for a stage (`shipped`: 512 from `long` on); a
    /// window given holds for every stage].
    #[arg(long, value_parser = count::<0, 16777216>)]
    pub window: Option<usize>,
    /// The distant-pair gate [default: log; `train`: the recipe's].
    #[arg(long, value_parser = ["paper", "log"])]
    pub gate: Option<String>,
    /// The paper gate's slope [default: 10; `train`: the recipe's].
    #[arg(long, value_parser = slope)]
    pub lambda: Option<f64>,
    /// Default k for hard top-k inference, 1..=K [default: 2; `train`: the recipe's].
    #[arg(long, value_parser = count::<1, 64>)]
    pub top_k: Option<usize>,
    #[arg(long)]
    pub causal_sinkhorn: bool,
    /// Router scores: `dot` (the paper's S = h W_g C^T) or `cosine` (unit-norm vectors and
    /// centroids, so S / tau stays bounded and Sinkhorn keeps the groups balanced) [default:
    /// dot; `train`: the recipe's].
    #[arg(long, value_parser = ["dot", "cosine"])]
    pub score: Option<String>,
    /// On models with sliding-window layers (Gemma 2/3): route `all` layers (the Focus mask
    /// composes with each sliding layer's window) or only the `global` ones [default: all;
    /// `train`: the recipe's].
    #[arg(long, value_parser = ["all", "global"])]
    pub router_layers: Option<String>,
    /// [ours] Attention sinks: the first N tokens of a sequence are always attendable by every
    /// later query, like local pairs (0: none, the paper's mask) [default: 0; `train`: the
    /// recipe's].
    #[arg(long, value_parser = count::<0, 1024>)]
    pub sink: Option<usize>,
}

impl SpecArgs {
    /// `base` with each value given replaced (`adapter init`: `AdapterSpec::default()`; `train`:
    /// the recipe's).
    pub fn spec(&self, base: focus_core::AdapterSpec) -> focus_core::AdapterSpec {
        focus_core::AdapterSpec {
            groups: self.groups.unwrap_or(base.groups),
            d_g: self.dg.unwrap_or(base.d_g),
            tau: self.tau.unwrap_or(base.tau),
            sinkhorn_iters: self.sinkhorn_iters.unwrap_or(base.sinkhorn_iters),
            window: self.window.unwrap_or(base.window),
            gate: self.gate.as_deref().map_or(base.gate, |g| if g == "paper" { focus_core::Gate::Paper } else { focus_core::Gate::Log }),
            lambda: self.lambda.unwrap_or(base.lambda),
            // Not clamped: a top_k above K is refused by the adapter check, with both named.
            top_k: self.top_k.unwrap_or(base.top_k),
            causal_sinkhorn: self.causal_sinkhorn || base.causal_sinkhorn,
            score: self.score.as_deref().map_or(base.score, |s| if s == "cosine" { focus_core::Score::Cosine } else { focus_core::Score::Dot }),
            router_layers: self.router_layers.as_deref().map_or(base.router_layers, |r| r.parse().expect("clap checked the value")),
            sink: self.sink.unwrap_or(base.sink),
        }
    }
}
