//! A generation step's attention over a KV cache that lives on the GPU: the kernel of
//! `crates/kernels/cuda/focus_decode.cu` (flash decoding: per-chunk partials, merged by log-sum-exp in
//! the same launch by each head's last block), launched as a candle custom op. `attention::cpu::decode::attend` is the CPU twin and the reference;
//! both keep exactly `focus::mask::classify`'s pairs (the kernel tests a key's top-k set before
//! it reads the key's row).

use crate::focus::gate::GateFn;
use crate::error::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use super::{storage, view};
use candle_core::{CpuStorage, CudaStorage, CustomOp3, DType, Layout, Shape, Tensor};

const PTX: &str = focus_kernels::DECODE_PTX;
const MODULE: &str = "focus_decode";
/// Cached positions per partial (one block of 4 warps each), at least and at most: small chunks
/// give a step many blocks in flight, large ones fewer blocks and partials to merge. Measured on
/// an H200 (`experiments/gpu/chunk_sweep.sh`, decode kernels per layer, dense / top-k): SmolLM2's
/// shape at 8150 cached, chunk 64: 23.9 / 20.5 us, 128: 20.7 / 17.0, 256: 25.6 / 20.7;
/// Qwen2.5's at 32000, 128: 79.4 / 51.6, 256: 71.3 / 46.4, 512: 77.2 / 45.2.
const MIN_CHUNK: usize = 64;
const MAX_CHUNK: usize = 256;
/// Partials per head the chunk aims at (128 at 8K, 256 from 16K).
const TARGET_CHUNKS: usize = 64;

/// The chunk for a cache of `cap` positions: from the capacity alone, so that every step over
/// one cache (eager or replayed as a CUDA graph) has the same launch shape and sums alike.
fn chunk_for(cap: usize) -> usize {
    #[cfg(test)]
    if let c @ 1.. = CHUNK_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        return c;
    }
    cap.div_ceil(TARGET_CHUNKS).next_power_of_two().clamp(MIN_CHUNK, MAX_CHUNK)
}

/// A chunk that `attention::cpu::decode::tests::device_speed` sets to compare chunk sizes
/// (0: `chunk_for`'s own).
#[cfg(test)]
pub static CHUNK_OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Query heads a block serves (`decode_partial2`: two of one KV head, whose K and V rows it
/// loads once). Measured on an H200 (`bench decode --device cuda`, Qwen2.5-Coder-0.5B, 14
/// heads over 2, one build alternated: experiments/results/decode_gqa_h200/): two heads a block
/// gave dense +13% at 16K and +11% at 32K cached (chunk 256), but -2% at 1K and -6 to -10% at
/// 4K (fewer blocks in flight when chunks are small); on SmolLM2's 3 heads a KV head, three
/// heads a block cost -15% at 8K. So: two heads when a KV head has at least 6 and the chunk is
/// the largest (caches over 8K positions); one otherwise.
fn heads_per_block(rep: usize, chunk: usize) -> usize {
    #[cfg(test)]
    if let c @ 1..=2 = HEADS_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        return c;
    }
    if rep >= 6 && chunk == MAX_CHUNK { 2 } else { 1 }
}

/// Heads a block that `attention::cpu::decode::tests::device_decode_equals_the_cpu` sets to
/// test both kernels on small caches (0: `heads_per_block`'s own).
#[cfg(test)]
pub static HEADS_OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The kernel keeps a query head in registers, 8 values per lane.
pub const MAX_HEAD_DIM: usize = 256;

/// What one step keeps and how it scores (see the kernel's notes).
#[derive(Debug, Clone, Copy)]
pub struct DecodeStep<'a> {
    /// The step's [token id, position] (u32, on the device): the newest token sits at that
    /// position, and the keys up to it are cached (read on the device, so that a step captured
    /// as a CUDA graph replays at every position).
    pub step: &'a Tensor,
    /// The layer's own sliding window (Gemma): keys before n - own_window are outside it.
    pub own_window: Option<usize>,
    /// Hard top-k: the cached top-k sets ((cap,) bitmasks as i64), the newest token's (the
    /// query's, row n - 1) included: the kernel reads it there.
    pub topk: Option<&'a Tensor>,
    /// The adapter's local window (top-k keeps it; soft leaves it ungated).
    pub window: usize,
    /// The adapter's sink [ours]: keys j < sink are kept and ungated, as local ones.
    pub sink: usize,
    /// Soft gates and the cached memberships ((cap, K) f32, the newest row included).
    pub soft: Option<(GateFn, &'a Tensor)>,
    pub softcap: Option<f32>,
    /// Per query head, how many of its blocks have finished (u32, at least one a query head,
    /// zero between launches: the last block clears it); one per cache, kept on the device.
    pub arrivals: &'a Tensor,
}

/// The newest token's attention output (H, D) from its queries `q` (H, D) and the cache `k`,
/// `v` (Hkv, cap, D), all f32 on one CUDA device. The grid covers the capacity (see the
/// kernel's notes); the host keeps the step's position below it.
pub fn decode_attention(q: &Tensor, k: &Tensor, v: &Tensor, step: DecodeStep<'_>) -> Result<Tensor> {
    Ok(q.apply_op3_no_bwd(k, v, &DecodeOp { step })?)
}

/// A step's new key and value rows `k_new`, `v_new` (Hkv x D values each, f32) into the cache
/// `k`, `v` (Hkv, cap, D) at the step's position, read on the device (`step`, as in
/// `DecodeStep`): one kernel, which a captured step replays at every position. The host keeps
/// the position below the capacity.
pub fn append_rows(k: &Tensor, v: &Tensor, k_new: &Tensor, v_new: &Tensor, step: &Tensor) -> crate::error::Result<()> {
    use crate::error::Error;
    let candle_core::Device::Cuda(dev) = k.device() else {
        return Err(Error::Invalid("append_rows: the cache is not on a CUDA device".into()));
    };
    let (hkv, cap, d) = k.dims3()?;
    let rows = |x: &Tensor| -> crate::error::Result<Tensor> { Ok(x.to_dtype(DType::F32)?.flatten_all()?.contiguous()?) };
    let (kn, vn) = (rows(k_new)?, rows(v_new)?);
    if v.dims3()? != (hkv, cap, d) || kn.elem_count() != hkv * d || vn.elem_count() != hkv * d || step.dims1()? != 2 || step.dtype() != DType::U32 || k.dtype() != DType::F32 || v.dtype() != DType::F32 {
        return Err(Error::Invalid(format!("append_rows: cache {:?} and {:?}, new rows {:?} and {:?}, step {:?}", k.dims(), v.dims(), k_new.dims(), v_new.dims(), step.dims())));
    }
    let (gk, gv, gkn, gvn, gs) = (storage(k)?, storage(v)?, storage(&kn)?, storage(&vn)?, storage(step)?);
    let (vk, vv, vkn, vvn, vs) = (view::<f32>(&gk, 0)?, view::<f32>(&gv, 0)?, view::<f32>(&gkn, 0)?, view::<f32>(&gvn, 0)?, view::<u32>(&gs, 0)?);
    let f = dev.get_or_load_custom_func("kv_append", MODULE, PTX)?;
    let mut b = f.builder();
    let (cap32, d32) = (cap as i32, d as i32);
    b.arg(&vk).arg(&vv).arg(&vkn).arg(&vvn).arg(&vs).arg(&cap32).arg(&d32);
    let cfg = LaunchConfig { grid_dim: (hkv as u32, 1, 1), block_dim: (d.clamp(32, 256) as u32, 1, 1), shared_mem_bytes: 0 };
    unsafe { b.launch(cfg) }.w()?;
    Ok(())
}

struct DecodeOp<'a> {
    step: DecodeStep<'a>,
}

impl CustomOp3 for DecodeOp<'_> {
    fn name(&self) -> &'static str {
        "focus-decode-attention"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("focus-decode-attention is the CUDA kernel; on the CPU use attention::cpu::decode::attend")
    }

    fn cuda_fwd(&self, s1: &CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout, s3: &CudaStorage, l3: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let st = self.step;
        let (h, d) = l1.shape().dims2()?;
        let (hkv, cap, dk) = l2.shape().dims3()?;
        if s1.dtype() != DType::F32 || s2.dtype() != DType::F32 || s3.dtype() != DType::F32 {
            candle_core::bail!("decode attention on CUDA takes f32");
        }
        if dk != d || l3.shape().dims3()? != (hkv, cap, d) || hkv == 0 || h % hkv != 0 || d > MAX_HEAD_DIM || cap == 0 || st.step.dims1()? != 2 || st.step.dtype() != DType::U32 || st.arrivals.dims1()? < h || st.arrivals.dtype() != DType::U32 {
            candle_core::bail!("decode attention: q ({h}, {d}), cache ({hkv}, {cap}, {dk}), step {:?}", st.step.dims());
        }
        let contiguous = |l: &Layout| l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("decode attention needs contiguous q, k, v".into()));
        let ((qa, qb), (ka, kb), (va, vb)) = (contiguous(l1)?, contiguous(l2)?, contiguous(l3)?);
        let dev = s1.device().clone();
        let (q, k, v) = (s1.as_cuda_slice::<f32>()?.slice(qa..qb), s2.as_cuda_slice::<f32>()?.slice(ka..kb), s3.as_cuda_slice::<f32>()?.slice(va..vb));
        // Positions a step may attend: the capacity, or the layer's own window.
        let chunk = chunk_for(cap);
        let chunks = st.own_window.map_or(cap, |w| w.min(cap)).div_ceil(chunk);
        let own_window = st.own_window.unwrap_or(0).min(i32::MAX as usize) as i32;
        let step = storage(st.step)?;
        let step_view = view::<u32>(&step, 0)?;
        let part_m = unsafe { dev.alloc::<f32>(h * chunks)? };
        let part_l = unsafe { dev.alloc::<f32>(h * chunks)? };
        // Each partial's row padded to a multiple of 4 values (the merge reads float4s).
        let part_o = unsafe { dev.alloc::<f32>(h * chunks * d.next_multiple_of(4))? };
        let out = unsafe { dev.alloc::<f32>(h * d)? };
        let null = 0u64;
        let masks = st.topk.map(storage).transpose()?;
        let memb = st.soft.map(|(_, m)| storage(m)).transpose()?;
        // A block takes `per` query heads of one KV head; a KV head's rep heads take `nsub`
        // blocks (the last one fewer heads when per does not divide rep).
        let rep_heads = h / hkv;
        let per = heads_per_block(rep_heads, chunk).min(rep_heads);
        let nsub = rep_heads.div_ceil(per);
        let f = dev.get_or_load_custom_func(if per == 2 { "decode_partial2" } else { "decode_partial" }, MODULE, PTX)?;
        let mut b = f.builder();
        b.arg(&q).arg(&k).arg(&v);
        let mask_view = masks.as_ref().map(|g| view::<i64>(g, 0)).transpose()?;
        let memb_view = memb.as_ref().map(|g| view::<f32>(g, 0)).transpose()?;
        match &mask_view {
            Some(m) => b.arg(m),
            None => b.arg(&null),
        };
        b.arg(&part_m).arg(&part_l).arg(&part_o);
        let (cap32, d32, rep, chunk, chunks32) = (cap as i32, d as i32, (h / hkv) as i32, chunk as i32, chunks as i32);
        let topk = st.topk.is_some() as i32;
        let window = st.window.min(i32::MAX as usize) as i32;
        let sink = st.sink.min(i32::MAX as usize) as i32;
        let scale = 1.0 / (d as f32).sqrt();
        let softcap = st.softcap.unwrap_or(0.0);
        b.arg(&step_view).arg(&own_window).arg(&cap32).arg(&d32).arg(&rep).arg(&chunk).arg(&chunks32);
        b.arg(&topk).arg(&window).arg(&sink).arg(&scale).arg(&softcap);
        match &memb_view {
            Some(m) => b.arg(m),
            None => b.arg(&null),
        };
        let (groups, gate, gparam) = match st.soft {
            Some((GateFn::Log { eps }, m)) => (m.dim(1)? as i32, 1i32, eps),
            Some((GateFn::Paper { lambda }, m)) => (m.dim(1)? as i32, 2i32, lambda),
            _ => (0i32, 0i32, 0f32),
        };
        b.arg(&groups).arg(&gate).arg(&gparam);
        let arrivals = storage(st.arrivals)?;
        let arrivals_view = view::<u32>(&arrivals, 0)?;
        let nsub32 = nsub as i32;
        b.arg(&out).arg(&arrivals_view).arg(&nsub32);
        // The merge's weights in shared memory, one per chunk.
        if chunks * 4 > 32 << 10 {
            candle_core::bail!("decode attention: {chunks} partials a head exceed the merge's shared memory");
        }
        let cfg = LaunchConfig { grid_dim: (chunks as u32, (hkv * nsub) as u32, 1), block_dim: (128, 1, 1), shared_mem_bytes: (chunks * 4) as u32 };
        unsafe { b.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((h, d))))
    }
}
