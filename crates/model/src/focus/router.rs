//! The Focus router of one layer: its parameters (`Router`: W_g and the K centroids), scores
//! S = (h W_g) C^T (or cosines), then Sinkhorn (`sinkhorn.rs`) to soft memberships
//! (`LayerRouting`). `Score` says how a routing vector meets a
//! centroid. `Adapter::route` (adapter.rs, above this file) is the inference path (host
//! Sinkhorn), `Adapter::route_tensor` the differentiable one for training.

use super::mask::topk_mask;
use crate::error::Result;
use candle_core::Tensor;
use serde::{Deserialize, Serialize};

/// How a routing vector is compared with a centroid [ours: the paper uses the plain dot product].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Score {
    /// S = (h W_g) C^T, unbounded: as W_g and C grow, S / tau spreads and 10 Sinkhorn
    /// iterations no longer balance the groups (measured: dominance 0.15 -> 0.38 in 371 steps).
    #[default]
    Dot,
    /// Cosine of the angle between h W_g and each centroid (both rows L2-normalised), as in
    /// SwAV's prototypes: S / tau stays within +-1 / tau, so Sinkhorn keeps converging.
    Cosine,
}

impl Score {
    /// Scores (T x K) of routing vectors `vecs` (T x d_g) against `centroids` (K x d_g).
    /// Differentiable: only candle ops.
    pub fn scores(self, vecs: &Tensor, centroids: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Score::Dot => vecs.matmul(&centroids.t()?)?,
            Score::Cosine => l2_rows(vecs)?.matmul(&l2_rows(centroids)?.t()?)?,
        })
    }
}

/// Rows scaled to unit L2 norm (a tiny floor keeps a zero row finite).
fn l2_rows(x: &Tensor) -> Result<Tensor> {
    let norm = (x.sqr()?.sum_keepdim(1)? + 1e-12)?.sqrt()?;
    Ok(x.broadcast_div(&norm)?)
}

/// One layer's routing for one sequence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerRouting {
    pub t: usize,
    pub groups: usize,
    /// Raw scores S = (h W_g) C^T, T x K row-major.
    pub scores: Vec<f32>,
    /// Soft memberships after Sinkhorn, T x K; each row sums to 1.
    pub memberships: Vec<f32>,
    /// The routing vectors h W_g (T x d_g), kept only when routing is recorded.
    pub vectors: Option<Vec<f32>>,
    pub d_g: usize,
}

impl LayerRouting {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.memberships[i * self.groups..(i + 1) * self.groups]
    }

    /// The k groups with the largest memberships of token i, in descending membership; ties go
    /// to the lower group index so that the choice is deterministic.
    pub fn top_groups(&self, i: usize, k: usize) -> Vec<usize> {
        super::mask::top_k_indices(self.row(i), k)
    }

    /// Per-token bitmasks of the top-k groups (K <= 64 is enforced by the adapter), in
    /// parallel: at 32K tokens on one thread, 3.3 ms a layer that the GPU waited for.
    pub fn topk_masks(&self, k: usize) -> Vec<u64> {
        use rayon::prelude::*;
        (0..self.t).into_par_iter().with_min_len(1024).map(|i| topk_mask(self.row(i), k)).collect()
    }
}

/// One layer's router parameters.
#[derive(Debug, Clone)]
pub struct Router {
    /// W_g: (d_model, d_g)
    pub proj: Tensor,
    /// C: (K, d_g)
    pub centroids: Tensor,
    /// [ours] A fixed per-channel scale s (d_model,) on the router's input: the router reads
    /// h * s, not h (`AdapterConfig::input_scale`). Set once at initialisation to each channel's
    /// inverse RMS, so that a model whose normalised hidden state has huge channels (Gemma 3's
    /// norm gains reach the hundreds) gives scores on the scale of S / tau that Sinkhorn can
    /// balance; `None`: the paper's router, h W_g.
    pub input_scale: Option<Tensor>,
}

impl Router {
    /// The router's input: `h` (rows of d_model), times the input scale when there is one.
    pub fn input(&self, h: &Tensor) -> Result<Tensor> {
        Ok(match &self.input_scale {
            Some(s) => h.broadcast_mul(&s.to_dtype(h.dtype())?)?,
            None => h.clone(),
        })
    }
}


/// The routing vector and scores of one f32 row `h` on the CPU, in plain loops; `None` for any
/// other input, or parameters a gradient tracks. A generation step routes one token per layer,
/// and candle's matmul packed W_g for each of them (about a tenth of a top-k step).
pub(super) fn one_row_scores(score: Score, r: &Router, h: &Tensor) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
    use candle_core::{DType, Device, Storage};
    let host = |t: &Tensor| matches!(t.device(), Device::Cpu) && t.dtype() == DType::F32 && !t.track_op() && t.is_contiguous();
    if h.rank() != 2 || h.dim(0)? != 1 || !host(h) || !host(&r.proj) || !host(&r.centroids) || r.input_scale.as_ref().is_some_and(|s| !host(s)) {
        return Ok(None);
    }
    let ((dm, dg), (_, dg2)) = (r.proj.dims2()?, r.centroids.dims2()?);
    if h.dim(1)? != dm || dg2 != dg {
        return Ok(None);
    }
    let mut x = h.flatten_all()?.to_vec1::<f32>()?;
    if let Some(s) = &r.input_scale {
        x.iter_mut().zip(s.flatten_all()?.to_vec1::<f32>()?).for_each(|(a, b)| *a *= b);
    }
    let (ps, pl) = r.proj.storage_and_layout();
    let Storage::Cpu(p) = &*ps else { return Ok(None) };
    let w = &p.as_slice::<f32>()?[pl.start_offset()..pl.start_offset() + dm * dg];
    // v = h W_g, row after row of W_g: d_g lanes of multiply-adds. Plain `*` and `+`: this
    // crate's baseline target has no FMA, and `mul_add` became a call to the software `fmaf`
    // per weight (most of a top-k step's routing cost).
    let mut v = vec![0f32; dg];
    for (xi, row) in x.iter().zip(w.chunks_exact(dg)) {
        v.iter_mut().zip(row).for_each(|(a, b)| *a += xi * b);
    }
    let c = r.centroids.to_vec2::<f32>()?;
    let unit = |u: &[f32]| -> Vec<f32> {
        let n = (u.iter().map(|x| x * x).sum::<f32>() + 1e-12).sqrt();
        u.iter().map(|x| x / n).collect()
    };
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let scores = match score {
        Score::Dot => c.iter().map(|ci| dot(&v, ci)).collect(),
        Score::Cosine => {
            let vu = unit(&v);
            c.iter().map(|ci| dot(&vu, &unit(ci))).collect()
        }
    };
    Ok(Some((v, scores)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-row scores equal candle's matmuls, for both score functions.
    #[test]
    fn one_row_scores_equal_the_matmuls() {
        use candle_core::Device;
        let dev = Device::Cpu;
        let mut r = Router { proj: Tensor::randn(0f32, 0.1, (96, 16), &dev).unwrap(), centroids: Tensor::randn(0f32, 1.0, (8, 16), &dev).unwrap(), input_scale: None };
        let h = Tensor::randn(0f32, 1.0, (1, 96), &dev).unwrap();
        let scale = Tensor::rand(0.01f32, 3.0, 96, &dev).unwrap();
        for (score, scaled) in [(Score::Dot, false), (Score::Cosine, false), (Score::Dot, true), (Score::Cosine, true)] {
            r.input_scale = scaled.then(|| scale.clone());
            let (v, s) = one_row_scores(score, &r, &h).unwrap().expect("one host row");
            // The reference scales h itself, then multiplies: (h * s) W_g.
            let hs = if scaled { h.broadcast_mul(&scale).unwrap() } else { h.clone() };
            let vt = hs.matmul(&r.proj).unwrap();
            let want_v = vt.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let want_s = score.scores(&vt, &r.centroids).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for (a, b) in v.iter().zip(&want_v).chain(s.iter().zip(&want_s)) {
                assert!((a - b).abs() < 1e-4 * (1.0 + b.abs()), "{score:?}, scaled {scaled}: {a} vs {b}");
            }
        }
        // Two rows are left to candle.
        assert!(one_row_scores(Score::Dot, &r, &Tensor::zeros((2, 96), candle_core::DType::F32, &dev).unwrap()).unwrap().is_none());
    }

    #[test]
    fn top_groups_break_ties_by_index() {
        let r = LayerRouting { t: 1, groups: 4, scores: vec![0.0; 4], memberships: vec![0.25; 4], vectors: None, d_g: 1 };
        assert_eq!(r.top_groups(0, 2), vec![0, 1]);
        assert_eq!(r.topk_masks(3), vec![0b0111]);
    }
}
