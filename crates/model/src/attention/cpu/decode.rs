//! Decode attention on the CPU (`attention::decode`): the newest token over one layer's cache
//! (`kv_cache::LayerCache`). Hard top-k reads only the local window and the keys whose top-k
//! sets meet the query's, from the cache's buckets or through its index of keys by group
//! (`decode::selected_keys`): no other key's bytes are read. A key in several shared groups is
//! taken once, so the selected keys are exactly the mask's row (`mask::classify`).
//! Keys are split into chunks over which partial softmaxes run in parallel and are merged by
//! log-sum-exp (flash decoding); every query head of a KV head reads each key row once.

use super::simd::{dot, exp};
use crate::attention::decode_keys::{selected_keys, DecodeAttention, ReadBytes};
use crate::attention::kv_cache::{Bucket, LayerCache};
use crate::attention::LayerAttention;
use crate::error::{Error, Result};
use crate::focus::gate::GateFn;
use crate::focus::mask;
use multiversion::multiversion;
use rayon::prelude::*;

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
    let newest = n - 1;
    // The first position the layer's own sliding window keeps.
    let from = own.window.map_or(0, |w| n.saturating_sub(w));
    // The selected keys as runs of rows: the local window from the position-ordered rows, and
    // with current buckets, each bucket whose set meets the query's, its distant positions
    // (a prefix of the bucket: positions ascend); else every selected key gathered.
    let (sources, index): (Vec<(Rows, Vec<u32>)>, u64) = match (how, cache.buckets.as_ref(), cache.routing.as_ref()) {
        (DecodeAttention::TopK { window, sink }, Some(b), Some(r)) if cache.buckets_current() && !mask::all_local(n, window) => {
            let (mi, distant) = (r.masks[newest], newest - window);
            // The local window, after the sink keys [ours] past it that share no group with the
            // query (those that do are in the buckets below).
            let sinks = mask::sink_keys(newest, window, sink).filter(|&j| j >= from && !mask::share_group(mi, r.masks[j])).map(|j| j as u32);
            let mut sources = vec![(Rows::Positions, sinks.chain(distant.max(from) as u32..=newest as u32).collect::<Vec<u32>>())];
            for bk in b.lists.iter().filter(|bk| mask::share_group(mi, bk.mask)) {
                let lo = bk.pos.partition_point(|&j| (j as usize) < from);
                let hi = bk.pos.partition_point(|&j| (j as usize) < distant);
                if hi > lo {
                    sources.push((Rows::Bucket(bk), (lo as u32..hi as u32).collect()));
                }
            }
            // One top-k set read per bucket.
            (sources, 8 * b.lists.len() as u64)
        }
        _ => {
            let (mut keys, index) = selected_keys(cache, how)?;
            keys.retain(|&j| j as usize >= from);
            (vec![(Rows::Positions, keys)], index)
        }
    };
    let scale = 1.0 / (d as f32).sqrt();
    // Soft gates (one run of positions): per selected key, the affinity with the query and
    // whether it is distant.
    let gates: Option<(GateFn, Vec<(f32, bool)>)> = match how {
        DecodeAttention::Soft { gate, window, sink } => {
            let r = cache.routing.as_ref().expect("selected_keys checked the routing");
            let gi = r.row(n - 1);
            let a = sources[0].1.iter().map(|&j| (gi.iter().zip(r.row(j as usize)).map(|(x, y)| x * y).sum::<f32>(), !mask::always(n - 1, j as usize, window, sink))).collect();
            Some((gate, a))
        }
        _ => None,
    };
    // Tasks (KV head, run, chunk), head after head.
    let tasks: Vec<(usize, usize, usize)> = (0..hkv)
        .flat_map(|h| sources.iter().enumerate().flat_map(move |(si, (_, ks))| (0..ks.len().div_ceil(CHUNK)).map(move |c| (h, si, c))))
        .collect();
    let parts: Vec<Partial> = tasks
        .par_iter()
        .map(|&(h, si, c)| {
            let (rows, keys) = &sources[si];
            let (kr, vr) = match rows {
                Rows::Positions => (&cache.k[h], &cache.v[h]),
                Rows::Bucket(b) => (&b.k[h], &b.v[h]),
            };
            let ks = &keys[c * CHUNK..(c * CHUNK + CHUNK).min(keys.len())];
            let qh: Vec<f32> = q[h * rep * d..(h + 1) * rep * d].iter().map(|x| x * scale).collect();
            let mut s = vec![0f32; rep * ks.len()];
            chunk_scores(&qh, rep, d, kr, ks, &mut s);
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
            chunk_pv(&s, rep, d, vr, ks, &mut p.acc);
            p
        })
        .collect();
    let mut out = vec![0f32; heads * d];
    let per_head = tasks.len() / hkv;
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
    let kept: usize = sources.iter().map(|(_, ks)| ks.len()).sum();
    // Dense attention of this layer reads its window at most.
    let dense = own.window.map_or(n, |w| w.min(n));
    Ok((out, ReadBytes { kv: kept as u64 * tb, index, dense: dense as u64 * tb }))
}

/// Where a run of selected keys is read from.
enum Rows<'a> {
    /// The position-ordered rows (`LayerCache::k`, `v`); keys are positions.
    Positions,
    /// One bucket's rows; keys are indices into the bucket.
    Bucket(&'a Bucket),
}

/// s[r][jj] = q_r . k_{keys[jj]} for the `rep` query rows of one KV head (q pre-scaled).
fn chunk_scores(q: &[f32], rep: usize, d: usize, k: &[f32], keys: &[u32], s: &mut [f32]) {
    assert!(q.len() >= rep * d && s.len() >= rep * keys.len() && keys.iter().all(|&j| (j as usize + 1) * d <= k.len()));
    #[cfg(target_arch = "x86_64")]
    if d % 16 == 0 && avx512::available() {
        // SAFETY: the CPU has AVX-512F; the assert bounds every row read and write.
        return unsafe { avx512::chunk_scores(q, rep, d, k, keys, s) };
    }
    chunk_scores_any(q, rep, d, k, keys, s)
}

#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn chunk_scores_any(q: &[f32], rep: usize, d: usize, k: &[f32], keys: &[u32], s: &mut [f32]) {
    let nk = keys.len();
    for (jj, &j) in keys.iter().enumerate() {
        prefetch_row(k, keys, jj, d);
        let kr = &k[j as usize * d..(j as usize + 1) * d];
        for r in 0..rep {
            s[r * nk + jj] = dot(&q[r * d..(r + 1) * d], kr);
        }
    }
}

/// Rows ahead that a gathered read asks the memory for.
const PREFETCH_AHEAD: usize = 8;

/// Asks for row keys[jj + PREFETCH_AHEAD] of `x` (rows of `d`): top-k's rows are gathered, and
/// the hardware prefetchers, which follow streams, do not fetch them in time.
#[inline(always)]
fn prefetch_row(x: &[f32], keys: &[u32], jj: usize, d: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(&j) = keys.get(jj + PREFETCH_AHEAD) {
        let row = x[j as usize * d..].as_ptr();
        for line in (0..d).step_by(16) {
            // SAFETY: prefetching has no side effect on memory; the address lies within `x`.
            unsafe { std::arch::x86_64::_mm_prefetch(row.add(line) as *const i8, std::arch::x86_64::_MM_HINT_T0) };
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

/// acc[r] += sum_jj p[r][jj] v_{keys[jj]}. Output columns in blocks of 64 (then 16, then one),
/// whose sums stay in registers over the whole chunk: summed key after key into memory, each
/// multiply-add also cost a load and a store.
fn chunk_pv(p: &[f32], rep: usize, d: usize, v: &[f32], keys: &[u32], acc: &mut [f32]) {
    assert!(p.len() >= rep * keys.len() && acc.len() >= rep * d && keys.iter().all(|&j| (j as usize + 1) * d <= v.len()));
    #[cfg(target_arch = "x86_64")]
    if d % 16 == 0 && avx512::available() {
        // SAFETY: the CPU has AVX-512F; the assert bounds every row read and write.
        return unsafe { avx512::chunk_pv(p, rep, d, v, keys, acc) };
    }
    chunk_pv_any(p, rep, d, v, keys, acc)
}

#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn chunk_pv_any(p: &[f32], rep: usize, d: usize, v: &[f32], keys: &[u32], acc: &mut [f32]) {
    let nk = keys.len();
    for r in 0..rep {
        let pr = &p[r * nk..(r + 1) * nk];
        let out = &mut acc[r * d..(r + 1) * d];
        let mut c = 0;
        while c + 64 <= d {
            pv_block::<64>(pr, d, c, v, keys, &mut out[c..c + 64], r == 0 && c == 0);
            c += 64;
        }
        while c + 16 <= d {
            pv_block::<16>(pr, d, c, v, keys, &mut out[c..c + 16], false);
            c += 16;
        }
        for c in c..d {
            pv_block::<1>(pr, d, c, v, keys, &mut out[c..c + 1], false);
        }
    }
}

/// out[..W] += sum_jj p[jj] v_{keys[jj]}[c..c + W]; the first pass over the rows prefetches them.
#[inline(always)]
fn pv_block<const W: usize>(p: &[f32], d: usize, c: usize, v: &[f32], keys: &[u32], out: &mut [f32], prefetch: bool) {
    let mut a = [0f32; W];
    a.copy_from_slice(out);
    for (jj, (&j, &pj)) in keys.iter().zip(p).enumerate() {
        if prefetch {
            prefetch_row(v, keys, jj, d);
        }
        let x = &v[j as usize * d + c..j as usize * d + c + W];
        for l in 0..W {
            a[l] = pj.mul_add(x[l], a[l]);
        }
    }
    out.copy_from_slice(&a);
}

/// The chunk kernels in AVX-512 for head dims that are a multiple of 16: compiled from the
/// portable loops, the scores ran two lanes wide.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::PREFETCH_AHEAD;
    use std::arch::x86_64::*;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f")
    }

    #[inline(always)]
    unsafe fn prefetch(x: *const f32, keys: &[u32], jj: usize, d: usize) {
        if let Some(&j) = keys.get(jj + PREFETCH_AHEAD) {
            let row = x.add(j as usize * d);
            let mut c = 0;
            while c < d {
                _mm_prefetch(row.add(c).cast(), _MM_HINT_T0);
                c += 16;
            }
        }
    }

    /// # Safety
    /// AVX-512F; d % 16 == 0; q holds rep x d, s rep x keys.len(), k every row of `keys`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn chunk_scores(q: &[f32], rep: usize, d: usize, k: &[f32], keys: &[u32], s: &mut [f32]) {
        // The common head dims as constants, whose loops the compiler unrolls.
        match d {
            64 => scores(q, rep, 64, k, keys, s),
            128 => scores(q, rep, 128, k, keys, s),
            256 => scores(q, rep, 256, k, keys, s),
            _ => scores(q, rep, d, k, keys, s),
        }
    }

    #[inline(always)]
    unsafe fn dot16(q: *const f32, k: *const f32, d: usize) -> f32 {
        // Two chains of multiply-adds, so that their latency overlaps.
        let (mut a, mut b) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut c = 0;
        while c + 32 <= d {
            a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(c)), _mm512_loadu_ps(k.add(c)), a);
            b = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(c + 16)), _mm512_loadu_ps(k.add(c + 16)), b);
            c += 32;
        }
        if c < d {
            a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(c)), _mm512_loadu_ps(k.add(c)), a);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a, b))
    }

    #[inline(always)]
    unsafe fn scores(q: &[f32], rep: usize, d: usize, k: &[f32], keys: &[u32], s: &mut [f32]) {
        let (nk, q, k, s) = (keys.len(), q.as_ptr(), k.as_ptr(), s.as_mut_ptr());
        for (jj, &j) in keys.iter().enumerate() {
            prefetch(k, keys, jj, d);
            let kr = k.add(j as usize * d);
            for r in 0..rep {
                *s.add(r * nk + jj) = dot16(q.add(r * d), kr, d);
            }
        }
    }

    /// # Safety
    /// AVX-512F; d % 16 == 0; p holds rep x keys.len(), acc rep x d, v every row of `keys`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn chunk_pv(p: &[f32], rep: usize, d: usize, v: &[f32], keys: &[u32], acc: &mut [f32]) {
        match d {
            64 => pv(p, rep, 64, v, keys, acc),
            128 => pv(p, rep, 128, v, keys, acc),
            256 => pv(p, rep, 256, v, keys, acc),
            _ => pv(p, rep, d, v, keys, acc),
        }
    }

    /// out[c..c + 16 U] += sum_jj p[jj] v_{keys[jj]}[c..c + 16 U], the sums in U registers over
    /// the whole chunk (summed key after key into memory, each multiply-add also cost a load and
    /// a store).
    #[inline(always)]
    unsafe fn pv_block<const U: usize>(p: *const f32, d: usize, c: usize, v: *const f32, keys: &[u32], out: *mut f32, first: bool) {
        let mut a = [_mm512_setzero_ps(); U];
        for (u, a) in a.iter_mut().enumerate() {
            *a = _mm512_loadu_ps(out.add(c + 16 * u));
        }
        for (jj, &j) in keys.iter().enumerate() {
            if first {
                prefetch(v, keys, jj, d);
            }
            let (w, x) = (_mm512_set1_ps(*p.add(jj)), v.add(j as usize * d + c));
            for (u, a) in a.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(w, _mm512_loadu_ps(x.add(16 * u)), *a);
            }
        }
        for (u, a) in a.iter().enumerate() {
            _mm512_storeu_ps(out.add(c + 16 * u), *a);
        }
    }

    #[inline(always)]
    unsafe fn pv(p: &[f32], rep: usize, d: usize, v: &[f32], keys: &[u32], acc: &mut [f32]) {
        let nk = keys.len();
        for r in 0..rep {
            let (pr, out) = (p.as_ptr().add(r * nk), acc.as_mut_ptr().add(r * d));
            let mut c = 0;
            while c + 64 <= d {
                pv_block::<4>(pr, d, c, v.as_ptr(), keys, out, r == 0 && c == 0);
                c += 64;
            }
            while c < d {
                pv_block::<1>(pr, d, c, v.as_ptr(), keys, out, r == 0 && c == 0);
                c += 16;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::attention::cpu::Shape;
    use crate::attention::reference::masked_dense_reference;
    use crate::attention::kv_cache::CachedRouting;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The GPU step's byte count (`device_read_bytes`, from the index of positions by top-k
    /// set) reads as many key and value rows as the CPU step keeps, with a layer's own sliding
    /// window, sinks [ours], few groups (one pass over the range) and many (the index), and
    /// equals a plain count over the distant positions.
    #[test]
    fn device_read_bytes_count_the_cpu_steps_rows() {
        use crate::attention::decode_keys::device_read_bytes;
        let mut rng = StdRng::seed_from_u64(9);
        for case in 0..40 {
            let (hkv, d) = (2, 8);
            let t = rng.gen_range(1..3000);
            let window = if case % 2 == 0 { rng.gen_range(0..200) } else { rng.gen_range(0..16) };
            let sink = [0, 1, 4, 300][case % 4];
            let groups = [4, 8, 16, 64][case % 4];
            let k = rng.gen_range(1..=3);
            let own = LayerAttention { window: (case % 3 == 1).then(|| rng.gen_range(1..2000)), ..LayerAttention::default() };
            let mut r = |n: usize| (0..n).map(|_| rng.gen::<f32>()).collect::<Vec<f32>>();
            let (kk, v, memb) = (r(hkv * t * d), r(hkv * t * d), r(t * groups));
            let mut cache = LayerCache::new(hkv, d, Some(CachedRouting::new(groups, k, None)));
            cache.push_kv(&kk, &v, t);
            let ro = cache.routing.as_mut().unwrap();
            (0..t).for_each(|i| ro.push(&memb[i * groups..(i + 1) * groups], &memb[i * groups..(i + 1) * groups]));
            let q = r(2 * hkv * d);
            let how = DecodeAttention::TopK { window, sink };
            let (_, cpu) = attend(&q, 2 * hkv, &cache, how, &own).unwrap();
            let dev = device_read_bytes(&cache, how, &own).unwrap();
            assert_eq!(dev.kv, cpu.kv, "case {case} t {t} w {window} s {sink} K {groups} own {own:?}: key and value bytes");
            // The plain count over the distant positions.
            let (n, i) = (t, t - 1);
            let from = own.window.map_or(0, |w| n.saturating_sub(w));
            let ro = cache.routing.as_ref().unwrap();
            let lo = i.saturating_sub(window).max(from);
            let kept = (from..lo).filter(|&j| j < sink || mask::share_group(ro.masks[i], ro.masks[j])).count() + n - lo;
            assert_eq!(dev.kv, kept as u64 * cache.token_bytes(), "case {case}: kept keys");
            assert_eq!(dev.index, (lo - from) as u64 * 8, "case {case}: index bytes");
        }
    }

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
            // Small windows too, where sinks [ours] matter.
            let window = if rng.gen_bool(0.5) { rng.gen_range(0..200) } else { rng.gen_range(0..16) };
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
            // Top-k again over the bucketed rows (`kv_cache::Buckets`).
            let mut bucketed = cache.clone();
            bucketed.enable_buckets();
            assert!(bucketed.buckets_current());
            for sink in [0, 1, 4] {
                for (how, cache) in [(DecodeAttention::Dense, &cache), (DecodeAttention::TopK { window, sink }, &cache), (DecodeAttention::TopK { window, sink }, &bucketed)] {
                    let (got, read) = attend(&qi, heads, cache, how, &LayerAttention::default()).unwrap();
                    let want = masked_dense_reference(&q, &kk, &v, s, |i, j| how == DecodeAttention::Dense || mask::kept(&masks, window, sink, i, j));
                    let kept = (0..t).filter(|&j| how == DecodeAttention::Dense || mask::kept(&masks, window, sink, t - 1, j)).count();
                    assert_eq!(read.kv, kept as u64 * cache.token_bytes(), "{how:?}: rows read");
                    for h in 0..heads {
                        let w = &want[(h * t + t - 1) * d..(h * t + t) * d];
                        let err = got[h * d..(h + 1) * d].iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                        assert!(err < 1e-5, "{how:?} t {t} w {window} k {k}: {err}");
                    }
                }
                // With a layer's own sliding window (which composes with the mask) and a
                // soft-cap, the buckets keep exactly the gathered rows' keys.
                let own = LayerAttention { window: Some(rng.gen_range(1..t + 50)), softcap: Some(5.0), ..LayerAttention::default() };
                let how = DecodeAttention::TopK { window, sink };
                let ((a, ra), (b, rb)) = (attend(&qi, heads, &cache, how, &own).unwrap(), attend(&qi, heads, &bucketed, how, &own).unwrap());
                assert_eq!(ra.kv, rb.kv, "own window {:?} sink {sink}: rows read", own.window);
                let err = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                assert!(err < 1e-5, "own window {:?} sink {sink}: {err}", own.window);
            }
        }
    }

    /// A benchmark's host cache of `n` random tokens, routed by causal Sinkhorn (K=8, k=2).
    pub(crate) fn routed_cache(rng: &mut StdRng, hkv: usize, d: usize, n: usize) -> LayerCache {
        use crate::focus::sinkhorn::CausalSinkhorn;
        let mut c = LayerCache::new(hkv, d, Some(CachedRouting::new(8, 2, Some(CausalSinkhorn::new(8, 1.0, 10)))));
        let kv: Vec<f32> = (0..hkv * n * d).map(|_| rng.gen::<f32>() - 0.5).collect();
        c.push_kv(&kv, &kv, n);
        let ro = c.routing.as_mut().unwrap();
        for _ in 0..n {
            let s: Vec<f32> = (0..8).map(|_| rng.gen::<f32>()).collect();
            let m = ro.sinkhorn.as_mut().unwrap().push(&s);
            ro.push(&s, &m);
        }
        c
    }

    /// Decode attention alone at SmolLM2's shapes (30 layers, 3 KV heads of 64, 9 query heads)
    /// over an 8K cache: ms per step, dense vs top-k (K=8, k=2, window 128). A benchmark:
    /// `cargo test --release -p focus-core --lib attention::cpu::decode::tests::speed -- --ignored --nocapture`
    /// (the dev profile's debug assertions check every load of the intrinsics kernels).
    #[test]
    #[ignore]
    fn speed() {
        let mut rng = StdRng::seed_from_u64(3);
        let n: usize = std::env::var("DECODE_N").ok().and_then(|v| v.parse().ok()).unwrap_or(8180);
        let (hkv, heads, d, layers) = (3, 9, 64, 30);
        let caches: Vec<LayerCache> = (0..layers)
            .map(|_| {
                let mut c = routed_cache(&mut rng, hkv, d, n);
                c.enable_buckets();
                c
            })
            .collect();
        let q: Vec<f32> = (0..heads * d).map(|_| rng.gen::<f32>() - 0.5).collect();
        let own = LayerAttention::default();
        // The chunk kernels alone on one chunk of 512 keys that stays in cache.
        {
            let keys: Vec<u32> = (0..512).collect();
            let mut sc = vec![0f32; 3 * 512];
            let mut acc = vec![0f32; 3 * 64];
            let t0 = std::time::Instant::now();
            for _ in 0..1000 {
                chunk_scores(&q[..3 * 64], 3, 64, &caches[0].k[0], &keys, &mut sc);
            }
            let t1 = t0.elapsed().as_secs_f64();
            let t0 = std::time::Instant::now();
            for _ in 0..1000 {
                chunk_pv(&sc, 3, 64, &caches[0].v[0], &keys, &mut acc);
            }
            let t2 = t0.elapsed().as_secs_f64();
            let t0 = std::time::Instant::now();
            for _ in 0..1000 {
                for r in 0..3 {
                    std::hint::black_box(softmax_terms(&mut sc[r * 512..(r + 1) * 512]));
                }
            }
            let t3 = t0.elapsed().as_secs_f64();
            eprintln!("in cache, ns per key: scores {:.1}, pv {:.1}, softmax {:.1}", t1 / 512e3 * 1e9, t2 / 512e3 * 1e9, t3 / 512e3 * 1e9);
        }
        for how in [DecodeAttention::Dense, DecodeAttention::TopK { window: 128, sink: 0 }] {
            let best = (0..7)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    for c in &caches {
                        std::hint::black_box(attend(&q, heads, c, how, &own).unwrap());
                    }
                    t0.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min);
            let t0 = std::time::Instant::now();
            for c in &caches {
                std::hint::black_box(selected_keys(c, how).unwrap());
            }
            eprintln!("  selected_keys: {:.2} ms", t0.elapsed().as_secs_f64() * 1e3);
            let (_, read) = attend(&q, heads, &caches[0], how, &own).unwrap();
            eprintln!("{how:?} n {n}: {:.2} ms per step ({:.1} GB/s of cache rows)", best * 1e3, read.kv as f64 * layers as f64 / best / 1e9);
        }
    }
}
