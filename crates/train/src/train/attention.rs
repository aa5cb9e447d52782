//! The training attention of one layer as one op with a backward pass: RoPE, causal attention
//! with the soft gate of FOCUS-METHOD section 1 computed from the memberships inside each tile,
//! and the gradients with respect to the projections and the memberships. No T x T tensor is
//! ever made, so memory stays linear in the sequence length.
//!
//! Input: `qkv` (B*T, (H + 2*Hkv) * D), per token the query heads, then the key heads, then
//! the value heads (the concatenated Q/K/V projection, before RoPE); memberships `g` (B, T, K).
//! Output: (B*T, H*D), per token the heads in order (what the output projection takes).
//!
//! It computes exactly what the composed reference computes: RoPE on q and k, then
//! `attention::attend_batch` with `attention::soft::soft_plan(g)`, or for straight-through
//! training (`hard`) `attention::soft::straight_through_plan(g, k)` (tested, forward and
//! gradients, in `tests` below). On the CPU it runs plain loops in f32 (multi-threaded over
//! sequences and heads), any head dim; on CUDA the kernels of `crates/kernels/cuda/focus_train.cu`
//! (bf16 tensor-core tiles with f32 accumulation and softmax, head dims 64, 128 and 256,
//! K <= 16). A model's own sliding window (Gemma 2/3's local layers) is applied as the composed
//! path applies it: pairs with i - j >= W do not exist, attention sinks included; and so is its
//! soft-capping (Gemma 2): u = q.k / sqrt(D) becomes cap * tanh(u / cap) before the gate and the
//! mask.

use crate::error::{Error, Result};
use crate::focus::gate::GateFn;
use super::device::{cpu_f32, cpu_out};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use std::sync::{Arc, Mutex};

/// One layer's training attention: shapes, RoPE, gate and window.
#[derive(Debug, Clone)]
pub struct SoftAttention {
    pub b: usize,
    pub t: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// cos and sin tables (T, head_dim / 2, f32) and whether adjacent pairs rotate
    /// (interleaved) rather than the two halves; `None`: no rotation (learned positions).
    pub rope: Option<(Tensor, Tensor, bool)>,
    pub gate: GateFn,
    pub window: usize,
    /// Attention sinks [ours]: keys j < sink are ungated, as local ones.
    pub sink: usize,
    /// The layer's own sliding window W when it removes pairs (`LayerAttention::span`): keys
    /// with i - j >= W are never attended; `None`: every causal pair exists.
    pub span: Option<usize>,
    /// The layer's soft-cap c (`LayerAttention::softcap`, Gemma 2): the scaled score u becomes
    /// c * tanh(u / c) before the gate and the mask.
    pub softcap: Option<f32>,
    /// Straight-through training through the hard top-k mask of this k
    /// (`attention::soft::straight_through_plan`): the forward keeps a distant pair only where
    /// the two tokens' top-k groups (as inference chooses them from the memberships) meet, with
    /// no gate on the pairs it keeps; the backward is the log gate's, dA = dS / (a + eps), so
    /// `gate` must be `GateFn::Log`. `None`: the soft gate.
    pub hard: Option<usize>,
}

/// Largest K the CUDA kernels take.
pub const CUDA_MAX_GROUPS: usize = 16;

/// Largest K of the straight-through mask (its top-k sets are bit masks: 16 bits on CUDA).
pub const MAX_HARD_GROUPS: usize = 16;

/// Each token's top-k groups as a bit mask, chosen as inference chooses them
/// (`mask::topk_mask`), from memberships `g` (rows of `kk`).
fn topk_bits(g: &[f32], kk: usize, k: usize) -> Vec<u32> {
    g.chunks_exact(kk).map(|row| crate::focus::mask::topk_mask(row, k) as u32).collect()
}

/// Head dims the CUDA kernels take.
pub const CUDA_HEAD_DIMS: [usize; 3] = [64, 128, 256];

impl SoftAttention {
    fn nh(&self) -> usize {
        self.heads + 2 * self.kv_heads
    }

    /// Whether the CUDA kernels take this layer (`groups`: K of the memberships).
    pub fn cuda_supports(&self, groups: usize) -> bool {
        CUDA_HEAD_DIMS.contains(&self.head_dim) && (self.gate == GateFn::None || (1..=CUDA_MAX_GROUPS).contains(&groups))
    }

    /// The first key query `i` attends (the sliding window's start, else 0).
    fn first_key(&self, i: usize) -> usize {
        self.span.map_or(0, |w| (i + 1).saturating_sub(w))
    }

    /// The attention output (B*T, H*D) of `qkv` with memberships `g` (B, T, K; ignored
    /// without a gate). Differentiable with respect to both.
    pub fn forward(&self, qkv: &Tensor, g: Option<&Tensor>) -> Result<Tensor> {
        let (rows, cols) = qkv.dims2()?;
        if rows != self.b * self.t || cols != self.nh() * self.head_dim || self.heads % self.kv_heads != 0 {
            return Err(Error::Invalid(format!("fused attention: qkv is {rows} x {cols}, expected {} x {}", self.b * self.t, self.nh() * self.head_dim)));
        }
        if self.rope.is_some() && self.head_dim % 2 != 0 {
            return Err(Error::Invalid("RoPE needs an even head dim".into()));
        }
        if self.span == Some(0) {
            return Err(Error::Invalid("fused attention: a sliding window of 0 keys".into()));
        }
        if self.softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err(Error::Invalid(format!("fused attention: soft-cap {:?} is not a positive number", self.softcap)));
        }
        if let Some(k) = self.hard {
            if !matches!(self.gate, GateFn::Log { .. }) {
                return Err(Error::Invalid("fused attention: the straight-through mask takes the log gate's backward (GateFn::Log)".into()));
            }
            let groups = g.map_or(0, |g| g.dim(g.rank() - 1).unwrap_or(0));
            if !(1..=groups.min(MAX_HARD_GROUPS)).contains(&k) {
                return Err(Error::Invalid(format!("fused attention: straight-through top-{k} of {groups} groups (1 <= k <= K <= {MAX_HARD_GROUPS})")));
            }
        }
        let op = AttnOp { cfg: self.clone(), saved: Arc::new(Mutex::new(None)) };
        let qkv = qkv.contiguous()?;
        Ok(match (self.gate, g) {
            (GateFn::None, _) => qkv.apply_op1(op)?,
            (_, Some(g)) => {
                let (b, t, _) = g.dims3()?;
                if (b, t) != (self.b, self.t) || g.dtype() != DType::F32 {
                    return Err(Error::Invalid(format!("fused attention: memberships must be f32 ({}, {}, K), got {:?} {:?}", self.b, self.t, g.dims(), g.dtype())));
                }
                qkv.apply_op2(&g.contiguous()?, op)?
            }
            (_, None) => return Err(Error::Invalid("a gated attention needs memberships".into())),
        })
    }
}

/// What the forward keeps for the backward: each row's log-sum-exp (CPU: natural log; CUDA:
/// log2, as its kernels work).
enum Saved {
    Cpu(Vec<f32>),
    #[cfg(feature = "cuda")]
    Cuda(candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>),
}

struct AttnOp {
    cfg: SoftAttention,
    saved: Arc<Mutex<Option<Saved>>>,
}

/// The backward pass as an op of its own (inputs qkv, out, d_out): returns d(qkv) and leaves
/// d(g) in `stash` for `TakeStash`.
struct AttnBwd {
    cfg: SoftAttention,
    g: Option<Tensor>,
    saved: Arc<Mutex<Option<Saved>>>,
    stash: Arc<Mutex<Option<Stashed>>>,
}

enum Stashed {
    Cpu(CpuStorage),
    #[cfg(feature = "cuda")]
    Cuda(candle_core::CudaStorage),
}

/// Returns the storage another op left in its stash (a second output of that op).
struct TakeStash {
    stash: Arc<Mutex<Option<Stashed>>>,
    shape: Shape,
}

impl CustomOp1 for TakeStash {
    fn name(&self) -> &'static str {
        "focus-take-stash"
    }
    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        match self.stash.lock().unwrap().take() {
            Some(Stashed::Cpu(s)) => Ok((s, self.shape.clone())),
            _ => candle_core::bail!("no CPU result stashed"),
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, _: &candle_core::CudaStorage, _: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        match self.stash.lock().unwrap().take() {
            Some(Stashed::Cuda(s)) => Ok((s, self.shape.clone())),
            _ => candle_core::bail!("no CUDA result stashed"),
        }
    }
}

impl AttnOp {
    fn backward(&self, qkv: &Tensor, g: Option<&Tensor>, res: &Tensor, grad: &Tensor) -> candle_core::Result<(Tensor, Option<Tensor>)> {
        let stash = Arc::new(Mutex::new(None));
        let bwd = AttnBwd { cfg: self.cfg.clone(), g: g.cloned(), saved: self.saved.clone(), stash: stash.clone() };
        let dqkv = qkv.apply_op3_no_bwd(res, &grad.contiguous()?, &bwd)?;
        let dg = match g {
            Some(g) => Some(g.apply_op1_no_bwd(&TakeStash { stash, shape: g.shape().clone() })?),
            None => None,
        };
        Ok((dqkv, dg))
    }
}

impl CustomOp1 for AttnOp {
    fn name(&self) -> &'static str {
        "focus-soft-attention"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.cpu(s, l, None)
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.cuda(s, l, None)
    }
    fn bwd(&self, qkv: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(self.backward(qkv, None, res, grad)?.0))
    }
}

impl CustomOp2 for AttnOp {
    fn name(&self) -> &'static str {
        "focus-soft-attention"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, gs: &CpuStorage, gl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.cpu(s, l, Some((gs, gl)))
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout, gs: &candle_core::CudaStorage, gl: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.cuda(s, l, Some((gs, gl)))
    }
    fn bwd(&self, qkv: &Tensor, g: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dqkv, dg) = self.backward(qkv, Some(g), res, grad)?;
        Ok((Some(dqkv), dg))
    }
}

impl CustomOp3 for AttnBwd {
    fn name(&self) -> &'static str {
        "focus-soft-attention-bwd"
    }
    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let c = &self.cfg;
        let qkv = cpu_f32(s1, l1)?;
        let out = cpu_f32(s2, l2)?;
        let dout = cpu_f32(s3, l3)?;
        let g = match &self.g {
            Some(g) => Some(g.flatten_all()?.to_vec1::<f32>()?),
            None => None,
        };
        let k = self.g.as_ref().map_or(0, |g| g.dims()[2]);
        let lse = match self.saved.lock().unwrap().take() {
            Some(Saved::Cpu(v)) => v,
            _ => candle_core::bail!("fused attention: the forward pass kept no CPU state"),
        };
        let (q, kk, v) = cpu::rotate(c, &qkv)?;
        let (dqkv, dg) = cpu::backward(c, &q, &kk, &v, g.as_deref(), k, &out, &dout, &lse)?;
        *self.stash.lock().unwrap() = Some(Stashed::Cpu(CpuStorage::F32(dg)));
        Ok((cpu_out(dqkv, s1.dtype())?, l1.shape().clone()))
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout, s3: &candle_core::CudaStorage, l3: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::backward(self, s1, l1, s2, l2, s3, l3)
    }
}

impl AttnOp {
    fn cpu(&self, s: &CpuStorage, l: &Layout, g: Option<(&CpuStorage, &Layout)>) -> candle_core::Result<(CpuStorage, Shape)> {
        let c = &self.cfg;
        let qkv = cpu_f32(s, l)?;
        let (g, k) = match g {
            Some((gs, gl)) => (Some(cpu_f32(gs, gl)?), gl.dims()[2]),
            None => (None, 0),
        };
        let (q, kk, v) = cpu::rotate(c, &qkv)?;
        let (out, lse) = cpu::forward(c, &q, &kk, &v, g.as_deref(), k);
        *self.saved.lock().unwrap() = Some(Saved::Cpu(lse));
        Ok((cpu_out(out, s.dtype())?, Shape::from((c.b * c.t, c.heads * c.head_dim))))
    }
}

/// The CPU implementation: plain loops in f32.
mod cpu {
    use super::*;

    /// The RoPE tables as host vectors (T x D/2 each), and the layout.
    fn tables(c: &SoftAttention) -> candle_core::Result<Option<(Vec<f32>, Vec<f32>, bool)>> {
        Ok(match &c.rope {
            Some((cs, sn, il)) => Some((
                cs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                sn.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                *il,
            )),
            None => None,
        })
    }

    /// The rotation pairs of one head: (d0, d1, frequency index).
    fn pairs(d: usize, interleaved: bool) -> impl Iterator<Item = (usize, usize, usize)> {
        (0..d / 2).map(move |p| if interleaved { (2 * p, 2 * p + 1, p) } else { (p, p + d / 2, p) })
    }

    /// q (B, H, T, D), k and v (B, Hkv, T, D) from qkv, q and k rotated.
    pub fn rotate(c: &SoftAttention, qkv: &[f32]) -> candle_core::Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let (b, t, h, hkv, d, nh) = (c.b, c.t, c.heads, c.kv_heads, c.head_dim, c.nh());
        let tab = tables(c)?;
        let mut q = vec![0f32; b * h * t * d];
        let mut k = vec![0f32; b * hkv * t * d];
        let mut v = vec![0f32; b * hkv * t * d];
        for bi in 0..b {
            for ti in 0..t {
                let row = &qkv[(bi * t + ti) * nh * d..(bi * t + ti + 1) * nh * d];
                for hh in 0..nh {
                    let src = &row[hh * d..(hh + 1) * d];
                    let dst = if hh < h {
                        &mut q[((bi * h + hh) * t + ti) * d..][..d]
                    } else if hh < h + hkv {
                        &mut k[((bi * hkv + hh - h) * t + ti) * d..][..d]
                    } else {
                        &mut v[((bi * hkv + hh - h - hkv) * t + ti) * d..][..d]
                    };
                    dst.copy_from_slice(src);
                    if let (Some((cs, sn, il)), true) = (&tab, hh < h + hkv) {
                        for (d0, d1, p) in pairs(d, *il) {
                            let (co, si) = (cs[ti * (d / 2) + p], sn[ti * (d / 2) + p]);
                            let (x0, x1) = (src[d0], src[d1]);
                            dst[d0] = x0 * co - x1 * si;
                            dst[d1] = x0 * si + x1 * co;
                        }
                    }
                }
            }
        }
        Ok((q, k, v))
    }

    /// A dot product in 8 independent lanes, so that it vectorises (a single running sum
    /// cannot be reassociated by the compiler).
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
        let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
        for (x, y) in ca.zip(cb) {
            for i in 0..8 {
                acc[i] += x[i] * y[i];
            }
        }
        acc.iter().sum::<f32>() + tail
    }

    #[inline(always)]
    fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
        for (v, w) in y.iter_mut().zip(x) {
            *v += a * w;
        }
    }

    /// The score, gate factor, scaled (and soft-capped) q.k and affinity of pair (i, j) of
    /// sequence `bi`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn pair(c: &SoftAttention, qi: &[f32], kj: &[f32], g: Option<&[f32]>, bits: Option<&[u32]>, kk: usize, bi: usize, i: usize, j: usize) -> (f32, f32, f32, f32, bool) {
        let mut u = dot(qi, kj) / (c.head_dim as f32).sqrt();
        if let Some(cap) = c.softcap {
            u = cap * (u / cap).tanh();
        }
        let distant = !crate::focus::mask::always(i, j, c.window, c.sink) && c.gate != GateFn::None;
        let a = match (distant, g) {
            (true, Some(g)) => dot(&g[(bi * c.t + i) * kk..][..kk], &g[(bi * c.t + j) * kk..][..kk]),
            _ => 0.0,
        };
        let (s, f) = match (bits, distant) {
            // Straight-through: the hard mask, no gate on the pairs it keeps.
            (Some(m), true) => (if m[bi * c.t + i] & m[bi * c.t + j] != 0 { u } else { f32::NEG_INFINITY }, 1.0),
            _ => c.gate.score(u, a, distant),
        };
        (s, f, u, a, distant)
    }

    /// One head of one sequence: its output (T, D) and each row's log-sum-exp.
    #[multiversion::multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
    #[allow(clippy::too_many_arguments)]
    fn forward_head(c: &SoftAttention, q: &[f32], k: &[f32], v: &[f32], g: Option<&[f32]>, bits: Option<&[u32]>, kk: usize, bi: usize) -> (Vec<f32>, Vec<f32>) {
        let (t, d) = (c.t, c.head_dim);
        let mut o = vec![0f32; t * d];
        let mut lse = vec![0f32; t];
        let mut s = vec![0f32; t];
        for i in 0..t {
            let qi = &q[i * d..(i + 1) * d];
            let mut m = f32::NEG_INFINITY;
            let j0 = c.first_key(i);
            for j in j0..=i {
                s[j] = pair(c, qi, &k[j * d..(j + 1) * d], g, bits, kk, bi, i, j).0;
                m = m.max(s[j]);
            }
            let mut l = 0f32;
            let oi = &mut o[i * d..(i + 1) * d];
            for j in j0..=i {
                let p = (s[j] - m).exp();
                l += p;
                axpy(oi, p, &v[j * d..(j + 1) * d]);
            }
            oi.iter_mut().for_each(|x| *x /= l);
            lse[i] = m + l.ln();
        }
        (o, lse)
    }

    /// Output (B*T, H*D) and each row's natural log-sum-exp (B, H, T).
    pub fn forward(c: &SoftAttention, q: &[f32], k: &[f32], v: &[f32], g: Option<&[f32]>, kk: usize) -> (Vec<f32>, Vec<f32>) {
        let (b, t, h, d) = (c.b, c.t, c.heads, c.head_dim);
        let rep = h / c.kv_heads;
        let bits = match (c.hard, g) {
            (Some(k), Some(g)) => Some(topk_bits(g, kk, k)),
            _ => None,
        };
        let parts: Vec<(Vec<f32>, Vec<f32>)> = (0..b * h)
            .into_par_iter()
            .map(|bh| {
                let (bi, hi) = (bh / h, bh % h);
                let kvo = (bi * c.kv_heads + hi / rep) * t * d;
                forward_head(c, &q[bh * t * d..(bh + 1) * t * d], &k[kvo..kvo + t * d], &v[kvo..kvo + t * d], g, bits.as_deref(), kk, bi)
            })
            .collect();
        let mut out = vec![0f32; b * t * h * d];
        let mut lse = vec![0f32; b * h * t];
        for (bh, (o, l)) in parts.into_iter().enumerate() {
            let (bi, hi) = (bh / h, bh % h);
            for i in 0..t {
                out[(bi * t + i) * h * d + hi * d..][..d].copy_from_slice(&o[i * d..(i + 1) * d]);
            }
            lse[bh * t..(bh + 1) * t].copy_from_slice(&l);
        }
        (out, lse)
    }

    /// dQ of the query heads of kv head `bk % Hkv` of sequence `bk / Hkv`, dK and dV of that kv
    /// head, and the sequence's dg from these heads.
    #[multiversion::multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
    #[allow(clippy::too_many_arguments)]
    fn backward_kv_head(c: &SoftAttention, q: &[f32], k: &[f32], v: &[f32], g: Option<&[f32]>, bits: Option<&[u32]>, kk: usize, out: &[f32], dout: &[f32], lse: &[f32], bk: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let (t, h, hkv, d) = (c.t, c.heads, c.kv_heads, c.head_dim);
        let rep = h / hkv;
        let scale = 1.0 / (d as f32).sqrt();
        let (bi, kh) = (bk / hkv, bk % hkv);
        let kvo = bk * t * d;
        let (mut dq, mut dk, mut dv, mut dg) = (vec![0f32; rep * t * d], vec![0f32; t * d], vec![0f32; t * d], vec![0f32; t * kk]);
        for r in 0..rep {
            let hi = kh * rep + r;
            let bh = bi * h + hi;
            for i in 0..t {
                let qi = &q[(bh * t + i) * d..][..d];
                let oi = &out[(bi * t + i) * h * d + hi * d..][..d];
                let doi = &dout[(bi * t + i) * h * d + hi * d..][..d];
                let di = dot(doi, oi);
                for j in c.first_key(i)..=i {
                    let kj = &k[kvo + j * d..][..d];
                    let (s, f, u, a, distant) = pair(c, qi, kj, g, bits, kk, bi, i, j);
                    let p = (s - lse[bh * t + i]).exp();
                    let ds = p * (dot(doi, &v[kvo + j * d..][..d]) - di);
                    let mut du = ds;
                    if distant {
                        let da = match c.gate {
                            GateFn::Log { eps } => ds / (a + eps),
                            GateFn::Paper { lambda } => {
                                du = ds * f;
                                ds * u * lambda * f * (1.0 - f)
                            }
                            GateFn::None => 0.0,
                        };
                        if let Some(g) = g {
                            for x in 0..kk {
                                dg[i * kk + x] += da * g[(bi * t + j) * kk + x];
                                dg[j * kk + x] += da * g[(bi * t + i) * kk + x];
                            }
                        }
                    }
                    if let Some(cap) = c.softcap {
                        // Through the cap: d(c tanh(x / c))/dx = 1 - tanh^2, u = c tanh.
                        let th = u / cap;
                        du *= 1.0 - th * th;
                    }
                    axpy(&mut dq[(r * t + i) * d..][..d], du * scale, kj);
                    axpy(&mut dk[j * d..(j + 1) * d], du * scale, qi);
                    axpy(&mut dv[j * d..(j + 1) * d], p, doi);
                }
            }
        }
        (dq, dk, dv, dg)
    }

    /// d(qkv) (B*T, NH*D) and d(g) (B, T, K) from the output, its gradient and the saved
    /// log-sum-exps.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(c: &SoftAttention, q: &[f32], k: &[f32], v: &[f32], g: Option<&[f32]>, kk: usize, out: &[f32], dout: &[f32], lse: &[f32]) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
        let (b, t, h, hkv, d, nh) = (c.b, c.t, c.heads, c.kv_heads, c.head_dim, c.nh());
        let rep = h / hkv;
        let bits = match (c.hard, g) {
            (Some(k), Some(g)) => Some(topk_bits(g, kk, k)),
            _ => None,
        };
        // One task per (sequence, kv head): it owns dK and dV of that head and dQ of its query
        // heads, and a partial dg of its sequence.
        let parts: Vec<(Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>)> = (0..b * hkv)
            .into_par_iter()
            .map(|bk| backward_kv_head(c, q, k, v, g, bits.as_deref(), kk, out, dout, lse, bk))
            .collect();
        let tab = tables(c)?;
        let mut dqkv = vec![0f32; b * t * nh * d];
        let mut dg = vec![0f32; b * t * kk];
        // Undo the rotation: x0 = y0 c + y1 s, x1 = -y0 s + y1 c.
        let unrotate = |dst: &mut [f32], src: &[f32], ti: usize| {
            dst.copy_from_slice(src);
            if let Some((cs, sn, il)) = &tab {
                for (d0, d1, p) in pairs(d, *il) {
                    let (co, si) = (cs[ti * (d / 2) + p], sn[ti * (d / 2) + p]);
                    dst[d0] = src[d0] * co + src[d1] * si;
                    dst[d1] = -src[d0] * si + src[d1] * co;
                }
            }
        };
        for (bk, (dq, dk, dv, dgp)) in parts.into_iter().enumerate() {
            let (bi, kh) = (bk / hkv, bk % hkv);
            for ti in 0..t {
                let row = &mut dqkv[(bi * t + ti) * nh * d..(bi * t + ti + 1) * nh * d];
                for r in 0..rep {
                    let hi = kh * rep + r;
                    unrotate(&mut row[hi * d..(hi + 1) * d], &dq[(r * t + ti) * d..][..d], ti);
                }
                unrotate(&mut row[(h + kh) * d..(h + kh + 1) * d], &dk[ti * d..(ti + 1) * d], ti);
                row[(h + hkv + kh) * d..(h + hkv + kh + 1) * d].copy_from_slice(&dv[ti * d..(ti + 1) * d]);
            }
            for (x, y) in dg[bi * t * kk..(bi + 1) * t * kk].iter_mut().zip(&dgp) {
                *x += y;
            }
        }
        Ok((dqkv, dg))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::train::device::cuda::{grid1, grid_rows, launch, view};
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig};
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::{CudaStorage, Storage};

    /// Rows (queries or keys) per block of the attention kernels.
    const TILE: usize = 64;

    /// The kernels' shape at head dim `d` (focus_train.cu's `Cfg`): rows per streamed tile,
    /// whether the 16-row A operands stay in registers (else shared memory), and how many
    /// blocks share a key tile in `attn_bwd_dkdv` (2: one for dV, one for dK).
    fn shape(d: usize) -> (usize, bool, usize) {
        if d == 64 {
            (64, true, 1)
        } else {
            (32, false, 2)
        }
    }

    /// Dynamic shared memory of attention kernel `kernel` (0 forward, 1 dq, 2 dkdv) at head dim
    /// `d` with `km` membership slots: what `smem_bytes` in focus_train.cu computes.
    fn smem_bytes(d: usize, km: usize, kernel: usize) -> u32 {
        let (bn, areg, _) = shape(d);
        let l = d + 8;
        let a_tiles = match (areg, kernel) {
            (true, _) => 0,
            (false, 0) => 1,
            (false, _) => 2,
        };
        let sums = if kernel == 2 { 4 * bn * 4 } else { 0 };
        ((a_tiles * TILE * l + 4 * bn * l) * 2 + 2 * bn * km * 4 + sums) as u32
    }

    /// The window arguments of the kernels: (window, sink, span), span i32::MAX without a
    /// sliding window.
    fn masks(c: &SoftAttention) -> (i32, i32, i32) {
        let clamp = |x: usize| x.min(i32::MAX as usize) as i32;
        (clamp(c.window), clamp(c.sink), c.span.map_or(i32::MAX, clamp))
    }

    /// log2(e) / sqrt(D): the score scale in the kernels' log2 units.
    fn scale_log2(c: &SoftAttention) -> f32 {
        std::f32::consts::LOG2_E / (c.head_dim as f32).sqrt()
    }

    /// The kernels' name part of the gate and soft-cap (`log`, `log_cap`, ...), the gate's
    /// parameter and the soft-cap argument (0 for the kernels without one, which ignore it).
    fn gate_name(c: &SoftAttention) -> (String, f32, f32) {
        let (name, param) = match (c.gate, c.hard) {
            (GateFn::None, _) => ("none", 0.0),
            (GateFn::Log { eps }, Some(_)) => ("hard", eps),
            (GateFn::Log { eps }, None) => ("log", eps),
            (GateFn::Paper { lambda }, _) => ("paper", lambda),
        };
        match c.softcap {
            Some(cap) => (format!("{name}_cap"), param, cap),
            None => (name.to_string(), param, 0.0),
        }
    }

    fn km(g: GateFn, k: usize) -> candle_core::Result<usize> {
        Ok(match (g, k) {
            (GateFn::None, _) => 8,
            (_, 1..=8) => 8,
            (_, 9..=16) => 16,
            _ => candle_core::bail!("the CUDA training attention takes K <= {CUDA_MAX_GROUPS} groups, not {k}"),
        })
    }

    /// GATE_HARD's top-k bits (B*T u16) of the f32 memberships `g`, or `None` for the soft gate.
    fn topk_bits(c: &SoftAttention, dev: &CudaDevice, g: Option<&CudaView<f32>>, groups: usize) -> candle_core::Result<Option<CudaSlice<u16>>> {
        let (Some(top), Some(g)) = (c.hard, g) else { return Ok(None) };
        let n = c.b * c.t;
        let bits = unsafe { dev.alloc::<u16>(n)? };
        let (ni, gi, ti) = (n as i32, groups as i32, top as i32);
        launch!(dev, "topk_bits", grid1(n), g, &bits, &ni, &gi, &ti);
        Ok(Some(bits))
    }

    fn dname(dt: DType) -> candle_core::Result<&'static str> {
        Ok(match dt {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            d => candle_core::bail!("the CUDA training attention takes f32 or bf16, not {d:?}"),
        })
    }

    /// The launch of attention kernel `kernel` (0 forward, 1 dq, 2 dkdv): one block of 128
    /// threads per 64-row tile, head and sequence (and part, for dkdv).
    fn tiles(c: &SoftAttention, km: usize, kernel: usize) -> LaunchConfig {
        let parts = if kernel == 2 { shape(c.head_dim).2 } else { 1 };
        LaunchConfig { grid_dim: (c.t.div_ceil(TILE) as u32, c.heads as u32, (c.b * parts) as u32), block_dim: (128, 1, 1), shared_mem_bytes: smem_bytes(c.head_dim, km, kernel) }
    }

    /// Rotated q, k and v in bf16 from qkv (f32 or bf16).
    fn rope_split(c: &SoftAttention, dev: &CudaDevice, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaSlice<half::bf16>, CudaSlice<half::bf16>, CudaSlice<half::bf16>)> {
        if !CUDA_HEAD_DIMS.contains(&c.head_dim) {
            candle_core::bail!("the CUDA training attention takes head dims {CUDA_HEAD_DIMS:?}, not {}", c.head_dim);
        }
        let (b, t, h, hkv, d) = (c.b, c.t, c.heads, c.kv_heads, c.head_dim);
        let qr = unsafe { dev.alloc::<half::bf16>(b * h * t * d)? };
        let kr = unsafe { dev.alloc::<half::bf16>(b * hkv * t * d)? };
        let vr = unsafe { dev.alloc::<half::bf16>(b * hkv * t * d)? };
        let n = b * t * c.nh() * d / 2;
        let (bi, ti, hi, hk, di) = (b as i32, t as i32, h as i32, hkv as i32, d as i32);
        let null = 0u64;
        let guards = c.rope.as_ref().map(|(cs, sn, il)| (cs.storage_and_layout(), sn.storage_and_layout(), *il as i32));
        let tabs = match &guards {
            Some(((cg, cl), (sg, sl), il)) => match (&**cg, &**sg) {
                (Storage::Cuda(cs), Storage::Cuda(sn)) => Some((view::<f32>(cs, cl)?, view::<f32>(sn, sl)?, *il)),
                _ => candle_core::bail!("RoPE tables must be on the device"),
            },
            None => None,
        };
        macro_rules! go {
            ($t:ty, $name:expr) => {{
                let x = view::<$t>(s, l)?;
                match &tabs {
                    Some((cs, sn, il)) => launch!(dev, $name, grid1(n), &x, cs, sn, &qr, &kr, &vr, &bi, &ti, &hi, &hk, &di, il),
                    None => launch!(dev, $name, grid1(n), &x, &null, &null, &qr, &kr, &vr, &bi, &ti, &hi, &hk, &di, &0i32),
                }
            }};
        }
        match s.dtype() {
            DType::BF16 => go!(half::bf16, "rope_split_bf16"),
            DType::F32 => go!(f32, "rope_split_f32"),
            d => candle_core::bail!("the CUDA training attention takes f32 or bf16, not {d:?}"),
        }
        Ok((qr, kr, vr))
    }

    impl AttnOp {
        pub(super) fn cuda(&self, s: &CudaStorage, l: &Layout, g: Option<(&CudaStorage, &Layout)>) -> candle_core::Result<(CudaStorage, Shape)> {
            let c = &self.cfg;
            let dev = s.device().clone();
            let (qr, kr, vr) = rope_split(c, &dev, s, l)?;
            let k = g.map_or(0, |(_, gl)| gl.dims()[2]);
            let (gname, gparam, cap) = gate_name(c);
            let kmv = km(c.gate, k)?;
            let name = format!("attn_fwd_{gname}_k{kmv}_d{}_{}", c.head_dim, dname(s.dtype())?);
            let lse = unsafe { dev.alloc::<f32>(c.b * c.heads * c.t)? };
            let (t, h, hkv, kk) = (c.t as i32, c.heads as i32, c.kv_heads as i32, k as i32);
            let (w, sk, sp) = masks(c);
            let sl2 = scale_log2(c);
            let null = 0u64;
            let cfg = tiles(c, kmv, 0);
            macro_rules! go {
                ($t:ty) => {{
                    let out = unsafe { dev.alloc::<$t>(c.b * c.t * c.heads * c.head_dim)? };
                    match g {
                        Some((gs, gl)) => {
                            let gv = view::<f32>(gs, gl)?;
                            match topk_bits(c, &dev, Some(&gv), k)? {
                                Some(bits) => launch!(&dev, &name, cfg, &qr, &kr, &vr, &gv, &bits, &out, &lse, &t, &h, &hkv, &kk, &w, &sk, &sp, &sl2, &gparam, &cap),
                                None => launch!(&dev, &name, cfg, &qr, &kr, &vr, &gv, &null, &out, &lse, &t, &h, &hkv, &kk, &w, &sk, &sp, &sl2, &gparam, &cap),
                            }
                        }
                        None => launch!(&dev, &name, cfg, &qr, &kr, &vr, &null, &null, &out, &lse, &t, &h, &hkv, &kk, &w, &sk, &sp, &sl2, &gparam, &cap),
                    }
                    CudaStorage::wrap_cuda_slice(out, dev.clone())
                }};
            }
            let out = match s.dtype() {
                DType::BF16 => go!(half::bf16),
                _ => go!(f32),
            };
            *self.saved.lock().unwrap() = Some(Saved::Cuda(lse));
            Ok((out, Shape::from((c.b * c.t, c.heads * c.head_dim))))
        }
    }

    pub(super) fn backward(op: &AttnBwd, s1: &CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout, s3: &CudaStorage, l3: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let c = &op.cfg;
        let dev = s1.device().clone();
        let (b, t, h, hkv, d) = (c.b, c.t, c.heads, c.kv_heads, c.head_dim);
        let lse = match op.saved.lock().unwrap().take() {
            Some(Saved::Cuda(v)) => v,
            _ => candle_core::bail!("fused attention: the forward pass kept no CUDA state"),
        };
        let (qr, kr, vr) = rope_split(c, &dev, s1, l1)?;
        // dO in (B, H, T, D) bf16 and D = rowsum(dO * O).
        let dot = unsafe { dev.alloc::<half::bf16>(b * h * t * d)? };
        let dd = unsafe { dev.alloc::<f32>(b * h * t)? };
        let (bi, ti, hi, hk, di) = (b as i32, t as i32, h as i32, hkv as i32, d as i32);
        if s2.dtype() != s3.dtype() {
            candle_core::bail!("fused attention: output {:?} and its gradient {:?} differ in dtype", s2.dtype(), s3.dtype());
        }
        match s2.dtype() {
            DType::BF16 => {
                let (o, dg) = (view::<half::bf16>(s2, l2)?, view::<half::bf16>(s3, l3)?);
                launch!(&dev, "attn_bwd_prep_bf16", grid_rows(b * t * h), &dg, &o, &dot, &dd, &bi, &ti, &hi, &di);
            }
            DType::F32 => {
                let (o, dg) = (view::<f32>(s2, l2)?, view::<f32>(s3, l3)?);
                launch!(&dev, "attn_bwd_prep_f32", grid_rows(b * t * h), &dg, &o, &dot, &dd, &bi, &ti, &hi, &di);
            }
            other => candle_core::bail!("fused attention: gradient dtype {other:?}"),
        }
        let guard = op.g.as_ref().map(|g| g.storage_and_layout());
        let gv = match &guard {
            Some((gs, gl)) => match &**gs {
                Storage::Cuda(gs) => Some(view::<f32>(gs, gl)?),
                _ => candle_core::bail!("memberships must be on the device"),
            },
            None => None,
        };
        let k = op.g.as_ref().map_or(0, |g| g.dims()[2]);
        let (gname, gparam, cap) = gate_name(c);
        let kmv = km(c.gate, k)?;
        let part = b * h * t * d;
        let dq = unsafe { dev.alloc::<f32>(part)? };
        let dk = unsafe { dev.alloc::<f32>(part)? };
        let dv = unsafe { dev.alloc::<f32>(part)? };
        let gated = gv.is_some();
        let dga = unsafe { dev.alloc::<f32>((b * h * t * k).max(1))? };
        let dgb = unsafe { dev.alloc::<f32>((b * h * t * k).max(1))? };
        let kk = k as i32;
        let (w, sk, sp) = masks(c);
        let sl2 = scale_log2(c);
        let null = 0u64;
        let dq_name = format!("attn_bwd_dq_{gname}_k{kmv}_d{d}");
        let kv_name = format!("attn_bwd_dkdv_{gname}_k{kmv}_d{d}");
        let (cq, ckv) = (tiles(c, kmv, 1), tiles(c, kmv, 2));
        match (&gv, topk_bits(c, &dev, gv.as_ref(), k)?) {
            (Some(gv), Some(bits)) => {
                launch!(&dev, &dq_name, cq, &qr, &kr, &vr, gv, &bits, &dot, &lse, &dd, &dq, &dga, &ti, &hi, &hk, &kk, &w, &sk, &sp, &sl2, &gparam, &cap);
                launch!(&dev, &kv_name, ckv, &qr, &kr, &vr, gv, &bits, &dot, &lse, &dd, &dk, &dv, &dgb, &ti, &hi, &hk, &kk, &w, &sk, &sp, &sl2, &gparam, &cap);
            }
            (Some(gv), None) => {
                launch!(&dev, &dq_name, cq, &qr, &kr, &vr, gv, &null, &dot, &lse, &dd, &dq, &dga, &ti, &hi, &hk, &kk, &w, &sk, &sp, &sl2, &gparam, &cap);
                launch!(&dev, &kv_name, ckv, &qr, &kr, &vr, gv, &null, &dot, &lse, &dd, &dk, &dv, &dgb, &ti, &hi, &hk, &kk, &w, &sk, &sp, &sl2, &gparam, &cap);
            }
            (None, _) => {
                launch!(&dev, &dq_name, cq, &qr, &kr, &vr, &null, &null, &dot, &lse, &dd, &dq, &dga, &ti, &hi, &hk, &kk, &w, &sk, &sp, &sl2, &gparam, &cap);
                launch!(&dev, &kv_name, ckv, &qr, &kr, &vr, &null, &null, &dot, &lse, &dd, &dk, &dv, &dgb, &ti, &hi, &hk, &kk, &w, &sk, &sp, &sl2, &gparam, &cap);
            }
        }
        // d(qkv), RoPE undone, in the dtype of qkv.
        let n = b * t * c.nh() * d / 2;
        let rope_guards = c.rope.as_ref().map(|(cs, sn, il)| (cs.storage_and_layout(), sn.storage_and_layout(), *il as i32));
        let tabs = match &rope_guards {
            Some(((cg, cl), (sg, sl), il)) => match (&**cg, &**sg) {
                (Storage::Cuda(cs), Storage::Cuda(sn)) => Some((view::<f32>(cs, cl)?, view::<f32>(sn, sl)?, *il)),
                _ => candle_core::bail!("RoPE tables must be on the device"),
            },
            None => None,
        };
        macro_rules! finish {
            ($t:ty, $name:expr) => {{
                let out = unsafe { dev.alloc::<$t>(b * t * c.nh() * d)? };
                match &tabs {
                    Some((cs, sn, il)) => launch!(&dev, $name, grid1(n), &dq, &dk, &dv, cs, sn, &out, &bi, &ti, &hi, &hk, &di, il),
                    None => launch!(&dev, $name, grid1(n), &dq, &dk, &dv, &null, &null, &out, &bi, &ti, &hi, &hk, &di, &0i32),
                }
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let dqkv = match s1.dtype() {
            DType::BF16 => finish!(half::bf16, "attn_bwd_finish_bf16"),
            _ => finish!(f32, "attn_bwd_finish_f32"),
        };
        if gated {
            let dg = unsafe { dev.alloc::<f32>(b * t * k)? };
            launch!(&dev, "attn_dg_reduce", grid1(b * t * k), &dga, &dgb, &dg, &bi, &ti, &hi, &kk);
            *op.stash.lock().unwrap() = Some(Stashed::Cuda(CudaStorage::wrap_cuda_slice(dg, dev.clone())));
        }
        Ok((dqkv, l1.shape().clone()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The fused op against the composed reference (RoPE by candle's `rope_slow` /
    //! `rope_i_slow`, `soft::soft_plan`, `attend_batch`): forward values and gradients with
    //! respect to qkv (so q, k and v) and g, for both gates and no gate, several windows, GQA,
    //! both RoPE layouts and none, sliding windows and soft-caps of the model's own.
    use super::*;
    use crate::focus::adapter::AdapterConfig;
    use crate::attention::{attend_batch, soft::{soft_plan, straight_through_plan}, LayerPlan};
    use crate::focus::mask::TopK;
    use crate::focus::adapter::{AdapterSpec, Gate};
    use crate::focus::mask::causal_bias;
    use candle_core::{Device, Var, D};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[derive(Clone, Copy)]
    pub(crate) struct Case {
        pub b: usize,
        pub t: usize,
        pub h: usize,
        pub hkv: usize,
        pub d: usize,
        pub k: usize,
        pub window: usize,
        /// Attention sinks [ours].
        pub sink: usize,
        pub gate: Option<Gate>,
        pub rope: Option<bool>,
        /// The layer's own sliding window (keys i - j < W), as Gemma 2/3's local layers.
        pub span: Option<usize>,
        /// The layer's soft-cap (Gemma 2).
        pub softcap: Option<f32>,
        /// Straight-through through the hard top-k mask of this k (log gate backward).
        pub hard: Option<usize>,
    }

    pub(crate) fn adapter_cfg(k: usize, window: usize, sink: usize, gate: Gate) -> AdapterConfig {
        let id = crate::focus::identity::BaseModel { arch: "llama".into(), name: "t".into(), n_layers: 1, d_model: 8, n_heads: 1, n_kv_heads: 1, vocab: 8, fingerprint: String::new() };
        let a = crate::focus::adapter::Adapter::random(&id, &Device::Cpu, &AdapterSpec { groups: k, window, sink, gate, lambda: 4.0, ..Default::default() }, 1).unwrap();
        a.config
    }

    /// The op and the composed reference on the same inputs; returns (output, d qkv, d g) of
    /// each, for the loss sum(out * w).
    pub(crate) fn both(c: &Case, dev: &Device, seed: u64) -> [(Vec<f32>, Vec<f32>, Option<Vec<f32>>); 2] {
        both_in(c, dev, seed, DType::F32)
    }

    /// `both` with the op's qkv input cast to `dtype` (the reference always takes f32).
    pub(crate) fn both_in(c: &Case, dev: &Device, seed: u64, dtype: DType) -> [(Vec<f32>, Vec<f32>, Option<Vec<f32>>); 2] {
        let mut rng = StdRng::seed_from_u64(seed);
        let nh = c.h + 2 * c.hkv;
        let mut rand = |n: usize, s: f32| -> Vec<f32> { (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * s).collect() };
        let qkv0 = rand(c.b * c.t * nh * c.d, 1.5);
        // Memberships: rows of a softmax (positive, sum to 1), as Sinkhorn gives.
        let graw = rand(c.b * c.t * c.k, 3.0);
        let wout = rand(c.b * c.t * c.h * c.d, 1.0);
        let qkv = Var::from_tensor(&Tensor::from_vec(qkv0, (c.b * c.t, nh * c.d), dev).unwrap()).unwrap();
        let glog = Var::from_tensor(&Tensor::from_vec(graw, (c.b, c.t, c.k), dev).unwrap()).unwrap();
        let g = candle_nn::ops::softmax(glog.as_tensor(), D::Minus1).unwrap();
        let w = Tensor::from_vec(wout, (c.b * c.t, c.h * c.d), dev).unwrap();
        let rope = c.rope.map(|il| {
            let (cs, sn) = crate::model::block::rope_tables(c.t, c.d, 10000.0, dev).unwrap();
            (cs, sn, il)
        });
        let cfg = c.gate.map(|gt| adapter_cfg(c.k, c.window, c.sink, gt));
        // Straight-through: the log gate's backward, whatever the adapter's gate (as step.rs).
        let gate = match (&cfg, c.hard) {
            (Some(cfg), Some(_)) => GateFn::Log { eps: cfg.log_eps as f32 },
            _ => cfg.as_ref().map_or(GateFn::None, GateFn::of),
        };
        let own = crate::attention::LayerAttention { window: c.span, softcap: c.softcap.map(f64::from), ..Default::default() };
        let attn = SoftAttention { b: c.b, t: c.t, heads: c.h, kv_heads: c.hkv, head_dim: c.d, rope: rope.clone(), gate, window: c.window, sink: c.sink, span: own.span(c.t), softcap: c.softcap, hard: c.hard };
        let grads = |out: &Tensor| {
            let gs = (out.to_dtype(DType::F32).unwrap() * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let v = |t: &Tensor| t.flatten_all().unwrap().to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
            // No gradient path to g at all (no gate, or the reference's all-local plan): zeros.
            let gg = c.gate.map(|_| gs.get(glog.as_tensor()).map_or(vec![0.0; c.b * c.t * c.k], v));
            (v(out), v(gs.get(qkv.as_tensor()).unwrap()), gg)
        };
        let fused = grads(&attn.forward(&qkv.as_tensor().to_dtype(dtype).unwrap(), Some(&g)).unwrap());
        // The composed reference.
        let heads = |from: usize, n: usize| qkv.as_tensor().narrow(1, from * c.d, n * c.d).unwrap().reshape((c.b, c.t, n, c.d)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
        let (mut q, mut k, v) = (heads(0, c.h), heads(c.h, c.hkv), heads(c.h + c.hkv, c.hkv));
        if let Some((cs, sn, il)) = &rope {
            let rot = |x: &Tensor| if *il { candle_nn::rotary_emb::rope_i_slow(x, cs, sn).unwrap() } else { candle_nn::rotary_emb::rope_slow(x, cs, sn).unwrap() };
            q = rot(&q);
            k = rot(&k);
        }
        let plan = match (&cfg, c.hard) {
            (Some(cfg), Some(k)) if !crate::focus::mask::all_local(c.t, c.window) => straight_through_plan(&g, cfg, TopK::new(k, c.k).unwrap()).unwrap(),
            (Some(cfg), None) if !crate::focus::mask::all_local(c.t, c.window) => soft_plan(&g, cfg).unwrap(),
            _ => LayerPlan::Dense,
        };
        let o = attend_batch(&q, &k, &v, &plan, &own, &causal_bias(c.t, dev).unwrap()).unwrap();
        let o = o.transpose(1, 2).unwrap().reshape((c.b * c.t, c.h * c.d)).unwrap();
        let composed = grads(&o);
        [fused, composed]
    }

    pub(crate) fn rel_err(a: &[f32], b: &[f32]) -> f32 {
        let num: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt();
        let den: f32 = b.iter().map(|y| y * y).sum::<f32>().sqrt().max(1e-12);
        num / den
    }

    pub(crate) fn norm(a: &[f32]) -> f32 {
        a.iter().map(|x| x * x).sum::<f32>().sqrt()
    }

    pub(crate) const CASES: &[Case] = &[
        Case { b: 2, t: 37, h: 4, hkv: 2, d: 16, k: 4, window: 5, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
        Case { b: 1, t: 50, h: 3, hkv: 1, d: 8, k: 3, window: 0, sink: 0, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: None },
        Case { b: 2, t: 41, h: 2, hkv: 2, d: 12, k: 5, window: 9, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: None },
        Case { b: 1, t: 33, h: 4, hkv: 1, d: 16, k: 8, window: 2, sink: 0, gate: Some(Gate::Paper), rope: None, span: None, softcap: None, hard: None },
        Case { b: 2, t: 30, h: 2, hkv: 1, d: 8, k: 4, window: 40, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
        Case { b: 2, t: 29, h: 6, hkv: 3, d: 8, k: 4, window: 3, sink: 0, gate: None, rope: Some(true), span: None, softcap: None, hard: None },
        // Attention sinks [ours]: small windows, so that the first tokens are distant.
        Case { b: 2, t: 37, h: 4, hkv: 2, d: 16, k: 4, window: 5, sink: 1, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
        Case { b: 1, t: 50, h: 3, hkv: 1, d: 8, k: 3, window: 0, sink: 4, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: None },
        Case { b: 2, t: 41, h: 2, hkv: 2, d: 12, k: 5, window: 9, sink: 4, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: None },
        Case { b: 1, t: 33, h: 4, hkv: 1, d: 16, k: 8, window: 2, sink: 1, gate: Some(Gate::Paper), rope: None, span: None, softcap: None, hard: None },
        Case { b: 2, t: 30, h: 2, hkv: 1, d: 8, k: 4, window: 4, sink: 40, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
        // A sliding window of the model's own (Gemma 2/3's local layers), with and without a
        // gate, and sinks that fall outside it.
        Case { b: 2, t: 45, h: 4, hkv: 2, d: 16, k: 4, window: 5, sink: 2, gate: Some(Gate::Log), rope: Some(false), span: Some(17), softcap: None, hard: None },
        Case { b: 1, t: 40, h: 2, hkv: 1, d: 8, k: 3, window: 3, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: Some(9), softcap: None, hard: None },
        Case { b: 2, t: 30, h: 2, hkv: 1, d: 12, k: 4, window: 3, sink: 0, gate: None, rope: Some(true), span: Some(7), softcap: None, hard: None },
        // The head dims of Gemma 2/3 and Qwen (128, 256), GQA, sinks, both gates and none.
        Case { b: 2, t: 45, h: 4, hkv: 1, d: 128, k: 8, window: 6, sink: 1, gate: Some(Gate::Log), rope: Some(false), span: Some(20), softcap: None, hard: None },
        Case { b: 1, t: 37, h: 4, hkv: 2, d: 128, k: 4, window: 4, sink: 4, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: None },
        Case { b: 2, t: 40, h: 2, hkv: 1, d: 256, k: 4, window: 5, sink: 4, gate: Some(Gate::Paper), rope: Some(false), span: Some(16), softcap: None, hard: None },
        Case { b: 1, t: 33, h: 4, hkv: 1, d: 256, k: 8, window: 3, sink: 1, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: None },
        Case { b: 1, t: 30, h: 2, hkv: 1, d: 256, k: 4, window: 3, sink: 0, gate: None, rope: Some(false), span: Some(11), softcap: None, hard: None },
        // Soft-capping (Gemma 2), with and without its sliding window, both gates and none, GQA,
        // caps near the scores (about 0.75 here) so that tanh bends them; all-local; Gemma 2's
        // own cap of 50 at its head dim.
        Case { b: 2, t: 45, h: 4, hkv: 2, d: 16, k: 4, window: 5, sink: 2, gate: Some(Gate::Log), rope: Some(false), span: Some(17), softcap: Some(1.0), hard: None },
        Case { b: 1, t: 40, h: 2, hkv: 1, d: 8, k: 3, window: 3, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: Some(0.7), hard: None },
        Case { b: 2, t: 30, h: 2, hkv: 1, d: 12, k: 4, window: 3, sink: 0, gate: None, rope: Some(true), span: Some(7), softcap: Some(1.5), hard: None },
        Case { b: 2, t: 30, h: 2, hkv: 1, d: 8, k: 4, window: 40, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: Some(1.0), hard: None },
        Case { b: 1, t: 41, h: 4, hkv: 2, d: 256, k: 8, window: 4, sink: 1, gate: Some(Gate::Paper), rope: Some(false), span: Some(16), softcap: Some(2.0), hard: None },
        Case { b: 2, t: 37, h: 4, hkv: 2, d: 256, k: 4, window: 3, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: Some(50.0), hard: None },
        // Straight-through (the hard top-k mask forward, the log gate's gradient back), from
        // adapters of either gate: k of 1 to 3 of K 3 to 8, sinks, GQA, a sliding window of the
        // model's own, a soft-cap.
        Case { b: 2, t: 37, h: 4, hkv: 2, d: 16, k: 4, window: 5, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: Some(2) },
        Case { b: 1, t: 50, h: 3, hkv: 1, d: 8, k: 8, window: 3, sink: 1, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: Some(2) },
        Case { b: 2, t: 41, h: 2, hkv: 2, d: 12, k: 3, window: 0, sink: 4, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: Some(1) },
        Case { b: 2, t: 45, h: 4, hkv: 2, d: 16, k: 5, window: 5, sink: 2, gate: Some(Gate::Paper), rope: Some(false), span: Some(17), softcap: None, hard: Some(3) },
        Case { b: 1, t: 40, h: 4, hkv: 1, d: 128, k: 8, window: 4, sink: 1, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: Some(1.0), hard: Some(2) },
    ];

    #[test]
    fn fused_attention_matches_the_composed_reference_with_gradients() {
        for (n, c) in CASES.iter().enumerate() {
            let [(fo, fq, fg), (co, cq, cg)] = both(c, &Device::Cpu, 7 + n as u64);
            let what = format!("case {n} (d {}, {:?}, window {}, sink {}, span {:?}, rope {:?}, softcap {:?}, hard {:?})", c.d, c.gate, c.window, c.sink, c.span, c.rope, c.softcap, c.hard);
            assert!(rel_err(&fo, &co) < 1e-5, "{what}: output {}", rel_err(&fo, &co));
            assert!(norm(&cq) > 1e-3, "{what}: the reference d qkv vanishes");
            assert!(rel_err(&fq, &cq) < 1e-4, "{what}: d qkv {}", rel_err(&fq, &cq));
            if let (Some(fg), Some(cg)) = (&fg, &cg) {
                // The all-local case (every key local or a sink) has no gate gradient at all;
                // elsewhere it must be there.
                if c.window + 1 < c.t && c.sink + c.window + 1 < c.t {
                    assert!(norm(cg) > 1e-4, "{what}: the reference d g vanishes");
                    assert!(rel_err(fg, cg) < 1e-4, "{what}: d g {}", rel_err(fg, cg));
                } else {
                    assert!(norm(fg) == 0.0 && norm(cg) < 1e-6, "{what}: all-local, d g {} / {}", norm(fg), norm(cg));
                }
            }
        }
    }

    /// The CUDA kernels (bf16 tiles, f32 accumulation) on `cases` against the composed
    /// reference in f32 on the device, each case with attention sinks [ours] s = 0, 1, 4, from
    /// f32 and bf16 inputs: outputs and gradients with respect to qkv and g.
    #[cfg(feature = "cuda")]
    fn cuda_matches_the_reference(cases: &[Case], seed: u64) {
        let dev = crate::device::cuda(0).expect("these tests need a CUDA GPU");
        for (n, c) in cases.iter().flat_map(|c| [0, 1, 4].map(|sink| Case { sink, ..*c })).enumerate() {
            let c = &c;
            for dtype in [DType::F32, DType::BF16] {
                let [(fo, fq, fg), (co, cq, cg)] = both_in(c, &dev, seed + n as u64, dtype);
                let what = format!("case {n} {dtype:?} (d {}, {:?}, T {}, H {}/{}, K {}, window {}, sink {}, span {:?}, rope {:?}, softcap {:?}, hard {:?})", c.d, c.gate, c.t, c.h, c.hkv, c.k, c.window, c.sink, c.span, c.rope, c.softcap, c.hard);
                let (eo, eq) = (rel_err(&fo, &co), rel_err(&fq, &cq));
                let eg = match (&fg, &cg) {
                    (Some(fg), Some(cg)) if c.window + 1 < c.t => rel_err(fg, cg),
                    (Some(fg), Some(_)) => norm(fg),
                    _ => 0.0,
                };
                println!("{what}: output {eo:.2e}, d qkv {eq:.2e}, d g {eg:.2e}");
                assert!(norm(&cq) > 1e-3, "{what}: the reference d qkv vanishes");
                assert!(eo < 1e-2 && eq < 2e-2 && eg < 2e-2, "{what}: output {eo:e}, d qkv {eq:e}, d g {eg:e}");
            }
        }
    }

    /// Head dim 64 (register-resident operands, 64-key tiles): GQA, both gates and none,
    /// windows from 0 to all-local, lengths that are not multiples of the 64-row tiles, a
    /// sliding window of the model's own.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fused_attention_matches_the_composed_reference_with_gradients() {
        cuda_matches_the_reference(
            &[
                Case { b: 2, t: 200, h: 6, hkv: 2, d: 64, k: 8, window: 16, sink: 0, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: None },
                Case { b: 1, t: 130, h: 3, hkv: 3, d: 64, k: 4, window: 0, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: None, softcap: None, hard: None },
                Case { b: 2, t: 64, h: 2, hkv: 1, d: 64, k: 16, window: 20, sink: 0, gate: Some(Gate::Log), rope: None, span: None, softcap: None, hard: None },
                Case { b: 1, t: 333, h: 4, hkv: 2, d: 64, k: 12, window: 128, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: None },
                Case { b: 2, t: 100, h: 4, hkv: 1, d: 64, k: 8, window: 5, sink: 0, gate: None, rope: Some(true), span: None, softcap: None, hard: None },
                Case { b: 1, t: 257, h: 2, hkv: 2, d: 64, k: 3, window: 300, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
                Case { b: 2, t: 230, h: 4, hkv: 2, d: 64, k: 8, window: 12, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: Some(90), softcap: None, hard: None },
                // Long enough that most tiles are wholly distant or wholly local (the kernels'
                // tile classes skip the per-pair position tests there).
                Case { b: 1, t: 700, h: 4, hkv: 1, d: 64, k: 8, window: 100, sink: 0, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: None },
                Case { b: 1, t: 600, h: 2, hkv: 1, d: 64, k: 16, window: 70, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: Some(400), softcap: None, hard: None },
            ],
            40,
        );
    }

    /// Head dims 128 and 256 (operands in shared memory, 32-key tiles, dK and dV in separate
    /// blocks): Gemma 3's shape (4 query heads on 1 kv head, halves rotated, a sliding window
    /// of the model's own on its local layers) and others, K up to 16, lengths that are not
    /// multiples of the tiles.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fused_attention_head_dims_128_and_256_match_the_composed_reference_with_gradients() {
        cuda_matches_the_reference(
            &[
                Case { b: 2, t: 200, h: 4, hkv: 1, d: 256, k: 8, window: 16, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
                Case { b: 1, t: 130, h: 2, hkv: 2, d: 256, k: 4, window: 0, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: None },
                Case { b: 2, t: 96, h: 4, hkv: 1, d: 256, k: 16, window: 20, sink: 0, gate: Some(Gate::Log), rope: None, span: Some(40), softcap: None, hard: None },
                Case { b: 1, t: 333, h: 4, hkv: 1, d: 256, k: 12, window: 128, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: Some(150), softcap: None, hard: None },
                Case { b: 2, t: 100, h: 4, hkv: 1, d: 256, k: 8, window: 5, sink: 0, gate: None, rope: Some(false), span: Some(33), softcap: None, hard: None },
                Case { b: 1, t: 257, h: 2, hkv: 1, d: 256, k: 3, window: 300, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: None, hard: None },
                Case { b: 2, t: 200, h: 6, hkv: 2, d: 128, k: 8, window: 16, sink: 0, gate: Some(Gate::Log), rope: Some(true), span: Some(70), softcap: None, hard: None },
                Case { b: 1, t: 150, h: 4, hkv: 4, d: 128, k: 16, window: 10, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: None, softcap: None, hard: None },
                Case { b: 1, t: 77, h: 2, hkv: 1, d: 128, k: 5, window: 3, sink: 0, gate: None, rope: None, span: None, softcap: None, hard: None },
                // Llama 3's head dim and GQA 4:1 at a length where most tiles are wholly distant.
                Case { b: 1, t: 700, h: 8, hkv: 2, d: 128, k: 8, window: 100, sink: 0, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: None, hard: None },
                Case { b: 1, t: 520, h: 4, hkv: 1, d: 128, k: 16, window: 40, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: Some(300), softcap: None, hard: None },
            ],
            140,
        );
    }

    /// Soft-capping (Gemma 2; the `_cap` kernels) at every head dim, both gates and none, with
    /// and without a sliding window of the model's own, caps near the scores (about 0.75 at
    /// these inputs) so that tanh bends them, and Gemma 2's shape (2 query heads a kv head, head
    /// dim 256) with its cap of 50.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fused_attention_soft_capped_matches_the_composed_reference_with_gradients() {
        cuda_matches_the_reference(
            &[
                Case { b: 2, t: 200, h: 6, hkv: 2, d: 64, k: 8, window: 16, sink: 0, gate: Some(Gate::Log), rope: Some(true), span: None, softcap: Some(1.0), hard: None },
                Case { b: 1, t: 230, h: 4, hkv: 2, d: 64, k: 12, window: 12, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: Some(90), softcap: Some(0.7), hard: None },
                Case { b: 2, t: 100, h: 4, hkv: 1, d: 64, k: 8, window: 5, sink: 0, gate: None, rope: Some(true), span: Some(40), softcap: Some(1.5), hard: None },
                Case { b: 2, t: 200, h: 6, hkv: 2, d: 128, k: 8, window: 16, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: Some(70), softcap: Some(1.0), hard: None },
                Case { b: 1, t: 150, h: 4, hkv: 4, d: 128, k: 16, window: 10, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: None, softcap: Some(2.0), hard: None },
                Case { b: 1, t: 333, h: 4, hkv: 2, d: 256, k: 16, window: 128, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: Some(150), softcap: Some(1.0), hard: None },
                Case { b: 2, t: 130, h: 4, hkv: 2, d: 256, k: 4, window: 20, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: None, softcap: Some(0.8), hard: None },
                Case { b: 2, t: 100, h: 4, hkv: 1, d: 256, k: 8, window: 5, sink: 0, gate: None, rope: Some(false), span: Some(33), softcap: Some(1.0), hard: None },
                Case { b: 1, t: 257, h: 4, hkv: 2, d: 256, k: 8, window: 16, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: Some(64), softcap: Some(50.0), hard: None },
            ],
            240,
        );
    }

    /// Straight-through (the `_hard` kernels): the hard top-k mask forward, the log gate's
    /// gradient back, at every head dim, K 3 to 16, k 1 to 3, from adapters of either gate,
    /// with a sliding window of the model's own and a soft-cap, at lengths where most tiles are
    /// wholly distant.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_fused_attention_straight_through_matches_the_composed_reference_with_gradients() {
        cuda_matches_the_reference(
            &[
                Case { b: 2, t: 200, h: 6, hkv: 2, d: 64, k: 8, window: 16, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: Some(2) },
                Case { b: 1, t: 600, h: 4, hkv: 1, d: 64, k: 16, window: 70, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: Some(400), softcap: None, hard: Some(3) },
                Case { b: 2, t: 130, h: 2, hkv: 1, d: 64, k: 3, window: 0, sink: 0, gate: Some(Gate::Log), rope: None, span: None, softcap: None, hard: Some(1) },
                Case { b: 1, t: 700, h: 8, hkv: 2, d: 128, k: 8, window: 100, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: None, hard: Some(2) },
                Case { b: 2, t: 200, h: 4, hkv: 1, d: 256, k: 4, window: 16, sink: 0, gate: Some(Gate::Paper), rope: Some(false), span: Some(90), softcap: None, hard: Some(2) },
                Case { b: 1, t: 257, h: 4, hkv: 2, d: 256, k: 8, window: 16, sink: 0, gate: Some(Gate::Log), rope: Some(false), span: Some(64), softcap: Some(50.0), hard: Some(2) },
                Case { b: 2, t: 100, h: 6, hkv: 2, d: 64, k: 8, window: 12, sink: 0, gate: Some(Gate::Paper), rope: Some(true), span: None, softcap: Some(1.0), hard: Some(2) },
            ],
            340,
        );
    }

    /// The comparison above can fail: the same inputs with the other gate (or another
    /// window, or a soft-cap) give outputs and gradients far outside its tolerances.
    #[test]
    fn fused_attention_check_detects_a_wrong_gate_or_window() {
        let c = &CASES[0];
        let [(fo, fq, fg), _] = both(c, &Device::Cpu, 7);
        let paper = Case { gate: Some(Gate::Paper), ..*c };
        let [(po, pq, pg), _] = both(&paper, &Device::Cpu, 7);
        assert!(rel_err(&po, &fo) > 1e-2 && rel_err(&pq, &fq) > 1e-2 && rel_err(pg.as_ref().unwrap(), fg.as_ref().unwrap()) > 1e-2);
        let wider = Case { window: c.window + 3, ..*c };
        let [(_, wq, wg), _] = both(&wider, &Device::Cpu, 7);
        assert!(rel_err(&wq, &fq) > 1e-3 && rel_err(wg.as_ref().unwrap(), fg.as_ref().unwrap()) > 1e-2);
        // A sink [ours] changes the function: s = 4 against s = 0, both ways round.
        let sunk = Case { sink: 4, ..*c };
        let [(so, sq, sg), (co, _, _)] = both(&sunk, &Device::Cpu, 7);
        assert!(rel_err(&so, &fo) > 1e-3 && rel_err(&sq, &fq) > 1e-3 && rel_err(sg.as_ref().unwrap(), fg.as_ref().unwrap()) > 1e-2);
        assert!(rel_err(&co, &fo) > 1e-3, "the composed reference honours the sink too");
        // So does a sliding window of the model's own.
        let slid = Case { span: Some(12), ..*c };
        let [(lo, lq, lg), (lco, _, _)] = both(&slid, &Device::Cpu, 7);
        assert!(rel_err(&lo, &fo) > 1e-3 && rel_err(&lq, &fq) > 1e-3 && rel_err(lg.as_ref().unwrap(), fg.as_ref().unwrap()) > 1e-2);
        assert!(rel_err(&lco, &fo) > 1e-3, "the composed reference honours the sliding window too");
        // And so does a soft-cap.
        let capped = Case { softcap: Some(1.0), ..*c };
        let [(ko, kq, kg), (kco, _, _)] = both(&capped, &Device::Cpu, 7);
        assert!(rel_err(&ko, &fo) > 1e-3 && rel_err(&kq, &fq) > 1e-3 && rel_err(kg.as_ref().unwrap(), fg.as_ref().unwrap()) > 1e-2);
        assert!(rel_err(&kco, &fo) > 1e-3, "the composed reference caps too");
        // And the straight-through mask is not the soft gate, nor top-1 top-2.
        let hard = Case { hard: Some(2), ..*c };
        let [(ho, hq, hg), (hco, _, _)] = both(&hard, &Device::Cpu, 7);
        assert!(rel_err(&ho, &fo) > 1e-2 && rel_err(&hq, &fq) > 1e-2 && rel_err(hg.as_ref().unwrap(), fg.as_ref().unwrap()) > 1e-2);
        assert!(rel_err(&hco, &fo) > 1e-2, "the composed reference masks too");
        let top1 = Case { hard: Some(1), ..*c };
        let [(to, tq, tg), _] = both(&top1, &Device::Cpu, 7);
        assert!(rel_err(&to, &ho) > 1e-2 && rel_err(&tq, &hq) > 1e-2 && rel_err(tg.as_ref().unwrap(), hg.as_ref().unwrap()) > 1e-2);
    }
}
