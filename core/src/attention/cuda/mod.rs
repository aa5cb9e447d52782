//! Attention on CUDA: `host` launches the kernels of `core/kernels/focus_attention.cu` as candle
//! custom ops (built with `--features cuda`); `plan` is their host-side planning (the tokens of
//! each group in position order, where partial results go), free of CUDA so that CI checks it on
//! the CPU.

#[cfg(feature = "cuda")]
pub mod host;
pub mod plan;
