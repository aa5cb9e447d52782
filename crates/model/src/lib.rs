//! focus-model: the ground floor of Focus Lens. Loads pretrained decoders (GGUF and Hugging Face
//! safetensors), attaches Focus centroid routers, and runs dense, soft and exact hard top-k
//! attention on the CPU or with CUDA kernels. No GUI dependency.
//!
//! Its folders import one way, each only from the ones before it (`error` and `device` are open
//! to all; `focus-core`'s `tests/import_order.rs` checks it):
//! - `io`: files in and out (atomic writes, export sets, text loading, memory budgets);
//! - `focus`: what Focus adds (adapter format, router, Sinkhorn, the mask rule);
//! - `attention`: one layer's attention in every mode, and its CPU / CUDA kernels;
//! - `model`: base models (config, decoder and its block, weights, GGUF / HF readers,
//!   tokenizer, one file per family).
//!
//! The crates above it (focus-analysis, focus-train, focus-bench) re-export these modules, so an
//! item has the same path in every crate (`crate::model::Model`).

pub mod attention;
pub mod device;
pub mod error;
pub mod focus;
pub mod io;
pub mod model;

pub use attention::{Mode, ModeKind};
pub use error::{Error, Result};
pub use focus::adapter::{Adapter, AdapterConfig, AdapterSpec, Gate, RouterLayers, Score};
pub use model::{Model, ModelConfig};
