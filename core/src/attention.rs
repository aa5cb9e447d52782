//! Attention for one layer, in every mode Focus needs. Dense and soft attention are candle
//! matrix products (soft adds the router's gate to the scores); hard top-k runs the exact A/B
//! kernel in `topk.rs`, which never computes a pair outside the mask; `Masked` is dense
//! attention with an explicit mask, the reference the fast path is tested against.

use crate::adapter::{AdapterConfig, Gate};
use crate::error::{Error, Result};
use crate::kernels::CausalSoftmax;
use crate::router::LayerRouting;
use crate::{flash, topk};
use candle_core::{Device, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Dense,
    /// Soft gates on distant pairs (training, and the "soft" inference mode).
    Soft,
    /// Hard top-k group membership: distant pairs attend only when their top-k sets intersect.
    TopK(usize),
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

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Dense => "dense",
            Mode::Soft => "soft",
            Mode::TopK(_) => "topk",
        }
    }
    pub fn k(&self) -> Option<usize> {
        match self {
            Mode::TopK(k) => Some(*k),
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
    /// Exact hard top-k: per-token group bitmasks and the local window.
    TopK { masks: Vec<u64>, window: usize },
    /// Dense attention with an explicit additive mask (0 kept, -inf pruned), T x T.
    Masked(Tensor),
}

/// Additive causal mask: 0 on and below the diagonal, -inf above.
pub fn causal_bias(t: usize, dev: &Device) -> Result<Tensor> {
    let v: Vec<f32> = (0..t * t).map(|n| if n % t <= n / t { 0.0 } else { f32::NEG_INFINITY }).collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

/// Every causal pair is local when no query is more than `window` tokens after position 0.
pub fn all_local(t: usize, window: usize) -> bool {
    t <= window + 1
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
        Mode::Soft => soft_plan(&Tensor::from_slice(&routing.memberships, (t, cfg.groups), dev)?, cfg),
        Mode::TopK(k) => {
            if k == 0 || k > cfg.groups {
                return Err(Error::Invalid(format!("top-k k = {k} must be in 1..={}", cfg.groups)));
            }
            Ok(LayerPlan::TopK { masks: routing.topk_masks(k), window: cfg.window })
        }
    }
}

/// The soft gate of FOCUS-METHOD section 1 from memberships `g` (T x K), as a T x T plan
/// (B x T x K gives B x T x T, for a batch of sequences). Built from candle ops, so gradients
/// flow to `g` when it comes from trainable routers.
pub fn soft_plan(g: &Tensor, cfg: &AdapterConfig) -> Result<LayerPlan> {
    gate_plan(g, cfg, &local_mask(g.dim(g.rank() - 2)?, cfg.window, g.device())?)
}

/// `soft_plan` with the local mask (`local_mask`, T x T) given.
fn gate_plan(g: &Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
    let affinity = g.matmul(&g.t()?)?;
    let local = local.broadcast_as(affinity.shape())?;
    Ok(match cfg.gate {
        Gate::Paper => {
            let f = candle_nn::ops::sigmoid(&(affinity * cfg.lambda)?)?;
            LayerPlan::SoftFactor(local.where_cond(&f.ones_like()?, &f)?)
        }
        Gate::Log => {
            let b = (affinity + cfg.log_eps)?.log()?;
            LayerPlan::SoftBias(local.where_cond(&b.zeros_like()?, &b)?)
        }
    })
}

/// Training through the hard top-k mask (a straight-through estimator): the plan's value is
/// the mask top-k inference applies (0 where it keeps a pair, -inf where it prunes it), its
/// gradient that of the log gate's soft bias log(a_ij + eps), whatever the adapter's gate (the
/// forward uses no gate). The loss is then hard inference's loss, while the routers still get
/// gradients through the soft memberships (of the pairs the mask keeps).
/// `g`: memberships (T x K) or (B x T x K).
pub fn straight_through_plan(g: &Tensor, cfg: &AdapterConfig, k: usize) -> Result<LayerPlan> {
    if k == 0 || k > cfg.groups {
        return Err(Error::Invalid(format!("straight-through k = {k} must be in 1..={}", cfg.groups)));
    }
    let (kk, dev) = (cfg.groups, g.device());
    let local = local_mask(g.dim(g.rank() - 2)?, cfg.window, dev)?;
    let log_gate = AdapterConfig { gate: Gate::Log, ..cfg.clone() };
    let LayerPlan::SoftBias(soft) = gate_plan(g, &log_gate, &local)? else {
        unreachable!("the log gate gives an additive bias")
    };
    // Top-k sets from the memberships' values, chosen as inference chooses them, as 0/1
    // indicators; the T x T mask itself is built on the device (a shared group = a positive
    // product of indicators), not pair by pair on the host.
    let rows = g.detach().to_dtype(candle_core::DType::F32)?.flatten_to(g.rank() - 2)?.to_vec2::<f32>()?;
    let ind: Vec<f32> = rows.iter().flat_map(|r| {
        let m = crate::router::topk_mask(r, k);
        (0..kk).map(move |x| ((m >> x) & 1) as f32)
    }).collect();
    let ind = Tensor::from_vec(ind, g.shape(), dev)?.to_dtype(g.dtype())?;
    let shared = ind.matmul(&ind.t()?)?.gt(0.5)?;
    let keep = shared.maximum(&local.broadcast_as(shared.shape())?)?;
    let hard = keep.where_cond(&soft.zeros_like()?, &Tensor::full(f32::NEG_INFINITY, soft.shape(), dev)?.to_dtype(soft.dtype())?)?;
    Ok(LayerPlan::SoftBias((hard + (&soft - soft.detach())?)?))
}

/// 1 where 0 <= i - j <= window (and for j > i, which the causal mask removes anyway), else 0.
pub fn local_mask(t: usize, window: usize, dev: &Device) -> Result<Tensor> {
    let v: Vec<u8> = (0..t * t).map(|n| ((n / t).saturating_sub(n % t) <= window) as u8).collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}

/// Inference attention of one sequence: q (H, T, D); k, v (Hkv, T, D); returns (H, T, D).
/// `causal` is the additive causal mask (`causal_bias`), needed off the CPU. Training uses
/// `attend_batch`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, plan: &LayerPlan, causal: Option<&Tensor>) -> Result<Tensor> {
    let (h, t, d) = q.dims3()?;
    let hkv = k.dim(0)?;
    if let LayerPlan::TopK { masks, window } = plan {
        // On CUDA the top-k kernel runs on the device (the CPU kernel below would round-trip
        // q, k, v through the host); shapes it does not take fall through to the CPU kernel.
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = q.device() {
            if let Some(out) = crate::cuda_attention::focus_attention_if_supported(q, k, v, masks, *window, dev)? {
                return Ok(out);
            }
        }
        let lay = topk::Shape { heads: h, kv_heads: hkv, t, d };
        let out = topk::focus_attention(
            &q.flatten_all()?.to_vec1::<f32>()?,
            &k.flatten_all()?.to_vec1::<f32>()?,
            &v.flatten_all()?.to_vec1::<f32>()?,
            lay,
            masks,
            *window,
        );
        return Ok(Tensor::from_vec(out, (h, t, d), q.device())?);
    }
    // Dense: our flash kernels on either device (candle's matmul + softmax below materialises
    // the T x T scores; on the H200 our f32 kernel is 2.9x faster at 4K tokens).
    #[cfg(feature = "cuda")]
    if let (LayerPlan::Dense, Device::Cuda(_)) = (plan, q.device()) {
        if let Some(out) = crate::cuda_attention::dense_attention_if_supported(q, k, v)? {
            return Ok(out);
        }
    }
    let fast_cpu = q.device().is_cpu();
    if fast_cpu && matches!(plan, LayerPlan::Dense) {
        let out = flash::causal_attention(
            &q.flatten_all()?.to_vec1::<f32>()?,
            &k.flatten_all()?.to_vec1::<f32>()?,
            &v.flatten_all()?.to_vec1::<f32>()?,
            topk::Shape { heads: h, kv_heads: hkv, t, d },
        );
        return Ok(Tensor::from_vec(out, (h, t, d), q.device())?);
    }
    // GQA without copying K/V: the query heads sharing a KV head become one taller matrix.
    let rep = h / hkv;
    let qg = q.reshape((hkv, rep * t, d))?;
    let scale = 1.0 / (d as f64).sqrt();
    let scores = qg.matmul(&k.t()?)?.reshape((h, t, t))?;
    // Scaled scores with the plan's gate or mask; `None` means plain scaled scores.
    let adjusted = match plan {
        LayerPlan::Dense => None,
        LayerPlan::SoftFactor(f) => Some((&scores * scale)?.broadcast_mul(f)?),
        LayerPlan::SoftBias(b) | LayerPlan::Masked(b) => Some((&scores * scale)?.broadcast_add(b)?),
        LayerPlan::TopK { .. } => unreachable!(),
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

/// Training attention of a batch of sequences: q (B, H, T, D), k and v (B, Hkv, T, D), a dense
/// or soft plan with one T x T gate per sequence (B x T x T), the causal mask (T x T). Only ops
/// with a backward pass (explicit scores, the composed softmax), so that gradients reach the
/// routers through the frozen model.
pub fn attend_batch(q: &Tensor, k: &Tensor, v: &Tensor, plan: &LayerPlan, causal: &Tensor) -> Result<Tensor> {
    let (b, h, t, d) = q.dims4()?;
    let hkv = k.dim(1)?;
    let rep = h / hkv;
    let scores = (q.reshape((b, hkv, rep * t, d))?.matmul(&k.t()?)?.reshape((b, h, t, t))? * (1.0 / (d as f64).sqrt()))?;
    let x = match plan {
        LayerPlan::Dense => scores,
        LayerPlan::SoftFactor(f) => scores.broadcast_mul(&f.unsqueeze(1)?)?,
        LayerPlan::SoftBias(bias) => scores.broadcast_add(&bias.unsqueeze(1)?)?,
        LayerPlan::TopK { .. } | LayerPlan::Masked(_) => {
            return Err(Error::Invalid("batched attention takes dense or soft plans (training)".into()))
        }
    };
    let p = candle_nn::ops::softmax(&x.broadcast_add(causal)?, candle_core::D::Minus1)?;
    Ok(p.reshape((b, hkv, rep * t, t))?.matmul(v)?.reshape((b, h, t, d))?)
}

/// The hard top-k mask as an additive T x T tensor (0 kept, -inf pruned): the explicit
/// reference for the fast kernel.
pub fn topk_mask_bias(masks: &[u64], window: usize, dev: &Device) -> Result<Tensor> {
    let t = masks.len();
    let v: Vec<f32> = (0..t * t)
        .map(|n| {
            let (i, j) = (n / t, n % t);
            let keep = j > i || i - j <= window || masks[i] & masks[j] != 0;
            if keep { 0.0 } else { f32::NEG_INFINITY }
        })
        .collect();
    Ok(Tensor::from_vec(v, (t, t), dev)?)
}
