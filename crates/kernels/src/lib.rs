//! focus-kernels: the CUDA sources of Focus Lens (`cuda/*.cu`), compiled to PTX by `build.rs`
//! under the `cuda` feature and handed out as text for the driver to load. One crate holds them
//! all so the kernels of inference (focus-model) and of training (focus-train) are built by one
//! script. Without the feature it is empty: CPU builds need no CUDA toolchain.
//!
//! - `focus_attention.cu`: inference attention (dense, exact top-k Focus);
//! - `focus_decode.cu`: a generation step's attention over a cached context;
//! - `focus_route.cu`: that step's routing (score, Sinkhorn, top-k of the newest token);
//! - `focus_rows.cu`: the fused one-row products and norms of `model::fused`;
//! - `focus_train.cu`: the fused training step's ops; `focus_train_cap.cu`: its soft-capped
//!   attention (Gemma 2), a module of its own so that other models do not JIT-compile it;
//!   `focus_train_hard.cu`: its straight-through attention (the hard top-k mask), likewise.

#[cfg(feature = "cuda")]
pub const ATTENTION_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_attention.ptx"));
#[cfg(feature = "cuda")]
pub const DECODE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_decode.ptx"));
#[cfg(feature = "cuda")]
pub const ROUTE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_route.ptx"));
#[cfg(feature = "cuda")]
pub const ROWS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_rows.ptx"));
#[cfg(feature = "cuda")]
pub const TRAIN_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_train.ptx"));
#[cfg(feature = "cuda")]
pub const TRAIN_CAP_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_train_cap.ptx"));
#[cfg(feature = "cuda")]
pub const TRAIN_HARD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/focus_train_hard.ptx"));
