//! focus-core: the Focus Lens library. Loads pretrained decoders (GGUF and Hugging Face
//! safetensors), attaches Focus centroid routers, runs dense, soft and exact hard top-k
//! attention, and reports per-layer routing statistics. No GUI dependency.

pub mod adapter;
pub mod analysis;
pub mod attention;
pub mod bench;
pub mod device;
pub mod categories;
#[cfg(feature = "cuda")]
pub mod cuda_attention;
pub mod error;
pub mod eval;
pub mod flash;
pub mod gguf;
pub mod group_segments;
pub mod inspect;
pub mod io;
pub mod kernels;
pub mod model;
pub mod ppl;
pub mod projection;
pub mod router;
pub mod stats;
pub mod text;
pub mod tokenizer;
pub mod topk;
pub mod topk_tiled;
pub mod train;

pub use adapter::{Adapter, AdapterConfig, AdapterSpec, Gate, Score};
pub use attention::Mode;
pub use error::{Error, Result};
pub use model::{Model, ModelConfig};
