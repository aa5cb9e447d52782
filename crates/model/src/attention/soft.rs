//! The soft-gate plans of FOCUS-METHOD section 1, built from candle ops so that gradients flow
//! to the memberships when they come from trainable routers: the paper's multiplicative gate,
//! our additive log gate, and the straight-through plan that trains through the hard mask.

use super::LayerPlan;
use crate::error::Result;
use crate::focus::adapter::{AdapterConfig, Gate};
use crate::focus::mask::{local_mask, topk_mask, TopK};
use candle_core::Tensor;

/// The soft gate of FOCUS-METHOD section 1 from memberships `g` (T x K), as a T x T plan
/// (B x T x K gives B x T x T, for a batch of sequences). Built from candle ops, so gradients
/// flow to `g` when it comes from trainable routers.
pub fn soft_plan(g: &Tensor, cfg: &AdapterConfig) -> Result<LayerPlan> {
    gate_plan(g, cfg, &local_mask(g.dim(g.rank() - 2)?, cfg.window, cfg.sink, g.device())?)
}

/// `soft_plan` with the affinity of query memberships `gq` and key memberships `gk` (T x K
/// each): a_ij = gq_i . gk_j. The same as `soft_plan` when they are equal; an intervention
/// (`analysis::intervene`) edits one side.
pub fn soft_plan_pair(gq: &Tensor, gk: &Tensor, cfg: &AdapterConfig) -> Result<LayerPlan> {
    affinity_plan(gq.matmul(&gk.t()?)?, cfg, &local_mask(gq.dim(gq.rank() - 2)?, cfg.window, cfg.sink, gq.device())?)
}

/// `soft_plan` with the local mask (`local_mask`, T x T) given.
fn gate_plan(g: &Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
    affinity_plan(g.matmul(&g.t()?)?, cfg, local)
}

/// The gate of the memberships' affinities (T x T, or B x T x T), local pairs left alone.
fn affinity_plan(affinity: Tensor, cfg: &AdapterConfig, local: &Tensor) -> Result<LayerPlan> {
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
pub fn straight_through_plan(g: &Tensor, cfg: &AdapterConfig, k: TopK) -> Result<LayerPlan> {
    let k = k.of(cfg.groups)?;
    let (kk, dev) = (cfg.groups, g.device());
    let local = local_mask(g.dim(g.rank() - 2)?, cfg.window, cfg.sink, dev)?;
    let log_gate = AdapterConfig { gate: Gate::Log, ..cfg.clone() };
    let LayerPlan::SoftBias(soft) = gate_plan(g, &log_gate, &local)? else {
        unreachable!("the log gate gives an additive bias")
    };
    // Top-k sets from the memberships' values, chosen as inference chooses them, as 0/1
    // indicators; the T x T mask itself is built on the device (a shared group = a positive
    // product of indicators), not pair by pair on the host.
    let rows = g.detach().to_dtype(candle_core::DType::F32)?.flatten_to(g.rank() - 2)?.to_vec2::<f32>()?;
    let ind: Vec<f32> = rows.iter().flat_map(|r| {
        let m = topk_mask(r, k);
        (0..kk).map(move |x| ((m >> x) & 1) as f32)
    }).collect();
    let ind = Tensor::from_vec(ind, g.shape(), dev)?.to_dtype(g.dtype())?;
    let shared = ind.matmul(&ind.t()?)?.gt(0.5)?;
    let keep = shared.maximum(&local.broadcast_as(shared.shape())?)?;
    let hard = keep.where_cond(&soft.zeros_like()?, &Tensor::full(f32::NEG_INFINITY, soft.shape(), dev)?.to_dtype(soft.dtype())?)?;
    Ok(LayerPlan::SoftBias((hard + (&soft - soft.detach())?)?))
}

#[cfg(test)]
mod tests {
    //! Soft mode against a plain f64 reference that gates each pair through `GateFn::score`:
    //! local pairs and sink pairs [ours] ungated, the others gated by their affinity.
    use super::*;
    use crate::attention::{attend, cpu::Shape};
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
                let plan = soft_plan(&Tensor::from_slice(&g, (t, kk), &dev).unwrap(), &cfg).unwrap();
                let ten = |x: &[f32], h: usize| Tensor::from_slice(x, (h, t, d), &dev).unwrap();
                let got = attend(&ten(&q, heads), &ten(&k, kv_heads), &ten(&v, kv_heads), &plan, &Default::default(), None).unwrap();
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let want = reference(&q, &k, &v, s, &g, kk, GateFn::of(&cfg), window, sink);
                let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(err <= 1e-5, "case {case} t {t} w {window} s {sink} {gate:?}: {err}");
                outs.push(got);
            }
            // With distant pairs, sinks change the output.
            if t > window + 2 {
                let diff = outs[0].iter().zip(&outs[2]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(diff > 1e-4, "case {case}: sink 4 gives the output of sink 0");
            }
        }
    }
}
