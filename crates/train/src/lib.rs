//! focus-train: router training in one room, above focus-analysis (the trainer: AdamW,
//! evaluation, checkpoints, the log; the training step's fused ops and their CUDA launchers).
//! The lower crates' modules are re-exported so paths read the same in every crate.

pub use focus_analysis::{analysis, attention, device, error, eval, focus, generate, index, io, model};
pub use focus_model::{Adapter, AdapterConfig, AdapterSpec, Error, Gate, Mode, Model, ModelConfig, Result, RouterLayers, Score};

pub mod train;
