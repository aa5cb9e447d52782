//! The routing space of one layer in 2D: principal component analysis of the tokens' routing
//! vectors `h W_g` (T x d_g), with the layer's K centroids projected into the same plane (same
//! mean-centering, same axes). f64 throughout; the d_g x d_g covariance is diagonalised exactly by
//! cyclic Jacobi rotations. Deterministic: each axis is signed so that its largest component (the
//! lowest index among equals) is positive.

use crate::focus::adapter::Adapter;
use crate::error::{Error, Result};
use crate::focus::pca::symmetric_eigen;
use crate::focus::router::LayerRouting;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub d_g: usize,
    /// Mean routing vector (subtracted before projecting tokens and centroids alike).
    pub mean: Vec<f64>,
    /// The two principal axes (unit vectors of length d_g).
    pub axes: [Vec<f64>; 2],
    /// All eigenvalues of the covariance (divided by T - 1), descending.
    pub eigenvalues: Vec<f64>,
    /// Share of the total variance along each axis.
    pub explained: [f64; 2],
    /// Per token: coordinates on the two axes.
    pub points: Vec<[f64; 2]>,
    /// Per centroid: coordinates on the two axes.
    pub centroids: Vec<[f64; 2]>,
}

/// PCA of `vectors` (T x d, row-major) with `centroids` (K x d) projected alongside.
pub fn pca_2d(vectors: &[f32], t: usize, d: usize, centroids: &[f32], k: usize) -> Result<Projection> {
    if d < 2 {
        return Err(Error::Invalid(format!("routing space has {d} dimension(s); a 2D projection needs at least 2")));
    }
    if t < 2 {
        return Err(Error::Invalid(format!("a projection needs at least 2 tokens, got {t}")));
    }
    if vectors.len() != t * d || centroids.len() != k * d {
        return Err(Error::Invalid(format!(
            "projection: {} routing values for {t} x {d}, {} centroid values for {k} x {d}",
            vectors.len(),
            centroids.len()
        )));
    }
    if vectors.iter().chain(centroids).any(|x| !x.is_finite()) {
        return Err(Error::Invalid("projection: routing vectors or centroids are not finite".into()));
    }
    let mut mean = vec![0f64; d];
    for row in vectors.chunks(d) {
        row.iter().zip(&mut mean).for_each(|(&x, m)| *m += x as f64);
    }
    mean.iter_mut().for_each(|m| *m /= t as f64);
    let mut cov = vec![0f64; d * d];
    for row in vectors.chunks(d) {
        let c: Vec<f64> = row.iter().zip(&mean).map(|(&x, m)| x as f64 - m).collect();
        for a in 0..d {
            for b in a..d {
                cov[a * d + b] += c[a] * c[b];
            }
        }
    }
    for a in 0..d {
        for b in a..d {
            cov[a * d + b] /= (t - 1) as f64;
            cov[b * d + a] = cov[a * d + b];
        }
    }
    let (eigenvalues, vecs) = symmetric_eigen(&cov, d);
    let total: f64 = eigenvalues.iter().map(|&l| l.max(0.0)).sum();
    let explained = if total > 0.0 { [eigenvalues[0].max(0.0) / total, eigenvalues[1].max(0.0) / total] } else { [0.0, 0.0] };
    let axes = [vecs[0].clone(), vecs[1].clone()];
    let project = |rows: &[f32]| -> Vec<[f64; 2]> {
        rows.chunks(d)
            .map(|r| {
                let dot = |ax: &[f64]| r.iter().zip(&mean).zip(ax).map(|((&x, m), a)| (x as f64 - m) * a).sum::<f64>();
                [dot(&axes[0]), dot(&axes[1])]
            })
            .collect()
    };
    let points = project(vectors);
    let centroids = project(centroids);
    Ok(Projection { d_g: d, mean, axes, eigenvalues, explained, points, centroids })
}

/// The routing space of layer `layer`: its recorded routing vectors and the adapter's centroids.
pub fn layer_projection(routing: &LayerRouting, adapter: &Adapter, layer: usize) -> Result<Projection> {
    let router = adapter
        .layers
        .get(layer)
        .ok_or_else(|| Error::Invalid(format!("layer {layer} out of range (adapter has {})", adapter.layers.len())))?;
    let vectors = routing
        .vectors
        .as_ref()
        .ok_or_else(|| Error::Invalid("routing vectors were not recorded for this layer".into()))?;
    let cent = router.centroids.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    pca_2d(vectors, routing.t, routing.d_g, &cent, adapter.config.groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    #[test]
    fn two_by_two_known_answer() {
        let (l, v) = symmetric_eigen(&[2.0, 1.0, 1.0, 2.0], 2);
        let r = std::f64::consts::FRAC_1_SQRT_2;
        assert!((l[0] - 3.0).abs() < 1e-14 && (l[1] - 1.0).abs() < 1e-14, "{l:?}");
        assert!((v[0][0] - r).abs() < 1e-14 && (v[0][1] - r).abs() < 1e-14, "{v:?}");
        // Equal magnitudes: the lower index is made positive.
        assert!((v[1][0] - r).abs() < 1e-14 && (v[1][1] + r).abs() < 1e-14, "{v:?}");
    }

    #[test]
    fn random_16x16_is_diagonalised() {
        let n = 16;
        let mut rng = StdRng::seed_from_u64(3);
        let mut a = vec![0f64; n * n];
        for i in 0..n {
            for j in i..n {
                let x: f64 = rng.gen::<f64>() * 2.0 - 1.0;
                a[i * n + j] = x;
                a[j * n + i] = x;
            }
        }
        let (l, v) = symmetric_eigen(&a, n);
        let trace: f64 = (0..n).map(|i| a[i * n + i]).sum();
        assert!((l.iter().sum::<f64>() - trace).abs() < 1e-12);
        assert!(l.windows(2).all(|w| w[0] >= w[1]));
        for (li, vi) in l.iter().zip(&v) {
            for r in 0..n {
                let av: f64 = (0..n).map(|c| a[r * n + c] * vi[c]).sum();
                assert!((av - li * vi[r]).abs() < 1e-12, "A v != l v");
            }
        }
        for i in 0..n {
            for j in 0..n {
                let d: f64 = v[i].iter().zip(&v[j]).map(|(x, y)| x * y).sum();
                assert!((d - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
    }

    /// Points built from known axes and variances: PCA must recover them exactly.
    #[test]
    fn pca_recovers_a_known_frame() {
        // Orthonormal axes in 3D: u = (1, 1, 0)/sqrt2, w = (0, 0, 1), third (1, -1, 0)/sqrt2.
        let r = std::f64::consts::FRAC_1_SQRT_2;
        let (u, w, z) = ([r, r, 0.0], [0.0, 0.0, 1.0], [r, -r, 0.0]);
        let offset = [5.0, -2.0, 1.0];
        // Coordinates with sample variances 4, 1, 0.25 along u, w, z and zero mean: a +-a pattern.
        let mut pts = Vec::new();
        for (s1, s2, s3) in [(1., 1., 1.), (1., -1., -1.), (-1., 1., -1.), (-1., -1., 1.)] {
            let (a, b, c) = (2.0 * s1, 1.0 * s2, 0.5 * s3);
            for k in 0..3 {
                pts.push((offset[k] + a * u[k] + b * w[k] + c * z[k]) as f32);
            }
        }
        // Centroid at offset + 3u - 1w projects to (3, -1).
        let cent: Vec<f32> = (0..3).map(|k| (offset[k] + 3.0 * u[k] - w[k]) as f32).collect();
        let p = pca_2d(&pts, 4, 3, &cent, 1).unwrap();
        let var = |x: f64| x * x * 4.0 / 3.0; // 4 points at +-x: sum x^2 * 4 / (T - 1)
        let want = [var(2.0), var(1.0), var(0.5)];
        for (g, w) in p.eigenvalues.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{:?}", p.eigenvalues);
        }
        let total: f64 = want.iter().sum();
        assert!((p.explained[0] - want[0] / total).abs() < 1e-6 && (p.explained[1] - want[1] / total).abs() < 1e-6);
        for k in 0..3 {
            assert!((p.axes[0][k] - u[k]).abs() < 1e-6 && (p.axes[1][k] - w[k]).abs() < 1e-6, "{:?}", p.axes);
        }
        assert!((p.centroids[0][0] - 3.0).abs() < 1e-5 && (p.centroids[0][1] + 1.0).abs() < 1e-5, "{:?}", p.centroids);
        assert!((p.points[0][0] - 2.0).abs() < 1e-5 && (p.points[0][1] - 1.0).abs() < 1e-5, "{:?}", p.points);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(pca_2d(&[1.0, 2.0], 1, 2, &[], 0).is_err());
        assert!(pca_2d(&[1.0, 2.0, 3.0], 2, 2, &[], 0).is_err());
        assert!(pca_2d(&[1.0, 2.0], 2, 1, &[], 0).is_err());
        assert!(pca_2d(&[1.0, f32::NAN, 3.0, 4.0], 2, 2, &[], 0).is_err());
        // Identical points: zero variance, defined output.
        let p = pca_2d(&[1.0, 1.0, 1.0, 1.0], 2, 2, &[0.0, 0.0], 1).unwrap();
        assert_eq!(p.explained, [0.0, 0.0]);
    }
}
