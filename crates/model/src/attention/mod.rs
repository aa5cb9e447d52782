//! Attention for one layer, in every mode Focus needs. `plan` resolves a layer's mode, adapter
//! and routing into a `LayerPlan`; `attend` runs it for one sequence (inference) and
//! `attend_batch` for a batch with a backward pass (training).
//!
//! Dispatch order in `attend` (the first that applies runs):
//! 1. `TopK` on CUDA: the CUDA Focus kernel (`cuda::host`), for the shapes it takes;
//! 2. `TopK` otherwise: the exact CPU Focus kernel (`cpu::focus`), which never computes a
//!    pair outside the mask;
//! 3. `Dense` on CUDA: the CUDA flash kernel, for the shapes it takes;
//! 4. `Dense` on the CPU: the tiled CPU flash kernel (`cpu::dense`);
//! 5. everything else (soft gates, an explicit `Masked` reference, dense on other devices):
//!    candle matrix products with the gate or mask applied to the scores, and the fused causal
//!    softmax (`cpu::simd`) on the CPU.
//!
//! A layer's own attention (`LayerAttention`) composes with the plan: a sliding window shorter
//! than the sequence removes the pairs i - j >= W in every path (the CPU kernels skip them, the
//! others add it to the mask; the CUDA kernels do not take it and fall through), and
//! soft-capping (Gemma 2) runs the candle path, capping the scaled logits before any gate or
//! mask.
//!
//! `soft` builds the soft-gate plans, `reference` holds the independent references the kernels
//! are tested against; the mask rule itself is `focus::mask`. `decode` is the attention of one
//! new token over a layer's KV cache (`kv_cache`), with its CPU and CUDA kernels beside the
//! prefill ones; `decode_keys` what such a step is (mode, kept keys, bytes read), below both. Training's fused attention op is `train::attention`.

pub mod cpu;
pub mod cuda;
pub mod decode;
pub mod decode_keys;
pub mod kv_cache;
pub mod reference;
pub mod soft;

use crate::error::{Error, Result};
use crate::focus::adapter::AdapterConfig;
use crate::focus::mask::{self, all_local, TopK};
use crate::focus::router::LayerRouting;
use cpu::simd::CausalSoftmax;
use cpu::Shape;
use candle_core::{Device, Tensor};

/// What one layer's own attention does before any Focus mask, as the block runs it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerAttention {
    /// The RoPE base of this layer (`None`: learned positions, no rotation).
    pub rope_theta: Option<f64>,
    /// Sliding window W (keys i - j < W); `None` for a global layer.
    pub window: Option<usize>,
    /// Logits become cap * tanh(logit / cap) before the softmax (Gemma 2).
    pub softcap: Option<f64>,
    /// The score scale when it is not 1/sqrt(head_dim) (Gemma 2's query_pre_attn_scalar^-0.5).
    pub scale: Option<f64>,
}

impl LayerAttention {
    /// The sliding window when it removes pairs from a sequence of `t` tokens (W < t).
    pub fn span(&self, t: usize) -> Option<usize> {
        self.window.filter(|&w| w < t)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Dense,
    /// Soft gates on distant pairs (training, and the "soft" inference mode).
    Soft,
    /// Hard top-k group membership: distant pairs attend only when their top-k sets intersect.
    TopK(TopK),
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Dense => f.write_str("dense"),
            Mode::Soft => f.write_str("soft"),
            Mode::TopK(k) => write!(f, "topk({k})"),
        }
    }
}

/// The attention mode as a user picks it, without top-k's k: the CLI's `--mode`, the GUI's
/// mode buttons and its sessions all hold this one type, and `with` makes the `Mode` once k is
/// checked against an adapter's K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ModeKind {
    Dense,
    Soft,
    TopK,
}

impl ModeKind {
    pub const ALL: [ModeKind; 3] = [ModeKind::Dense, ModeKind::Soft, ModeKind::TopK];

    /// The name on the command line and in exports ("dense", "soft", "topk").
    pub fn name(self) -> &'static str {
        match self {
            ModeKind::Dense => "dense",
            ModeKind::Soft => "soft",
            ModeKind::TopK => "topk",
        }
    }

    /// The mode, with `k` for top-k (ignored by the others).
    pub fn with(self, k: TopK) -> Mode {
        match self {
            ModeKind::Dense => Mode::Dense,
            ModeKind::Soft => Mode::Soft,
            ModeKind::TopK => Mode::TopK(k),
        }
    }
}

impl std::str::FromStr for ModeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<ModeKind> {
        ModeKind::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| Error::Invalid(format!("mode {s:?}: expected dense, soft or topk")))
    }
}

impl Mode {
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
    pub fn kind(&self) -> ModeKind {
        match self {
            Mode::Dense => ModeKind::Dense,
            Mode::Soft => ModeKind::Soft,
            Mode::TopK(_) => ModeKind::TopK,
        }
    }
    pub fn k(&self) -> Option<usize> {
        match self {
            Mode::TopK(k) => Some(k.k()),
            _ => None,
        }
    }
}

/// How one layer attends, resolved from the mode, the adapter and the routing.
pub enum LayerPlan {
    Dense,
    /// Scores are multiplied by `factor` (T x T; paper gate) or `bias` is added (log gate).
    SoftFactor(Tensor),
    SoftBias(Tensor),
    /// Exact hard top-k: per-token group bitmasks, the local window and the sink [ours].
    TopK { masks: Vec<u64>, window: usize, sink: usize },
    /// Dense attention with an explicit additive mask (0 kept, -inf pruned), T x T.
    Masked(Tensor),
}

pub fn plan(
    mode: Mode,
    cfg: Option<&AdapterConfig>,
    routing: Option<&LayerRouting>,
    t: usize,
    dev: &Device,
) -> Result<LayerPlan> {
    let (cfg, routing) = match (mode, cfg, routing) {
        (Mode::Dense, _, _) => return Ok(LayerPlan::Dense),
        (_, Some(c), Some(r)) => (c, r),
        _ => return Err(Error::Invalid(format!("mode {mode} needs an adapter"))),
    };
    // When the mask keeps every causal pair the dense kernel computes exactly the same function,
    // so short inputs give the base model's logits bit for bit.
    if all_local(t, cfg.window) {
        return Ok(LayerPlan::Dense);
    }
    match mode {
        Mode::Dense => unreachable!(),
        Mode::Soft => soft::soft_plan(&Tensor::from_slice(&routing.memberships, (t, cfg.groups), dev)?, cfg),
        Mode::TopK(k) => Ok(LayerPlan::TopK { masks: routing.topk_masks(k.of(cfg.groups)?), window: cfg.window, sink: cfg.sink }),
    }
}

/// Inference attention of one sequence: q (H, T, D); k, v (Hkv, T, D); returns (H, T, D).
/// `own` is the layer's own attention (sliding window, soft-cap). `causal` is the additive
/// causal mask (`focus::mask::causal_bias`), needed off the CPU. Training uses `attend_batch`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, plan: &LayerPlan, own: &LayerAttention, causal: Option<&Tensor>) -> Result<Tensor> {
    let (h, t, d) = q.dims3()?;
    let hkv = k.dim(0)?;
    let span = own.span(t);
    // Soft-capping acts on each logit before the mask: the hard mask becomes an explicit one
    // for the candle path below.
    let capped_topk;
    let plan = match (plan, own.softcap) {
        (LayerPlan::TopK { masks, window, sink }, Some(_)) => {
            capped_topk = LayerPlan::Masked(mask::topk_mask_bias(masks, *window, *sink, q.device())?);
            &capped_topk
        }
        _ => plan,
    };
    if let LayerPlan::TopK { masks, window, sink } = plan {
        // On CUDA the top-k kernel runs on the device (the CPU kernel below would round-trip
        // q, k, v through the host); shapes it does not take fall through to the CPU kernel.
        #[cfg(feature = "cuda")]
        if let (Device::Cuda(dev), None) = (q.device(), span) {
            if let Some(out) = crate::attention::cuda::host::focus_attention_if_supported(q, k, v, masks, *window, *sink, dev)? {
                return Ok(out);
            }
        }
        let lay = Shape { heads: h, kv_heads: hkv, t, d };
        let out = cpu::focus::focus_attention_within(
            &q.flatten_all()?.to_vec1::<f32>()?,
            &k.flatten_all()?.to_vec1::<f32>()?,
            &v.flatten_all()?.to_vec1::<f32>()?,
            lay,
            masks,
            *window,
            *sink,
            span,
        );
        return Ok(Tensor::from_vec(out, (h, t, d), q.device())?);
    }
    // Dense: our flash kernels on either device (candle's matmul + softmax below materialises
    // the T x T scores; on the H200 our f32 kernel is 2.9x faster at 4K tokens).
    #[cfg(feature = "cuda")]
    if let (LayerPlan::Dense, Device::Cuda(_), None, None) = (plan, q.device(), span, own.softcap) {
        if let Some(out) = crate::attention::cuda::host::dense_attention_if_supported(q, k, v)? {
            return Ok(out);
        }
    }
    let fast_cpu = q.device().is_cpu();
    if fast_cpu && matches!(plan, LayerPlan::Dense) && own.softcap.is_none() {
        let out = cpu::dense::causal_attention_within(
            &q.flatten_all()?.to_vec1::<f32>()?,
            &k.flatten_all()?.to_vec1::<f32>()?,
            &v.flatten_all()?.to_vec1::<f32>()?,
            Shape { heads: h, kv_heads: hkv, t, d },
            span,
        );
        return Ok(Tensor::from_vec(out, (h, t, d), q.device())?);
    }
    // GQA without copying K/V: the query heads sharing a KV head become one taller matrix.
    let rep = h / hkv;
    let qg = q.reshape((hkv, rep * t, d))?;
    let scale = 1.0 / (d as f64).sqrt();
    let scores = qg.matmul(&k.t()?)?.reshape((h, t, t))?;
    let own_bias = match span {
        Some(w) => Some(mask::sliding_bias(t, w, q.device())?),
        None => None,
    };
    // Scaled (and capped) scores with the plan's gate or mask and the sliding window; `None`
    // means plain scaled scores.
    let adjusted = match (plan, own.softcap, &own_bias) {
        (LayerPlan::Dense, None, None) => None,
        _ => {
            let s = cap(&(&scores * scale)?, own.softcap)?;
            let s = match plan {
                LayerPlan::Dense => s,
                LayerPlan::SoftFactor(f) => s.broadcast_mul(f)?,
                LayerPlan::SoftBias(b) | LayerPlan::Masked(b) => s.broadcast_add(b)?,
                LayerPlan::TopK { .. } => unreachable!(),
            };
            Some(match &own_bias {
                Some(b) => s.broadcast_add(b)?,
                None => s,
            })
        }
    };
    let p = if fast_cpu {
        // Fused scale + causal mask + softmax over the causal triangle only.
        let (x, s) = match adjusted {
            Some(a) => (a, 1.0),
            None => (scores, scale as f32),
        };
        x.contiguous()?.apply_op1_no_bwd(&CausalSoftmax { scale: s })?
    } else {
        let x = match adjusted {
            Some(a) => a,
            None => (scores * scale)?,
        };
        let causal = causal.ok_or_else(|| Error::Invalid("this attention path needs the causal mask".into()))?;
        candle_nn::ops::softmax_last_dim(&x.broadcast_add(causal)?)?
    };
    Ok(p.reshape((hkv, rep * t, t))?.matmul(v)?.reshape((h, t, d))?)
}

/// Soft-capping of scaled logits: cap * tanh(s / cap) (differentiable).
fn cap(s: &Tensor, softcap: Option<f64>) -> Result<Tensor> {
    Ok(match softcap {
        Some(c) => ((s / c)?.tanh()? * c)?,
        None => s.clone(),
    })
}

/// Training attention of a batch of sequences: q (B, H, T, D), k and v (B, Hkv, T, D), a dense
/// or soft plan with one T x T gate per sequence (B x T x T), the causal mask (T x T). Only ops
/// with a backward pass (explicit scores, the composed softmax), so that gradients reach the
/// routers through the frozen model.
pub fn attend_batch(q: &Tensor, k: &Tensor, v: &Tensor, plan: &LayerPlan, own: &LayerAttention, causal: &Tensor) -> Result<Tensor> {
    let (b, h, t, d) = q.dims4()?;
    let hkv = k.dim(1)?;
    let rep = h / hkv;
    let scores = (q.reshape((b, hkv, rep * t, d))?.matmul(&k.t()?)?.reshape((b, h, t, t))? * (1.0 / (d as f64).sqrt()))?;
    let scores = cap(&scores, own.softcap)?;
    let x = match plan {
        LayerPlan::Dense => scores,
        LayerPlan::SoftFactor(f) => scores.broadcast_mul(&f.unsqueeze(1)?)?,
        LayerPlan::SoftBias(bias) => scores.broadcast_add(&bias.unsqueeze(1)?)?,
        LayerPlan::TopK { .. } | LayerPlan::Masked(_) => {
            return Err(Error::Invalid("batched attention takes dense or soft plans (training)".into()))
        }
    };
    // The sliding window joins the causal mask after the gate: a gate times -inf would give the
    // gate a NaN gradient.
    let mask = match own.span(t) {
        Some(w) => causal.broadcast_add(&mask::sliding_bias(t, w, q.device())?)?,
        None => causal.clone(),
    };
    let p = candle_nn::ops::softmax(&x.broadcast_add(&mask)?, candle_core::D::Minus1)?;
    Ok(p.reshape((b, hkv, rep * t, t))?.matmul(v)?.reshape((b, h, t, d))?)
}
