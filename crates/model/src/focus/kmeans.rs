//! K-means of routing vectors, for the data-driven initialisation of the centroids
//! (FOCUS-METHOD section 3: "random; or k-means of h W_g over a sample with W_g at its initial
//! value"). k-means++ seeding, then Lloyd iterations; with `spherical` the vectors and centroids
//! are unit-normalised and assignment is by cosine (what `Score::Cosine` scores), else by
//! Euclidean distance.

use rand::{rngs::StdRng, Rng, SeedableRng};

/// `k` centroids (k x d, row-major) of the `n` rows of `x` (n x d). An empty cluster is
/// re-seeded at the row farthest from its centroid, so every centroid ends up holding data.
pub fn kmeans(x: &[f32], n: usize, d: usize, k: usize, iters: usize, spherical: bool, seed: u64) -> Vec<f32> {
    assert!(x.len() == n * d && n >= k && k > 0 && d > 0, "kmeans: {n} rows of {d} for {k} centroids");
    let mut x = x.to_vec();
    if spherical {
        x.chunks_mut(d).for_each(normalise);
    }
    let row = |i: usize| &x[i * d..(i + 1) * d];
    let dist = |a: &[f32], b: &[f32]| -> f64 {
        if spherical {
            1.0 - a.iter().zip(b).map(|(p, q)| (p * q) as f64).sum::<f64>()
        } else {
            a.iter().zip(b).map(|(p, q)| ((p - q) as f64).powi(2)).sum()
        }
    };
    // k-means++: each next centroid is a row drawn with probability ~ its distance to the nearest
    // centroid so far.
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c: Vec<f32> = row(rng.gen_range(0..n)).to_vec();
    let mut near: Vec<f64> = (0..n).map(|i| dist(row(i), &c[0..d])).collect();
    for j in 1..k {
        let total: f64 = near.iter().map(|v| v.max(0.0)).sum();
        let pick = if total > 0.0 {
            let mut r = rng.gen_range(0.0..total);
            near.iter().position(|&v| {
                r -= v.max(0.0);
                r <= 0.0
            })
            .unwrap_or(n - 1)
        } else {
            rng.gen_range(0..n)
        };
        c.extend_from_slice(row(pick));
        for (i, v) in near.iter_mut().enumerate() {
            *v = v.min(dist(row(i), &c[j * d..(j + 1) * d]));
        }
    }
    let mut assign = vec![usize::MAX; n];
    for _ in 0..iters {
        let mut changed = false;
        let mut worst = (0usize, f64::MIN);
        for i in 0..n {
            let (g, dd) = (0..k).map(|g| (g, dist(row(i), &c[g * d..(g + 1) * d]))).fold((0, f64::MAX), |a, b| if b.1 < a.1 { b } else { a });
            if assign[i] != g {
                assign[i] = g;
                changed = true;
            }
            if dd > worst.1 {
                worst = (i, dd);
            }
        }
        let mut sum = vec![0f64; k * d];
        let mut count = vec![0usize; k];
        for i in 0..n {
            count[assign[i]] += 1;
            for (s, &v) in sum[assign[i] * d..(assign[i] + 1) * d].iter_mut().zip(row(i)) {
                *s += v as f64;
            }
        }
        for g in 0..k {
            if count[g] == 0 {
                c[g * d..(g + 1) * d].copy_from_slice(row(worst.0));
                changed = true;
                continue;
            }
            for (cv, s) in c[g * d..(g + 1) * d].iter_mut().zip(&sum[g * d..(g + 1) * d]) {
                *cv = (*s / count[g] as f64) as f32;
            }
            if spherical {
                normalise(&mut c[g * d..(g + 1) * d]);
            }
        }
        if !changed {
            break;
        }
    }
    c
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three well-separated blobs: k-means finds their means, whatever the seed.
    #[test]
    fn finds_separated_clusters() {
        let centres = [[10.0f32, 0.0], [0.0, 10.0], [-10.0, -10.0]];
        let mut rng = StdRng::seed_from_u64(3);
        let mut x = Vec::new();
        for i in 0..300 {
            let c = centres[i % 3];
            x.push(c[0] + rng.gen_range(-1.0..1.0));
            x.push(c[1] + rng.gen_range(-1.0..1.0));
        }
        for seed in 0..4 {
            let c = kmeans(&x, 300, 2, 3, 50, false, seed);
            for want in centres {
                let best = c.chunks(2).map(|g| (g[0] - want[0]).abs() + (g[1] - want[1]).abs()).fold(f32::MAX, f32::min);
                assert!(best < 0.3, "seed {seed}: no centroid near {want:?}: {c:?}");
            }
        }
    }

    /// Spherical k-means returns unit centroids that separate directions, not magnitudes.
    #[test]
    fn spherical_clusters_by_direction() {
        let mut x = Vec::new();
        for i in 0..100 {
            let s = 1.0 + i as f32; // magnitudes from 1 to 100 in both directions
            x.extend_from_slice(&[s, 0.01 * s]);
            x.extend_from_slice(&[0.01 * s, s]);
        }
        let c = kmeans(&x, 200, 2, 2, 20, true, 0);
        for g in c.chunks(2) {
            assert!((g[0] * g[0] + g[1] * g[1] - 1.0).abs() < 1e-4);
        }
        let (a, b) = (&c[0..2], &c[2..4]);
        assert!((a[0] > 0.99 && b[1] > 0.99) || (a[1] > 0.99 && b[0] > 0.99), "{c:?}");
    }
}
