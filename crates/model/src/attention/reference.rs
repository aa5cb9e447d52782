//! References for the fast kernels, written independently of them: dense attention under an
//! arbitrary mask in f64 (`masked_dense_reference`, the bar every kernel is tested against), and
//! the original one-query-at-a-time Focus kernel (`focus_attention_rowwise`), a second exact
//! implementation of the A/B split of FOCUS-METHOD section 2:
//!   A: causal pairs that share a group (any distance). A pair sharing several groups is counted
//!      only in its lowest shared group, so nothing is counted twice for k >= 2;
//!   B: causal local pairs, and sink pairs (j < s, [ours]), that share no group.
//! Each query runs an online softmax over A (walking only the buckets of its own groups) and over
//! B (walking only its window), keeping a log-sum-exp for each, and the two are merged exactly.

use super::cpu::simd::exp;
use super::cpu::Shape;
use crate::focus::mask::{self, share_group};
use multiversion::multiversion;
use rayon::prelude::*;

#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise without reassociating.
    let mut acc = [0f32; 8];
    let (ac, ar) = a.split_at(a.len() / 8 * 8);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// Running softmax state of one query over one set of keys.
pub struct Online {
    pub max: f32,
    pub sum: f32,
    pub acc: Vec<f32>,
}

impl Online {
    pub fn new(d: usize) -> Self {
        Online { max: f32::NEG_INFINITY, sum: 0.0, acc: vec![0.0; d] }
    }
    #[inline(always)]
    pub fn push(&mut self, score: f32, v: &[f32]) {
        if score > self.max {
            let r = exp(self.max - score);
            self.sum *= r;
            self.acc.iter_mut().for_each(|a| *a *= r);
            self.max = score;
        }
        let p = exp(score - self.max);
        self.sum += p;
        self.acc.iter_mut().zip(v).for_each(|(a, x)| *a = p.mul_add(*x, *a));
    }
    /// log of the set's total weight; -inf for an empty set.
    pub fn lse(&self) -> f32 {
        if self.sum == 0.0 { f32::NEG_INFINITY } else { self.max + self.sum.ln() }
    }
}

/// Merges two disjoint sets' softmax states exactly: o = (e^lA oA + e^lB oB) / (e^lA + e^lB),
/// written with unnormalised accumulators so that one division remains.
pub fn merge(a: &Online, b: &Online, out: &mut [f32]) {
    let m = a.max.max(b.max);
    let wa = if a.sum == 0.0 { 0.0 } else { (a.max - m).exp() };
    let wb = if b.sum == 0.0 { 0.0 } else { (b.max - m).exp() };
    let denom = a.sum * wa + b.sum * wb;
    for (o, (x, y)) in out.iter_mut().zip(a.acc.iter().zip(&b.acc)) {
        *o = (x * wa + y * wb) / denom;
    }
}

/// Exact hard top-k Focus attention one query at a time, walking each of its keys: simple and
/// slow. q: (heads, t, d), k and v: (kv_heads, t, d), row-major; returns (heads, t, d).
pub fn focus_attention_rowwise(q: &[f32], k: &[f32], v: &[f32], s: Shape, masks: &[u64], window: usize, sink: usize) -> Vec<f32> {
    let Shape { heads, kv_heads, t, d } = s;
    assert_eq!(q.len(), heads * t * d);
    assert_eq!(k.len(), kv_heads * t * d);
    assert_eq!(masks.len(), t);
    let rep = heads / kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    let buckets = mask::group_members(masks);
    let mut out = vec![0f32; heads * t * d];
    out.par_chunks_mut(d).enumerate().for_each(|(row, o)| {
        let (h, i) = (row / t, row % t);
        let kh = h / rep;
        let qi = &q[row * d..(row + 1) * d];
        let kv = (&k[kh * t * d..(kh + 1) * t * d], &v[kh * t * d..(kh + 1) * t * d]);
        query_row(qi, kv, i, d, masks, &buckets, (window, sink), scale, o);
    });
    out
}

/// One query of `focus_attention`: its A set, its B set, and the merge.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
#[allow(clippy::too_many_arguments)]
fn query_row(qi: &[f32], (k, v): (&[f32], &[f32]), i: usize, d: usize, masks: &[u64], buckets: &[Vec<u32>], (window, sink): (usize, usize), scale: f32, o: &mut [f32]) {
    let key = |j: usize| &k[j * d..(j + 1) * d];
    let val = |j: usize| &v[j * d..(j + 1) * d];
    let mi = masks[i];
    // A: pairs sharing a group, each in its lowest shared group only.
    let mut a = Online::new(d);
    let mut bits = mi;
    while bits != 0 {
        let g = bits.trailing_zeros();
        bits &= bits - 1;
        for &j in &buckets[g as usize] {
            let j = j as usize;
            if j > i {
                break;
            }
            if (mi & masks[j]).trailing_zeros() == g {
                a.push(dot(qi, key(j)) * scale, val(j));
            }
        }
    }
    // B: local and sink pairs [ours] that share no group.
    let mut b = Online::new(d);
    for j in mask::sink_keys(i, window, sink).chain(i.saturating_sub(window)..=i) {
        if !share_group(mi, masks[j]) {
            b.push(dot(qi, key(j)) * scale, val(j));
        }
    }
    merge(&a, &b, o);
}

/// Number of causal pairs each set of the A/B split holds: (A same-group, B local-only). Their
/// sum is the mask's kept pairs (`mask::pair_stats`), which the tests check.
pub fn ab_pair_counts(masks: &[u64], window: usize, sink: usize) -> (u64, u64) {
    let buckets = mask::group_members(masks);
    let mut a = 0u64;
    let mut b = 0u64;
    for (i, &mi) in masks.iter().enumerate() {
        let mut bits = mi;
        while bits != 0 {
            let g = bits.trailing_zeros();
            bits &= bits - 1;
            for &j in &buckets[g as usize] {
                if j as usize > i {
                    break;
                }
                if (mi & masks[j as usize]).trailing_zeros() == g {
                    a += 1;
                }
            }
        }
        for j in mask::sink_keys(i, window, sink).chain(i.saturating_sub(window)..=i) {
            if !share_group(mi, masks[j]) {
                b += 1;
            }
        }
    }
    (a, b)
}

/// Dense attention with an arbitrary mask, in f64, written as plainly as possible: the
/// independent reference for the property tests.
pub fn masked_dense_reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    s: Shape,
    keep: impl Fn(usize, usize) -> bool,
) -> Vec<f32> {
    let Shape { heads, kv_heads, t, d } = s;
    let rep = heads / kv_heads;
    let mut out = vec![0f32; heads * t * d];
    for h in 0..heads {
        let kh = h / rep;
        for i in 0..t {
            let qi = &q[(h * t + i) * d..(h * t + i + 1) * d];
            let scores: Vec<Option<f64>> = (0..t)
                .map(|j| {
                    (j <= i && keep(i, j)).then(|| {
                        let kj = &k[(kh * t + j) * d..(kh * t + j + 1) * d];
                        qi.iter().zip(kj).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() / (d as f64).sqrt()
                    })
                })
                .collect();
            let m = scores.iter().flatten().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| s.map_or(0.0, |s| (s - m).exp())).collect();
            let z: f64 = w.iter().sum();
            for c in 0..d {
                let acc: f64 = (0..t).map(|j| w[j] * v[(kh * t + j) * d + c] as f64).sum();
                out[(h * t + i) * d + c] = (acc / z) as f32;
            }
        }
    }
    out
}
