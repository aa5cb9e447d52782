//! Attention on CUDA: `decode` runs a generation step over a cache on the GPU; `host` launches the kernels of `core/kernels/focus_attention.cu` as candle
//! custom ops (built with `--features cuda`); `train_kernels` loads those of
//! `core/kernels/focus_train.cu` (the training step's fused ops); `plan` is their host-side planning (the tokens of
//! each group in position order, where partial results go), free of CUDA so that CI checks it on
//! the CPU.

#[cfg(feature = "cuda")]
pub mod host;
pub mod plan;
#[cfg(feature = "cuda")]
pub mod decode;
#[cfg(feature = "cuda")]
pub mod train_kernels;
