//! Opening a compute device. On CUDA, candle allocates from the device's default memory pool
//! (stream-ordered `cuMemAllocAsync`), whose release threshold is 0: every synchronisation hands
//! all freed memory back to the driver, and the next allocation maps it again. A forward pass
//! or an attention call then pays for mapping its intermediate buffers each time (8 GB for the
//! Focus kernel at 1M tokens). PyTorch keeps freed blocks in a cache; we keep them in the pool.

use crate::error::Result;
use candle_core::Device;

/// Device `ordinal` on CUDA, with freed memory kept in its pool for reuse.
pub fn cuda(ordinal: usize) -> Result<Device> {
    let device = Device::new_cuda(ordinal)?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = &device {
        keep_pool_memory(dev)?;
    }
    Ok(device)
}

#[cfg(feature = "cuda")]
fn keep_pool_memory(dev: &candle_core::cuda_backend::CudaDevice) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let ctx = dev.cuda_stream().context().clone();
    if !ctx.has_async_alloc() {
        return Ok(()); // plain cuMemAlloc: no pool to configure
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: a valid device handle from the context, and a u64 for the attribute (cuda.h).
    let status = unsafe {
        let s = sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device());
        if s != sys::CUresult::CUDA_SUCCESS {
            s
        } else {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut std::ffi::c_void,
            )
        }
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(crate::Error::Invalid(format!("cannot configure the CUDA memory pool: {status:?}")));
    }
    Ok(())
}
