//! The small device helpers of the training ops: CPU storages as f32 values and back, and the
//! launch plumbing for the CUDA kernels of `crates/kernels/cuda/focus_train.cu` (module
//! `focus_train`, and `focus_train_cap` / `focus_train_hard` for its soft-capped and
//! straight-through attention, compiled to PTX by
//! build.rs): loading a function, device views of storages
//! and tensors, launch shapes. The ops themselves are in `attention.rs`, `sinkhorn.rs` and
//! `ops.rs` beside this file.

use candle_core::{CpuStorage, DType, Layout};

/// A contiguous CPU storage as f32 values.
pub fn cpu_f32(s: &CpuStorage, l: &Layout) -> candle_core::Result<Vec<f32>> {
    let (a, b) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("fused ops need contiguous inputs".into()))?;
    Ok(match s {
        CpuStorage::F32(v) => v[a..b].to_vec(),
        CpuStorage::BF16(v) => v[a..b].iter().map(|x| x.to_f32()).collect(),
        CpuStorage::F16(v) => v[a..b].iter().map(|x| x.to_f32()).collect(),
        CpuStorage::F64(v) => v[a..b].iter().map(|&x| x as f32).collect(),
        _ => candle_core::bail!("fused ops take float inputs"),
    })
}

/// f32 values as a CPU storage of `dtype`.
pub fn cpu_out(v: Vec<f32>, dtype: DType) -> candle_core::Result<CpuStorage> {
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(v),
        DType::BF16 => CpuStorage::BF16(v.into_iter().map(half::bf16::from_f32).collect()),
        DType::F16 => CpuStorage::F16(v.into_iter().map(half::f16::from_f32).collect()),
        DType::F64 => CpuStorage::F64(v.into_iter().map(|x| x as f64).collect()),
        d => candle_core::bail!("fused ops give float outputs, not {d:?}"),
    })
}

#[cfg(feature = "cuda")]
pub mod cuda {
    //! Launching the training kernels.
    use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaView, LaunchConfig};
    use candle_core::cuda_backend::{CudaDType, CudaDevice};
    use candle_core::{CudaStorage, Layout};

    const PTX: &str = focus_kernels::TRAIN_PTX;
    const MODULE: &str = "focus_train";
    /// The soft-capped attention kernels (`_cap_` in their names; focus_train_cap.cu), apart so
    /// that only a model that soft-caps pays for their JIT compilation.
    const CAP_PTX: &str = focus_kernels::TRAIN_CAP_PTX;
    const CAP_MODULE: &str = "focus_train_cap";
    /// The straight-through attention kernels (`_hard_`, soft-capped or not; focus_train_hard.cu),
    /// apart likewise: only a straight-through run compiles them.
    const HARD_PTX: &str = focus_kernels::TRAIN_HARD_PTX;
    const HARD_MODULE: &str = "focus_train_hard";

    /// The kernel `name` of the training modules on `dev` (each loaded once per device).
    pub fn func(dev: &CudaDevice, name: &str) -> candle_core::Result<CudaFunction> {
        let (module, ptx) = if name.contains("_hard_") {
            (HARD_MODULE, HARD_PTX)
        } else if name.contains("_cap_") {
            (CAP_MODULE, CAP_PTX)
        } else {
            (MODULE, PTX)
        };
        Ok(dev.get_or_load_custom_func(name, module, ptx)?.into_cuda_function())
    }

    /// Launches kernel `$name` of the training module on `$dev`'s stream with `$cfg` and the
    /// arguments given (each a reference), in the caller's error context.
    macro_rules! launch {
        ($dev:expr, $name:expr, $cfg:expr, $($arg:expr),* $(,)?) => {{
            use candle_core::cuda_backend::cudarc::driver::PushKernelArg as _;
            use candle_core::cuda_backend::WrapErr as _;
            let f = $crate::train::device::cuda::func($dev, $name)?;
            let cfg: candle_core::cuda_backend::cudarc::driver::LaunchConfig = $cfg;
            // More than the 48 KB of dynamic shared memory a launch gets by default (the
            // attention kernels at head dims 128 and 256) must be allowed first.
            if cfg.shared_mem_bytes > 48 * 1024 {
                use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute_enum as A;
                f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, cfg.shared_mem_bytes as i32).w()?;
            }
            let stream = $dev.cuda_stream();
            let mut b = stream.launch_builder(&f);
            $( b.arg($arg); )*
            unsafe { b.launch(cfg) }.w()?;
        }};
    }
    pub(crate) use launch;

    /// The contiguous device view of a storage under its layout.
    pub fn view<'a, T: CudaDType>(s: &'a CudaStorage, l: &Layout) -> candle_core::Result<CudaView<'a, T>> {
        let (a, b) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("training kernels need contiguous inputs".into()))?;
        Ok(s.as_cuda_slice::<T>()?.slice(a..b))
    }

    /// One thread per item, 256 to a block.
    pub fn grid1(n: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (n.div_ceil(256).max(1) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }

    /// One warp per row, 8 rows to a block.
    pub fn grid_rows(rows: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (rows.div_ceil(8).max(1) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }
}
