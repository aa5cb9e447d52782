//! Principal directions of router inputs, for the data-driven initialisation of W_g [ours]
//! (issue 28: a random W_g keeps a random 16 of the hidden state's directions; the top
//! principal directions keep the ones along which tokens differ most). `Moments` accumulates
//! the mean and second moment of rows over many sequences; `top_eigen` returns the leading
//! eigenvectors of a symmetric matrix by subspace iteration with a Rayleigh-Ritz finish, and
//! `symmetric_eigen` (cyclic Jacobi) every eigenpair of a small one (the Routing space view's PCA).

use rand::{rngs::StdRng, SeedableRng};

/// Running sums of rows of dimension `d` (f64): their count, sum and sum of outer products.
#[derive(Debug, Clone)]
pub struct Moments {
    pub d: usize,
    pub n: usize,
    sum: Vec<f64>,
    outer: Vec<f64>,
}

impl Moments {
    pub fn new(d: usize) -> Moments {
        Moments { d, n: 0, sum: vec![0.0; d], outer: vec![0.0; d * d] }
    }

    /// Adds the rows of `x` (n x d, row-major).
    pub fn add(&mut self, x: &[f32]) {
        let d = self.d;
        assert_eq!(x.len() % d, 0, "rows of {d}");
        for row in x.chunks(d) {
            for (a, &v) in row.iter().enumerate() {
                self.sum[a] += v as f64;
                let v = v as f64;
                let out = &mut self.outer[a * d..(a + 1) * d];
                // Only the upper triangle is accumulated; `covariance` mirrors it.
                for (b, &w) in row.iter().enumerate().skip(a) {
                    out[b] += v * w as f64;
                }
            }
        }
        self.n += x.len() / d;
    }

    /// The mean row.
    pub fn mean(&self) -> Vec<f64> {
        self.sum.iter().map(|s| s / self.n.max(1) as f64).collect()
    }

    /// The mean squared norm of the rows, E ||x||^2.
    pub fn mean_sq_norm(&self) -> f64 {
        (0..self.d).map(|a| self.outer[a * self.d + a]).sum::<f64>() / self.n.max(1) as f64
    }

    /// The covariance matrix (d x d, row-major): E[x x^T] - mu mu^T.
    pub fn covariance(&self) -> Vec<f64> {
        let (d, n) = (self.d, self.n.max(1) as f64);
        let mu = self.mean();
        let mut c = vec![0.0; d * d];
        for a in 0..d {
            for b in a..d {
                let v = self.outer[a * d + b] / n - mu[a] * mu[b];
                c[a * d + b] = v;
                c[b * d + a] = v;
            }
        }
        c
    }
}

/// The `r` leading eigenpairs of the symmetric d x d matrix `c` (row-major): eigenvalues in
/// descending order and the eigenvectors as the columns of a d x r row-major matrix.
pub fn top_eigen(c: &[f64], d: usize, r: usize, iters: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    assert!(c.len() == d * d && r >= 1 && r <= d, "top_eigen: {r} of a {d} x {d} matrix");
    // Subspace iteration on r + p vectors (oversampling speeds convergence of the r-th).
    let p = (r + 8).min(d);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v: Vec<f64> = (0..d * p).map(|_| super::adapter::normal(&mut rng) as f64).collect();
    orthonormalise(&mut v, d, p);
    for _ in 0..iters {
        v = matmul(c, &v, d, d, p);
        orthonormalise(&mut v, d, p);
    }
    // Rayleigh-Ritz: the eigenvectors of V^T C V rotate V onto the eigenvectors.
    let cv = matmul(c, &v, d, d, p);
    let mut small = vec![0.0; p * p];
    for i in 0..p {
        for j in 0..p {
            small[i * p + j] = (0..d).map(|a| v[a * p + i] * cv[a * p + j]).sum();
        }
    }
    let (vals, vecs) = symmetric_eigen(&small, p);
    let mut out = vec![0.0; d * r];
    for (col, e) in vecs.iter().take(r).enumerate() {
        for a in 0..d {
            out[a * r + col] = (0..p).map(|j| v[a * p + j] * e[j]).sum();
        }
    }
    (vals[..r].to_vec(), out)
}

/// (m x k) x (k x n), row-major.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for (t, &x) in a[i * k..(i + 1) * k].iter().enumerate() {
            if x != 0.0 {
                row.iter_mut().zip(&b[t * n..(t + 1) * n]).for_each(|(o, &y)| *o += x * y);
            }
        }
    }
    out
}

/// Modified Gram-Schmidt on the `p` columns of the d x p row-major `v`.
fn orthonormalise(v: &mut [f64], d: usize, p: usize) {
    for j in 0..p {
        for i in 0..j {
            let dot: f64 = (0..d).map(|a| v[a * p + i] * v[a * p + j]).sum();
            (0..d).for_each(|a| v[a * p + j] -= dot * v[a * p + i]);
        }
        let norm = (0..d).map(|a| v[a * p + j].powi(2)).sum::<f64>().sqrt().max(1e-300);
        (0..d).for_each(|a| v[a * p + j] /= norm);
    }
}

/// Eigen-decomposition of a symmetric n x n matrix (row-major) by cyclic Jacobi rotations.
/// Returns the eigenvalues in descending order and the matching unit eigenvectors, each signed so
/// that its largest component (lowest index among equals, to 1e-9 relative) is positive.
pub fn symmetric_eigen(a: &[f64], n: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
    assert_eq!(a.len(), n * n, "symmetric_eigen: matrix is not n x n");
    let mut m = a.to_vec();
    let mut v = vec![0f64; n * n]; // columns are eigenvectors
    (0..n).for_each(|i| v[i * n + i] = 1.0);
    let norm: f64 = m.iter().map(|x| x * x).sum::<f64>().sqrt();
    for _sweep in 0..100 {
        let off: f64 = (0..n).flat_map(|p| (0..n).filter(move |&q| q != p).map(move |q| (p, q))).map(|(p, q)| m[p * n + q].powi(2)).sum();
        if off.sqrt() <= 1e-15 * norm || norm == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = m[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                // Rotation angle that zeroes m[p][q] (Golub & Van Loan, Algorithm 8.4.2).
                let theta = (m[q * n + q] - m[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (mkp, mkq) = (m[k * n + p], m[k * n + q]);
                    m[k * n + p] = c * mkp - s * mkq;
                    m[k * n + q] = s * mkp + c * mkq;
                }
                for k in 0..n {
                    let (mpk, mqk) = (m[p * n + k], m[q * n + k]);
                    m[p * n + k] = c * mpk - s * mqk;
                    m[q * n + k] = s * mpk + c * mqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| m[j * n + j].total_cmp(&m[i * n + i]));
    let values = order.iter().map(|&i| m[i * n + i]).collect();
    let vectors = order
        .iter()
        .map(|&i| {
            let mut e: Vec<f64> = (0..n).map(|k| v[k * n + i]).collect();
            let big = e.iter().fold(0f64, |a, x| a.max(x.abs()));
            if let Some(lead) = e.iter().position(|x| x.abs() >= big * (1.0 - 1e-9)) {
                if e[lead] < 0.0 {
                    e.iter_mut().for_each(|x| *x = -*x);
                }
            }
            e
        })
        .collect();
    (values, vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_planted_directions() {
        // Rows with variance 25, 9 and 4 along three orthonormal directions and 0.01 noise:
        // the top 2 eigenvectors are the first two directions, eigenvalues ~25 and ~9.
        let d = 12;
        let mut rng = StdRng::seed_from_u64(7);
        let mut dirs = vec![0.0f64; d * 3];
        dirs.iter_mut().for_each(|x| *x = super::super::adapter::normal(&mut rng) as f64);
        orthonormalise(&mut dirs, d, 3);
        let mut m = Moments::new(d);
        let mut rows = Vec::new();
        for _ in 0..4000 {
            let z = [5.0, 3.0, 2.0].map(|s| s * super::super::adapter::normal(&mut rng) as f64);
            rows.extend((0..d).map(|a| (1.0 + (0..3).map(|j| z[j] * dirs[a * 3 + j]).sum::<f64>() + 0.1 * super::super::adapter::normal(&mut rng) as f64) as f32));
        }
        m.add(&rows);
        let (vals, vecs) = top_eigen(&m.covariance(), d, 2, 100, 1);
        assert!((vals[0] / 25.0 - 1.0).abs() < 0.1 && (vals[1] / 9.0 - 1.0).abs() < 0.1, "{vals:?}");
        for j in 0..2 {
            let cos: f64 = (0..d).map(|a| vecs[a * 2 + j] * dirs[a * 3 + j]).sum();
            assert!(cos.abs() > 0.99, "direction {j}: |cos| {cos}");
        }
        // The mean (1 in every coordinate) is not a principal direction: the covariance is centred.
        assert!(m.mean().iter().all(|&x| (x - 1.0).abs() < 0.3));
    }
}
