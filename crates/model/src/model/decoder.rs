//! The one decoder every family loads into: pre-norm transformer blocks (`block.rs`) whose
//! attention is pluggable (dense, Focus soft, Focus hard top-k, or an explicit mask) and which
//! report each layer's routing when a Focus adapter is attached. `Decoder::run` is the layer
//! loop of every pass: inference (`forward`), the differentiable composed ops
//! (`forward_differentiable`), inspection (`analysis::partners`) and generation's prefill go
//! through it, and a `LayerHook` sees what they need of each layer.
//!
//! One other layer loop exists: the fused training step's (`train::step`), which runs the
//! same blocks through fused ops with backward passes and other weights (concatenated, bf16 on
//! CUDA); tests/differentiable.rs checks that it computes what this one computes.

use super::block::{AttentionInputs, Block, Norm, Pass};
use super::config::ModelConfig;
use super::linear::Weight;
use super::step::DeviceStep;
use crate::attention::{self, LayerAttention, LayerPlan, Mode};
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::mask::{self, TopK};
use crate::focus::router::LayerRouting;
use crate::focus::sinkhorn::{sinkhorn_composed, SinkhornGrad, SinkhornOp};
use candle_core::{DType, Device, Tensor, D};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct Decoder {
    pub config: ModelConfig,
    /// (vocab, d_model).
    pub embed: Weight,
    pub pos_embed: Option<Tensor>,
    pub blocks: Vec<Block>,
    pub final_norm: Norm,
    /// (vocab, d_model); the embedding itself (the same tensor or blocks) when tied.
    pub lm_head: Weight,
    pub device: Device,
    /// How many passes (`run`) this decoder has started: the GUI's tests assert with it that a
    /// view reused kept layers instead of running the model.
    pub passes: PassCount,
}

/// A counter of model passes (`Decoder::passes`).
#[derive(Debug, Default)]
pub struct PassCount(std::sync::atomic::AtomicUsize);

impl PassCount {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// One pass more: a generation step replayed as a CUDA graph runs no pass of its own.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn add_one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a forward pass should do besides producing logits.
#[derive(Clone, Copy)]
pub struct ForwardOptions<'a> {
    pub mode: Mode,
    pub adapter: Option<&'a Adapter>,
    /// Keep each layer's routing (scores, memberships, routing vectors) in the output.
    pub record_routing: bool,
    /// Compute logits only for positions >= this (perplexity scores only the second half).
    pub logits_from: usize,
    /// The position of the first token (a generation step runs one token at its cache's
    /// length); 0 for a sequence from its start.
    pub start: usize,
    /// Checked between layers; set it to abort with `Error::Cancelled`.
    pub cancel: Option<&'a AtomicBool>,
    /// Use only ops with a backward pass and route with differentiable Sinkhorn, so that a loss
    /// on the logits gives gradients to the router parameters (dense and soft modes).
    pub differentiable: bool,
    /// How the differentiable path back-propagates through Sinkhorn.
    pub sinkhorn_grad: SinkhornGrad,
    /// The differentiable path's Sinkhorn: candle's ops, or training's fused op.
    pub balance: SinkhornOp,
    /// Training only: run the hard top-k mask of this k, with the log gate's gradient
    /// (`attention::soft::straight_through_plan`), instead of the soft gate.
    pub straight_through: Option<TopK>,
    /// Training only (the differentiable path): every routed layer's memberships, as tensors
    /// in the graph, are pushed here (the trainer's sharpening term [ours]).
    pub memberships: Option<&'a std::sync::Mutex<Vec<Tensor>>>,
    /// A generation step on a GPU: its one token and its position (`start`) are also on the
    /// device, and the pass reads them there (embedding, RoPE rows, position embedding), so
    /// that it uploads nothing and can be captured as a CUDA graph (`model::step`).
    pub device_step: Option<&'a DeviceStep>,
    /// A profiling aid (inference only): where a pass's time goes, stage by stage. Each stage's
    /// end waits for the device, so the pass runs slower than without; `bench forward --stages`
    /// runs one such pass per mode after its timed ones.
    pub stage_times: Option<&'a std::sync::Mutex<StageTimes>>,
    /// The caller reads no routing, neither the output's nor a hook's (perplexity, speed): a
    /// top-k pass on CUDA then routes on the device and only the top-k masks cross to the
    /// host (`attention::device_topk_masks`); the output holds no routing and hooks see none.
    pub routing_unused: bool,
}

/// Seconds a pass spent in each stage (`ForwardOptions::stage_times`), summed over layers; each
/// stage timed to the device's completion of its work.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct StageTimes {
    /// Token (and position) embeddings, RoPE tables: before the first layer.
    pub embed_s: f64,
    /// Each layer's attention pre-norm and its Q, K, V products (RoPE applied).
    pub qkv_s: f64,
    /// The adapter's routing: Sinkhorn and the memberships (a sequence routed on the host has
    /// its scores made and copied back before its Q/K/V products, in `qkv_s`; one routed on
    /// the device has scores, Sinkhorn and masks here).
    pub route_s: f64,
    /// The attention plan (top-k's group segments, soft gates, masks).
    pub plan_s: f64,
    /// Attention itself.
    pub attend_s: f64,
    /// The output projection, the residuals and the MLP.
    pub finish_s: f64,
}

impl StageTimes {
    pub fn total_s(&self) -> f64 {
        self.embed_s + self.qkv_s + self.route_s + self.plan_s + self.attend_s + self.finish_s
    }
}

/// Adds the time since its last mark to a stage of `StageTimes`, after waiting for the device.
struct StageClock<'a> {
    times: Option<&'a std::sync::Mutex<StageTimes>>,
    dev: &'a Device,
    last: std::time::Instant,
}

impl StageClock<'_> {
    fn mark(&mut self, stage: fn(&mut StageTimes) -> &mut f64) -> Result<()> {
        let Some(times) = self.times else { return Ok(()) };
        self.dev.synchronize()?;
        let now = std::time::Instant::now();
        *stage(&mut times.lock().expect("stage times")) += (now - self.last).as_secs_f64();
        self.last = now;
        Ok(())
    }
}

impl<'a> ForwardOptions<'a> {
    pub fn new(mode: Mode, adapter: Option<&'a Adapter>) -> Self {
        ForwardOptions { mode, adapter, record_routing: false, logits_from: 0, start: 0, cancel: None, differentiable: false, sinkhorn_grad: Default::default(), balance: sinkhorn_composed, straight_through: None, memberships: None, device_step: None, stage_times: None, routing_unused: false }
    }
}

pub struct ForwardOutput {
    /// (T - logits_from, vocab)
    pub logits: Tensor,
    /// One entry per layer when routing was computed (any mode with an adapter).
    pub routing: Vec<LayerRouting>,
}

/// What a caller sees of each layer of an inference pass. Every method has a default that does
/// nothing, so a hook implements only what it needs.
pub trait LayerHook {
    /// Replaces layer `l`'s attention plan (tests run an explicitly masked dense reference
    /// through the real model this way). `None` keeps the plan the mode gives.
    fn plan(&mut self, _l: usize, _routing: Option<&LayerRouting>) -> Result<Option<LayerPlan>> {
        Ok(None)
    }
    /// Sees layer `l`'s attention inputs and routing before it attends; `Break` ends the pass
    /// there (inspection needs only the layers up to the one it looks at).
    fn inputs(&mut self, _l: usize, _inputs: &AttentionInputs, _routing: Option<&LayerRouting>) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    /// Sees layer `l`'s normalised state (the router's input) before its Q/K/V products are
    /// made (inference only): a GPU step starts the layer's routing here, beside them. With
    /// `norm`, `h` is the residual row and `norm` its pre-norm, not yet applied (`prenorm`).
    fn normed(&mut self, _l: usize, _h: &Tensor, _norm: Option<&Norm>) -> Result<()> {
        Ok(())
    }
    /// Whether the pass may leave a step row's pre-norm to the kernels that read it
    /// (`Block::prenorm_in_kernels`): then `normed` and `AttentionInputs` carry the residual
    /// row and the norm. Generation's GPU step does; by default the norm runs first.
    fn prenorm(&self) -> bool {
        false
    }
    /// Attends layer `l` itself in place of the pass's routing and plan, returning the
    /// attention output (1, H, 1, D): generation's step attends over its KV cache this way.
    /// `None` leaves the layer to the pass. Inference only.
    fn attend(&mut self, _l: usize, _inputs: &AttentionInputs, _own: &LayerAttention) -> Result<Option<Tensor>> {
        Ok(None)
    }
    /// Called after each layer (progress).
    fn done(&mut self, _l: usize) {}
}

/// No hook: the plain forward pass.
pub struct NoHook;
impl LayerHook for NoHook {}

/// A hook that only overrides plans: `f(layer, routing)`.
struct PlanOverride<F>(F);
impl<F: FnMut(usize, Option<&LayerRouting>) -> Result<Option<LayerPlan>>> LayerHook for PlanOverride<F> {
    fn plan(&mut self, l: usize, routing: Option<&LayerRouting>) -> Result<Option<LayerPlan>> {
        (self.0)(l, routing)
    }
}

/// How a pass ended: the residual stream after the last block (B*T, d_model), or where a hook
/// stopped it.
pub enum RunEnd {
    Finished { x: Tensor, routing: Vec<LayerRouting> },
    Stopped,
}

/// A non-finite logit is an error, never a printed result: it means the weights (finite but so
/// large that activations overflow) or the header's norm/RoPE values are broken. Checked by
/// each row's sum, which any NaN or infinity makes non-finite (and finite logits only past
/// 3.4e38 / vocab, ~1e33, broken in any case): a reduction along rows, one block a row on a
/// GPU. `abs().max_all()` reduced all rows x vocab values in one block: at 32K tokens on
/// Qwen2.5 (16 blocks of 2,048 x 151,936 logits) it took 1.38 s of a 3.7 s pass's kernels.
fn check_finite_logits(logits: &Tensor) -> Result<()> {
    let sums = logits.sum_keepdim(D::Minus1)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    if !sums.iter().all(|s| s.is_finite()) {
        return Err(non_finite_logits());
    }
    Ok(())
}

fn non_finite_logits() -> Error {
    Error::NonFinite("the model produced NaN or infinite logits: its weights overflow in f32 or its header's norm epsilon / RoPE base is broken".into())
}

impl Decoder {
    /// The route of every product with a stored weight (the blocks' projections, the LM head):
    /// `Products::Exact` (the default) or llama.cpp's 8-bit `Products::Int8`.
    pub fn set_products(&mut self, p: crate::model::qmatmul::Products) {
        for b in &mut self.blocks {
            for l in [&mut b.q, &mut b.k, &mut b.v, &mut b.o, &mut b.mlp.up_or_fc, &mut b.mlp.down] {
                l.set_products(p);
            }
            if let Some(g) = &mut b.mlp.gate {
                g.set_products(p);
            }
        }
        self.lm_head.set_products(p);
    }

    /// Runs one sequence from position 0. The mode decides the attention of every layer.
    pub fn forward(&self, ids: &[u32], opts: &ForwardOptions) -> Result<ForwardOutput> {
        self.forward_with(ids, opts, |_, _| Ok(None))
    }

    /// Like `forward`, but `plan_override(layer, routing)` may replace a layer's attention plan
    /// (tests run an explicitly masked dense reference through the real model this way; it is
    /// also called once per layer, in order, which progress reports use). Inference only.
    pub fn forward_with(
        &self,
        ids: &[u32],
        opts: &ForwardOptions,
        plan_override: impl FnMut(usize, Option<&LayerRouting>) -> Result<Option<LayerPlan>> + Send,
    ) -> Result<ForwardOutput> {
        let mut hook = PlanOverride(plan_override);
        let t = ids.len();
        if opts.logits_from >= t.max(1) {
            return Err(Error::Invalid("logits_from must be below the sequence length".into()));
        }
        if opts.differentiable {
            // The differentiable forward with a batch of one.
            let logits = self.forward_differentiable(&[ids], opts)?;
            return Ok(ForwardOutput { logits: logits.narrow(0, opts.logits_from, t - opts.logits_from)?, routing: Vec::new() });
        }
        let RunEnd::Finished { x, routing } = self.run(&[ids], opts, &mut hook)? else {
            return Err(Error::Invalid("the pass was stopped before the last layer".into()));
        };
        let logits = self.logits(&x.narrow(0, opts.logits_from, t - opts.logits_from)?)?;
        Ok(ForwardOutput { logits, routing })
    }

    /// The differentiable forward pass (dense or soft mode) of several sequences of one length
    /// as one batched graph of candle's ops (the composed form of `train::forward`). Each
    /// sequence is routed and balanced on its own, exactly as `forward` with `differentiable`
    /// set. Returns the logits (B*T, vocab), sequence after sequence.
    pub fn forward_differentiable(&self, seqs: &[&[u32]], opts: &ForwardOptions) -> Result<Tensor> {
        let opts = ForwardOptions { differentiable: true, ..*opts };
        let RunEnd::Finished { x, .. } = self.run(seqs, &opts, &mut NoHook)? else { unreachable!("no hook stops a differentiable pass") };
        let x = self.final_norm.forward(&x, true)?;
        self.softcap_logits(self.lm_head.forward(&x, None)?)
    }

    /// Final-logit soft-capping, cap * tanh(logit / cap) (Gemma 2), when the model has it.
    pub fn softcap_logits(&self, logits: Tensor) -> Result<Tensor> {
        Ok(match self.config.final_softcap {
            Some(cap) => ((logits / cap)?.tanh()? * cap)?,
            None => logits,
        })
    }

    /// Checks a batch of sequences and the options against the model.
    pub fn check(&self, seqs: &[&[u32]], opts: &ForwardOptions) -> Result<()> {
        let cfg = &self.config;
        let t = seqs.first().map_or(0, |s| s.len());
        if t == 0 {
            return Err(Error::Invalid("cannot run the model on zero tokens".into()));
        }
        if seqs.iter().any(|s| s.len() != t) {
            return Err(Error::Invalid("training needs one or more sequences of one positive length".into()));
        }
        if opts.start + t > cfg.context {
            return Err(Error::Invalid(format!("{} tokens exceed the model's context of {} tokens", opts.start + t, cfg.context)));
        }
        if let Some(&bad) = seqs.iter().flat_map(|s| s.iter()).find(|&&i| i as usize >= cfg.vocab) {
            return Err(Error::Invalid(format!("token id {bad} is outside the vocabulary ({})", cfg.vocab)));
        }
        match (opts.differentiable, opts.mode, opts.adapter) {
            (_, Mode::Dense, _) | (_, Mode::Soft, Some(_)) | (false, Mode::TopK(_), Some(_)) => Ok(()),
            (false, m, None) => Err(Error::Invalid(format!("mode {m} needs an adapter"))),
            (true, m, _) => Err(Error::Invalid(format!("mode {m} is not trainable: train with soft gates and an adapter"))),
        }
    }

    /// The layer loop. Inference (`!opts.differentiable`) runs one sequence through the fused
    /// kernels and routes on the host; training runs a batch through ops with a backward pass
    /// and routes with differentiable Sinkhorn. `hook` sees each layer (inference only).
    /// On the CPU the pass runs on a worker of the thread pool that runs its kernels: from
    /// outside the pool, the calling thread ran the serial parts while the idle workers spun,
    /// more threads than cores (measured: a 1024-token SmolLM2 forward 17% faster, a decode step
    /// 2x). On a GPU it stays on the calling thread, where its CUDA context is.
    pub fn run(&self, seqs: &[&[u32]], opts: &ForwardOptions, hook: &mut (dyn LayerHook + Send)) -> Result<RunEnd> {
        if self.device.is_cpu() {
            return rayon::scope(|_| self.run_here(seqs, opts, hook));
        }
        self.run_here(seqs, opts, hook)
    }

    fn run_here(&self, seqs: &[&[u32]], opts: &ForwardOptions, hook: &mut (dyn LayerHook + Send)) -> Result<RunEnd> {
        self.check(seqs, opts)?;
        self.passes.0.fetch_add(1, Ordering::Relaxed);
        let (b, t) = (seqs.len(), seqs[0].len());
        let train = opts.differentiable;
        let dev = &self.device;
        let mut clock = StageClock { times: opts.stage_times.filter(|_| !train), dev, last: std::time::Instant::now() };
        if clock.times.is_some() {
            dev.synchronize()?;
            clock.last = std::time::Instant::now();
        }
        let (mut x, pass) = match opts.device_step {
            Some(step) if b == 1 && t == 1 && !train => (self.embed_step(step)?, Pass::at_step(&self.config, step.rope_rows()?)),
            Some(_) => return Err(Error::Invalid("a device step runs one token, for inference".into())),
            None => (self.embed_at(seqs, opts.start)?, Pass::at(&self.config, b, t, opts.start, train, dev)?),
        };
        clock.mark(|s| &mut s.embed_s)?;
        // The fast CPU kernels apply the causal mask themselves; other paths add it to the
        // scores (made when a layer first needs it: a hook that attends itself needs none).
        // Past `attention::CHUNK_SCORES` inference attends in blocks of query rows, each with
        // its own rows' mask: the whole T x T (4 GB at 32K tokens) would go unused.
        let needs_causal = train || (!dev.is_cpu() && attention::query_rows(self.config.n_heads, t) >= t);
        let mut causal: Option<Tensor> = None;
        let mut routing = Vec::new();
        for (l, blk) in self.blocks.iter().enumerate() {
            if opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(Error::Cancelled);
            }
            // The adapter, where it routes this layer (`RouterLayers`).
            let routed = opts.adapter.filter(|a| a.config.router_layers.routes(self.config.is_sliding(l)));
            // A GPU step's row: the pre-norm inside the Q/K/V product and the routing kernel.
            let (h, h_norm) = if !train && hook.prenorm() && blk.prenorm_in_kernels(&x) {
                (x.clone(), blk.attn_norm.clone())
            } else {
                (blk.attention_norm(&x, &pass)?, None)
            };
            if !train {
                hook.normed(l, &h, h_norm.as_ref())?;
            }
            // A top-k pass whose routing nobody reads routes on a CUDA device (after the Q/K/V
            // products, on the same stream): only the masks come back, when the layer attends.
            let device_route = match (routed, opts.mode) {
                (Some(a), Mode::TopK(k)) if opts.routing_unused && !train && t > 1 && h_norm.is_none() && dev.is_cuda() && !mask::all_local(t, a.config.window) => Some((a, k.of(a.config.groups)?, h.clone())),
                _ => None,
            };
            // Otherwise a sequence's routing scores come before its Q/K/V products are queued:
            // copying them to the host waits for the device, and with the products queued
            // after it the GPU computes them while the host balances the scores (Sinkhorn).
            let early = match opts.adapter {
                Some(a) if !train && t > 1 && h_norm.is_none() && device_route.is_none() => Some(a.scores(l, &h)?),
                _ => None,
            };
            let inp = blk.attention_heads_with(h, h_norm, &pass)?;
            clock.mark(|s| &mut s.qkv_s)?;
            let device_masks = match device_route {
                Some((a, k, h)) => attention::device_topk_masks(a, l, &h, k)?.map(|m| (a, m)),
                None => None,
            };
            // A hook may attend the layer itself (generation's step, over its cache).
            let hooked = if train { None } else { hook.attend(l, &inp, &blk.attn)? };
            if hooked.is_none() && needs_causal && causal.is_none() {
                causal = Some(mask::causal_bias(t, dev)?);
                clock.mark(|s| &mut s.plan_s)?;
            }
            let o = if let Some(o) = hooked {
                o
            } else if train {
                let plan = match routed {
                    Some(a) if opts.mode == Mode::Soft && !mask::all_local(t, a.config.window) => {
                        let g = a.route_tensor(l, &inp.normed()?, b, opts.sinkhorn_grad, opts.balance)?;
                        if let Some(m) = opts.memberships {
                            m.lock().expect("memberships collector").push(g.clone());
                        }
                        match opts.straight_through {
                            Some(k) => attention::soft::straight_through_plan(&g, &a.config, k)?,
                            None => attention::soft::soft_plan(&g, &a.config)?,
                        }
                    }
                    _ => LayerPlan::Dense,
                };
                attention::attend_batch(&inp.q, &inp.k, &inp.v, &plan, &blk.attn, causal.as_ref().expect("training has the causal mask"))?
            } else {
                let layer_routing = match (opts.adapter, early) {
                    _ if device_masks.is_some() => None,
                    (Some(a), Some((vecs, scores))) => Some(a.route_scores(l, vecs, scores, opts.record_routing)?),
                    (Some(a), None) => Some(a.route(l, &inp.normed()?, opts.record_routing)?),
                    (None, _) => None,
                };
                clock.mark(|s| &mut s.route_s)?;
                if hook.inputs(l, &inp, layer_routing.as_ref()).is_break() {
                    return Ok(RunEnd::Stopped);
                }
                let plan = match hook.plan(l, layer_routing.as_ref())? {
                    Some(p) => p,
                    // A layer the adapter does not route attends densely (within its own window).
                    None if routed.is_none() && opts.adapter.is_some() => LayerPlan::Dense,
                    None if device_masks.is_some() => {
                        let (a, m) = device_masks.as_ref().expect("device masks");
                        LayerPlan::TopK { masks: a.masks_on_host(l, m)?, window: a.config.window, sink: a.config.sink }
                    }
                    None => attention::plan(opts.mode, opts.adapter.map(|a| &a.config), layer_routing.as_ref(), t, dev)?,
                };
                let (q, k, v) = (inp.q.squeeze(0)?, inp.k.squeeze(0)?, inp.v.squeeze(0)?);
                routing.extend(layer_routing);
                clock.mark(|s| &mut s.plan_s)?;
                let o = attention::attend(&q, &k, &v, &plan, &blk.attn, causal.as_ref())?.unsqueeze(0)?;
                clock.mark(|s| &mut s.attend_s)?;
                o
            };
            x = blk.finish(&x, &o, &pass)?;
            clock.mark(|s| &mut s.finish_s)?;
            hook.done(l);
        }
        Ok(RunEnd::Finished { x, routing })
    }

    /// The residual stream entering the first block ((B*T, d_model)) for sequences of one
    /// length whose first token sits at position `start` (generation embeds one token at a time).
    pub fn embed_at(&self, seqs: &[&[u32]], start: usize) -> Result<Tensor> {
        let (b, t) = (seqs.len(), seqs.first().map_or(0, |s| s.len()));
        let dm = self.embed.dims2()?.1;
        let mut x = self.embed.rows(&seqs.concat(), &self.device)?;
        if let Some(s) = self.config.embed_scale {
            x = (x * s)?;
        }
        Ok(match &self.pos_embed {
            Some(pe) => x.reshape((b, t, dm))?.broadcast_add(&pe.narrow(0, start, t)?)?.reshape((b * t, dm))?,
            None => x,
        })
    }

    /// `embed_at` for a GPU generation step: the token and its position read on the device.
    pub fn embed_step(&self, step: &DeviceStep) -> Result<Tensor> {
        let mut x = match &self.embed {
            Weight::Dense(e) => e.index_select(&step.id()?, 0)?.to_dtype(DType::F32)?,
            // Stored weights live on the CPU, where the step's id can be read.
            stored => stored.rows(&step.id()?.to_vec1::<u32>()?, &self.device)?,
        };
        if let Some(s) = self.config.embed_scale {
            x = (x * s)?;
        }
        Ok(match &self.pos_embed {
            Some(pe) => (x + pe.index_select(&step.pos()?, 0)?)?,
            None => x,
        })
    }

    /// Logits ((rows, vocab)) of the last block's output `x` ((rows, d_model)), checked finite.
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let logits = self.logits_unchecked(x)?;
        check_finite_logits(&logits)?;
        Ok(logits)
    }

    /// The logits of one row copied to the host, checked finite there: a decode step needs
    /// them on the host anyway, and a check on the device would wait for the GPU a second time.
    pub fn host_logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        Self::checked_on_host(&self.logits_unchecked(x)?)
    }

    /// Logits (rows, vocab) copied to the host as one vector, checked finite there.
    pub fn checked_on_host(logits: &Tensor) -> Result<Vec<f32>> {
        let v = logits.flatten_all()?.to_vec1::<f32>()?;
        if !v.iter().all(|l| l.is_finite()) {
            return Err(non_finite_logits());
        }
        Ok(v)
    }

    /// The logits of `x` ((rows, d_model)), not checked: a captured decode step computes them
    /// into its output buffer and the host checks its copy (`checked_on_host`).
    pub fn logits_unchecked(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.final_norm.forward(x, false)?;
        self.softcap_logits(self.lm_head.forward(&h, None)?)
    }

    /// Mean negative log-likelihood of `targets[i]` under `logits[i]`, per position.
    pub fn nll(logits: &Tensor, targets: &[u32]) -> Result<Vec<f32>> {
        let lsm = candle_nn::ops::log_softmax(logits, D::Minus1)?;
        let idx = Tensor::from_slice(targets, (targets.len(), 1), logits.device())?;
        let lp = lsm.gather(&idx, 1)?.squeeze(1)?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        Ok(lp.into_iter().map(|x| -x).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row-sum check refuses a NaN, +inf or -inf anywhere (one value among 151,936 of
    /// its row, in any row) and passes finite logits, large ones included.
    #[test]
    fn non_finite_logits_are_refused_wherever_they_are() {
        let (rows, vocab) = (3, 151_936);
        let ok = Tensor::ones((rows, vocab), DType::F32, &Device::Cpu).unwrap();
        assert!(check_finite_logits(&ok).is_ok());
        assert!(check_finite_logits(&(ok.clone() * 1e30).unwrap()).is_ok());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for (r, c) in [(0, 0), (1, 77_777), (2, vocab - 1)] {
                let mut v = vec![1f32; rows * vocab];
                v[r * vocab + c] = bad;
                let t = Tensor::from_vec(v, (rows, vocab), &Device::Cpu).unwrap();
                assert!(matches!(check_finite_logits(&t), Err(Error::NonFinite(_))), "{bad} at ({r}, {c}) passed");
            }
        }
    }
}
