//! focus-analysis: what Focus Lens does with a routed model, above focus-model:
//! - `analysis`: routing statistics and what the app shows (partners, the routing-space
//!   projection, categories, compare, interventions, alignment, structure);
//! - `eval`: perplexity and the zero-degradation suites;
//! - `generate`: token-by-token generation (KV cache, incremental causal routing, sparse
//!   decode, sampling, chat templates);
//! - `index`: a corpus's routing per token and layer, reduced to per-centroid statistics and
//!   labels (the store is the app's).
//!
//! `analysis`, `eval` and `generate` stand side by side; `index` may use them
//! (`focus-core`'s `tests/import_order.rs` checks it). focus-model's modules are re-exported so
//! paths read the same in every crate.

pub use focus_model::{attention, device, error, focus, io, model};
pub use focus_model::{Adapter, AdapterConfig, AdapterSpec, Error, Gate, Mode, Model, ModelConfig, Result, RouterLayers, Score};

pub mod analysis;
pub mod eval;
pub mod generate;
pub mod index;
