//! Router training, in one room: the routers of a frozen model learn through the model's own
//! next-token loss (FOCUS-METHOD section 3). Nothing here is needed for inference.
//! - `trainer`: the training loop (AdamW on W_g and the centroids, held-out evaluation,
//!   checkpoints, the training log);
//! - `step`: the training forward, fused (its own layer loop) or composed (the decoder's);
//! - `block`: the block's entry points for the fused step; `weights`: the frozen weights as it
//!   reads them;
//! - the fused ops, each with a backward pass and a CPU and a CUDA implementation:
//!   `attention` (RoPE + gated attention of a layer), `sinkhorn` (Sinkhorn balancing), `ops`
//!   (frozen linear, RMSNorm, SwiGLU, cross-entropy); `device`: their storage helpers and CUDA
//!   launch plumbing (kernels in crates/kernels/cuda/focus_train.cu).

pub mod attention;
mod block;
pub mod device;
pub mod ops;
pub mod sinkhorn;
mod step;
mod trainer;
mod weights;

pub use step::{forward, layer_gradients, layer_graph_bytes, Objective, TrainPath};
pub use trainer::{checkpoint_dir, Before, probe_from_books, probe_passage, sharpening_term, top_group_balance_term, LayerCategories, BALANCE_TEMPERATURE, LogRow, Recompute, RouterSize, TrainData, TrainKernels, TrainOptions, Trainer, PROBE_BYTES, PURE_MIN_TOKENS};
pub use weights::TrainWeights;
