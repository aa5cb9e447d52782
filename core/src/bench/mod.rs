//! Benchmarks shared by the CLI (`focus-lens bench ...`) and the GUI's speed panel: the whole
//! model's prefill, dense vs hard top-k (`forward`), and one attention call, our dense kernel vs
//! exact top-k Focus vs candle's matmul + softmax (`attention`). Figures are printed, never
//! asserted in tests.

mod attention;
#[cfg(feature = "cuda")]
mod attention_cuda;
mod forward;

pub use attention::*;
pub use forward::*;

/// Median of repeated timings (the upper one of an even count): robust to one slow repeat.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
