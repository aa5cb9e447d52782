//! Benchmarks shared by the CLI (`focus-lens bench ...`) and the GUI's speed panel: the whole
//! model's prefill, dense vs hard top-k (`forward`), and one attention call, our dense kernel vs
//! exact top-k Focus vs candle's matmul + softmax (`attention`). Figures are printed, never
//! asserted in tests.

mod attention;
mod forward;

pub use attention::*;
pub use forward::*;
