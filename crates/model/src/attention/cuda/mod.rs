//! Attention on CUDA (built with `--features cuda`): `host` launches the kernels of
//! `crates/kernels/cuda/focus_attention.cu` as candle custom ops, `decode` runs one new token over a
//! cache on the GPU (`crates/kernels/cuda/focus_decode.cu`), `route` routes that token on the GPU
//! (`crates/kernels/cuda/focus_route.cu`), and `plan` is their host-side planning (the tokens of each
//! group in position order, where partial results go), free of CUDA so that CI checks it on
//! the CPU. The training step's kernels are `train::device`'s.

#[cfg(feature = "cuda")]
pub mod host;
pub mod plan;
#[cfg(feature = "cuda")]
pub mod decode;
#[cfg(feature = "cuda")]
pub mod route;

/// A contiguous CUDA tensor's storage, held as a read guard (a kernel launched while it is held
/// runs on candle's one stream after every earlier use of the buffer), and its start offset.
#[cfg(feature = "cuda")]
pub(crate) fn storage(t: &candle_core::Tensor) -> candle_core::Result<(impl std::ops::Deref<Target = candle_core::Storage> + '_, usize)> {
    let (s, l) = t.storage_and_layout();
    if !l.is_contiguous() || !matches!(&*s, candle_core::Storage::Cuda(_)) {
        candle_core::bail!("a Focus kernel needs contiguous CUDA tensors");
    }
    let off = l.start_offset();
    Ok((s, off))
}

/// The kernel argument of a guarded buffer (`storage`): its elements from the tensor's start,
/// `extra` further on.
#[cfg(feature = "cuda")]
pub(crate) fn view<'s, T: candle_core::cuda_backend::CudaDType>(
    g: &'s (impl std::ops::Deref<Target = candle_core::Storage>, usize),
    extra: usize,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'s, T>> {
    match &*g.0 {
        candle_core::Storage::Cuda(c) => Ok(c.as_cuda_slice::<T>()?.slice(g.1 + extra..)),
        _ => candle_core::bail!("a Focus kernel's tensor is not on the CUDA device"),
    }
}
