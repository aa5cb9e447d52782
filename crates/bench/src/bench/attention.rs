//! Attention micro-benchmark: our dense tiled kernel vs exact hard top-k Focus attention (and
//! candle's plain matmul + softmax attention where its T x T scores fit), measured alternately in
//! one run so that machine load hits every variant alike. Used by `focus-lens bench attention`
//! and meant for the GUI's speed panel too.

use super::median;
use crate::error::{Error, Result};
use crate::attention::cpu::Shape;
use crate::attention::cpu;
use crate::focus::mask;
use candle_core::{DType, Device, Tensor};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct AttentionBench {
    pub lengths: Vec<usize>,
    /// K values (number of groups).
    pub groups: Vec<usize>,
    /// k values (top-k memberships per token); pairs with k > K are skipped.
    pub ks: Vec<usize>,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub window: usize,
    /// Timed repeats (median reported), after one untimed warm-up when `warmup`.
    pub repeats: usize,
    pub warmup: bool,
    pub seed: u64,
    /// Skip candle's attention when its scores (and probabilities) would exceed this many bytes.
    pub candle_max_bytes: usize,
    /// Element type on CUDA (f32 or bf16); the CPU kernels are f32.
    pub dtype: DType,
    /// Query rows per block of the CUDA bf16 kernels (64 or 128).
    pub tile_rows: usize,
}

impl Default for AttentionBench {
    fn default() -> Self {
        AttentionBench {
            lengths: vec![1024, 2048, 4096, 8192, 16384, 32768, 65536],
            groups: vec![4, 8],
            ks: vec![1, 2],
            heads: 8,
            kv_heads: 8,
            head_dim: 64,
            window: 128,
            repeats: 3,
            warmup: true,
            seed: 0,
            candle_max_bytes: 6 << 30,
            dtype: DType::F32,
            tile_rows: 128,
        }
    }
}

/// One (length, K, k) measurement. Times in milliseconds; `None` where not run.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionRow {
    pub n: usize,
    pub groups: usize,
    pub k: usize,
    pub window: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub device: String,
    pub dtype: String,
    pub threads: usize,
    /// Our tiled dense causal kernel (`cpu::dense::causal_attention`).
    pub dense_ms: Option<f64>,
    /// Exact hard top-k Focus attention (`cpu::focus::focus_attention`).
    pub focus_ms: Option<f64>,
    /// dense_ms / focus_ms.
    pub speedup: Option<f64>,
    /// Pairs the Focus mask keeps over all causal pairs.
    pub pairs_fraction: f64,
    /// 1 / pairs_fraction: the speedup if time were proportional to pairs computed.
    pub bound: f64,
    /// speedup / bound.
    pub efficiency: Option<f64>,
    /// candle: Q K^T, scale, causal mask, softmax, x V (full T x T scores).
    pub candle_ms: Option<f64>,
    /// Process CPU time (all threads) of the dense and Focus calls and their ratio: robust to
    /// other work on the machine, which wall times are not (Linux only).
    pub dense_cpu_ms: Option<f64>,
    pub focus_cpu_ms: Option<f64>,
    pub speedup_cpu: Option<f64>,
    /// CUDA: building and uploading the routing plan (group segments), once per routing; not
    /// part of focus_ms, as every layer sharing a routing reuses it.
    pub plan_ms: Option<f64>,
}

impl AttentionRow {
    /// A row of `cfg` for length n and memberships `masks` (K groups, k each), with the ratios
    /// derived from the timings; the CPU-time and plan columns start empty.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(cfg: &AttentionBench, n: usize, groups: usize, k: usize, masks: &[u64], device: &str, dtype: &str, threads: usize, dense_ms: Option<f64>, focus_ms: Option<f64>, candle_ms: Option<f64>) -> Self {
        let pf = pairs_fraction(masks, cfg.window);
        let speedup = dense_ms.zip(focus_ms).map(|(a, b)| a / b);
        AttentionRow {
            n,
            groups,
            k,
            window: cfg.window,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: cfg.head_dim,
            device: device.into(),
            dtype: dtype.into(),
            threads,
            dense_ms,
            focus_ms,
            speedup,
            pairs_fraction: pf,
            bound: 1.0 / pf,
            efficiency: speedup.map(|x| x * pf),
            candle_ms,
            dense_cpu_ms: None,
            focus_cpu_ms: None,
            speedup_cpu: None,
            plan_ms: None,
        }
    }
}

impl AttentionBench {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if self.lengths.is_empty() || self.lengths.contains(&0) {
            return bad("lengths must be positive (and at least one)".into());
        }
        if self.groups.is_empty() || self.groups.iter().any(|&g| g == 0 || g > 64) {
            return bad("groups (K) must be in 1..=64".into());
        }
        if self.ks.is_empty() || self.ks.contains(&0) {
            return bad("k must be at least 1".into());
        }
        if !self.groups.iter().any(|&g| self.ks.iter().any(|&k| k <= g)) {
            return bad("no (K, k) pair with k <= K".into());
        }
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!("heads ({}) must be a positive multiple of kv-heads ({})", self.heads, self.kv_heads));
        }
        if self.head_dim == 0 {
            return bad("head-dim must be positive".into());
        }
        if self.repeats == 0 {
            return bad("repeats must be at least 1".into());
        }
        if !matches!(self.dtype, DType::F32 | DType::BF16) {
            return bad(format!("dtype must be f32 or bf16, not {:?}", self.dtype));
        }
        if !matches!(self.tile_rows, 64 | 128) {
            return bad(format!("tile rows must be 64 or 128, not {}", self.tile_rows));
        }
        Ok(())
    }
}

/// The long-length limit of the speedup bound 1 / `pairs_fraction` for balanced top-k
/// memberships: two distant tokens share a group unless their k-sets are disjoint, which
/// happens with probability C(K-k, k) / C(K, k). It is K/k only for k = 1 (K=8, k=2: 28/13).
pub fn bound_limit(groups: usize, k: usize) -> f64 {
    let binom = |n: usize, r: usize| -> f64 {
        if r > n {
            return 0.0;
        }
        (0..r).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    };
    let disjoint = if k > groups { 0.0 } else { binom(groups - k, k) / binom(groups, k).max(1.0) };
    1.0 / (1.0 - disjoint).max(1e-12)
}

/// Fraction of causal pairs kept.
pub fn pairs_fraction(masks: &[u64], window: usize) -> f64 {
    // The synthetic benchmark has no attention sinks.
    mask::pair_stats(masks, window, 0).retained
}

/// CPU time of this process (user + system, all threads) in ms, from /proc/self/stat (Linux;
/// 10 ms ticks). On a machine shared with other work it measures our work, not our share of it.
pub fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10.0)
}

/// Wall and CPU milliseconds of one call.
pub(super) fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, Option<f64>)> {
    let c0 = process_cpu_ms();
    let t0 = Instant::now();
    f()?;
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    Ok((wall, c0.zip(process_cpu_ms()).map(|(a, b)| b - a)))
}

/// candle's attention as a plain framework user writes it: full scores, additive causal mask,
/// fused softmax, then the values. q: (H, T, D), k, v: (Hkv, T, D).
pub fn candle_attention(q: &Tensor, k: &Tensor, v: &Tensor, causal: &Tensor) -> Result<Tensor> {
    let (h, t, d) = q.dims3()?;
    let hkv = k.dim(0)?;
    let rep = h / hkv;
    let qg = q.reshape((hkv, rep * t, d))?;
    let scores = (qg.matmul(&k.t()?)?.reshape((h, t, t))? * (1.0 / (d as f64).sqrt()))?;
    let p = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(causal)?)?;
    Ok(p.reshape((hkv, rep * t, t))?.matmul(v)?.reshape((h, t, d))?)
}

/// The (K, k) variants of a configuration, each with its balanced memberships for length n.
pub(super) fn variants(cfg: &AttentionBench, n: usize) -> Result<Vec<(usize, usize, Vec<u64>)>> {
    cfg.groups
        .iter()
        .flat_map(|&g| cfg.ks.iter().filter(move |&&kk| kk <= g).map(move |&kk| (g, kk)))
        .map(|(g, kk)| Ok((g, kk, mask::balanced_masks(n, g, kk, cfg.seed.wrapping_add((g * 64 + kk) as u64))?)))
        .collect()
}

/// The benchmark on the CPU (or candle's attention alone on a GPU without our kernels).
pub(super) fn run_cpu(cfg: &AttentionBench, device: &Device, mut on_row: impl FnMut(&AttentionRow)) -> Result<Vec<AttentionRow>> {
    let cpu = device.is_cpu();
    let dev_name = if cpu { "cpu" } else { "cuda" };
    let threads = rayon::current_num_threads();
    let mut rows = Vec::new();
    for &n in &cfg.lengths {
        let s = Shape { heads: cfg.heads, kv_heads: cfg.kv_heads, t: n, d: cfg.head_dim };
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ n as u64);
        let mut r = |len: usize| (0..len).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect::<Vec<f32>>();
        let q = r(s.heads * n * s.d);
        let k = r(s.kv_heads * n * s.d);
        let v = r(s.kv_heads * n * s.d);
        let variants = variants(cfg, n)?;
        let candle_bytes = 2 * cfg.heads * n * n * 4;
        let candle_inputs = if candle_bytes <= cfg.candle_max_bytes {
            let tq = Tensor::from_slice(&q, (s.heads, n, s.d), device)?;
            let tk = Tensor::from_slice(&k, (s.kv_heads, n, s.d), device)?;
            let tv = Tensor::from_slice(&v, (s.kv_heads, n, s.d), device)?;
            Some((tq, tk, tv, crate::focus::mask::causal_bias(n, device)?))
        } else {
            None
        };
        let mut dense_t = Vec::new();
        let mut dense_c = Vec::new();
        let mut candle_t = Vec::new();
        let mut focus_t = vec![Vec::new(); variants.len()];
        let mut focus_c = vec![Vec::new(); variants.len()];
        // Variants alternate within each repeat; with `warmup`, repeat 0 is not timed.
        let first = usize::from(!cfg.warmup);
        for rep in first..=cfg.repeats {
            let keep = rep > 0;
            if cpu {
                let (ms, cpu) = timed(|| Ok(cpu::dense::causal_attention(&q, &k, &v, s)))?;
                if keep {
                    dense_t.push(ms);
                    dense_c.extend(cpu);
                }
                for (vi, (_, _, masks)) in variants.iter().enumerate() {
                    let (ms, cpu) = timed(|| Ok(cpu::focus::focus_attention(&q, &k, &v, s, masks, cfg.window, 0)))?;
                    if keep {
                        focus_t[vi].push(ms);
                        focus_c[vi].extend(cpu);
                    }
                }
            }
            if let Some((tq, tk, tv, causal)) = &candle_inputs {
                let (ms, _) = timed(|| {
                    let o = candle_attention(tq, tk, tv, causal)?;
                    device.synchronize()?;
                    Ok(o)
                })?;
                if keep {
                    candle_t.push(ms);
                }
            }
        }
        let (dense_ms, candle_ms, dense_cpu_ms) = (median(&dense_t), median(&candle_t), median(&dense_c));
        for (vi, (g, kk, masks)) in variants.iter().enumerate() {
            let mut row = AttentionRow::new(cfg, n, *g, *kk, masks, dev_name, "f32", threads, dense_ms, median(&focus_t[vi]), candle_ms);
            row.dense_cpu_ms = dense_cpu_ms;
            row.focus_cpu_ms = median(&focus_c[vi]);
            row.speedup_cpu = dense_cpu_ms.zip(row.focus_cpu_ms).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::focus::mask::balanced_masks;

    #[test]
    fn bound_limit_is_k_over_k_for_one_and_matches_balanced_masks() {
        assert!((bound_limit(8, 1) - 8.0).abs() < 1e-12);
        assert!((bound_limit(8, 2) - 28.0 / 13.0).abs() < 1e-12);
        // Two 2-sets of 4 groups are disjoint with probability C(2,2)/C(4,2) = 1/6.
        assert!((bound_limit(4, 2) - 1.2).abs() < 1e-12);
        // k > K/2: any two k-sets meet, nothing to gain.
        assert!((bound_limit(4, 3) - 1.0).abs() < 1e-12);
        // Independently: the measured bound of long balanced masks approaches the limit.
        for (g, k) in [(8, 1), (8, 2), (4, 2)] {
            let measured = 1.0 / pairs_fraction(&balanced_masks(20_000, g, k, 3).unwrap(), 16);
            assert!((measured / bound_limit(g, k) - 1.0).abs() < 0.05, "K={g} k={k}: {measured} vs {}", bound_limit(g, k));
        }
    }


    #[test]
    fn kept_pairs_matches_direct_count() {
        let mut rng = StdRng::seed_from_u64(4);
        for _ in 0..30 {
            let t = rng.gen_range(1..300);
            let g = rng.gen_range(1..=8);
            let k = rng.gen_range(1..=g);
            let w = rng.gen_range(0..50);
            let s = [0, 1, 4][rng.gen_range(0..3)];
            let masks = balanced_masks(t, g, k, rng.gen()).unwrap();
            let mut direct = 0u64;
            for i in 0..t {
                for j in 0..=i {
                    direct += mask::kept(&masks, w, s, i, j) as u64;
                }
            }
            assert_eq!(mask::pair_stats(&masks, w, s).kept(), direct);
            let (a, b) = crate::attention::reference::ab_pair_counts(&masks, w, s);
            assert_eq!(a + b, direct);
        }
    }

    /// The candle path computes the same attention as our dense kernel.
    #[test]
    fn candle_attention_equals_dense_kernel() {
        let (h, hkv, t, d) = (4, 2, 70, 16);
        let mut rng = StdRng::seed_from_u64(8);
        let mut r = |n: usize| (0..n).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect::<Vec<f32>>();
        let (q, k, v) = (r(h * t * d), r(hkv * t * d), r(hkv * t * d));
        let dev = Device::Cpu;
        let got = candle_attention(
            &Tensor::from_slice(&q, (h, t, d), &dev).unwrap(),
            &Tensor::from_slice(&k, (hkv, t, d), &dev).unwrap(),
            &Tensor::from_slice(&v, (hkv, t, d), &dev).unwrap(),
            &crate::focus::mask::causal_bias(t, &dev).unwrap(),
        )
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
        let want = cpu::dense::causal_attention(&q, &k, &v, Shape { heads: h, kv_heads: hkv, t, d });
        let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err < 1e-5, "{err}");
    }
}
