//! Decode benchmark (`focus-lens bench decode`): tokens/s of one generation step over a cached
//! context of each length, dense vs hard top-k, and the bytes each step reads from the caches.
//!
//! The context is synthetic: random keys and values, and routing from random scores balanced
//! by causal Sinkhorn (so top-k sets are spread over the groups as a balanced router spreads
//! them). A real prefill of 32K tokens takes far longer on a small CPU than the steps measured,
//! and the cost of a step depends on the cache's length and the selected keys' count, not on
//! the values. The step itself is real: the new token runs through every block, and its
//! routing comes from its own hidden state. Dense and top-k steps alternate so that drift hits
//! both alike; the median step time is reported.
//!
//! On a GPU the steps as users get them replay as one CUDA graph each (`generate::graph`); the
//! same steps launched kernel by kernel ("eager") are timed beside them, alternated with them,
//! so that the graph's gain is a ratio from one run.
//!
//! On a GPU a separate instrumented pass follows the timed one (`SPLIT_STEPS` more steps per
//! mode, with a device synchronisation around each part, `Generator::set_split`): the median
//! time of routing, attention and the rest per step (`StepSplit`), so that the timed steps stay
//! unsynchronised and the split still shows where a step's time goes.

use super::median;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::sinkhorn::CausalSinkhorn;
use crate::attention::decode::ReadBytes;
use crate::attention::kv_cache::{CachedRouting, LayerCache};
use crate::generate::{Generator, GraphStats, StepSplit};
use crate::model::Model;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecodeRow {
    pub context: usize,
    pub k: usize,
    pub groups: usize,
    pub window: usize,
    pub dense_tokens_per_s: f64,
    pub topk_tokens_per_s: f64,
    pub topk_over_dense_speed: f64,
    /// Bytes read from the caches per token (all layers), median step.
    pub dense_bytes: u64,
    pub topk_bytes: u64,
    /// topk_bytes / dense_bytes (index bytes included).
    pub topk_read_fraction: f64,
    /// On a GPU: per-part medians of the instrumented steps (see the module notes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_split: Option<StepSplit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_split: Option<StepSplit>,
    /// On a GPU: the same steps launched kernel by kernel (no CUDA graph), timed beside the
    /// others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_eager_tokens_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_eager_tokens_per_s: Option<f64>,
    /// On a GPU: what the top-k generator's graph did (captures, replays, a fallback's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_graph: Option<GraphStats>,
}

/// Instrumented steps per mode and context on a GPU (after the timed ones).
pub const SPLIT_STEPS: usize = 8;

/// Per-part medians of instrumented steps.
fn median_split(v: &[StepSplit]) -> Option<StepSplit> {
    let part = |f: fn(&StepSplit) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    Some(StepSplit { routing_s: part(|s| s.routing_s)?, attention_s: part(|s| s.attention_s)?, rest_s: part(|s| s.rest_s)?, host_s: part(|s| s.host_s)?, total_s: part(|s| s.total_s)? })
}

pub struct DecodeBenchOptions {
    pub contexts: Vec<usize>,
    /// Timed steps per context and mode, after one warm-up step each.
    pub steps: usize,
    pub k: usize,
    pub seed: u64,
}

/// One synthetic layer cache of `n` tokens; with `adapter`, routed as the module notes say.
fn synthetic_cache(model: &Model, adapter: Option<&Adapter>, k: usize, n: usize, rng: &mut StdRng) -> LayerCache {
    let cfg = model.config();
    let routing = adapter.map(|a| {
        let c = &a.config;
        CachedRouting::new(c.groups, k, Some(CausalSinkhorn::new(c.groups, c.tau, c.sinkhorn_iters)))
    });
    let mut cache = LayerCache::new(cfg.n_kv_heads, cfg.head_dim, routing);
    let len = cfg.n_kv_heads * n * cfg.head_dim;
    let mut r = |len: usize| (0..len).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect::<Vec<f32>>();
    let (kk, vv) = (r(len), r(len));
    cache.push_kv(&kk, &vv, n);
    if let Some(ro) = cache.routing.as_mut() {
        let g = ro.groups;
        for _ in 0..n {
            let s = r(g);
            let m = ro.sinkhorn.as_mut().expect("causal state").push(&s);
            ro.push(&s, &m);
        }
    }
    cache
}

/// `adapter` must use causal Sinkhorn (only causal routing can be cached); `base`: token ids
/// cycled for the context's positions and the steps.
pub fn decode_bench(model: &Model, adapter: &Adapter, base: &[u32], opts: &DecodeBenchOptions, mut row: impl FnMut(&DecodeRow)) -> Result<Vec<DecodeRow>> {
    let ctx = model.config().context;
    if base.is_empty() {
        return Err(Error::Invalid("the benchmark text has no tokens".into()));
    }
    if !adapter.config.causal_sinkhorn {
        return Err(Error::Invalid("top-k decode needs an adapter with causal Sinkhorn (causal_sinkhorn = true)".into()));
    }
    let topk = adapter.config.topk(opts.k)?;
    let k = topk.k();
    let split_steps = if model.device().is_cpu() { 0 } else { SPLIT_STEPS };
    let steps = opts.steps + 2 + split_steps;
    if let Some(&bad) = opts.contexts.iter().find(|&&n| n == 0 || n + steps > ctx) {
        return Err(Error::Invalid(format!("context {bad} plus {steps} steps must fit the model's context of {ctx} tokens")));
    }
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut rows = Vec::new();
    for &n in &opts.contexts {
        let ids: Vec<u32> = base.iter().cycle().take(n).cloned().collect();
        let mut topk_layers = Vec::new();
        let mut dense_layers = Vec::new();
        for _ in 0..model.config().n_layers {
            let c = synthetic_cache(model, Some(adapter), k, n, &mut rng);
            dense_layers.push(LayerCache { routing: None, ..c.clone() });
            topk_layers.push(c);
        }
        let gpu = !model.device().is_cpu();
        // On a GPU the eager twins (the same caches, a second copy).
        let mut eager = if gpu {
            let mut d = Generator::with_cache(&model.decoder, None, Mode::Dense, dense_layers.clone(), ids.clone())?;
            let mut t = Generator::with_cache(&model.decoder, Some(adapter), Mode::TopK(topk), topk_layers.clone(), ids.clone())?;
            d.set_graph(false);
            t.set_graph(false);
            Some((d, t))
        } else {
            None
        };
        let mut dense = Generator::with_cache(&model.decoder, None, Mode::Dense, dense_layers, ids.clone())?;
        let mut topk = Generator::with_cache(&model.decoder, Some(adapter), Mode::TopK(topk), topk_layers, ids)?;
        let (mut td, mut tk, mut ted, mut tek) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut rd, mut rk, mut rde, mut rke) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // A graph's first steps warm up and capture (see `generate::graph`): untimed.
        let warm = if gpu { 2 } else { 1 };
        for s in 0..opts.steps + warm {
            let id = base[(n + s) % base.len()];
            let mut gens: Vec<(&mut Generator, &mut Vec<f64>, &mut Vec<ReadBytes>)> = vec![(&mut dense, &mut td, &mut rd), (&mut topk, &mut tk, &mut rk)];
            if let Some((d, t)) = eager.as_mut() {
                gens.push((d, &mut ted, &mut rde));
                gens.push((t, &mut tek, &mut rke));
            }
            for (g, times, reads) in gens {
                let t0 = Instant::now();
                let step = g.feed(&[id])?;
                if s >= warm {
                    times.push(t0.elapsed().as_secs_f64());
                    reads.push(step.read);
                }
            }
        }
        let topk_graph = gpu.then(|| topk.graph_stats());
        drop(eager);
        // The instrumented pass (GPU only).
        let (mut sd, mut sk) = (Vec::new(), Vec::new());
        for (g, splits) in [(&mut dense, &mut sd), (&mut topk, &mut sk)] {
            g.set_split(true);
            for s in 0..split_steps {
                let id = base[(n + opts.steps + warm + s) % base.len()];
                splits.extend(g.feed(&[id])?.split);
            }
            g.set_split(false);
        }
        let (d, t) = (median(&td).unwrap_or_default(), median(&tk).unwrap_or_default());
        let mid = |r: &[ReadBytes]| r[r.len() / 2];
        let (bd, bk) = (mid(&rd), mid(&rk));
        let r = DecodeRow {
            context: n,
            k,
            groups: adapter.config.groups,
            window: adapter.config.window,
            dense_tokens_per_s: 1.0 / d,
            topk_tokens_per_s: 1.0 / t,
            topk_over_dense_speed: d / t,
            dense_bytes: bd.kv + bd.index,
            topk_bytes: bk.kv + bk.index,
            topk_read_fraction: bk.fraction(),
            dense_split: median_split(&sd),
            topk_split: median_split(&sk),
            dense_eager_tokens_per_s: median(&ted).map(|t| 1.0 / t),
            topk_eager_tokens_per_s: median(&tek).map(|t| 1.0 / t),
            topk_graph,
        };
        row(&r);
        rows.push(r);
    }
    Ok(rows)
}
