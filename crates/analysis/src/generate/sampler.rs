//! Choosing the next token from the logits: greedy at temperature 0, else nucleus (top-p)
//! sampling at a temperature, from a seeded generator so that a seed reproduces a run.

use rand::{rngs::StdRng, Rng, SeedableRng};

pub struct Sampler {
    temperature: f64,
    top_p: f64,
    rng: StdRng,
}

impl Sampler {
    /// `temperature` >= 0 (0: greedy), `top_p` in (0, 1].
    pub fn new(temperature: f64, top_p: f64, seed: u64) -> Self {
        Sampler { temperature, top_p, rng: StdRng::seed_from_u64(seed) }
    }

    /// The next token id. Ties go to the lower id, so that greedy decoding is deterministic.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let argmax = || logits.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32;
        if self.temperature == 0.0 {
            return argmax();
        }
        let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let mut p: Vec<(u32, f64)> = logits.iter().enumerate().map(|(i, &x)| (i as u32, ((x as f64 - m) / self.temperature).exp())).collect();
        // Descending probability, lower id first among equals (the sort is stable).
        p.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = p.iter().map(|x| x.1).sum();
        // The smallest prefix holding top_p of the mass (at least one token).
        let (mut kept, mut mass) = (0, 0.0);
        for &(_, w) in &p {
            kept += 1;
            mass += w;
            if mass >= self.top_p * total {
                break;
            }
        }
        let u = self.rng.gen::<f64>() * mass;
        let mut c = 0.0;
        for &(id, w) in &p[..kept] {
            c += w;
            if u < c {
                return id;
            }
        }
        p[kept - 1].0
    }
}

/// log softmax(logits)[id], in f64: the model's own log-probability of the token (temperature 1).
pub fn log_prob(logits: &[f32], id: u32) -> f64 {
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = logits.iter().map(|&x| (x as f64 - m).exp()).sum();
    logits[id as usize] as f64 - m - z.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_seeded_and_nucleus() {
        let logits = [1.0f32, 3.0, 3.0, 0.5, 2.9];
        assert_eq!(Sampler::new(0.0, 1.0, 0).sample(&logits), 1);
        let draw = |seed| {
            let mut s = Sampler::new(1.0, 1.0, seed);
            (0..200).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        // Every id is drawn at temperature 1 and top_p 1; a tiny top_p keeps only the top token.
        assert!((0..5).all(|id| draw(3).contains(&id)));
        let mut s = Sampler::new(1.0, 1e-9, 5);
        assert!((0..50).all(|_| s.sample(&logits) == 1));
        // top_p 0.5 keeps the two tokens at 3.0 (their mass passes half): never the others.
        let mut s = Sampler::new(1.0, 0.5, 5);
        let got: Vec<u32> = (0..300).map(|_| s.sample(&logits)).collect();
        assert!(got.iter().all(|&i| i == 1 || i == 2) && got.contains(&2));
        let lp: f64 = (0..5).map(|i| log_prob(&logits, i).exp()).sum();
        assert!((lp - 1.0).abs() < 1e-12);
    }
}
