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
//! `layer_plan` holds what a layer will do (`LayerPlan`), `soft` builds the soft-gate plans, `reference` holds the independent references the kernels
//! are tested against; the mask rule itself is `focus::mask`. `decode` is the attention of one
//! new token over a layer's KV cache (`kv_cache`), with its CPU and CUDA kernels beside the
//! prefill ones; `decode_keys` what such a step is (mode, kept keys, bytes read), below both. Training's fused attention op is `train::attention`.

pub mod cpu;
pub mod cuda;
pub mod decode;
pub mod decode_keys;
pub mod kv_cache;
pub mod layer_plan;
pub mod reference;
pub mod soft;

use crate::error::{Error, Result};
use crate::focus::adapter::{Adapter, AdapterConfig};
use crate::focus::mask::{self, all_local, TopK};
use crate::focus::router::LayerRouting;
use cpu::simd::CausalSoftmax;
use cpu::Shape;
pub use layer_plan::LayerPlan;
use candle_core::{Device, Tensor};

/// What one layer's own attention does before any Focus mask, as the block runs it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerAttention {
    /// The RoPE base of this layer (`None`: learned positions, no rotation).
    pub rope_theta: Option<f64>,
    /// Its frequencies are stretched by the model's RoPE scaling (`ModelConfig::rope_scaling`).
    pub rope_scaled: bool,
    /// Sliding window W (keys i - j < W); `None` for a global layer.
    pub window: Option<usize>,
    /// Logits become cap * tanh(logit / cap) before the softmax (Gemma 2).
    pub softcap: Option<f64>,
    /// The score scale when it is not 1/sqrt(head_dim) (Gemma 2's query_pre_attn_scalar^-0.5).
    pub scale: Option<f64>,
}

impl LayerAttention {
    /// What tells this layer's RoPE tables apart from another layer's: the base and whether
    /// the model's scaling stretches it (`None`: no rotation).
    pub fn rope_key(&self) -> Option<(f64, bool)> {
        self.rope_theta.map(|t| (t, self.rope_scaled))
    }

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
        Mode::Soft => Ok(soft::soft_gate(&Tensor::from_slice(&routing.memberships, (t, cfg.groups), dev)?, cfg)),
        Mode::TopK(k) => Ok(LayerPlan::TopK { masks: routing.topk_masks(k.of(cfg.groups)?), window: cfg.window, sink: cfg.sink }),
    }
}

/// Layer `l`'s top-k routing of `h` (T x d_model) on its CUDA device, queued there: the
/// adapter's scores, then Sinkhorn and each token's k groups as a bit mask ((T,) u32,
/// `cuda::route::topk_masks`; `Adapter::masks_on_host` reads them). `None` where the device is
/// not CUDA or K > 32 (the host routes those). No memberships or scores leave the device: for a
/// pass whose caller reads no routing (`ForwardOptions::routing_unused`).
pub fn device_topk_masks(a: &Adapter, l: usize, h: &Tensor, k: usize) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if h.device().is_cuda() && a.config.groups <= 32 {
        let c = &a.config;
        let (_, scores) = a.score_tensors(l, h)?;
        return Ok(Some(cuda::route::topk_masks(&scores, c.tau, c.sinkhorn_iters, c.causal_sinkhorn, k)?));
    }
    let _ = (a, l, h, k);
    Ok(None)
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
    // Long sequences: the scores a block of query rows at a time (the whole H x T x T would be
    // 15 GB at 16K tokens of 14 heads, and this path holds several).
    let rows = query_rows(h, t);
    if rows < t {
        return attend_in_rows(q, k, v, plan, own, rows);
    }
    // GQA without copying K/V: the query heads sharing a KV head become one taller matrix.
    let rep = h / hkv;
    let qg = q.reshape((hkv, rep * t, d))?;
    let scale = 1.0 / (d as f64).sqrt();
    let scores = qg.matmul(&k.t()?)?.reshape((h, t, t))?;
    // Scaled (and capped) scores with the plan's gate or mask and the sliding window; `None`
    // means plain scaled scores.
    let adjusted = match (plan, own.softcap, span) {
        (LayerPlan::Dense, None, None) => None,
        _ => Some(gated(cap(&(&scores * scale)?, own.softcap)?, plan, span, 0, t)?),
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

/// Scores the candle path of `attend` holds at a time (2^27: 0.5 GB in f32): longer sequences
/// are attended `query_rows` rows at a time.
pub const CHUNK_SCORES: usize = 1 << 27;

/// Query rows of an H-head, T-token attention whose scores fit `CHUNK_SCORES` (T: all of them).
pub fn query_rows(h: usize, t: usize) -> usize {
    (CHUNK_SCORES / (h * t).max(1)).clamp(1, t.max(1))
}

/// The candle path of `attend` (a gate, an explicit mask, a sliding window or soft-capping)
/// `rows` query rows at a time: each block's scores against the keys a causal row of it can
/// see (the first r0 + m), with the gate and masks of those rows only. Memory: one block's
/// scores, gate and masks, whatever T.
fn attend_in_rows(q: &Tensor, k: &Tensor, v: &Tensor, plan: &LayerPlan, own: &LayerAttention, rows: usize) -> Result<Tensor> {
    let (h, t, d) = q.dims3()?;
    let hkv = k.dim(0)?;
    let rep = h / hkv;
    let scale = 1.0 / (d as f64).sqrt();
    let span = own.span(t);
    let mut outs = Vec::new();
    for r0 in (0..t).step_by(rows.max(1)) {
        let m = rows.min(t - r0);
        let n = r0 + m;
        let qb = q.narrow(1, r0, m)?.contiguous()?.reshape((hkv, rep * m, d))?;
        let kb = k.narrow(1, 0, n)?.contiguous()?;
        let s = cap(&(qb.matmul(&kb.t()?)?.reshape((h, m, n))? * scale)?, own.softcap)?;
        let s = gated(s, plan, span, r0, n)?;
        let causal = mask::causal_bias_rows(r0, m, n, q.device())?;
        let p = candle_nn::ops::softmax_last_dim(&s.broadcast_add(&causal)?.contiguous()?)?;
        outs.push(p.reshape((hkv, rep * m, n))?.matmul(&v.narrow(1, 0, n)?.contiguous()?)?.reshape((h, m, d))?);
    }
    Ok(Tensor::cat(&outs, 1)?)
}

/// Scaled scores `s` (H x m x n: query rows r0..r0+m against keys 0..n) with the plan's gate
/// or mask and the layer's sliding window (`span`) applied: a T x T plan's block of rows, or a
/// soft gate's rows made here.
fn gated(s: Tensor, plan: &LayerPlan, span: Option<usize>, r0: usize, n: usize) -> Result<Tensor> {
    let m = s.dim(1)?;
    let block = |x: &Tensor| -> Result<Tensor> {
        let r = x.rank();
        Ok(x.narrow(r - 2, r0, m)?.narrow(r - 1, 0, n)?)
    };
    let s = match plan {
        LayerPlan::Dense => s,
        LayerPlan::SoftFactor(f) => s.broadcast_mul(&block(f)?)?,
        LayerPlan::SoftBias(b) | LayerPlan::Masked(b) => s.broadcast_add(&block(b)?)?,
        LayerPlan::SoftGate(g) => match g.rows(r0, m, n)? {
            layer_plan::GateRows::Factor(f) => s.broadcast_mul(&f)?,
            layer_plan::GateRows::Bias(b) => s.broadcast_add(&b)?,
        },
        LayerPlan::TopK { .. } => unreachable!("top-k plans run their kernels"),
    };
    Ok(match span {
        Some(w) => s.broadcast_add(&mask::sliding_bias_rows(r0, m, n, w, s.device())?)?,
        None => s,
    })
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
        LayerPlan::TopK { .. } | LayerPlan::Masked(_) | LayerPlan::SoftGate(_) => {
            return Err(Error::Invalid("batched attention takes dense or training's soft plans".into()))
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

#[cfg(all(test, feature = "cuda"))]
mod cuda_tests {
    //! `attend`'s dispatch on a GPU (the test binary of a `--features cuda` build).
    use super::*;
    use crate::focus::mask::{balanced_masks, causal_bias};
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::DType;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn gpu() -> CudaDevice {
        match crate::device::cuda(0).expect("these tests need a CUDA GPU") {
            Device::Cuda(d) => d,
            _ => unreachable!(),
        }
    }

    fn rand_vec(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect()
    }

    /// The model's attention entry point takes the device kernels on CUDA (top-k and dense) and
    /// computes what the CPU kernels compute (SmolLM2's GQA shape: 3 query heads per KV head).
    #[test]
    fn cuda_attend_runs_on_the_device_and_matches_the_cpu() {
        let (h, hkv, t) = (6, 2, 900);
        let mut rng = StdRng::seed_from_u64(11);
        let q = rand_vec(h * t * 64, &mut rng);
        let kx = rand_vec(hkv * t * 64, &mut rng);
        let v = rand_vec(hkv * t * 64, &mut rng);
        let topk = |sink: usize| LayerPlan::TopK { masks: balanced_masks(t, 8, 2, 3).unwrap(), window: 128, sink };
        for plan in [topk(0), topk(1), topk(4), LayerPlan::Dense] {
            let run = |dev: &Device| {
                let ten = |x: &[f32], hh: usize| Tensor::from_slice(x, (hh, t, 64), dev).unwrap();
                let causal = causal_bias(t, dev).unwrap();
                let out = attend(&ten(&q, h), &ten(&kx, hkv), &ten(&v, hkv), &plan, &Default::default(), Some(&causal)).unwrap();
                out.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
            };
            let cpu = run(&Device::Cpu);
            let on_gpu = run(&Device::Cuda(gpu()));
            let err = cpu.iter().zip(&on_gpu).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err <= 1e-5, "{}: {err:e}", if matches!(plan, LayerPlan::Dense) { "dense" } else { "top-k" });
        }
        // Shapes the kernel does not take fall back (head dim 32).
        let z = Tensor::zeros((2, 10, 32), DType::F32, &Device::Cuda(gpu())).unwrap();
        assert!(cuda::host::focus_attention_if_supported(&z, &z, &z, &[1; 10], 4, 0, &gpu()).unwrap().is_none());
    }
}

#[cfg(test)]
/// Soft mode through `attend` against a gated reference (here, above `soft`, which builds the plan).
mod soft_tests {
    //! Soft mode against a plain f64 reference that gates each pair through `GateFn::score`:
    //! local pairs and sink pairs [ours] ungated, the others gated by their affinity.
    use super::soft::*;
    use super::*;
    use crate::focus::adapter::Gate;
    use crate::focus::gate::GateFn;
    use crate::focus::mask;
    use candle_core::Device;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn adapter_cfg(k: usize, window: usize, sink: usize, gate: Gate) -> AdapterConfig {
        use crate::focus::adapter::{Adapter, AdapterSpec};
        let id = crate::focus::identity::BaseModel { arch: "llama".into(), name: "t".into(), n_layers: 1, d_model: 8, n_heads: 1, n_kv_heads: 1, vocab: 8, fingerprint: String::new() };
        Adapter::random(&id, &Device::Cpu, &AdapterSpec { groups: k, window, sink, gate, lambda: 4.0, ..Default::default() }, 1).unwrap().config
    }

    #[allow(clippy::too_many_arguments)]
    fn reference(q: &[f32], k: &[f32], v: &[f32], s: Shape, g: &[f32], kk: usize, gate: GateFn, window: usize, sink: usize) -> Vec<f32> {
        let Shape { heads, kv_heads, t, d } = s;
        let rep = heads / kv_heads;
        let mut out = vec![0f32; heads * t * d];
        for h in 0..heads {
            let kh = h / rep;
            for i in 0..t {
                let qi = &q[(h * t + i) * d..(h * t + i + 1) * d];
                let sc: Vec<f64> = (0..=i)
                    .map(|j| {
                        let kj = &k[(kh * t + j) * d..(kh * t + j + 1) * d];
                        let u = qi.iter().zip(kj).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() / (d as f64).sqrt();
                        let a: f32 = (0..kk).map(|c| g[i * kk + c] * g[j * kk + c]).sum();
                        gate.score(u as f32, a, !mask::always(i, j, window, sink)).0 as f64
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for c in 0..d {
                    let acc: f64 = (0..=i).map(|j| w[j] * v[(kh * t + j) * d + c] as f64).sum();
                    out[(h * t + i) * d + c] = (acc / z) as f32;
                }
            }
        }
        out
    }

    #[test]
    fn soft_mode_with_sinks_equals_the_gated_reference() {
        let mut rng = StdRng::seed_from_u64(17);
        let dev = Device::Cpu;
        for case in 0..12 {
            let (heads, kv_heads, t, d, kk) = (4, 2, rng.gen_range(10..70), [8, 16][case % 2], 4);
            let window = [0, 2, 4, 9][case % 4];
            let gate = if case % 3 == 0 { Gate::Paper } else { Gate::Log };
            let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
            let (q, k, v) = (r(heads * t * d, 2.0), r(kv_heads * t * d, 2.0), r(kv_heads * t * d, 1.0));
            // Memberships: rows of positive values summing to 1.
            let g: Vec<f32> = r(t * kk, 3.0).chunks(kk).flat_map(|row| {
                let e: Vec<f32> = row.iter().map(|x| x.exp()).collect();
                let z: f32 = e.iter().sum();
                e.into_iter().map(move |x| x / z)
            }).collect();
            let s = Shape { heads, kv_heads, t, d };
            let mut outs = Vec::new();
            for sink in [0, 1, 4] {
                let cfg = adapter_cfg(kk, window, sink, gate);
                let gt = Tensor::from_slice(&g, (t, kk), &dev).unwrap();
                let ten = |x: &[f32], h: usize| Tensor::from_slice(x, (h, t, d), &dev).unwrap();
                let want = reference(&q, &k, &v, s, &g, kk, GateFn::of(&cfg), window, sink);
                // Training's T x T plan and inference's gate made per block of rows, whole and
                // on the long-sequence path (a block of query rows at a time; the last short).
                let rows = [1, 7, t - 1][case % 3];
                for (name, plan) in [("T x T plan", soft_plan(&gt, &cfg).unwrap()), ("gate by rows", soft_gate(&gt, &cfg))] {
                    let got = attend(&ten(&q, heads), &ten(&k, kv_heads), &ten(&v, kv_heads), &plan, &Default::default(), None).unwrap();
                    let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(err <= 1e-5, "{name}: case {case} t {t} w {window} s {sink} {gate:?}: {err}");
                    let blocks = attend_in_rows(&ten(&q, heads), &ten(&k, kv_heads), &ten(&v, kv_heads), &plan, &Default::default(), rows).unwrap();
                    let blocks = blocks.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    let err = blocks.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(err <= 1e-5, "{name}: case {case} t {t} in blocks of {rows} rows: {err}");
                    if name == "gate by rows" {
                        outs.push(got);
                    }
                }
            }
            // With distant pairs, sinks change the output.
            if t > window + 2 {
                let diff = outs[0].iter().zip(&outs[2]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(diff > 1e-4, "case {case}: sink 4 gives the output of sink 0");
            }
        }
    }

    #[test]
    fn attention_in_blocks_of_rows_equals_the_whole() {
        // A sliding window and soft-capping (Gemma 2's candle path) with each plan kind, whole
        // and a block of rows at a time; and the blocks' size at the lengths that need them.
        let mut rng = StdRng::seed_from_u64(5);
        let dev = Device::Cpu;
        let (heads, kv_heads, t, d, kk) = (4, 2, 41, 8, 4);
        let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
        let ten = |x: Vec<f32>, h: usize| Tensor::from_vec(x, (h, t, d), &dev).unwrap();
        let (q, k, v) = (ten(r(heads * t * d, 2.0), heads), ten(r(kv_heads * t * d, 2.0), kv_heads), ten(r(kv_heads * t * d, 1.0), kv_heads));
        let g = candle_nn::ops::softmax_last_dim(&Tensor::from_vec(r(t * kk, 3.0), (t, kk), &dev).unwrap()).unwrap();
        let masks: Vec<u64> = (0..t).map(|i| 1 << (i % kk)).collect();
        let plans = [
            LayerPlan::Dense,
            soft_plan(&g, &adapter_cfg(kk, 3, 1, Gate::Paper)).unwrap(),
            soft_plan(&g, &adapter_cfg(kk, 3, 0, Gate::Log)).unwrap(),
            soft_gate(&g, &adapter_cfg(kk, 3, 1, Gate::Paper)),
            soft_gate(&g, &adapter_cfg(kk, 3, 0, Gate::Log)),
            LayerPlan::Masked(mask::topk_mask_bias(&masks, 3, 1, &dev).unwrap()),
        ];
        let own = LayerAttention { window: Some(9), softcap: Some(2.0), ..Default::default() };
        for (i, plan) in plans.iter().enumerate() {
            let whole = attend(&q, &k, &v, plan, &own, None).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for rows in [1, 5, 40] {
                let got = attend_in_rows(&q, &k, &v, plan, &own, rows).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let err = got.iter().zip(&whole).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(err <= 1e-5, "plan {i}, blocks of {rows} rows: {err}");
            }
        }
        assert_eq!(query_rows(9, 2048), 2048, "SmolLM2 at 2,048 tokens: one block");
        let rows = query_rows(14, 32768);
        assert!(rows < 32768 && rows * 14 * 32768 <= CHUNK_SCORES, "Qwen2.5 at 32K: {rows} rows a block");
    }
}
