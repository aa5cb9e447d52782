//! focus-core: the Focus Lens library as one name for the app, the examples and the tests. It
//! holds no code of its own: it re-exports the crates that do, which the compiler keeps in one
//! order (each depends only on the ones before it):
//!
//! focus-kernels (CUDA sources) -> focus-model (`io`, `focus`, `attention`, `model`)
//! -> focus-analysis (`analysis`, `eval`, `generate`, `index`) -> {focus-train (`train`),
//! focus-bench (`bench`)}.
//!
//! Where things are:
//! - `model`: base models (config, decoder and its block, weights, GGUF / HF readers,
//!   tokenizer, one file per family);
//! - `focus`: what Focus adds (adapter format, router, Sinkhorn, the mask rule);
//! - `attention`: one layer's attention in every mode, and its CPU / CUDA kernels;
//! - `analysis`: routing statistics, partners, the routing-space projection, categories;
//! - `eval`: perplexity and the zero-degradation suites;
//! - `generate`: token-by-token generation (KV cache, incremental causal routing, sparse
//!   decode, sampling, chat templates);
//! - `index`: a corpus's routing per token and layer, reduced to per-centroid statistics and
//!   labels (the store is the app's);
//! - `train`: router training, in one room (the trainer, its fused step and ops, their CUDA
//!   launchers); `bench`: benchmarks; `io`: files in and out.

pub use focus_analysis::{analysis, eval, generate, index};
pub use focus_bench::bench;
pub use focus_model::{attention, device, error, focus, io, model};
pub use focus_train::train;

pub use focus_model::{Adapter, AdapterConfig, AdapterSpec, Error, Gate, Mode, ModeKind, Model, ModelConfig, Result, RouterLayers, Score};
