//! Benchmarks shared by the CLI (`focus-lens bench ...`) and the GUI's speed panel: the whole
//! model's prefill, dense vs hard top-k (`forward`), and one attention call, our dense kernel vs
//! exact top-k Focus vs candle's matmul + softmax (`attention`), one generation step over a
//! cached context, dense vs top-k (`decode`), and how far whole-sequence and causal Sinkhorn
//! route a text apart (`routing`). `attention_cuda` is the attention benchmark's CUDA side.
//! Figures are printed, never asserted in tests.

mod attention;
mod attention_run;
#[cfg(feature = "cuda")]
mod attention_cuda;
mod decode;
mod forward;
mod routing;

pub use attention::*;
pub use attention_run::*;
pub use decode::*;
pub use forward::*;
pub use routing::*;

/// Median of repeated timings (the upper one of an even count): robust to one slow repeat.
/// `None` when nothing was timed.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied()
}
