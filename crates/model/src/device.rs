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
        fixed_cublas_workspace(dev)?;
    }
    Ok(device)
}

/// The device's default memory pool, from which candle's stream-ordered allocations come (None
/// when the driver allocates without a pool).
#[cfg(feature = "cuda")]
fn default_pool(ctx: &candle_core::cuda_backend::cudarc::driver::CudaContext) -> Result<Option<candle_core::cuda_backend::cudarc::driver::sys::CUmemoryPool>> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    if !ctx.has_async_alloc() {
        return Ok(None);
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: a valid device handle from the context, and an out-pointer that lives here.
    let s = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
    if s != sys::CUresult::CUDA_SUCCESS {
        return Err(crate::Error::Invalid(format!("cannot get the CUDA memory pool: {s:?}")));
    }
    Ok(Some(pool))
}

/// "cuda (NVIDIA H100 80GB HBM3)": `dev` with the first GPU's name as nvidia-smi gives it, for
/// provenance; `dev` alone on the CPU or where nvidia-smi does not answer.
pub fn named(dev: &str) -> String {
    if dev.starts_with("cuda") {
        let smi = std::process::Command::new("nvidia-smi").args(["--query-gpu=name", "--format=csv,noheader", "--id=0"]).output();
        if let Ok(o) = smi {
            let name = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !name.is_empty() {
                return format!("{dev} ({name})");
            }
        }
    }
    dev.to_string()
}

/// One u64 attribute of a memory pool (cuda.h: every attribute read here is a cuuint64_t).
#[cfg(feature = "cuda")]
fn pool_attribute(pool: candle_core::cuda_backend::cudarc::driver::sys::CUmemoryPool, attribute: candle_core::cuda_backend::cudarc::driver::sys::CUmemPool_attribute) -> u64 {
    let mut v: u64 = 0;
    // SAFETY: an attribute query of a valid pool into a u64 that lives here.
    unsafe { candle_core::cuda_backend::cudarc::driver::sys::cuMemPoolGetAttribute(pool, attribute, &mut v as *mut u64 as *mut std::ffi::c_void) };
    v
}

/// Memory in use where a computation runs, for progress displays (bytes): on CUDA the device's
/// used memory (every process's, as nvidia-smi counts it), the larger of that and the pool's
/// peak of live allocations, and the card's total; on the CPU this process's resident memory,
/// its peak (VmHWM) and the machine's total. None where it cannot be read (no /proc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    pub used: u64,
    pub peak: u64,
    pub total: u64,
}

impl MemoryUse {
    /// "1.23 GiB (peak 1.50) of 24.0 GiB".
    pub fn line(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        format!("{:.2} GiB (peak {:.2}) of {:.1} GiB", gib(self.used), gib(self.peak), gib(self.total))
    }
}

/// The memory `device` uses now (`MemoryUse`). On CUDA it synchronises the stream first.
pub fn memory_use(device: &Device) -> Option<MemoryUse> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        use candle_core::cuda_backend::cudarc::driver::sys;
        let stream = dev.cuda_stream();
        stream.synchronize().ok()?;
        let ctx = stream.context();
        let (free, total) = ctx.mem_get_info().ok()?;
        let used = (total - free) as u64;
        let peak = default_pool(ctx).ok()?.map_or(used, |pool| pool_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH));
        return Some(MemoryUse { used, peak: peak.max(used), total: total as u64 });
    }
    if !matches!(device, Device::Cpu) {
        return None;
    }
    // /proc/self/status: "VmRSS:  123456 kB", "VmHWM: ..."; /proc/meminfo: "MemTotal: ... kB".
    let kb = |text: &str, key: &str| text.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()).map(|k| k * 1024);
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let used = kb(&status, "VmRSS:")?;
    Some(MemoryUse { used, peak: kb(&status, "VmHWM:").unwrap_or(used).max(used), total: kb(&meminfo, "MemTotal:")? })
}

/// The CUDA memory pool after a synchronisation (bytes): its live allocations, their peak since
/// the last `pool_memory` call, its reservation, and the device's used memory (every process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolMemory {
    pub used: u64,
    pub peak: u64,
    pub reserved: u64,
    pub device_used: u64,
}

impl PoolMemory {
    /// "used U peak P reserved R device-used D MiB".
    pub fn line(&self) -> String {
        let mib = |b: u64| b >> 20;
        format!("used {} peak {} reserved {} device-used {} MiB", mib(self.used), mib(self.peak), mib(self.reserved), mib(self.device_used))
    }
}

/// The pool's figures (`PoolMemory`), its peak watermark reset for the next call; None on the
/// CPU or where the driver allocates without a pool. For memory per training step
/// (`train_paper --mem-trace`) and per benchmark variant (`train_speed`).
pub fn pool_memory(device: &Device) -> Option<PoolMemory> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        use candle_core::cuda_backend::cudarc::driver::sys;
        use sys::CUmemPool_attribute::*;
        let stream = dev.cuda_stream();
        stream.synchronize().ok()?;
        let ctx = stream.context();
        let (free, total) = ctx.mem_get_info().ok()?;
        let pool = default_pool(ctx).ok()??;
        let get = |a| pool_attribute(pool, a);
        let m = PoolMemory { used: get(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), peak: get(CU_MEMPOOL_ATTR_USED_MEM_HIGH), reserved: get(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), device_used: (total - free) as u64 };
        let mut zero: u64 = 0;
        // SAFETY: a valid pool; resetting the high watermark takes a zero u64 (cuda.h types).
        unsafe { sys::cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &mut zero as *mut u64 as *mut std::ffi::c_void) };
        return Some(m);
    }
    let _ = device;
    None
}

/// cuBLAS's workspace, given once for the device's handle: a generation step captured as a CUDA
/// graph (`generate::graph`) runs its products with the workspace it was captured with, and an
/// eager step uses the same one, so that both choose the same algorithms.
#[cfg(feature = "cuda")]
const CUBLAS_WORKSPACE: usize = 32 << 20;

#[cfg(feature = "cuda")]
fn fixed_cublas_workspace(dev: &candle_core::cuda_backend::CudaDevice) -> Result<()> {
    use candle_core::cuda_backend::cudarc::{cublas::sys as blas, driver::DevicePtr};
    let ws = dev.alloc_zeros::<u8>(CUBLAS_WORKSPACE)?;
    let stream = dev.cuda_stream();
    let ptr = ws.device_ptr(&stream).0;
    let handle = dev.cublas_handle();
    // SAFETY: a live handle and a device buffer of the size given, which is never freed (below).
    let status = unsafe { blas::cublasSetWorkspace_v2(*handle.handle(), ptr as *mut std::ffi::c_void, CUBLAS_WORKSPACE) };
    if status != blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Err(crate::Error::Invalid(format!("cannot set the cuBLAS workspace: {status:?}")));
    }
    // cuBLAS keeps the pointer for the handle's life, which is the process's (candle shares one
    // handle among a device's clones): 32 MiB per opened device.
    std::mem::forget(ws);
    Ok(())
}

#[cfg(feature = "cuda")]
fn keep_pool_memory(dev: &candle_core::cuda_backend::CudaDevice) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let ctx = dev.cuda_stream().context().clone();
    let Some(pool) = default_pool(&ctx)? else {
        return Ok(()); // plain cuMemAlloc: no pool to configure
    };
    let mut threshold = u64::MAX;
    // SAFETY: a valid pool, and a u64 for the attribute (cuda.h).
    let status = unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut std::ffi::c_void,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(crate::Error::Invalid(format!("cannot configure the CUDA memory pool: {status:?}")));
    }
    Ok(())
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use candle_core::cuda_backend::cudarc::driver::sys;
    use candle_core::{DType, Device, Tensor};

    /// Issue 32 wants a decode step to replay as one CUDA graph. Its premise, checked here:
    /// candle's ops on the device's own (per-thread) stream capture, their stream-ordered
    /// allocations included, and the graph replays on new input written in place, its result
    /// copied into a buffer allocated before the capture.
    #[test]
    fn candle_ops_on_the_device_stream_capture_into_a_replayable_graph() {
        let dev = super::cuda(0).unwrap();
        let Device::Cuda(cd) = &dev else { unreachable!() };
        let f = |x: &Tensor| ((x * 2.0).unwrap().exp().unwrap() + x).unwrap().sqrt().unwrap();
        let want = |v: &[f32]| v.iter().map(|&x| ((2.0 * x).exp() + x).sqrt()).collect::<Vec<f32>>();
        let x = Tensor::new(&[0.1f32, 0.2, 0.3, 0.4], &dev).unwrap();
        let out = Tensor::zeros(4, DType::F32, &dev).unwrap();
        let _ = f(&x); // loads the kernels' modules before the capture
        let stream = cd.cuda_stream();
        stream.synchronize().unwrap();
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
        {
            let y = f(&x);
            out.slice_set(&y, 0, 0).unwrap();
        } // every buffer allocated inside is freed inside: the graph owns no memory after a launch
        let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * y.abs().max(1.0));
        assert_eq!(out.to_vec1::<f32>().unwrap(), vec![0.0; 4], "capturing ran nothing");
        graph.launch().unwrap();
        let got = out.to_vec1::<f32>().unwrap();
        assert!(close(&got, &want(&[0.1, 0.2, 0.3, 0.4])), "{got:?}");
        for v in [[1.0f32, 2.0, 3.0, 4.0], [-0.2, 0.5, 0.25, 2.5]] {
            x.slice_set(&Tensor::new(&v, &dev).unwrap(), 0, 0).unwrap();
            graph.launch().unwrap();
            let got = out.to_vec1::<f32>().unwrap();
            assert!(close(&got, &want(&v)), "replay on {v:?}: {got:?}");
        }
    }
}
