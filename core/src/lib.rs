//! focus-core: the Focus Lens library. Loads pretrained decoders (GGUF and Hugging Face
//! safetensors), attaches Focus centroid routers, runs dense, soft and exact hard top-k
//! attention, and reports per-layer routing statistics. No GUI dependency.
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

pub mod analysis;
pub mod attention;
pub mod bench;
pub mod device;
pub mod error;
pub mod eval;
pub mod focus;
pub mod generate;
pub mod index;
pub mod io;
pub mod model;
pub mod train;

pub use attention::Mode;
pub use error::{Error, Result};
pub use focus::adapter::{Adapter, AdapterConfig, AdapterSpec, Gate, RouterLayers, Score};
pub use model::{Model, ModelConfig};
