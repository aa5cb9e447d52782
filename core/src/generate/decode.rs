//! Attention of the newest token over one layer's cache (`kv_cache::LayerCache`), on the CPU:
//! dense (every cached key), soft (every key, gated as `attention::fused::GateFn` gates it),
//! or hard top-k, which reads only the local window and the keys whose top-k sets meet the
//! query's, found through the cache's index of keys by group: no other key's bytes are read.
//! A key in several shared groups is taken once, from the list of the lowest shared group
//! (`mask::classify`'s `SharedGroup`), so the selected keys are exactly the mask's row.
//! Keys are split into chunks over which partial softmaxes run in parallel and are merged by
//! log-sum-exp (flash decoding); every query head of a KV head reads each key row once.

use super::kv_cache::LayerCache;
use crate::attention::cpu::simd::exp;
use crate::attention::fused::GateFn;
use crate::error::{Error, Result};
use crate::focus::mask::{self, PairClass};
use crate::model::config::LayerAttention;
use crate::model::matvec::dot;
use multiversion::multiversion;
use rayon::prelude::*;
use candle_core::Tensor;
use serde::{Deserialize, Serialize};

/// How the newest token attends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecodeAttention {
    Dense,
    /// Hard top-k with local window w (the cache's top-k sets decide distant keys).
    TopK { window: usize },
    /// Soft gates on distant keys.
    Soft { gate: GateFn, window: usize },
}

/// Bytes one decode step reads from the caches (summed over the layers it covers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadBytes {
    /// Key and value rows read (f32).
    pub kv: u64,
    /// Routing data read to choose or gate keys: index entries and top-k sets (top-k),
    /// memberships (soft).
    pub index: u64,
    /// What dense attention reads: every cached key and value row.
    pub dense: u64,
}

impl ReadBytes {
    pub fn add(&mut self, o: ReadBytes) {
        self.kv += o.kv;
        self.index += o.index;
        self.dense += o.dense;
    }
    /// (kv + index) / dense.
    pub fn fraction(&self) -> f64 {
        if self.dense == 0 { 1.0 } else { (self.kv + self.index) as f64 / self.dense as f64 }
    }
}

/// The cached positions the newest token (position n - 1) attends, and the routing bytes read
/// to find them.
pub fn selected_keys(cache: &LayerCache, how: DecodeAttention) -> Result<(Vec<u32>, u64)> {
    let n = cache.len();
    if n == 0 {
        return Err(Error::Invalid("decode attention over an empty cache".into()));
    }
    let i = n - 1;
    let window = match how {
        DecodeAttention::TopK { window } if !mask::all_local(n, window) => window,
        DecodeAttention::Soft { .. } => {
            let r = cache.routing.as_ref().ok_or_else(|| Error::Invalid("soft decode needs cached routing".into()))?;
            return Ok(((0..n as u32).collect(), (n * r.groups * 4) as u64));
        }
        _ => return Ok(((0..n as u32).collect(), 0)),
    };
    let r = cache.routing.as_ref().ok_or_else(|| Error::Invalid("top-k decode needs cached routing".into()))?;
    let mi = r.masks[i];
    let mut keys = Vec::new();
    let mut index = 0u64;
    for g in mask::groups(mi) {
        for &j in &r.members[g] {
            if j as usize + window >= i {
                break;
            }
            // One position and one top-k set read per index entry scanned.
            index += 4 + 8;
            if mask::classify(i, j as usize, mi, r.masks[j as usize], window) == PairClass::SharedGroup(g) {
                keys.push(j);
            }
        }
    }
    // In position order: each group's members come sorted, but one group after another; read
    // in one ascending pass the rows stream as dense's do (the prefetchers follow), instead of
    // jumping back for every group.
    keys.sort_unstable();
    keys.extend((i - window) as u32..=i as u32);
    Ok((keys, index))
}

/// The newest token's attention output (1, H, 1, D) from its queries `q` (any shape of H x D
/// values, on the cache's device) over a cache on a GPU (`LayerCache::to_device`), and the
/// bytes read: the kernels of `attention::cuda::decode`, which keep the same pairs as `attend`.
/// The kernel finds the kept distant keys by testing each one's top-k set (8 bytes, counted
/// as index bytes) rather than through the host's index by group, so that it reads no host
/// data; the kept keys' rows are the only rows it reads.
pub fn attend_on_device(q: &Tensor, heads: usize, cache: &LayerCache, how: DecodeAttention, own: &LayerAttention) -> Result<(Tensor, ReadBytes)> {
    let kv = cache.device.as_ref().ok_or_else(|| Error::Invalid("attend_on_device: the cache is on the host".into()))?;
    let (n, d) = (kv.len, cache.head_dim);
    if n == 0 {
        return Err(Error::Invalid("decode attention over an empty cache".into()));
    }
    let i = n - 1;
    let from = own.window.map_or(0, |w| n.saturating_sub(w));
    let tb = cache.token_bytes();
    let dense = (n - from) as u64 * tb;
    let (kept, index) = match (how, cache.routing.as_ref()) {
        (DecodeAttention::TopK { window }, Some(r)) => {
            let mi = r.masks[i];
            let distant = &r.masks[from..(i.saturating_sub(window)).max(from)];
            let shared = distant.iter().filter(|&&mj| mask::share_group(mi, mj)).count();
            (n - from - distant.len() + shared, distant.len() as u64 * 8)
        }
        (DecodeAttention::Soft { .. }, Some(r)) => (n - from, ((n - from) * r.groups * 4) as u64),
        (DecodeAttention::Dense, _) => (n - from, 0),
        _ => return Err(Error::Invalid("top-k and soft decode need cached routing".into())),
    };
    let read = ReadBytes { kv: kept as u64 * tb, index, dense };
    #[cfg(feature = "cuda")]
    {
        use crate::attention::cuda::decode::{decode_attention, DecodeStep, MAX_HEAD_DIM};
        if d > MAX_HEAD_DIM {
            return Err(Error::Invalid(format!("decode on the GPU takes head dims up to {MAX_HEAD_DIM}, not {d}")));
        }
        let r = cache.routing.as_ref();
        let step = DecodeStep {
            n,
            from,
            topk: match (how, r, kv.masks.as_ref()) {
                (DecodeAttention::TopK { .. }, Some(r), Some(m)) => Some((r.masks[i], m)),
                _ => None,
            },
            window: match how {
                DecodeAttention::TopK { window } | DecodeAttention::Soft { window, .. } => window,
                DecodeAttention::Dense => n,
            },
            soft: match (how, kv.memberships.as_ref()) {
                (DecodeAttention::Soft { gate, .. }, Some(m)) => Some((gate, m)),
                _ => None,
            },
            softcap: own.softcap.map(|c| c as f32),
        };
        if kv.routed < n && step.topk.is_some() | step.soft.is_some() {
            return Err(Error::Invalid("decode on the GPU: the cache's routing was not synced to the device".into()));
        }
        let q = q.to_dtype(candle_core::DType::F32)?.reshape((heads, d))?.contiguous()?;
        let o = decode_attention(&q, &kv.k, &kv.v, step)?;
        Ok((o.reshape((1, heads, 1, d))?, read))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (q, heads, read, d);
        Err(Error::Invalid("a cache on a device needs a build with the cuda feature".into()))
    }
}

/// Keys per parallel chunk.
const CHUNK: usize = 512;

/// Online-softmax state of the query heads of one KV head over one chunk of keys.
struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

/// The attention output (heads x D) of the newest token's queries `q` (heads x D, after RoPE)
/// over `cache`, and the bytes read.
/// `own` is the layer's own attention: a sliding window drops the keys outside it (for every
/// mode: the Focus mask composes with it), a soft-cap acts on each scaled logit before any gate.
/// (Its score scale is already in `q`: `Block::attention_inputs` applies it.)
pub fn attend(q: &[f32], heads: usize, cache: &LayerCache, how: DecodeAttention, own: &LayerAttention) -> Result<(Vec<f32>, ReadBytes)> {
    let (hkv, d, n) = (cache.kv_heads, cache.head_dim, cache.len());
    if hkv == 0 || heads % hkv != 0 || q.len() != heads * d {
        return Err(Error::Invalid(format!("decode attention: {heads} query heads of {} values over {hkv} KV heads of {d}", q.len() / heads.max(1))));
    }
    let rep = heads / hkv;
    let (mut keys, index) = selected_keys(cache, how)?;
    let newest = n - 1;
    if let Some(w) = own.window {
        keys.retain(|&j| newest - (j as usize) < w);
    }
    let scale = 1.0 / (d as f32).sqrt();
    // Soft gates: per selected key, the affinity with the query and whether it is distant.
    let gates: Option<(GateFn, Vec<(f32, bool)>)> = match how {
        DecodeAttention::Soft { gate, window } => {
            let r = cache.routing.as_ref().expect("selected_keys checked the routing");
            let gi = r.row(n - 1);
            let a = keys.iter().map(|&j| (gi.iter().zip(r.row(j as usize)).map(|(x, y)| x * y).sum::<f32>(), n - 1 - j as usize > window)).collect();
            Some((gate, a))
        }
        _ => None,
    };
    let chunks: Vec<(usize, usize)> = (0..hkv).flat_map(|h| (0..keys.len().div_ceil(CHUNK)).map(move |c| (h, c))).collect();
    let parts: Vec<Partial> = chunks
        .par_iter()
        .map(|&(h, c)| {
            let ks = &keys[c * CHUNK..(c * CHUNK + CHUNK).min(keys.len())];
            let qh: Vec<f32> = q[h * rep * d..(h + 1) * rep * d].iter().map(|x| x * scale).collect();
            let mut s = vec![0f32; rep * ks.len()];
            chunk_scores(&qh, rep, d, &cache.k[h], ks, &mut s);
            if let Some(c) = own.softcap {
                let c = c as f32;
                s.iter_mut().for_each(|x| *x = c * (*x / c).tanh());
            }
            if let Some((gate, a)) = &gates {
                let a = &a[c * CHUNK..c * CHUNK + ks.len()];
                for r in 0..rep {
                    for (x, &(aff, distant)) in s[r * ks.len()..(r + 1) * ks.len()].iter_mut().zip(a) {
                        *x = gate.score(*x, aff, distant).0;
                    }
                }
            }
            let mut p = Partial { max: vec![f32::NEG_INFINITY; rep], sum: vec![0.0; rep], acc: vec![0.0; rep * d] };
            for r in 0..rep {
                (p.max[r], p.sum[r]) = softmax_terms(&mut s[r * ks.len()..(r + 1) * ks.len()]);
            }
            chunk_pv(&s, rep, d, &cache.v[h], ks, &mut p.acc);
            p
        })
        .collect();
    let mut out = vec![0f32; heads * d];
    let per_head = keys.len().div_ceil(CHUNK);
    for h in 0..hkv {
        let ps = &parts[h * per_head..(h + 1) * per_head];
        for r in 0..rep {
            let m = ps.iter().map(|p| p.max[r]).fold(f32::NEG_INFINITY, f32::max);
            let o = &mut out[(h * rep + r) * d..(h * rep + r + 1) * d];
            let mut z = 0f32;
            for p in ps {
                let w = if p.max[r] == f32::NEG_INFINITY { 0.0 } else { (p.max[r] - m).exp() };
                z += w * p.sum[r];
                o.iter_mut().zip(&p.acc[r * d..(r + 1) * d]).for_each(|(a, b)| *a += w * b);
            }
            let inv = 1.0 / z;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
    let tb = cache.token_bytes();
    // Dense attention of this layer reads its window at most.
    let dense = own.window.map_or(n, |w| w.min(n));
    Ok((out, ReadBytes { kv: keys.len() as u64 * tb, index, dense: dense as u64 * tb }))
}

/// s[r][jj] = q_r . k_{keys[jj]} for the `rep` query rows of one KV head (q pre-scaled).
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn chunk_scores(q: &[f32], rep: usize, d: usize, k: &[f32], keys: &[u32], s: &mut [f32]) {
    let nk = keys.len();
    for (jj, &j) in keys.iter().enumerate() {
        let kr = &k[j as usize * d..(j as usize + 1) * d];
        for r in 0..rep {
            s[r * nk + jj] = dot(&q[r * d..(r + 1) * d], kr);
        }
    }
}

/// exp(x - max) in place over one row of scores (-inf gives 0), and (max, sum of the terms).
/// Compiled for the CPU's FMA like the other chunk kernels: in the closure that calls it,
/// `exp`'s fused multiply-adds were calls to the software `fmaf` (5% of a decode step).
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn softmax_terms(row: &mut [f32]) -> (f32, f32) {
    let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let mut z = 0f32;
    for x in row.iter_mut() {
        *x = if *x == f32::NEG_INFINITY { 0.0 } else { exp(*x - m) };
        z += *x;
    }
    (m, z)
}

/// acc[r] += sum_jj p[r][jj] v_{keys[jj]}.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn chunk_pv(p: &[f32], rep: usize, d: usize, v: &[f32], keys: &[u32], acc: &mut [f32]) {
    let nk = keys.len();
    for (jj, &j) in keys.iter().enumerate() {
        let vr = &v[j as usize * d..(j as usize + 1) * d];
        for r in 0..rep {
            let pr = p[r * nk + jj];
            for (a, x) in acc[r * d..(r + 1) * d].iter_mut().zip(vr) {
                *a = pr.mul_add(*x, *a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::cpu::Shape;
    use crate::attention::reference::masked_dense_reference;
    use crate::generate::kv_cache::CachedRouting;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The newest token's output equals the last row of masked dense attention with the mask
    /// rule, and top-k reads exactly the kept keys' rows.
    #[test]
    fn decode_rows_equal_the_masked_reference() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..12 {
            let hkv = rng.gen_range(1..=3);
            let heads = hkv * rng.gen_range(1..=3);
            let d = [8, 13, 64][rng.gen_range(0..3)];
            let t = rng.gen_range(1..700);
            let window = rng.gen_range(0..200);
            let (groups, k) = (8, rng.gen_range(1..=3));
            let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
            let (q, kk, v) = (r(heads * t * d, 2.0), r(hkv * t * d, 2.0), r(hkv * t * d, 1.0));
            let memb: Vec<f32> = r(t * groups, 1.0).iter().map(|x| x.abs()).collect();
            let mut cache = LayerCache::new(hkv, d, Some(CachedRouting::new(groups, k, None)));
            cache.push_kv(&kk, &v, t);
            let ro = cache.routing.as_mut().unwrap();
            (0..t).for_each(|i| ro.push(&memb[i * groups..(i + 1) * groups], &memb[i * groups..(i + 1) * groups]));
            let masks = ro.masks.clone();
            // The last query row of q.
            let qi: Vec<f32> = (0..heads).flat_map(|h| q[(h * t + t - 1) * d..(h * t + t) * d].to_vec()).collect();
            let s = Shape { heads, kv_heads: hkv, t, d };
            for how in [DecodeAttention::Dense, DecodeAttention::TopK { window }] {
                let (got, read) = attend(&qi, heads, &cache, how, &LayerAttention::default()).unwrap();
                let want = masked_dense_reference(&q, &kk, &v, s, |i, j| how == DecodeAttention::Dense || mask::kept(&masks, window, i, j));
                let kept = (0..t).filter(|&j| how == DecodeAttention::Dense || mask::kept(&masks, window, t - 1, j)).count();
                assert_eq!(read.kv, kept as u64 * cache.token_bytes(), "{how:?}: rows read");
                for h in 0..heads {
                    let w = &want[(h * t + t - 1) * d..(h * t + t) * d];
                    let err = got[h * d..(h + 1) * d].iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(err < 1e-5, "{how:?} t {t} w {window} k {k}: {err}");
                }
            }
        }
    }

    /// On a GPU, the decode kernel gives the CPU's output and reads the same rows: dense, top-k
    /// and soft, with a sliding window, a soft-cap, head dims that do not fill a warp's lanes
    /// and contexts over several chunks.
    #[cfg(feature = "cuda")]
    #[test]
    fn device_decode_equals_the_cpu() {
        use candle_core::{Device, Tensor};
        let dev = Device::new_cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(11);
        for case in 0..16 {
            let hkv = rng.gen_range(1..=3);
            let heads = hkv * rng.gen_range(1..=3);
            let d = [13, 64, 256][case % 3];
            let t = rng.gen_range(1..1500);
            let window = rng.gen_range(0..200);
            let (groups, k) = (8, rng.gen_range(1..=3));
            let own = LayerAttention { window: (case % 4 == 1).then(|| rng.gen_range(1..600)), softcap: (case % 5 == 2).then_some(3.0), ..LayerAttention::default() };
            let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
            let (q, kk, v) = (r(heads * d, 2.0), r(hkv * t * d, 2.0), r(hkv * t * d, 1.0));
            let memb: Vec<f32> = r(t * groups, 1.0).iter().map(|x| x.abs()).collect();
            let mut cache = LayerCache::new(hkv, d, Some(CachedRouting::new(groups, k, None)));
            cache.push_kv(&kk, &v, t);
            let ro = cache.routing.as_mut().unwrap();
            (0..t).for_each(|i| ro.push(&memb[i * groups..(i + 1) * groups], &memb[i * groups..(i + 1) * groups]));
            let on_gpu = cache.clone().to_device(&dev).unwrap();
            let qt = Tensor::from_slice(&q, (1, heads, 1, d), &dev).unwrap();
            for how in [DecodeAttention::Dense, DecodeAttention::TopK { window }, DecodeAttention::Soft { gate: GateFn::Log { eps: 1e-6 }, window }, DecodeAttention::Soft { gate: GateFn::Paper { lambda: 10.0 }, window }] {
                let (want, rw) = attend(&q, heads, &cache, how, &own).unwrap();
                let (got, rg) = attend_on_device(&qt, heads, &on_gpu, how, &own).unwrap();
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(err < 2e-5, "case {case} {how:?} t {t} d {d} w {window} own {own:?}: {err}");
                assert_eq!((rg.kv, rg.dense), (rw.kv, rw.dense), "case {case} {how:?}: rows read");
            }
        }
    }
}
