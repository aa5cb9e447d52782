//! Retrofit training: AdamW on the routers (`W_g` and the centroids) of every layer through the
//! frozen model, with soft gates (FOCUS-METHOD section 3). Base weights are plain tensors, never
//! variables, so no gradient or update can reach them.
//!
//! Determinism: batch positions come from an RNG seeded by (seed, step), and the optimizer state
//! is checkpointed, so a run resumed from a checkpoint continues exactly as an uninterrupted one.
//!
//! Speed: by default a step runs the fused training step (`step::TrainPath`, frozen
//! weights in bf16 on CUDA) and the fused cross-entropy; `Trainer::kernels` selects the
//! composed forms instead (for A/B timings and as the reference).

use crate::focus::adapter::{Adapter, AdapterSpec};
use crate::focus::mask::TopK;
use crate::attention::Mode;
use crate::error::{Error, Result};
use super::ops::cross_entropy_rows;
use super::step::{self, TrainPath};
use super::weights::TrainWeights;
use crate::model::{ForwardOptions, Model};
use crate::focus::sinkhorn::SinkhornGrad;
use crate::analysis::stats::layer_stats;
use crate::analysis::structure::{self, LayerStructure};
use candle_core::{DType, Device, Tensor, Var};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainOptions {
    pub steps: usize,
    pub seq_len: usize,
    pub batch: usize,
    pub lr: f64,
    pub weight_decay: f64,
    pub seed: u64,
    /// Held-out evaluation every this many steps (and at the end); 0 = only at the end.
    pub eval_every: usize,
    /// Held-out sequences per evaluation.
    pub eval_seqs: usize,
    pub checkpoint_every: usize,
    /// Wall-clock budget in seconds (0 = none): when spent, the run ends at the current step
    /// as if that were the last (final held-out evaluation included).
    #[serde(default)]
    pub max_seconds: f64,
    /// Gradient through Sinkhorn: exact, or with the column normalisers held constant.
    #[serde(default)]
    pub sinkhorn_grad: SinkhornGrad,
    /// Cosine decay of the learning rate from `lr` at step 0 to `lr / 10` at `steps`.
    #[serde(default)]
    pub cosine_decay: bool,
    /// Train through the hard top-k mask of this k (straight-through, with the log gate's
    /// gradient whatever the gate) instead of the soft gate; held-out perplexity is then
    /// measured in that top-k mode.
    #[serde(default)]
    pub straight_through: Option<usize>,
    /// Clip the router gradients' global L2 norm to this before each update (0 = no clipping).
    #[serde(default)]
    pub grad_clip: f64,
    /// [ours] Keep the centroids at their initial value (e.g. k-means of h W_g): only W_g
    /// trains (issue 28, item 4).
    #[serde(default)]
    pub freeze_centroids: bool,
    /// [ours] Keep every W_g at its initial value (e.g. the principal directions of `init_pca`):
    /// only the centroids train, so the routing space h W_g, and the categories it separates,
    /// stay as they were (issue 28, item 4).
    #[serde(default)]
    pub freeze_projection: bool,
    /// [ours] Weight of a sharpening term added to the loss: the mean row entropy (nats) of
    /// every routed layer's balanced memberships (issue 28, item 4). Sinkhorn keeps each
    /// group's mass at 1/K; sharper rows make each token's top group carry that mass, so the top
    /// groups are balanced too and each is a tighter cluster of h W_g. 0 = the paper's loss.
    #[serde(default)]
    pub sharpen: f64,
    /// [ours] Weight of a top-group balance term added to the loss (`top_group_balance_term`).
    /// Sinkhorn balances each group's *mass*; the top groups, which top-k keeps and dominance
    /// counts, can still pile onto one group where rows stay soft. 0 = none.
    #[serde(default)]
    pub balance: f64,
}

/// How sharply `top_group_balance_term` approximates each token's top group: a softmax over
/// the groups of the memberships divided by this (a gap of 0.1 between the first and second
/// membership weighs the first e^2 = 7.4 times the second).
pub const BALANCE_TEMPERATURE: f64 = 0.05;

/// The top-group balance term [ours] (`TrainOptions::balance`): per routed layer, with s the
/// soft top-group assignment softmax(memberships / BALANCE_TEMPERATURE) of every token and m_g
/// its mean over tokens, K * sum_g m_g^2 - 1 (0 when the top groups are uniform, K - 1 when one
/// group takes every token); the mean over routed layers. None when no layer routed.
pub fn top_group_balance_term(memberships: &[Tensor]) -> Result<Option<Tensor>> {
    let mut sum: Option<Tensor> = None;
    for g in memberships {
        let k = g.dim(candle_core::D::Minus1)?;
        let rows = g.to_dtype(DType::F32)?.reshape(((), k))?;
        // candle_nn::ops::softmax (composed ops) has a gradient; the fused softmax_last_dim has none.
        let s = candle_nn::ops::softmax(&(rows / BALANCE_TEMPERATURE)?, candle_core::D::Minus1)?;
        let m = s.mean(0)?;
        let term = ((m.sqr()?.sum_all()? * k as f64)? - 1.0)?;
        sum = Some(match sum {
            Some(acc) => (acc + term)?,
            None => term,
        });
    }
    Ok(sum.map(|s| s / memberships.len() as f64).transpose()?)
}

/// The sharpening term [ours] (`TrainOptions::sharpen`): the mean over routed layers of the mean
/// row entropy of their memberships (rows sum to 1); None when no layer routed.
pub fn sharpening_term(memberships: &[Tensor]) -> Result<Option<Tensor>> {
    let mut sum: Option<Tensor> = None;
    for g in memberships {
        let g = g.to_dtype(DType::F32)?;
        // -sum p ln p per row; the 1e-12 keeps ln finite where a membership underflows to 0.
        let h = (&g * (&g + 1e-12)?.log()?)?.sum_keepdim(candle_core::D::Minus1)?.neg()?.mean_all()?;
        sum = Some(match sum {
            Some(s) => (s + h)?,
            None => h,
        });
    }
    Ok(sum.map(|s| s / memberships.len() as f64).transpose()?)
}

impl TrainOptions {
    /// The learning rate of step `step`.
    pub fn lr_at(&self, step: usize) -> f64 {
        if !self.cosine_decay || self.steps == 0 {
            return self.lr;
        }
        let p = (step as f64 / self.steps as f64).min(1.0);
        self.lr * (0.1 + 0.45 * (1.0 + (std::f64::consts::PI * p).cos()))
    }
}

/// Which kernels a training step uses (all on by default; each off gives the composed ops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainKernels {
    /// The fused step (fused attention, norms, SwiGLU, frozen projections, cross-entropy).
    pub fused: bool,
    /// Sinkhorn as one fused op.
    pub fused_sinkhorn: bool,
    /// On CUDA, the fused step's frozen weights and matmul activations in bf16 (f32
    /// accumulation; the residual stream, norms, routers and softmax stay f32); else f32.
    pub bf16: bool,
    /// The fused step's activation memory (`step::layer_gradients`): which layers' graphs
    /// are kept for the backward and which are recomputed in it.
    pub recompute: Recompute,
}

/// Which layers the fused step recomputes in the backward (`TrainKernels::recompute`); the
/// gradients are the same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recompute {
    /// The graphs of as many of the last layers as fit the memory free once the weights are
    /// loaded (`Trainer::kept_layers`), the others recomputed.
    #[default]
    Auto,
    /// Every layer (only the layers' inputs are kept): the least memory.
    On,
    /// None: every layer's graph is kept.
    Off,
}

impl Default for TrainKernels {
    fn default() -> Self {
        TrainKernels { fused: true, fused_sinkhorn: true, bf16: true, recompute: Recompute::Auto }
    }
}

/// Token streams: documents joined by the end-of-text token.
pub struct TrainData {
    pub train: Vec<u32>,
    pub heldout: Vec<u32>,
}

/// One line of the training log (JSONL).
#[derive(Debug, Clone, Serialize)]
pub struct LogRow {
    pub step: usize,
    pub loss: f64,
    pub train_ppl: f64,
    pub tokens_seen: usize,
    pub seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heldout_ppl: Option<f64>,
    /// Per layer, the share of the first held-out window's tokens in the largest top group; null
    /// for a layer the adapter does not route (it attends densely).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dominance: Option<Vec<Option<f64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_mass: Option<Vec<Vec<f64>>>,
    /// Per layer, category structure on the fixed probe passage (`Trainer::probe`), at each
    /// held-out evaluation: when groups form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub categories: Option<Vec<LayerCategories>>,
    /// Per layer, the structure measures on the probe (NMI with category, token id, position,
    /// repeat, each with its permutation null): at step 0 they are the untrained twin's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structure: Option<Vec<LayerStructure>>,
    /// Per layer, the size of the router's parameters and scores, at each held-out evaluation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routers: Option<Vec<RouterSize>>,
    /// The router gradients' global L2 norm of this step, before any clipping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
}

/// How large one layer's router has grown: with dot scores, S / tau scales with ||W_g|| and
/// the centroids, and nothing else bounds it.
#[derive(Debug, Clone, Serialize)]
pub struct RouterSize {
    /// ||W_g||_F and max |w| of W_g.
    pub w_norm: f64,
    pub w_max: f64,
    /// The centroids' largest L2 norm.
    pub centroid_max_norm: f64,
    /// min and max of S / tau on the first held-out window.
    pub score_min: f64,
    pub score_max: f64,
}

/// One layer's category structure on the probe passage (the categoriser of `analysis`).
#[derive(Debug, Clone, Serialize)]
pub struct LayerCategories {
    /// Token-weighted centroid purity.
    pub purity: f64,
    /// Centroids with at least `PURE_MIN_TOKENS` tokens that are >= 60% / >= 80% pure.
    pub pure60: usize,
    pub pure80: usize,
    /// Mean largest membership.
    pub confidence: f64,
    /// Share of tokens per group (argmax membership).
    pub sizes: Vec<f64>,
}

/// The probe passage of a text: its first `PROBE_BYTES` bytes, cut at a whitespace boundary
/// (about 900 tokens of English prose).
pub fn probe_passage(text: &str) -> &str {
    if text.len() <= PROBE_BYTES {
        return text;
    }
    let mut end = PROBE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text[..end].rfind(char::is_whitespace).filter(|&i| i > 0).unwrap_or(end);
    &text[..cut]
}

pub const PROBE_BYTES: usize = 4000;

/// A probe of several held-out books (issue 28's protocol: >= 25K bytes from >= 2 books, no
/// front matter): from each text `bytes` bytes starting a quarter of the way in (past title
/// pages, contents and prefaces), cut at whitespace, joined by blank lines.
pub fn probe_from_books(texts: &[&str], bytes: usize) -> String {
    let cut = |t: &str, at: usize| -> usize {
        let mut i = at.min(t.len());
        while !t.is_char_boundary(i) {
            i -= 1;
        }
        t[..i].rfind(char::is_whitespace).map_or(i, |w| w + 1)
    };
    texts
        .iter()
        .map(|t| {
            let start = cut(t, t.len() / 4);
            let end = cut(t, start + bytes).max(start);
            t[start..end].trim()
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A centroid counts as pure only with this many tokens of the probe passage (a group of three
/// commas is not a finding).
pub const PURE_MIN_TOKENS: usize = 20;

/// AdamW with its state as plain tensors, so that it can be checkpointed.
struct AdamW {
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    t: usize,
}

impl AdamW {
    fn new(vars: &[Var]) -> Result<Self> {
        let z = |v: &Var| v.as_tensor().zeros_like();
        Ok(AdamW { m: vars.iter().map(z).collect::<candle_core::Result<_>>()?, v: vars.iter().map(z).collect::<candle_core::Result<_>>()?, t: 0 })
    }
    fn step(&mut self, vars: &[Var], grads: &[Option<Tensor>], lr: f64, wd: f64) -> Result<()> {
        let (b1, b2, eps) = (0.9, 0.999, 1e-8);
        self.t += 1;
        let c1 = 1.0 - f64::powi(b1, self.t as i32);
        let c2 = 1.0 - f64::powi(b2, self.t as i32);
        for (i, var) in vars.iter().enumerate() {
            let Some(g) = &grads[i] else { continue };
            self.m[i] = ((&self.m[i] * b1)? + (g * (1.0 - b1))?)?.detach();
            self.v[i] = ((&self.v[i] * b2)? + (g.sqr()? * (1.0 - b2))?)?.detach();
            let update = ((&self.m[i] / c1)? / ((&self.v[i] / c2)?.sqrt()? + eps)?)?;
            let decayed = (var.as_tensor() * (1.0 - lr * wd))?;
            var.set(&(decayed - (update * lr)?)?)?;
        }
        Ok(())
    }
}

pub struct Trainer<'m> {
    pub model: &'m Model,
    pub adapter: Adapter,
    vars: Vec<Var>,
    opt: AdamW,
    pub opts: TrainOptions,
    pub step: usize,
    pub tokens_seen: usize,
    /// The kernels of each step; may be changed between steps.
    pub kernels: TrainKernels,
    /// `opts.straight_through`, checked against the adapter's K.
    straight_through: Option<TopK>,
    /// [ours, experimental] With `straight_through`: every other step trains the soft objective
    /// instead (odd steps), so that the soft mode is trained beside the hard top-k mask.
    pub alternate_soft: bool,
    /// The frozen weights as the fused step reads them, built at the first fused step.
    weights: Option<TrainWeights>,
    /// `Recompute::Auto`'s choice of kept layers, made at the first fused step (the device's
    /// free memory is read once: afterwards the pool holds what steps freed).
    auto_kept: Option<usize>,
    /// A fixed held-out passage on which each evaluation logs category structure (None: not
    /// logged).
    pub probe: Option<String>,
    /// The router gradients' global norm at the last step (before clipping).
    grad_norm: f64,
    /// Besides `OUT/checkpoint` (overwritten, for `resume`), keep every checkpoint's adapter in
    /// `OUT/checkpoints/step-NNNNNN` (`checkpoint_dir`), so that any of them can be opened later.
    pub keep_checkpoints: bool,
    /// The stages of the same run before this trainer's (`Before`); zero for a run of one.
    pub before: Before,
}

/// Where a trainer's stage starts within a run of several (the app's recipe stages, each a
/// fresh `Trainer::from_adapter` of the last one's adapter): the steps, tokens and seconds of the
/// stages before it. Log rows, `run`'s progress and kept checkpoints count from there, so that
/// they number the whole run; the learning-rate schedule and the batches count from the stage's
/// own start (`Trainer::step`), as a run of that stage alone would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Before {
    pub steps: usize,
    pub tokens: usize,
    pub seconds: f64,
}

/// Where `Trainer::run` keeps the adapter of the checkpoint at `step` (with `keep_checkpoints`).
pub fn checkpoint_dir(out: &Path, step: usize) -> std::path::PathBuf {
    out.join("checkpoints").join(format!("step-{step:06}"))
}

const CKPT_OPT: &str = "optimizer.safetensors";
const CKPT_STATE: &str = "trainer_state.json";

#[derive(Serialize, Deserialize)]
struct CheckpointState {
    step: usize,
    tokens_seen: usize,
    adam_t: usize,
    options: TrainOptions,
}

/// What one training step holds at least, in bytes: the logits of the whole batch (batch x
/// seq_len x vocab, f32) and every layer's hidden state kept for the backward pass (batch x
/// seq_len x d_model x layers); the attention's own temporaries come on top. `None` past u64.
pub fn step_bytes_at_least(cfg: &crate::model::ModelConfig, batch: usize, seq_len: usize) -> Option<(u64, u64)> {
    let tokens = (batch as u64).checked_mul(seq_len as u64)?;
    let logits = tokens.checked_mul(cfg.vocab as u64)?.checked_mul(4)?;
    let hidden = tokens.checked_mul(cfg.d_model as u64)?.checked_mul(cfg.n_layers as u64 + 1)?.checked_mul(4)?;
    Some((logits, hidden))
}

/// Refuses, before anything is allocated, a batch x seq_len whose step cannot fit the memory
/// available (batch 4096 x seq_len 512, inside the documented ranges, aborted on its first
/// 4.8 GB allocation); the error gives both figures.
pub fn check_step_memory(cfg: &crate::model::ModelConfig, batch: usize, seq_len: usize, avail: Option<&crate::model::memory::Available>) -> Result<()> {
    use crate::model::memory::human;
    let Some(a) = avail else { return Ok(()) };
    let need = step_bytes_at_least(cfg, batch, seq_len);
    let total = need.and_then(|(l, h)| l.checked_add(h));
    if total.is_none_or(|t| t > a.bytes) {
        let (what, parts) = match need {
            Some((l, h)) => (human(l.saturating_add(h)), format!("logits {} over the {}-token vocabulary, hidden states of {} layers {}", human(l), cfg.vocab, cfg.n_layers, human(h))),
            None => ("more bytes than a u64 counts".into(), String::new()),
        };
        return Err(Error::OutOfMemory(format!(
            "a training step of batch {batch} x seq_len {seq_len} ({} tokens) needs at least {what} ({parts}), but only {} is available ({}); lower --batch or --seq-len",
            batch as u64 * seq_len as u64,
            human(a.bytes),
            a.source
        )));
    }
    Ok(())
}

impl<'m> Trainer<'m> {
    pub fn new(model: &'m Model, spec: &AdapterSpec, opts: TrainOptions) -> Result<Self> {
        let adapter = Adapter::random(&model.identity(), model.device(), spec, opts.seed)?;
        Self::from_adapter(model, adapter, opts)
    }

    /// Starts from an existing adapter (its configuration and weights) instead of a random one:
    /// fine-tuning, e.g. a trained adapter with another objective (`straight_through`).
    pub fn from_adapter(model: &'m Model, mut adapter: Adapter, opts: TrainOptions) -> Result<Self> {
        if opts.seq_len < 2 || opts.seq_len > model.config().context || opts.batch == 0 {
            return Err(Error::Invalid(format!("seq_len must be in 2..={} and batch >= 1", model.config().context)));
        }
        // Every pair is local (or a sink [ours]) when seq_len <= w + 1 or s + w + 1 >= seq_len.
        if opts.seq_len <= adapter.config.window + 1 || adapter.config.sink + adapter.config.window + 1 >= opts.seq_len {
            let (w, s) = (adapter.config.window, adapter.config.sink);
            let why = if s == 0 {
                format!("inside the local window ({w})")
            } else {
                format!("inside the local window and the attention sinks ({s} sinks + window {w} + 1 = {} tokens always attend)", s + w + 1)
            };
            return Err(Error::Invalid(format!(
                "seq_len {} is {why}: every pair would be local and the routers get no gradient; use a seq_len above {}",
                opts.seq_len,
                s + w + 1
            )));
        }
        if model.device().is_cpu() {
            check_step_memory(model.config(), opts.batch, opts.seq_len, crate::model::memory::available().as_ref())?;
        }
        let straight_through = opts.straight_through.map(|k| adapter.config.topk(k)).transpose()?;
        // Measured results describe the weights they were measured on, which training changes:
        // a fine-tuned adapter must not carry its start's figures as its own.
        adapter.config.results = None;
        let vars = adapter.trainable_vars()?;
        let opt = AdamW::new(&vars)?;
        Ok(Trainer { model, adapter, vars, opt, opts, step: 0, tokens_seen: 0, kernels: TrainKernels::default(), straight_through, alternate_soft: false, weights: None, auto_kept: None, probe: None, grad_norm: f64::NAN, keep_checkpoints: false, before: Before::default() })
    }

    /// Continues from a checkpoint directory written by `save_checkpoint`.
    pub fn resume(model: &'m Model, dir: &Path) -> Result<Self> {
        let state_path = dir.join(CKPT_STATE);
        // Read through the guarded reader: a FIFO there blocked, a link to /dev/zero never ended.
        let text = crate::io::read_capped_string(&state_path, crate::io::MAX_JSON_BYTES, "trainer state")?;
        let st: CheckpointState = serde_json::from_str(&text).map_err(|e| Error::bad_file(&state_path, e.to_string()))?;
        let adapter = Adapter::load(dir, &model.identity(), model.device())?;
        let mut tr = Self::from_adapter(model, adapter, st.options)?;
        let opt_path = dir.join(CKPT_OPT);
        let tensors = candle_core::safetensors::load(&opt_path, &model.decoder.device)?;
        for i in 0..tr.vars.len() {
            let get = |k: String| tensors.get(&k).cloned().ok_or_else(|| Error::bad_file(&opt_path, format!("missing {k}")));
            tr.opt.m[i] = get(format!("m.{i}"))?;
            tr.opt.v[i] = get(format!("v.{i}"))?;
        }
        tr.opt.t = st.adam_t;
        tr.step = st.step;
        tr.tokens_seen = st.tokens_seen;
        Ok(tr)
    }

    pub fn save_checkpoint(&self, dir: &Path) -> Result<()> {
        self.adapter.save(dir)?;
        let mut t: HashMap<String, Tensor> = HashMap::new();
        for i in 0..self.vars.len() {
            t.insert(format!("m.{i}"), self.opt.m[i].to_device(&Device::Cpu)?);
            t.insert(format!("v.{i}"), self.opt.v[i].to_device(&Device::Cpu)?);
        }
        let tmp = crate::io::temp_path(&dir.join(CKPT_OPT));
        candle_core::safetensors::save(&t, &tmp)?;
        std::fs::rename(&tmp, dir.join(CKPT_OPT)).map_err(|e| Error::write(dir.join(CKPT_OPT), e))?;
        let st = CheckpointState { step: self.step, tokens_seen: self.tokens_seen, adam_t: self.opt.t, options: self.opts.clone() };
        crate::io::write_atomic(&dir.join(CKPT_STATE), serde_json::to_string_pretty(&st)?.as_bytes())
    }

    /// Start positions of step `step`'s batch: a function of (seed, step) only.
    fn batch_starts(&self, len: usize, step: usize) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(self.opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ step as u64);
        (0..self.opts.batch).map(|_| rng.gen_range(0..=len - self.opts.seq_len)).collect()
    }

    /// Replaces every layer's centroids by k-means of its routing vectors h W_g (W_g at its
    /// current value) over `seqs` training windows of `seq_len` tokens, taken from the start of
    /// the training data; spherical k-means for cosine scores. Only before the first step.
    pub fn init_kmeans(&mut self, data: &TrainData, seqs: usize, iters: usize) -> Result<()> {
        if self.step != 0 {
            return Err(Error::Invalid("k-means initialisation is only for a run that has not started".into()));
        }
        let (t, c) = (self.opts.seq_len, self.adapter.config.clone());
        let n_seq = (data.train.len() / t).min(seqs.max(1));
        if n_seq == 0 || n_seq * t < c.groups {
            return Err(Error::Invalid(format!("k-means needs at least one window of {t} tokens; the training data has {}", data.train.len())));
        }
        // Routing vectors do not depend on routing in dense mode: one pass gives every layer's.
        let mut vecs: Vec<Vec<f32>> = vec![Vec::new(); self.adapter.layers.len()];
        for s in 0..n_seq {
            let mut o = ForwardOptions::new(Mode::Dense, Some(&self.adapter));
            o.record_routing = true;
            o.logits_from = t - 1;
            let out = self.model.decoder.forward(&data.train[s * t..(s + 1) * t], &o)?;
            for (l, r) in out.routing.into_iter().enumerate() {
                vecs[l].extend(r.vectors.unwrap_or_default());
            }
        }
        let spherical = c.score == crate::focus::adapter::Score::Cosine;
        let dev = self.model.device();
        for (l, v) in vecs.iter().enumerate() {
            let cent = crate::focus::kmeans::kmeans(v, v.len() / c.d_g, c.d_g, c.groups, iters, spherical, self.opts.seed ^ l as u64);
            let cent = Tensor::from_vec(cent, (c.groups, c.d_g), dev)?;
            self.vars[2 * l + 1].set(&cent)?;
        }
        self.adapter.config.init = format!(
            "{}; then centroids = {} k-means ({iters} Lloyd iterations, k-means++ seeding) of h W_g over the first {} training tokens",
            c.init,
            if spherical { "spherical" } else { "Euclidean" },
            n_seq * t
        );
        Ok(())
    }

    /// Runs the first `n_seq` training windows through an identity router (d_g = d_model,
    /// W_g = I; tau large so that its Sinkhorn stays finite) and hands each layer's router
    /// inputs h (rows of d_model) to `each`; with `scaled`, h times the adapter's input scale.
    fn each_router_input(&self, data: &TrainData, n_seq: usize, scaled: bool, mut each: impl FnMut(usize, &[f32])) -> Result<()> {
        let (t, dev, d) = (self.opts.seq_len, self.model.device(), self.model.config().d_model);
        let spec = AdapterSpec { groups: 2, d_g: d, tau: 1e4, top_k: 1, score: crate::focus::adapter::Score::Dot, ..self.adapter.config.spec() };
        let mut probe = Adapter::random(&self.model.identity(), dev, &spec, 0)?;
        for (r, own) in probe.layers.iter_mut().zip(&self.adapter.layers) {
            r.proj = Tensor::eye(d, DType::F32, dev)?;
            r.input_scale = if scaled { own.input_scale.clone() } else { None };
        }
        for s in 0..n_seq {
            let mut o = ForwardOptions::new(Mode::Dense, Some(&probe));
            o.record_routing = true;
            o.logits_from = t - 1;
            let out = self.model.decoder.forward(&data.train[s * t..(s + 1) * t], &o)?;
            for (l, r) in out.routing.into_iter().enumerate() {
                each(l, &r.vectors.unwrap_or_default());
            }
        }
        Ok(())
    }

    /// [ours] Gives every layer's router a fixed input scale: each channel of its input h divided
    /// by that channel's RMS over `seqs` training windows (floored at 1% of the median channel's,
    /// so a dead channel is not blown up). A random W_g ~ N(0, 1/d_model) then sees unit-scale
    /// channels whatever the model's norm gains: Gemma 3's router inputs reach |h| in the
    /// thousands, its scores S / tau in the 10^4-10^6 (issue 28), where Sinkhorn's 10 iterations
    /// do not balance and the gradient through the memberships vanishes. Only before the first
    /// step, and before `init_pca` / `init_kmeans` (they then work on the scaled input).
    /// Returns each layer's (median, largest) channel RMS, the spread it removes.
    pub fn init_input_scale(&mut self, data: &TrainData, seqs: usize) -> Result<Vec<(f64, f64)>> {
        if self.step != 0 {
            return Err(Error::Invalid("the router input scale is set only for a run that has not started".into()));
        }
        let t = self.opts.seq_len;
        let n_seq = (data.train.len() / t).min(seqs.max(1));
        if n_seq == 0 {
            return Err(Error::Invalid(format!("the input scale needs at least one window of {t} training tokens; the training data has {}", data.train.len())));
        }
        let dev = self.model.device();
        let d = self.model.config().d_model;
        // The raw inputs: their spread is what the scale removes.
        let mut sq = vec![vec![0f64; d]; self.adapter.layers.len()];
        self.each_router_input(data, n_seq, false, |l, rows| {
            for row in rows.chunks(d) {
                sq[l].iter_mut().zip(row).for_each(|(a, &x)| *a += (x as f64) * (x as f64));
            }
        })?;
        let rows = n_seq * t;
        let mut spread = Vec::with_capacity(sq.len());
        for (l, q) in sq.iter().enumerate() {
            let rms: Vec<f64> = q.iter().map(|v| (v / rows as f64).sqrt()).collect();
            let mut sorted = rms.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[d / 2];
            let floor = (0.01 * median).max(1e-12);
            let scale: Vec<f32> = rms.iter().map(|r| (1.0 / r.max(floor)) as f32).collect();
            self.adapter.layers[l].input_scale = Some(Tensor::from_vec(scale, d, dev)?);
            spread.push((median, sorted[d - 1]));
        }
        self.adapter.config.input_scale = true;
        self.adapter.config.router_input = format!(
            "[ours] attention input after the layer's norm, each channel divided by its RMS over the first {} training tokens (layers.{{l}}.input_scale)",
            n_seq * t
        );
        Ok(spread)
    }

    /// [ours] Replaces every layer's W_g by the `d_g` leading principal directions of its
    /// router input h (the normalised attention input) over `seqs` training windows, then the
    /// centroids by k-means of the new h W_g (`init_kmeans`). A random W_g keeps a random
    /// subspace of h; the principal one keeps the directions along which tokens differ most.
    /// Scaled so that E ||h W_g||^2 equals a random W_g's (d_g / d_model E ||h||^2), which
    /// keeps S / tau in the same range; with `whiten`, every direction gets an equal share.
    /// Only before the first step.
    pub fn init_pca(&mut self, data: &TrainData, seqs: usize, whiten: bool, iters: usize) -> Result<()> {
        if self.step != 0 {
            return Err(Error::Invalid("PCA initialisation is only for a run that has not started".into()));
        }
        let (t, c) = (self.opts.seq_len, self.adapter.config.clone());
        let n_seq = (data.train.len() / t).min(seqs.max(1));
        let d = self.model.config().d_model;
        if n_seq == 0 || n_seq * t < d {
            // It reads at most `seqs` windows: a short sequence length can leave too few rows.
            return Err(Error::Invalid(format!(
                "PCA needs at least {d} router inputs (d_model); the first {n_seq} training windows of {t} tokens give {}: use a longer sequence length or more training text",
                n_seq * t
            )));
        }
        let dev = self.model.device();
        // With an input scale, the principal directions are those of what the router reads.
        let mut moments = vec![crate::focus::pca::Moments::new(d); self.adapter.layers.len()];
        self.each_router_input(data, n_seq, true, |l, rows| moments[l].add(rows))?;
        for (l, m) in moments.iter().enumerate() {
            let (vals, vecs) = crate::focus::pca::top_eigen(&m.covariance(), d, c.d_g, 60, self.opts.seed ^ l as u64);
            let target = m.mean_sq_norm() / d as f64; // a random W_g's E z_i^2 per direction
            // Unwhitened: one factor for all directions, from their second moments about 0
            // (h W_g has no bias, so the mean is part of what the scores see).
            let mu = m.mean();
            let second: Vec<f64> = (0..c.d_g).map(|j| vals[j].max(0.0) + (0..d).map(|a| vecs[a * c.d_g + j] * mu[a]).sum::<f64>().powi(2)).collect();
            let scale: Vec<f64> = if whiten {
                second.iter().map(|s| (target / s.max(1e-30)).sqrt()).collect()
            } else {
                vec![(target * c.d_g as f64 / second.iter().sum::<f64>().max(1e-30)).sqrt(); c.d_g]
            };
            let w: Vec<f32> = (0..d * c.d_g).map(|i| (vecs[i] * scale[i % c.d_g]) as f32).collect();
            self.vars[2 * l].set(&Tensor::from_vec(w, (d, c.d_g), dev)?)?;
        }
        self.adapter.config.init = format!(
            "[ours] W_g = the {} leading principal directions of each layer's router input over the first {} training tokens, {}",
            c.d_g,
            n_seq * t,
            if whiten { "each scaled to a random W_g's variance (whitened)" } else { "scaled together to a random W_g's E ||h W_g||^2" }
        );
        self.init_kmeans(data, seqs, iters)
    }

    /// [ours] Multiplies every layer's W_g by `gain` (after `init_*` or `--from`), so every
    /// score S = h W_g C^T scales by it and the memberships exp(S / tau) soften (gain < 1) with
    /// the same top group in most tokens. A PCA-initialised Gemma 3 router starts with S / tau
    /// in the thousands: its memberships are one-hot, the soft gate halves every cross-group
    /// distant logit, and no gradient reaches the router through Sinkhorn (issue 28). Only
    /// before the first step.
    pub fn scale_projection(&mut self, gain: f64) -> Result<()> {
        if self.step != 0 {
            return Err(Error::Invalid("the router projection is rescaled only for a run that has not started".into()));
        }
        if !(gain.is_finite() && gain > 0.0) {
            return Err(Error::Invalid(format!("the projection gain must be a positive number, not {gain}")));
        }
        for l in 0..self.adapter.layers.len() {
            let w = (self.vars[2 * l].as_tensor() * gain)?;
            self.vars[2 * l].set(&w)?;
        }
        self.adapter.config.init = format!("{}; then W_g multiplied by {gain} [ours]", self.adapter.config.init);
        Ok(())
    }

    /// One optimizer step; returns the mean training loss (nats/token).
    pub fn train_step(&mut self, data: &TrainData) -> Result<f64> {
        let (mean, mut grads) = self.loss_and_gradients(data)?;
        // One reduction and one copy to the host for all parameters (a scalar read per
        // parameter would synchronise a GPU step 60 times).
        let sums = grads.iter().flatten().map(|g| g.to_dtype(DType::F32)?.sqr()?.sum_all()).collect::<candle_core::Result<Vec<_>>>()?;
        self.grad_norm = if sums.is_empty() { 0.0 } else { Tensor::stack(&sums, 0)?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?.sqrt() };
        if self.opts.grad_clip > 0.0 && self.grad_norm > self.opts.grad_clip {
            let f = self.opts.grad_clip / self.grad_norm;
            for g in grads.iter_mut().flatten() {
                *g = (&*g * f)?;
            }
        }
        // A NaN or infinite loss (a learning rate that blew the routers up) would write NaN
        // into every router; stop with the step that produced it instead.
        if !mean.is_finite() {
            return Err(Error::NonFinite(format!(
                "training step {}: the loss is {mean} (learning rate {}); the routers were left as they were",
                self.step + 1,
                self.opts.lr_at(self.step)
            )));
        }
        if self.opts.freeze_centroids {
            // Every router's parameters are (W_g, centroids): the odd entries stay as they are.
            grads.iter_mut().skip(1).step_by(2).for_each(|g| *g = None);
        }
        if self.opts.freeze_projection {
            grads.iter_mut().step_by(2).for_each(|g| *g = None);
        }
        self.opt.step(&self.vars, &grads, self.opts.lr_at(self.step), self.opts.weight_decay)?;
        // On CUDA, the step's temporaries go back to the stream-ordered memory pool; without a
        // synchronisation per step the pool kept growing on the composed step (Gemma 3: ~0.5 GB
        // a step from 42 GB, out of memory at step 33 on the H200; with it: 42 GB flat over 40
        // steps, `train_paper --mem-trace`). A no-op on the CPU.
        self.model.decoder.device.synchronize()?;
        self.step += 1;
        self.tokens_seen += self.opts.batch * self.opts.seq_len;
        Ok(mean)
    }

    /// The router gradients this step would apply (each router's W_g, then its centroids, layer
    /// by layer; zeros where a parameter gets none), without applying them.
    pub fn router_gradients(&mut self, data: &TrainData) -> Result<Vec<Tensor>> {
        let (_, grads) = self.loss_and_gradients(data)?;
        grads.into_iter().zip(&self.vars).map(|(g, v)| Ok(match g { Some(g) => g, None => v.as_tensor().zeros_like()? })).collect()
    }

    /// The mean loss of this step's batch and the gradient of every router parameter.
    fn loss_and_gradients(&mut self, data: &TrainData) -> Result<(f64, Vec<Option<Tensor>>)> {
        let (t, dev) = (self.opts.seq_len, &self.model.decoder.device);
        if data.train.len() < t + 1 {
            return Err(Error::Invalid(format!("the training data has {} tokens; need more than seq_len {t}", data.train.len())));
        }
        let k = self.kernels;
        if k.fused {
            let dtype = if dev.is_cuda() && k.bf16 { DType::BF16 } else { DType::F32 };
            if self.weights.as_ref().is_none_or(|w| w.dtype != dtype) {
                self.weights = Some(TrainWeights::new(&self.model.decoder, dtype)?);
            }
        }
        let keep = if k.fused { self.kept_layers() } else { 0 };
        // The whole batch is one graph and one backward pass: the mean loss over its tokens.
        let b = self.opts.batch;
        let starts = self.batch_starts(data.train.len() - 1, self.step);
        let inputs: Vec<&[u32]> = starts.iter().map(|&s| &data.train[s..s + t]).collect();
        let targets: Vec<u32> = starts.iter().flat_map(|&s| data.train[s + 1..s + t + 1].iter().copied()).collect();
        let mut o = ForwardOptions::new(Mode::Soft, Some(&self.adapter));
        o.differentiable = true;
        o.sinkhorn_grad = self.opts.sinkhorn_grad;
        o.straight_through = self.straight_through.filter(|_| !(self.alternate_soft && self.step % 2 == 1));
        let memberships = std::sync::Mutex::new(Vec::new());
        if self.opts.sharpen > 0.0 || self.opts.balance > 0.0 {
            o.memberships = Some(&memberships);
        }
        let path = TrainPath { fused: k.fused, fused_sinkhorn: k.fused_sinkhorn, weights: if k.fused { self.weights.as_ref() } else { None } };
        let targets = Tensor::from_vec(targets, b * t, dev)?;
        if k.fused && step::takes_fused(&self.model.decoder, &o, path) {
            let (sharpen, balance) = (self.opts.sharpen, self.opts.balance);
            // The trainer's terms are means over routed layers: a layer's part is its term / n.
            let term = |g: &Tensor, n: usize| -> Result<Option<Tensor>> {
                let mut sum: Option<Tensor> = None;
                for (w, f) in [(sharpen, sharpening_term as fn(&[Tensor]) -> Result<Option<Tensor>>), (balance, top_group_balance_term)] {
                    if w > 0.0 {
                        if let Some(v) = f(std::slice::from_ref(g))? {
                            let v = (v * (w / n as f64))?;
                            sum = Some(match sum {
                                Some(s) => (s + v)?,
                                None => v,
                            });
                        }
                    }
                }
                Ok(sum)
            };
            let tw = self.weights.as_ref().expect("the fused step's weights");
            if k.fused_sinkhorn {
                o.balance = super::sinkhorn::sinkhorn_fused;
            }
            let obj = step::Objective { targets: &targets, term: &term, vars: &self.vars };
            let (loss, grads) = step::layer_gradients(&self.model.decoder, &inputs, &o, tw, &obj, keep)?;
            return Ok((loss.to_dtype(DType::F64)?.to_scalar::<f64>()?, grads));
        }
        let logits = step::forward(&self.model.decoder, &inputs, &o, path)?;
        let loss = if k.fused { cross_entropy_rows(&logits, &targets)?.mean_all()? } else { candle_nn::loss::cross_entropy(&logits, &targets)? };
        // The logged loss stays the next-token loss; the gradient also carries the sharpening
        // and balance terms [ours].
        let memberships = memberships.into_inner().unwrap_or_default();
        let mut objective = loss.clone();
        if self.opts.sharpen > 0.0 {
            if let Some(h) = sharpening_term(&memberships)? {
                objective = (&objective + (h.to_dtype(loss.dtype())? * self.opts.sharpen)?)?;
            }
        }
        if self.opts.balance > 0.0 {
            if let Some(b) = top_group_balance_term(&memberships)? {
                objective = (&objective + (b.to_dtype(loss.dtype())? * self.opts.balance)?)?;
            }
        }
        let store = objective.backward()?;
        // Detached: a gradient that kept its op history would keep this step's whole graph
        // (activations included) alive through the optimizer state.
        let grads: Vec<Option<Tensor>> = self.vars.iter().map(|v| store.get(v.as_tensor()).map(|g| g.detach())).collect();
        let mean = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        Ok((mean, grads))
    }

    /// How many of the last layers keep their graphs in a fused step (`TrainKernels::recompute`;
    /// the others are recomputed in the backward). `Auto` reads the memory free at the first
    /// step (once the weights are loaded) and keeps as many graphs as fit in four fifths of it
    /// beside the layers' inputs, the head's chunk (`step::head_chunk_bytes`) and one recomputed
    /// layer, a graph counted as `step::layer_graph_bytes` counts the step's ops: at Llama 3.1 8B's shape (4 x 2,048
    /// tokens, bf16, H100) a kept layer took 1.6 GiB of the pool's peak against 1.78 GiB
    /// counted; the fifth left over holds the kernels' temporaries and the pool's
    /// fragmentation. (Counting each graph twice kept 9 of 32 layers there, 43 of 79 GiB used,
    /// and the 23 recomputed forwards cost 8 ms each.)
    pub fn kept_layers(&mut self) -> usize {
        let layers = self.model.config().n_layers;
        match self.kernels.recompute {
            Recompute::On => 0,
            Recompute::Off => layers,
            Recompute::Auto => *self.auto_kept.get_or_insert_with(|| {
                let dev = &self.model.decoder.device;
                let room = match dev {
                    Device::Cpu => crate::model::memory::available().map(|a| a.bytes),
                    _ => crate::device::memory_use(dev).map(|m| m.total.saturating_sub(m.used)),
                };
                let cfg = self.model.config();
                let tokens = (self.opts.batch * self.opts.seq_len) as u64;
                let dtype = self.weights.as_ref().map_or(DType::F32, |w| w.dtype);
                let graph = step::layer_graph_bytes(cfg, tokens as usize, dtype);
                let inputs = (layers as u64 + 1) * tokens * cfg.d_model as u64 * 4;
                let head = step::head_chunk_bytes(cfg, dtype);
                room.map_or(layers, |room| ((room / 5 * 4).saturating_sub(inputs + head + graph) / graph.max(1)).min(layers as u64) as usize)
            }),
        }
    }

    /// Whether a step runs the fused step (`Trainer::kernels` asks for it and the model and
    /// device take it: `step::takes_fused`), else the composed ops.
    pub fn runs_fused(&self) -> bool {
        let mut o = ForwardOptions::new(Mode::Soft, Some(&self.adapter));
        o.differentiable = true;
        o.straight_through = self.straight_through;
        step::takes_fused(&self.model.decoder, &o, TrainPath { fused: self.kernels.fused, fused_sinkhorn: self.kernels.fused_sinkhorn, weights: None })
    }

    /// The inference mode the training optimises: soft, or top-k for straight-through runs.
    pub fn eval_mode(&self) -> Mode {
        self.straight_through.map_or(Mode::Soft, Mode::TopK)
    }

    /// Held-out perplexity (`eval_mode`, inference path) over the first `eval_seqs` windows, and
    /// per-layer dominance (None where the adapter does not route) and group mass on the first
    /// window.
    pub fn evaluate(&self, data: &TrainData) -> Result<(f64, Vec<Option<f64>>, Vec<Vec<f64>>)> {
        let (ppl, dom, mass, _) = self.held_out(data)?;
        Ok((ppl, dom, mass))
    }

    /// `evaluate`, and per layer the range of the raw scores on the first window (for
    /// `router_sizes`, so that an evaluation runs the held-out windows once).
    #[allow(clippy::type_complexity)]
    fn held_out(&self, data: &TrainData) -> Result<(f64, Vec<Option<f64>>, Vec<Vec<f64>>, Vec<(f32, f32)>)> {
        let t = self.opts.seq_len;
        let n = (data.heldout.len().saturating_sub(1) / t).min(self.opts.eval_seqs.max(1));
        if n == 0 {
            return Err(Error::Invalid(format!("held-out data has {} tokens; need more than seq_len {t}", data.heldout.len())));
        }
        let (mut nll, mut count) = (0f64, 0usize);
        let (mut dom, mut mass, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
        for w in 0..n {
            let ids = &data.heldout[w * t..(w + 1) * t];
            let mut o = ForwardOptions::new(self.eval_mode(), Some(&self.adapter));
            o.record_routing = w == 0;
            let out = self.model.decoder.forward(ids, &o)?;
            let v = crate::model::decoder::Decoder::nll(&out.logits, &data.heldout[w * t + 1..(w + 1) * t + 1])?;
            nll += v.iter().map(|&x| x as f64).sum::<f64>();
            count += v.len();
            if w == 0 {
                let c = &self.adapter.config;
                for (l, r) in out.routing.iter().enumerate() {
                    let st = layer_stats(l, r, c.tau, c.top_k, (c.window, c.sink), false);
                    dom.push(c.router_layers.routes(self.model.config().is_sliding(l)).then_some(st.dominance));
                    mass.push(st.mass_after);
                    ranges.push(r.scores.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x))));
                }
            }
        }
        Ok(((nll / count as f64).exp(), dom, mass, ranges))
    }

    /// Per layer, the size of the router's parameters, and the range of S / tau given the raw
    /// scores' (min, max) per layer (`held_out`: the first held-out window, routed in
    /// `eval_mode`).
    fn router_sizes(&self, score_ranges: &[(f32, f32)]) -> Result<Vec<RouterSize>> {
        let tau = self.adapter.config.tau;
        let scalar = |x: Tensor| -> Result<f64> { Ok(x.to_dtype(DType::F64)?.to_scalar::<f64>()?) };
        self.adapter
            .layers
            .iter()
            .zip(score_ranges)
            .map(|(r, &(lo, hi))| {
                Ok(RouterSize {
                    w_norm: scalar(r.proj.sqr()?.sum_all()?.sqrt()?)?,
                    w_max: scalar(r.proj.abs()?.flatten_all()?.max(0)?)?,
                    centroid_max_norm: scalar(r.centroids.sqr()?.sum(1)?.sqrt()?.max(0)?)?,
                    score_min: lo as f64 / tau,
                    score_max: hi as f64 / tau,
                })
            })
            .collect()
    }

    /// Category structure of every layer on the probe passage (None without one), routed in
    /// `eval_mode` as `focus-lens analyze` would: the centroid profiles' figures, and the
    /// structure measures (`analysis::structure`).
    pub fn probe_categories(&self) -> Result<Option<(Vec<LayerCategories>, Vec<LayerStructure>)>> {
        let Some(text) = &self.probe else { return Ok(None) };
        let c = &self.adapter.config;
        // Reported at the k it routes with: straight-through's, else the adapter's top_k.
        let opts = crate::analysis::AnalyzeOptions { mode: self.eval_mode().kind(), k: self.straight_through.unwrap_or(c.default_topk()), segment_len: self.opts.seq_len, keep_tokens: false, cancel: None };
        let a = crate::analysis::analyze(self.model, &self.adapter, "training", text, &opts, |_, _| {})?;
        let measured = structure::of_analysis(&a).layers;
        Ok(Some((
            a.profiles
                .iter()
                .zip(&a.layers)
                .map(|(p, st)| {
                    let n = st.group_size.iter().sum::<usize>().max(1) as f64;
                    LayerCategories {
                        purity: p.purity(),
                        pure60: p.pure_centroids(0.6, PURE_MIN_TOKENS),
                        pure80: p.pure_centroids(0.8, PURE_MIN_TOKENS),
                        confidence: st.mean_confidence,
                        sizes: st.group_size.iter().map(|&s| s as f64 / n).collect(),
                    }
                })
                .collect(),
            measured,
        )))
    }

    /// The held-out evaluation row of the current state (`loss`: the last step's).
    fn evaluation_row(&self, data: &TrainData, loss: f64, seconds: f64) -> Result<LogRow> {
        let (ppl, dom, mass, ranges) = self.held_out(data)?;
        let probe = self.probe_categories()?;
        let (categories, structure) = match probe {
            Some((c, s)) => (Some(c), Some(s)),
            None => (None, None),
        };
        Ok(LogRow {
            step: self.before.steps + self.step,
            loss,
            train_ppl: loss.exp(),
            tokens_seen: self.before.tokens + self.tokens_seen,
            seconds: self.before.seconds + seconds,
            heldout_ppl: Some(ppl),
            dominance: Some(dom),
            group_mass: Some(mass),
            categories,
            structure,
            routers: Some(self.router_sizes(&ranges)?),
            grad_norm: self.grad_norm.is_finite().then_some(self.grad_norm),
        })
    }

    /// Saves the checkpoint of the current step into `OUT/checkpoint`, and with
    /// `keep_checkpoints` its adapter into `checkpoint_dir(out, step)` too.
    fn checkpoint(&self, out: &Path) -> Result<()> {
        self.save_checkpoint(&out.join("checkpoint"))?;
        if self.keep_checkpoints {
            self.adapter.save(&checkpoint_dir(out, self.before.steps + self.step))?;
        }
        Ok(())
    }

    /// Runs to `opts.steps`, calling `log` for every row and `progress(step)` (rows and steps
    /// counted from `before`). Stops early, after saving a checkpoint, when `stop` is set.
    pub fn run(
        &mut self,
        data: &TrainData,
        out: &Path,
        stop: Option<&AtomicBool>,
        mut log: impl FnMut(&LogRow) -> Result<()>,
        mut progress: impl FnMut(usize, f64),
    ) -> Result<bool> {
        let t0 = std::time::Instant::now();
        if self.step == 0 && self.opts.eval_every > 0 {
            // Step 0: the untrained routers (the twin of the run) on the same held-out text and
            // probe, so that every later figure has its baseline in the same log. The loss is
            // the first batch's, without an update.
            let (loss, _) = self.loss_and_gradients(data)?;
            log(&self.evaluation_row(data, loss, 0.0)?)?;
        }
        while self.step < self.opts.steps {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                self.checkpoint(out)?;
                return Ok(false);
            }
            let loss = self.train_step(data)?;
            if self.opts.max_seconds > 0.0 && t0.elapsed().as_secs_f64() >= self.opts.max_seconds {
                self.opts.steps = self.step;
            }
            let eval_now = (self.opts.eval_every > 0 && self.step.is_multiple_of(self.opts.eval_every)) || self.step == self.opts.steps;
            let seconds = t0.elapsed().as_secs_f64();
            let row = if eval_now {
                self.evaluation_row(data, loss, seconds)?
            } else {
                LogRow { step: self.before.steps + self.step, loss, train_ppl: loss.exp(), tokens_seen: self.before.tokens + self.tokens_seen, seconds: self.before.seconds + seconds, heldout_ppl: None, dominance: None, group_mass: None, categories: None, structure: None, routers: None, grad_norm: Some(self.grad_norm) }
            };
            log(&row)?;
            progress(self.before.steps + self.step, loss);
            if self.opts.checkpoint_every > 0 && self.step.is_multiple_of(self.opts.checkpoint_every) {
                self.checkpoint(out)?;
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    //! The layer-by-layer step (`step::layer_gradients`) against the whole graph's backward,
    //! directly and through the trainer.
    use super::*;
    use crate::focus::adapter::Gate;

    fn fixture(arch: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_tiny").join(arch)
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// The layer-by-layer step (layers kept or recomputed in the backward, the head in row
    /// chunks) gives the loss and router gradients of the whole graph's backward, with the auxiliary
    /// per-layer terms, two sequences, sinks and a model's own sliding window on some layers.
    #[test]
    fn layer_gradients_equal_the_whole_graphs() {
                let mut model = Model::load(&fixture("llama"), &Device::Cpu).unwrap();
        for (l, b) in model.decoder.blocks.iter_mut().enumerate() {
            if l % 2 == 0 {
                b.attn.window = Some(20);
            }
        }
        let spec = AdapterSpec { groups: 4, window: 4, sink: 1, gate: Gate::Log, ..Default::default() };
        let mut adapter = Adapter::random(&model.identity(), &Device::Cpu, &spec, 5).unwrap();
        let vars = adapter.trainable_vars().unwrap();
        let ids: Vec<u32> = (0..81).map(|i| (i * 37 % 500) as u32).collect();
        let seqs: Vec<&[u32]> = vec![&ids[0..40], &ids[40..80]];
        let targets: Vec<u32> = ids[1..41].iter().chain(&ids[41..81]).copied().collect();
        let targets = Tensor::from_vec(targets, 80, &Device::Cpu).unwrap();
        let tw = TrainWeights::new(&model.decoder, DType::F32).unwrap();
        let (sharpen, balance) = (0.3, 0.7);
        // The whole graph, as the trainer builds it.
        let memberships = std::sync::Mutex::new(Vec::new());
        let mut o = ForwardOptions::new(Mode::Soft, Some(&adapter));
        o.memberships = Some(&memberships);
        let logits = step::forward(&model.decoder, &seqs, &o, TrainPath { weights: Some(&tw), ..TrainPath::default() }).unwrap();
        let loss = cross_entropy_rows(&logits, &targets).unwrap().mean_all().unwrap();
        let m = memberships.into_inner().unwrap();
        assert_eq!(m.len(), model.decoder.blocks.len(), "every layer routes");
        let objective = ((&loss + (sharpening_term(&m).unwrap().unwrap() * sharpen).unwrap()).unwrap() + (top_group_balance_term(&m).unwrap().unwrap() * balance).unwrap()).unwrap();
        let store = objective.backward().unwrap();
        let whole: Vec<Tensor> = vars.iter().map(|v| store.get(v.as_tensor()).unwrap().clone()).collect();
        let term = |g: &Tensor, n: usize| -> Result<Option<Tensor>> {
            let s = (sharpening_term(std::slice::from_ref(g))?.unwrap() * (sharpen / n as f64))?;
            let b = (top_group_balance_term(std::slice::from_ref(g))?.unwrap() * (balance / n as f64))?;
            Ok(Some((s + b)?))
        };
        let o = ForwardOptions::new(Mode::Soft, Some(&adapter));
        let layers = model.decoder.blocks.len();
        assert!(layers >= 2, "the fixture has layers to keep and to recompute");
        // Every layer recomputed, the last kept, all kept; 80 rows in chunks of 7 (a last
        // chunk of 3) and in one chunk.
        for keep in [0, 1, layers] {
            for rows in [7, 4096] {
                let obj = step::Objective { targets: &targets, term: &term, vars: &vars };
                let (rloss, rgrads) = step::layer_gradients_in(&model.decoder, &seqs, &o, &tw, &obj, keep, rows).unwrap();
                let (a, b) = (loss.to_scalar::<f32>().unwrap(), rloss.to_scalar::<f32>().unwrap());
                assert!((a - b).abs() <= 1e-5 * a.abs(), "keep {keep}, rows {rows}: loss {b} vs the whole graph's {a}");
                for (i, (w, r)) in whole.iter().zip(&rgrads).enumerate() {
                    let r = r.as_ref().expect("every router parameter gets a gradient");
                    let scale = w.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
                    assert!(scale > 0.0, "parameter {i}: zero gradient");
                    let err = max_abs_diff(w, r) / scale;
                    assert!(err <= 1e-4, "keep {keep}, rows {rows}: parameter {i}: gradient differs by {err} (relative)");
                }
            }
        }
        // Without the auxiliary terms the gradients differ (the check above sees them).
        let none = |_: &Tensor, _: usize| -> Result<Option<Tensor>> { Ok(None) };
        let obj = step::Objective { targets: &targets, term: &none, vars: &vars };
        let (_, plain) = step::layer_gradients_in(&model.decoder, &seqs, &o, &tw, &obj, 0, 7).unwrap();
        let d = max_abs_diff(&whole[0], plain[0].as_ref().unwrap());
        assert!(d > 1e-6, "the auxiliary terms change no gradient ({d})");
    }

    /// Gemma 2 (GeGLU as one op, post-norms, soft-capped attention, and the final logit
    /// soft-cap, which the layer-by-layer step applies inside its cross-entropy rather than on
    /// the logits) gives the loss and router gradients of the whole graph's backward, whose
    /// loss is the cross-entropy of the capped logits.
    #[test]
    fn layer_gradients_of_gemma2_equal_the_whole_graphs() {
        let mut model = Model::load(&fixture("gemma2"), &Device::Cpu).unwrap();
        let cfg = model.config().clone();
        assert!(cfg.final_softcap.is_some() && cfg.mlp == crate::model::config::MlpKind::GeGlu && cfg.post_norms, "the fixture is Gemma 2's shape");
        let spec = AdapterSpec { groups: 4, window: 3, gate: Gate::Log, ..Default::default() };
        let mut adapter = Adapter::random(&model.identity(), &Device::Cpu, &spec, 7).unwrap();
        let vars = adapter.trainable_vars().unwrap();
        let ids: Vec<u32> = (0..61).map(|i| (i * 37 % 500) as u32).collect();
        let seqs: Vec<&[u32]> = vec![&ids[0..30], &ids[30..60]];
        let targets = Tensor::from_vec(ids[1..61].to_vec(), 60, &Device::Cpu).unwrap();
        let none = |_: &Tensor, _: usize| -> Result<Option<Tensor>> { Ok(None) };
        // The whole graph's loss (the cross-entropy of the capped logits) and router gradients.
        let whole = |model: &Model| {
            let tw = TrainWeights::new(&model.decoder, DType::F32).unwrap();
            let o = ForwardOptions::new(Mode::Soft, Some(&adapter));
            let logits = step::forward(&model.decoder, &seqs, &o, TrainPath { weights: Some(&tw), ..TrainPath::default() }).unwrap();
            let loss = cross_entropy_rows(&logits, &targets).unwrap().mean_all().unwrap();
            let store = loss.backward().unwrap();
            (loss.to_scalar::<f32>().unwrap(), vars.iter().map(|v| store.get(v.as_tensor()).unwrap().clone()).collect::<Vec<_>>())
        };
        // The fixture's cap (3: it barely bends this tiny model's logits) and one that does.
        let mut losses = Vec::new();
        for cap in [cfg.final_softcap.unwrap(), 0.05] {
            model.decoder.config.final_softcap = Some(cap);
            let (a, grads) = whole(&model);
            let tw = TrainWeights::new(&model.decoder, DType::F32).unwrap();
            let o = ForwardOptions::new(Mode::Soft, Some(&adapter));
            let obj = step::Objective { targets: &targets, term: &none, vars: &vars };
            let (rloss, rgrads) = step::layer_gradients_in(&model.decoder, &seqs, &o, &tw, &obj, 1, 7).unwrap();
            let b = rloss.to_scalar::<f32>().unwrap();
            assert!((a - b).abs() <= 1e-5 * a.abs(), "cap {cap}: loss {b} vs the whole graph's {a}");
            for (i, (w, r)) in grads.iter().zip(&rgrads).enumerate() {
                let r = r.as_ref().expect("every router parameter gets a gradient");
                let scale = w.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
                assert!(scale > 0.0, "cap {cap}: parameter {i}: zero gradient");
                let err = max_abs_diff(w, r) / scale;
                assert!(err <= 1e-4, "cap {cap}: parameter {i}: gradient differs by {err} (relative)");
            }
            losses.push(a);
        }
        // The check sees the cap: at 0.05 the loss is another number than without one.
        model.decoder.config.final_softcap = None;
        let (plain, _) = whole(&model);
        assert!((losses[1] - plain).abs() > 1e-3 * plain.abs(), "the cap leaves the loss as it was ({} vs {plain})", losses[1]);
    }

    /// Through the trainer: two steps with `Recompute::On` and with `Off` leave the same
    /// routers and losses (sharpening and balance terms on); `Auto` keeps a tiny model's graph.
    #[test]
    fn trainer_recomputing_trains_as_the_whole_graph() {
                let model = Model::load(&fixture("llama"), &Device::Cpu).unwrap();
        let spec = AdapterSpec { groups: 4, window: 4, sink: 1, gate: Gate::Log, ..Default::default() };
        // Every field the trainer needs, as a saved run's options read.
        let opts: TrainOptions = serde_json::from_str(r#"{"steps":2,"seq_len":32,"batch":2,"lr":0.01,"weight_decay":0,"seed":0,"eval_every":0,"eval_seqs":1,"checkpoint_every":0,"sharpen":0.2,"balance":0.5}"#).unwrap();
        let ids: Vec<u32> = (0..400).map(|i| (i * 37 % 500) as u32).collect();
        let data = TrainData { train: ids.clone(), heldout: ids };
        let mut runs = Vec::new();
        for r in [Recompute::Off, Recompute::On, Recompute::Auto] {
            let mut tr = Trainer::new(&model, &spec, opts.clone()).unwrap();
            tr.kernels.recompute = r;
            let losses: Vec<f64> = (0..2).map(|_| tr.train_step(&data).unwrap()).collect();
            let w: Vec<f32> = tr.adapter.layers.iter().flat_map(|l| l.proj.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect();
            runs.push((losses, w));
        }
        let (l0, w0) = &runs[0];
        for (r, (l, w)) in runs.iter().enumerate().skip(1) {
            for (a, b) in l0.iter().zip(l) {
                assert!((a - b).abs() <= 1e-5 * a.abs(), "run {r}: loss {b} vs {a}");
            }
            let d = w0.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(d <= 1e-5, "run {r}: routers differ by {d}");
        }
        let moved = runs[0].1.iter().zip(&Trainer::new(&model, &spec, opts.clone()).unwrap().adapter.layers.iter().flat_map(|l| l.proj.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect::<Vec<_>>()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved > 1e-4, "two steps left the routers where they started ({moved})");
    }
}
