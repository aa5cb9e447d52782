//! Attention on CUDA (built with `--features cuda`): `host` launches the kernels of
//! `core/kernels/focus_attention.cu` as candle custom ops, `decode` runs one new token over a
//! cache on the GPU (`core/kernels/focus_decode.cu`), `route` routes that token on the GPU
//! (`core/kernels/focus_route.cu`), and `plan` is their host-side planning (the tokens of each
//! group in position order, where partial results go), free of CUDA so that CI checks it on
//! the CPU. The training step's kernels are `train::device`'s.

#[cfg(feature = "cuda")]
pub mod host;
pub mod plan;
#[cfg(feature = "cuda")]
pub mod decode;
#[cfg(feature = "cuda")]
pub mod route;
