//! focus-bench: the benchmarks (attention, forward, decode, routing), above focus-analysis.
//! The lower crates' modules are re-exported so paths read the same in every crate.

pub use focus_analysis::{analysis, attention, device, error, eval, focus, generate, index, io, model};
pub use focus_model::{Adapter, AdapterConfig, AdapterSpec, Error, Gate, Mode, Model, ModelConfig, Result, RouterLayers, Score};

pub mod bench;
