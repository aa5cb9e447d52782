//! The one decoder every family loads into: pre-norm transformer blocks whose attention is
//! pluggable (dense, Focus soft, Focus hard top-k, or an explicit mask) and which report each
//! layer's routing when a Focus adapter is attached.

use super::config::{MlpKind, ModelConfig, NormKind, Positions};
use crate::adapter::Adapter;
use crate::attention::{self, LayerPlan, Mode};
use crate::error::{Error, Result};
use crate::router::LayerRouting;
use candle_core::{DType, Device, Tensor, D};
use std::sync::atomic::{AtomicBool, Ordering};

/// y = x W^T + b, with W stored as (out, in) like PyTorch's nn.Linear.
#[derive(Debug, Clone)]
pub struct Linear {
    pub w: Tensor,
    pub b: Option<Tensor>,
}

impl Linear {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.matmul(&self.w.t()?)?;
        Ok(match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Norm {
    pub kind: NormKind,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub eps: f64,
}

impl Norm {
    /// `differentiable`: the composed version with a backward pass (the fused one has none).
    pub fn forward(&self, x: &Tensor, differentiable: bool) -> Result<Tensor> {
        let eps = self.eps as f32;
        Ok(match self.kind {
            NormKind::Rms if differentiable => candle_nn::ops::rms_norm_slow(x, &self.weight, eps)?,
            NormKind::Rms => candle_nn::ops::rms_norm(x, &self.weight, eps)?,
            NormKind::Layer => {
                let zeros;
                let bias = match &self.bias {
                    Some(b) => b,
                    None => {
                        zeros = self.weight.zeros_like()?;
                        &zeros
                    }
                };
                if differentiable {
                    candle_nn::ops::layer_norm_slow(x, &self.weight, bias, eps)?
                } else {
                    candle_nn::ops::layer_norm(x, &self.weight, bias, eps)?
                }
            }
        })
    }
}

#[derive(Debug, Clone)]
pub struct Mlp {
    pub kind: MlpKind,
    /// SwiGLU: gate; GELU: fc.
    pub up_or_fc: Linear,
    pub gate: Option<Linear>,
    pub down: Linear,
}

impl Mlp {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = match self.kind {
            MlpKind::SwiGlu => {
                let gate = self.gate.as_ref().expect("SwiGLU MLP has a gate").forward(x)?;
                (candle_nn::ops::silu(&gate)? * self.up_or_fc.forward(x)?)?
            }
            MlpKind::GeluTanh => self.up_or_fc.forward(x)?.gelu()?,
        };
        self.down.forward(&h)
    }
}

#[derive(Debug, Clone)]
pub struct Block {
    pub attn_norm: Norm,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub mlp_norm: Norm,
    pub mlp: Mlp,
}

pub struct Decoder {
    pub config: ModelConfig,
    pub embed: Tensor,
    pub pos_embed: Option<Tensor>,
    pub blocks: Vec<Block>,
    pub final_norm: Norm,
    /// (vocab, d_model); the embedding itself when tied.
    pub lm_head: Tensor,
    pub device: Device,
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
    /// Checked between layers; set it to abort with `Error::Cancelled`.
    pub cancel: Option<&'a AtomicBool>,
    /// Use only ops with a backward pass and route with differentiable Sinkhorn, so that a loss
    /// on the logits gives gradients to the router parameters (dense and soft modes).
    pub differentiable: bool,
    /// How the differentiable path back-propagates through Sinkhorn.
    pub sinkhorn_grad: crate::router::SinkhornGrad,
    /// Training only: run the hard top-k mask of this k, with the log gate's gradient
    /// (`attention::straight_through_plan`), instead of the soft gate.
    pub straight_through: Option<usize>,
}

impl<'a> ForwardOptions<'a> {
    pub fn new(mode: Mode, adapter: Option<&'a Adapter>) -> Self {
        ForwardOptions { mode, adapter, record_routing: false, logits_from: 0, cancel: None, differentiable: false, sinkhorn_grad: Default::default(), straight_through: None }
    }
}

pub struct ForwardOutput {
    /// (T - logits_from, vocab)
    pub logits: Tensor,
    /// One entry per layer when routing was computed (any mode with an adapter).
    pub routing: Vec<LayerRouting>,
}

impl Decoder {
    /// Runs one sequence from position 0. The mode decides the attention of every layer.
    pub fn forward(&self, ids: &[u32], opts: &ForwardOptions) -> Result<ForwardOutput> {
        self.forward_with(ids, opts, |_, _| Ok(None))
    }

    /// Like `forward`, but `plan_override(layer, routing)` may replace a layer's attention plan
    /// (used by tests to run an explicitly masked dense reference through the real model).
    pub fn forward_with(
        &self,
        ids: &[u32],
        opts: &ForwardOptions,
        plan_override: impl Fn(usize, Option<&LayerRouting>) -> Result<Option<LayerPlan>>,
    ) -> Result<ForwardOutput> {
        let cfg = &self.config;
        let t = ids.len();
        if t == 0 {
            return Err(Error::Invalid("cannot run the model on zero tokens".into()));
        }
        if t > cfg.context {
            return Err(Error::Invalid(format!(
                "{t} tokens exceed the model's context of {} tokens",
                cfg.context
            )));
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= cfg.vocab) {
            return Err(Error::Invalid(format!("token id {bad} is outside the vocabulary ({})", cfg.vocab)));
        }
        if opts.mode != Mode::Dense && opts.adapter.is_none() {
            return Err(Error::Invalid(format!("mode {} needs an adapter", opts.mode)));
        }
        if opts.logits_from >= t {
            return Err(Error::Invalid("logits_from must be below the sequence length".into()));
        }
        if opts.differentiable {
            // One differentiable path: the training forward with a batch of one.
            let logits = self.forward_train(&[ids], opts)?;
            return Ok(ForwardOutput { logits: logits.narrow(0, opts.logits_from, t - opts.logits_from)?, routing: Vec::new() });
        }
        let dev = &self.device;
        let ids_t = Tensor::from_slice(ids, t, dev)?;
        let mut x = self.embed.index_select(&ids_t, 0)?;
        if let Some(pe) = &self.pos_embed {
            x = x.add(&pe.narrow(0, 0, t)?)?;
        }
        let rope = match cfg.positions {
            Positions::Rope { theta, .. } => Some(rope_tables(t, cfg.head_dim, theta, dev)?),
            Positions::Learned => None,
        };
        // The fast CPU kernels apply the causal mask themselves; other paths add it to the scores.
        let causal = if dev.is_cpu() { None } else { Some(attention::causal_bias(t, dev)?) };
        let mut routing = Vec::new();
        for (l, b) in self.blocks.iter().enumerate() {
            if opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(Error::Cancelled);
            }
            let h = b.attn_norm.forward(&x, false)?;
            let heads = |lin: &Linear, n: usize| -> Result<Tensor> {
                Ok(lin.forward(&h)?.reshape((t, n, cfg.head_dim))?.transpose(0, 1)?.contiguous()?)
            };
            let mut q = heads(&b.q, cfg.n_heads)?;
            let mut k = heads(&b.k, cfg.n_kv_heads)?;
            let v = heads(&b.v, cfg.n_kv_heads)?;
            if let (Some((cos, sin)), Positions::Rope { interleaved, .. }) = (&rope, cfg.positions) {
                let rot = |x: &Tensor| -> Result<Tensor> {
                    let x4 = x.unsqueeze(0)?;
                    use candle_nn::rotary_emb as re;
                    let y = if interleaved { re::rope_i(&x4, cos, sin)? } else { re::rope(&x4, cos, sin)? };
                    Ok(y.squeeze(0)?)
                };
                q = rot(&q)?;
                k = rot(&k)?;
            }
            let layer_routing = match opts.adapter {
                Some(a) => Some(a.route(l, &h, opts.record_routing)?),
                None => None,
            };
            let plan = match plan_override(l, layer_routing.as_ref())? {
                Some(p) => p,
                None => attention::plan(opts.mode, opts.adapter.map(|a| &a.config), layer_routing.as_ref(), t, dev)?,
            };
            let o = attention::attend(&q, &k, &v, &plan, causal.as_ref())?;
            let o = o.transpose(0, 1)?.reshape((t, cfg.n_heads * cfg.head_dim))?;
            x = (x + b.o.forward(&o)?)?;
            x = (&x + b.mlp.forward(&b.mlp_norm.forward(&x, false)?)?)?;
            if let Some(r) = layer_routing {
                routing.push(r);
            }
        }
        let x = self.final_norm.forward(&x.narrow(0, opts.logits_from, t - opts.logits_from)?, false)?;
        let logits = x.matmul(&self.lm_head.t()?)?;
        Ok(ForwardOutput { logits, routing })
    }

    /// The differentiable forward pass (dense or soft mode) of several sequences of one length
    /// as one batched graph, for training: one backward pass per step instead of one per
    /// sequence, and B times fewer (larger) kernel launches on a GPU. Each sequence is routed
    /// and balanced on its own, exactly as `forward` with `differentiable` set (tested).
    /// Returns the logits (B*T, vocab), sequence after sequence.
    pub fn forward_train(&self, seqs: &[&[u32]], opts: &ForwardOptions) -> Result<Tensor> {
        let cfg = &self.config;
        let (b, t) = (seqs.len(), seqs.first().map_or(0, |s| s.len()));
        if b == 0 || t == 0 || seqs.iter().any(|s| s.len() != t) {
            return Err(Error::Invalid("training needs one or more sequences of one positive length".into()));
        }
        if t > cfg.context {
            return Err(Error::Invalid(format!("{t} tokens exceed the model's context of {} tokens", cfg.context)));
        }
        let ids: Vec<u32> = seqs.concat();
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= cfg.vocab) {
            return Err(Error::Invalid(format!("token id {bad} is outside the vocabulary ({})", cfg.vocab)));
        }
        let adapter = match (opts.mode, opts.adapter) {
            (Mode::Dense, a) => a,
            (Mode::Soft, Some(a)) => Some(a),
            (m, _) => return Err(Error::Invalid(format!("mode {m} is not trainable: train with soft gates and an adapter"))),
        };
        let dev = &self.device;
        let (dm, hd) = (self.embed.dim(1)?, cfg.head_dim);
        let mut x = self.embed.index_select(&Tensor::from_vec(ids, b * t, dev)?, 0)?;
        if let Some(pe) = &self.pos_embed {
            x = x.reshape((b, t, dm))?.broadcast_add(&pe.narrow(0, 0, t)?)?.reshape((b * t, dm))?;
        }
        let rope = match cfg.positions {
            Positions::Rope { theta, .. } => Some(rope_tables(t, hd, theta, dev)?),
            Positions::Learned => None,
        };
        let causal = attention::causal_bias(t, dev)?;
        for (l, blk) in self.blocks.iter().enumerate() {
            let h = blk.attn_norm.forward(&x, true)?;
            let heads = |lin: &Linear, n: usize| -> Result<Tensor> {
                Ok(lin.forward(&h)?.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous()?)
            };
            let mut q = heads(&blk.q, cfg.n_heads)?;
            let mut k = heads(&blk.k, cfg.n_kv_heads)?;
            let v = heads(&blk.v, cfg.n_kv_heads)?;
            if let (Some((cos, sin)), Positions::Rope { interleaved, .. }) = (&rope, cfg.positions) {
                use candle_nn::rotary_emb as re;
                let rot = |x: &Tensor| if interleaved { re::rope_i_slow(x, cos, sin) } else { re::rope_slow(x, cos, sin) };
                q = rot(&q)?;
                k = rot(&k)?;
            }
            let plan = match adapter {
                Some(a) if opts.mode == Mode::Soft && !attention::all_local(t, a.config.window) => {
                    let g = a.route_tensor(l, &h, b, opts.sinkhorn_grad)?;
                    match opts.straight_through {
                        Some(k) => attention::straight_through_plan(&g, &a.config, k)?,
                        None => attention::soft_plan(&g, &a.config)?,
                    }
                }
                _ => LayerPlan::Dense,
            };
            let o = attention::attend_batch(&q, &k, &v, &plan, &causal)?;
            let o = o.transpose(1, 2)?.reshape((b * t, cfg.n_heads * hd))?;
            x = (x + blk.o.forward(&o)?)?;
            x = (&x + blk.mlp.forward(&blk.mlp_norm.forward(&x, true)?)?)?;
        }
        let x = self.final_norm.forward(&x, true)?;
        Ok(x.matmul(&self.lm_head.t()?)?)
    }

    /// Mean negative log-likelihood of `targets[i]` under `logits[i]`, per position.
    pub fn nll(logits: &Tensor, targets: &[u32]) -> Result<Vec<f32>> {
        let lsm = candle_nn::ops::log_softmax(logits, D::Minus1)?;
        let idx = Tensor::from_slice(targets, (targets.len(), 1), logits.device())?;
        let lp = lsm.gather(&idx, 1)?.squeeze(1)?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        Ok(lp.into_iter().map(|x| -x).collect())
    }
}

/// cos/sin tables (T, head_dim/2) for rotary embeddings.
pub fn rope_tables(t: usize, head_dim: usize, theta: f64, dev: &Device) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half).map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32).collect();
    let mut ang = Vec::with_capacity(t * half);
    for p in 0..t {
        for f in &inv {
            ang.push(p as f32 * f);
        }
    }
    let ang = Tensor::from_vec(ang, (t, half), dev)?;
    Ok((ang.cos()?, ang.sin()?))
}
