//! A generation step's Focus routing on the GPU: the kernel of `crates/kernels/cuda/focus_route.cu`
//! (router projection, scores, causal Sinkhorn's newest row, top-k set), which writes the newest
//! token's memberships and set into the layer cache's device mirror (`kv_cache::DeviceKv`) and
//! its scores, memberships and updated Sinkhorn state into a step record that the host copies
//! once per step (`generate`). The host twin is `Adapter::scores` + `CausalSinkhorn::push` +
//! `mask::topk_mask`; the tests check the two agree.
//!
//! And a prefill's top-k routing (`topk_masks`): Sinkhorn over a sequence's scores and each
//! token's top-k set as a bit mask, on the device, so that only the masks cross to the host
//! (the group segments of `plan` are made from them). Its host twin is `focus::sinkhorn::sinkhorn`
//! + `LayerRouting::topk_masks`.

use crate::error::{Error, Result};
use candle_core::cuda_backend::cudarc::driver::{self, CudaView, DevicePtr, DeviceSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use super::{storage, view};
use candle_core::{CpuStorage, CudaStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};

const PTX: &str = focus_kernels::ROUTE_PTX;
const MODULE: &str = "focus_route";
/// The kernels' block (`ROUTE_THREADS`, and `SK_THREADS` of focus_sinkhorn.cuh).
const THREADS: usize = 1024;
/// Tokens a block of `route_rows_step` (`ROWS_PER_BLOCK`).
const ROWS_PER_BLOCK: usize = 256;
/// Centroids (K x d_g values) the kernel copies into shared memory; more are read in place.
const SHARED_CENTROIDS: usize = 4096;

/// What routes one token: the layer's router and the adapter's Sinkhorn settings.
#[derive(Debug, Clone, Copy)]
pub struct RouteParams<'a> {
    /// W_g (d_model, d_g) and the centroids (K, d_g), f32 on the device.
    pub proj: &'a Tensor,
    pub centroids: &'a Tensor,
    /// An optional per-channel scale of the router's input (d_model), applied before W_g.
    pub input_scale: Option<&'a Tensor>,
    pub cosine: bool,
    pub tau: f64,
    pub iters: usize,
    /// k of the top-k set.
    pub k: usize,
    /// The input's RMS norm (weight (d_model), eps) when the input is the residual row (a GPU
    /// step's `Block::prenorm_in_kernels`): the kernel applies it.
    pub norm: Option<(&'a Tensor, f32)>,
}

/// Where one routed token goes: the cache's device mirror and the step record.
pub struct RouteTarget<'a> {
    /// Causal Sinkhorn's running state (iters x K, at least one value) f64, updated in place.
    pub run: &'a Tensor,
    /// Memberships (cap, K) f32 and top-k sets (cap,) i64: row `pos` is written.
    pub memberships: &'a Tensor,
    pub masks: &'a Tensor,
    /// The step's [token id, position] (u32, on the device): row `position` is written.
    pub step: &'a Tensor,
    /// The step record (any length) f64 and the offset of this layer's (2 K + iters x K) values.
    pub record: &'a Tensor,
    pub record_at: usize,
}

/// Values one layer writes into the step record: scores (K), memberships (K), state (iters x K).
pub fn record_len(groups: usize, iters: usize) -> usize {
    (2 + iters) * groups
}

/// Routes the newest token from its normalised attention input `h` (1, d_model) on the device
/// (one kernel on candle's stream, no synchronisation), at the position the step tensor holds
/// (the host keeps it below the mirror's capacity; a row past it is not written).
pub fn route_newest(h: &Tensor, p: RouteParams<'_>, t: RouteTarget<'_>) -> Result<()> {
    route_newest_on(h, p, t, None)
}

/// `route_newest` on `side` when given: the kernel then runs beside the work candle's stream
/// does next (the layer's Q/K/V products), and whoever reads its outputs first waits for it
/// (`SideStream::join`). `h` must stay alive until that join (its memory returns to candle's
/// stream-ordered pool when dropped).
pub fn route_newest_on(h: &Tensor, p: RouteParams<'_>, t: RouteTarget<'_>, side: Option<&SideStream>) -> Result<()> {
    let Device::Cuda(dev) = h.device() else {
        return Err(Error::Invalid("route_newest: the input is not on a CUDA device".into()));
    };
    let (dm, dg) = p.proj.dims2()?;
    let (groups, dg2) = p.centroids.dims2()?;
    let h = h.to_dtype(DType::F32)?.flatten_all()?.contiguous()?;
    let (cap, g2) = t.memberships.dims2()?;
    if h.elem_count() != dm || dg2 != dg || g2 != groups || groups == 0 || groups > 64 || p.k == 0 || p.k > groups || t.masks.dims1()? != cap || t.step.dims1()? != 2 {
        return Err(Error::Invalid(format!(
            "route_newest: input {} for W_g ({dm}, {dg}), centroids ({groups}, {dg2}), memberships ({cap}, {g2}), k {}, step {:?}",
            h.elem_count(),
            p.k,
            t.step.dims()
        )));
    }
    if t.run.elem_count() < p.iters * groups || t.record.elem_count() < t.record_at + record_len(groups, p.iters) {
        return Err(Error::Invalid("route_newest: the Sinkhorn state or the step record has the wrong size".into()));
    }
    if let Some(s) = p.input_scale {
        if s.elem_count() != dm {
            return Err(Error::Invalid(format!("route_newest: the input scale has {} values for d_model {dm}", s.elem_count())));
        }
    }
    if let Some((w, _)) = p.norm {
        if w.elem_count() != dm {
            return Err(Error::Invalid(format!("route_newest: the input norm has {} weights for d_model {dm}", w.elem_count())));
        }
    }
    let f32s = |x: &Tensor| -> Result<Tensor> { Ok(x.to_dtype(DType::F32)?.contiguous()?) };
    let (proj, cents) = (f32s(p.proj)?, f32s(p.centroids)?);
    let scale = p.input_scale.map(f32s).transpose()?;
    let norm_w = p.norm.map(|(w, _)| f32s(w)).transpose()?;
    let eps = p.norm.map_or(0f32, |(_, e)| e);
    for (x, dt, what) in [(t.run, DType::F64, "state"), (t.memberships, DType::F32, "memberships"), (t.masks, DType::I64, "masks"), (t.record, DType::F64, "record"), (t.step, DType::U32, "step")] {
        if x.dtype() != dt || !x.is_contiguous() {
            return Err(Error::Invalid(format!("route_newest: the {what} tensor must be contiguous {dt:?}")));
        }
    }
    // The Sinkhorn state (worked on in f32), v (d_g), the row slices' partial sums (at most a
    // block's worth), the scaled input (d_model) and the centroids when they fit.
    let centroids_shared = groups * dg <= SHARED_CENTROIDS;
    let shared = (p.iters * groups + dg + THREADS + dm + if centroids_shared { groups * dg } else { 0 }) * 4;
    if shared > 48 << 10 {
        return Err(Error::Invalid(format!("route_newest: {} Sinkhorn iterations x {groups} groups, d_g {dg} and d_model {dm} need {shared} bytes of shared memory (at most 48 KiB)", p.iters)));
    }
    // Read guards: on candle's stream the kernel runs after every earlier use of the buffers
    // there; on the side stream after the fork, which follows them.
    let (gh, gp, gc, gr, gm, gk, grec, gstep) = (storage(&h)?, storage(&proj)?, storage(&cents)?, storage(t.run)?, storage(t.memberships)?, storage(t.masks)?, storage(t.record)?, storage(t.step)?);
    let gs = scale.as_ref().map(storage).transpose()?;
    let gn = norm_w.as_ref().map(storage).transpose()?;
    let (vh, vp, vc) = (view::<f32>(&gh, 0)?, view::<f32>(&gp, 0)?, view::<f32>(&gc, 0)?);
    let (vr, vm, vk, vrec) = (view::<f64>(&gr, 0)?, view::<f32>(&gm, 0)?, view::<i64>(&gk, 0)?, view::<f64>(&grec, t.record_at)?);
    let vstep = view::<u32>(&gstep, 0)?;
    let vs = gs.as_ref().map(|g| view::<f32>(g, 0)).transpose()?;
    let vn = gn.as_ref().map(|g| view::<f32>(g, 0)).transpose()?;
    let f = dev.get_or_load_custom_func("route_newest", MODULE, PTX)?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (THREADS as u32, 1, 1), shared_mem_bytes: shared as u32 };
    let (dm32, dg32, g32, cos, it32, k32, cap32, cs32) = (dm as i32, dg as i32, groups as i32, p.cosine as i32, p.iters as i32, p.k as i32, cap as i32, centroids_shared as i32);
    // Raw pointers and one launch for either stream (cudarc's builder launches only on the
    // stream its views belong to, candle's).
    let (ph, pp, pc, pr, pm, pk, pstep, prec) = (raw(&vh), raw(&vp), raw(&vc), raw(&vr), raw(&vm), raw(&vk), raw(&vstep), raw(&vrec));
    let ps = vs.as_ref().map_or(0u64, raw);
    let pn = vn.as_ref().map_or(0u64, raw);
    let tau = p.tau;
    let mut args: [*mut std::ffi::c_void; 20] = [
        &ph as *const u64 as *mut _,
        &ps as *const u64 as *mut _,
        &pp as *const u64 as *mut _,
        &pc as *const u64 as *mut _,
        &dm32 as *const i32 as *mut _,
        &dg32 as *const i32 as *mut _,
        &g32 as *const i32 as *mut _,
        &cos as *const i32 as *mut _,
        &tau as *const f64 as *mut _,
        &it32 as *const i32 as *mut _,
        &k32 as *const i32 as *mut _,
        &pr as *const u64 as *mut _,
        &pm as *const u64 as *mut _,
        &pk as *const u64 as *mut _,
        &pstep as *const u64 as *mut _,
        &cap32 as *const i32 as *mut _,
        &prec as *const u64 as *mut _,
        &cs32 as *const i32 as *mut _,
        &pn as *const u64 as *mut _,
        &eps as *const f32 as *mut _,
    ];
    let stream = match side {
        Some(side) => {
            side.fork()?;
            side.side
        }
        None => dev.cuda_stream().cu_stream(),
    };
    unsafe { driver::result::launch_kernel(f.cu_function(), cfg.grid_dim, cfg.block_dim, cfg.shared_mem_bytes, stream, &mut args) }.w()?;
    if let Some(side) = side {
        side.done()?;
    }
    Ok(())
}

/// A prefill's top-k routing on the device: the scores of T tokens (T x K, K <= 32, on CUDA)
/// balanced by Sinkhorn (`tau`, `iters`, causal or over the whole sequence; training's kernel
/// in f32, the host's in f64) and each token's k largest memberships as a bit mask, ties to the
/// lower group: (T,) u32 on the device, queued on candle's stream (no synchronisation). A row
/// whose memberships are not finite gets mask 0, which no top-k set is: the caller refuses it.
/// Causal Sinkhorn runs in one block (`route_topk_rows`), the other on a block per 256 tokens,
/// a launch an iteration (`route_rows_init`, `route_rows_step`).
pub fn topk_masks(scores: &Tensor, tau: f64, iters: usize, causal: bool, k: usize) -> Result<Tensor> {
    let (t, groups) = scores.dims2()?;
    if !scores.device().is_cuda() || t == 0 || groups == 0 || groups > 32 || k == 0 || k > groups || t * groups > i32::MAX as usize || !(tau > 0.0) {
        return Err(Error::Invalid(format!(
            "topk_masks: scores {:?} on {:?}, k {k}, tau {tau}: needs T x K scores on a CUDA device, 1 <= k <= K <= 32, tau > 0",
            scores.dims(),
            scores.device().location()
        )));
    }
    let s = scores.to_dtype(DType::F32)?.contiguous()?;
    Ok(s.apply_op1_no_bwd(&TopKRows { inv_tau: (1.0 / tau) as f32, iters, causal, k })?)
}

struct TopKRows {
    inv_tau: f32,
    iters: usize,
    causal: bool,
    k: usize,
}

impl CustomOp1 for TopKRows {
    fn name(&self) -> &'static str {
        "focus-route-topk-rows"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("focus-route-topk-rows is the CUDA kernel; on the CPU use focus::sinkhorn::sinkhorn and LayerRouting::topk_masks")
    }

    fn cuda_fwd(&self, st: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (t, groups) = l.shape().dims2()?;
        let (a, b) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("topk_masks needs contiguous scores".into()))?;
        let scores = st.as_cuda_slice::<f32>()?.slice(a..b);
        let dev = st.device.clone();
        let work = unsafe { dev.alloc::<f32>(t * groups)? };
        let masks = unsafe { dev.alloc::<u32>(t)? };
        let (t32, g32, k32) = (t as i32, groups as i32, self.k as i32);
        if self.causal {
            // One block: the prefix sums of causal Sinkhorn run down the whole sequence.
            let f = dev.get_or_load_custom_func("route_topk_rows", MODULE, PTX)?;
            let (it32, c32) = (self.iters as i32, 1i32);
            let mut bld = f.builder();
            bld.arg(&scores).arg(&work).arg(&masks).arg(&t32).arg(&g32).arg(&self.inv_tau).arg(&it32).arg(&c32).arg(&k32);
            unsafe { bld.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (THREADS as u32, 1, 1), shared_mem_bytes: 0 }) }.w()?;
        } else {
            // A launch an iteration over blocks of `ROWS_PER_BLOCK` tokens, the blocks' column
            // partials ((max, sum) f32 pairs, K a block) in two alternating buffers.
            let blocks = t.div_ceil(ROWS_PER_BLOCK);
            let parts = unsafe { dev.alloc::<f32>(2 * 2 * blocks * groups)? };
            let half = 2 * blocks * groups;
            let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (ROWS_PER_BLOCK as u32, 1, 1), shared_mem_bytes: 0 };
            let init = dev.get_or_load_custom_func("route_rows_init", MODULE, PTX)?;
            let mut bld = init.builder();
            bld.arg(&scores).arg(&work).arg(&parts).arg(&t32).arg(&g32).arg(&self.inv_tau);
            unsafe { bld.launch(cfg) }.w()?;
            let step = dev.get_or_load_custom_func("route_rows_step", MODULE, PTX)?;
            let (launches, cols) = (self.iters.max(1), i32::from(self.iters > 0));
            for i in 0..launches {
                let (pin, pout) = if i % 2 == 0 { (parts.slice(..half), parts.slice(half..)) } else { (parts.slice(half..), parts.slice(..half)) };
                let last = i32::from(i + 1 == launches);
                let mut bld = step.builder();
                bld.arg(&work).arg(&pin).arg(&pout).arg(&masks).arg(&t32).arg(&g32).arg(&cols).arg(&last).arg(&k32);
                unsafe { bld.launch(cfg) }.w()?;
            }
        }
        Ok((CudaStorage::wrap_cuda_slice(masks, dev), Shape::from(t)))
    }
}

/// A view's device address (no event is recorded: candle's context runs one stream as cudarc
/// counts them, so its views track no uses).
fn raw<T>(v: &CudaView<'_, T>) -> u64 {
    v.device_ptr(v.stream()).0
}

/// A second CUDA stream on candle's device for the routing kernels, with the two events that
/// order it against candle's stream: `fork` (the side waits for candle's stream so far) before
/// a launch, `done` after it, and `join` (candle's stream waits for the side) before the
/// kernel's outputs are read. Raw driver objects, not cudarc's `fork`: a cudarc stream would
/// switch every buffer of the context to event tracking (an event per argument per launch).
/// Forks and joins are stream operations, so a step captured as a CUDA graph holds them as
/// edges: the routing kernel is a branch beside the layer's Q/K/V products.
pub struct SideStream {
    main: std::sync::Arc<driver::CudaStream>,
    side: driver::sys::CUstream,
    forked: driver::sys::CUevent,
    finished: driver::sys::CUevent,
    /// Whether the side holds work candle's stream has not joined (a capture must join every
    /// stream it forked, and only those).
    pending: std::sync::atomic::AtomicBool,
}

// The handles are the driver's, usable from any thread once the context is bound (`new` and
// `drop` bind it; the launches, records and waits go through candle's bound context).
unsafe impl Send for SideStream {}
unsafe impl Sync for SideStream {}

impl SideStream {
    pub fn new(dev: &Device) -> Result<SideStream> {
        let Device::Cuda(d) = dev else { return Err(Error::Invalid("a side stream needs a CUDA device".into())) };
        let main = d.cuda_stream();
        main.context().bind_to_thread().w()?;
        let flags = driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let side = driver::result::stream::create(driver::result::stream::StreamKind::NonBlocking).w()?;
        let forked = driver::result::event::create(flags).w()?;
        let finished = driver::result::event::create(flags).w()?;
        Ok(SideStream { main, side, forked, finished, pending: false.into() })
    }

    /// The side stream waits for everything candle's stream holds so far.
    fn fork(&self) -> Result<()> {
        unsafe {
            driver::result::event::record(self.forked, self.main.cu_stream()).w()?;
            driver::result::stream::wait_event(self.side, self.forked, driver::sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).w()?;
        }
        Ok(())
    }

    /// Marks the side stream's work so far (the launch just made), for `join`.
    fn done(&self) -> Result<()> {
        unsafe { driver::result::event::record(self.finished, self.side) }.w()?;
        self.pending.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Candle's stream waits for the side's last launch (before its outputs are read); nothing
    /// when the side holds no work since the last join.
    pub fn join(&self) -> Result<()> {
        if self.pending.swap(false, std::sync::atomic::Ordering::Relaxed) {
            unsafe { driver::result::stream::wait_event(self.main.cu_stream(), self.finished, driver::sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }.w()?;
        }
        Ok(())
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        // Nothing may still run on the side when its stream goes.
        let _ = self.main.context().bind_to_thread();
        unsafe {
            let _ = driver::result::stream::synchronize(self.side);
            let _ = driver::result::event::destroy(self.forked);
            let _ = driver::result::event::destroy(self.finished);
            let _ = driver::result::stream::destroy(self.side);
        }
    }
}

/// The step record's copy to the host, made on the side stream right after the last layer's
/// routing: the host fills its copy of the routing from it while the device still runs the last
/// layer and the logits (`wait`), and the step's only wait on the logits follows. Pinned host
/// memory, so that a captured step holds the copy as a node, and an event the host waits on
/// (recorded as an external event node under capture, where a plain record would not signal
/// the host).
pub struct RecordCopy {
    host: *mut f64,
    len: usize,
    copied: driver::sys::CUevent,
    main: std::sync::Arc<driver::CudaStream>,
}

// The pinned buffer and the event are the driver's; one generator uses them, one step at a time.
unsafe impl Send for RecordCopy {}
unsafe impl Sync for RecordCopy {}

impl RecordCopy {
    /// Room for a record of `len` values.
    pub fn new(dev: &Device, len: usize) -> Result<RecordCopy> {
        let Device::Cuda(d) = dev else { return Err(Error::Invalid("a record copy needs a CUDA device".into())) };
        let main = d.cuda_stream();
        main.context().bind_to_thread().w()?;
        let host = unsafe { driver::result::malloc_host(len.max(1) * 8, 0) }.w()? as *mut f64;
        let copied = driver::result::event::create(driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).w()?;
        Ok(RecordCopy { host, len, copied, main })
    }

    /// Enqueues on `side`, after everything it holds: the copy of `record` (f64, `len` values),
    /// then the event. The caller joins `side` to candle's stream before a capture ends.
    pub fn enqueue(&self, side: &SideStream, record: &Tensor) -> Result<()> {
        if record.dtype() != DType::F64 || record.elem_count() != self.len {
            return Err(Error::Invalid(format!("record copy: {:?} {:?} for {} values", record.dtype(), record.dims(), self.len)));
        }
        let g = storage(record)?;
        let v = view::<f64>(&g, 0)?;
        let dst = unsafe { std::slice::from_raw_parts_mut(self.host, self.len) };
        unsafe {
            driver::result::memcpy_dtoh_async(dst, raw(&v), side.side).w()?;
            let capturing = driver::result::stream::is_capturing(side.side).w()? != driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            let flags = if capturing { driver::sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32 } else { 0 };
            driver::sys::cuEventRecordWithFlags(self.copied, side.side, flags).result().w()?;
        }
        side.done()
    }

    /// Waits for the copy (not for the rest of the step); the record's values.
    pub fn wait(&self) -> Result<&[f64]> {
        unsafe { driver::result::event::synchronize(self.copied) }.w()?;
        Ok(unsafe { std::slice::from_raw_parts(self.host, self.len) })
    }
}

impl Drop for RecordCopy {
    fn drop(&mut self) {
        let _ = self.main.context().bind_to_thread();
        unsafe {
            let _ = driver::result::event::synchronize(self.copied);
            let _ = driver::result::event::destroy(self.copied);
            let _ = driver::result::free_host(self.host as *mut std::ffi::c_void);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::focus::mask::topk_mask;
    use crate::focus::sinkhorn::CausalSinkhorn;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// The host's routing of one row, in f64 loops: (h * scale) W_g, scores (dot or cosine).
    fn host_scores(h: &[f32], scale: Option<&[f32]>, w: &[f32], c: &[f32], dg: usize, cosine: bool) -> Vec<f32> {
        let mut v = vec![0f64; dg];
        for (i, row) in w.chunks_exact(dg).enumerate() {
            let x = h[i] as f64 * scale.map_or(1.0, |s| s[i] as f64);
            v.iter_mut().zip(row).for_each(|(a, &b)| *a += x * b as f64);
        }
        let norm = |u: &[f64]| (u.iter().map(|x| x * x).sum::<f64>() + 1e-12).sqrt();
        let vn = if cosine { norm(&v) } else { 1.0 };
        c.chunks_exact(dg)
            .map(|cg| {
                let cg: Vec<f64> = cg.iter().map(|&x| x as f64).collect();
                let cn = if cosine { norm(&cg) } else { 1.0 };
                (v.iter().zip(&cg).map(|(a, b)| a * b).sum::<f64>() / vn / cn) as f32
            })
            .collect()
    }

    /// Whether the k-th and (k+1)-th largest memberships are within `eps` (a top-k set that
    /// rounding may decide either way).
    fn near_tie(m: &[f32], k: usize, eps: f32) -> bool {
        let mut s = m.to_vec();
        s.sort_by(|a, b| b.total_cmp(a));
        k < s.len() && (s[k - 1] - s[k]).abs() < eps
    }

    /// The routing kernel gives the host's causal Sinkhorn rows and top-k sets, token after
    /// token (the state carried on the device), for dot and cosine scores, K up to 64 (two
    /// groups per lane), zero and several iterations, with an input scale and with the input's
    /// RMS norm left to the kernel; the step record
    /// holds the scores, memberships and state the host then takes over.
    #[test]
    fn cuda_route_newest_equals_the_host_routing() {
        let dev = crate::device::cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(3);
        let (mut ties, mut checked) = (0usize, 0usize);
        for case in 0..12 {
            let dm = [96, 576, 896][case % 3];
            let dg = [16, 64, 300][case % 3];
            let groups = [4, 8, 40, 64][case % 4];
            let iters = [0, 1, 10][case % 3];
            let k = rng.gen_range(1..=3.min(groups));
            let tau = [0.1, 1.0][case % 2];
            let cosine = case % 2 == 1;
            let scaled = case % 3 == 2;
            // The input as a residual row with its RMS norm, applied by the kernel (a GPU step).
            let normed = case % 4 == 1 || case % 4 == 2;
            let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
            let (w, c) = (r(dm * dg, 0.1), r(groups * dg, 1.0));
            let scale = scaled.then(|| r(dm, 1.0).iter().map(|x| 1.0 + x).collect::<Vec<f32>>());
            let t = 40;
            let hs = r(t * dm, 1.0);
            let proj = Tensor::from_slice(&w, (dm, dg), &dev).unwrap();
            let cents = Tensor::from_slice(&c, (groups, dg), &dev).unwrap();
            let scale_t = scale.as_ref().map(|s| Tensor::from_slice(s, dm, &dev).unwrap());
            let (nw, eps) = (r(dm, 0.3).iter().map(|x| 1.0 + x).collect::<Vec<f32>>(), 1e-5f32);
            let nw_t = Tensor::from_slice(&nw, dm, &dev).unwrap();
            let mut host = CausalSinkhorn::new(groups, tau, iters);
            // The state starts at -inf, as the host's (one unused value without iterations).
            let run = Tensor::from_vec(vec![f64::NEG_INFINITY; iters.max(1) * groups], iters.max(1) * groups, &dev).unwrap();
            let memb = Tensor::zeros((64, groups), DType::F32, &dev).unwrap();
            let masks = Tensor::zeros(64, DType::I64, &dev).unwrap();
            let len = record_len(groups, iters);
            let record = Tensor::zeros(3 * len, DType::F64, &dev).unwrap();
            let step = Tensor::zeros(2, DType::U32, &dev).unwrap();
            for i in 0..t {
                step.slice_set(&Tensor::new(&[0u32, i as u32], &dev).unwrap(), 0, 0).unwrap();
                let h = &hs[i * dm..(i + 1) * dm];
                let ht = Tensor::from_slice(h, (1, dm), &dev).unwrap();
                let p = RouteParams { proj: &proj, centroids: &cents, input_scale: scale_t.as_ref(), cosine, tau, iters, k, norm: normed.then_some((&nw_t, eps)) };
                route_newest(&ht, p, RouteTarget { run: &run, memberships: &memb, masks: &masks, step: &step, record: &record, record_at: len }).unwrap();
                let hn: Vec<f32> = if normed {
                    let ms = h.iter().map(|x| (x * x) as f64).sum::<f64>() / dm as f64;
                    let inv = 1.0 / (ms + eps as f64).sqrt();
                    h.iter().zip(&nw).map(|(x, w)| (*x as f64 * inv * *w as f64) as f32).collect()
                } else {
                    h.to_vec()
                };
                let want_s = host_scores(&hn, scale.as_deref(), &w, &c, dg, cosine);
                let want_m = host.push(&want_s);
                let rec = record.to_vec1::<f64>().unwrap()[len..2 * len].to_vec();
                let got_m = memb.get(i).unwrap().to_vec1::<f32>().unwrap();
                let got_mask = masks.to_vec1::<i64>().unwrap()[i] as u64;
                for g in 0..groups {
                    assert!((rec[g] as f32 - want_s[g]).abs() <= 1e-4 * (1.0 + want_s[g].abs()), "case {case} token {i} group {g}: score {} vs {}", rec[g], want_s[g]);
                    assert!((got_m[g] - want_m[g]).abs() <= 2e-4, "case {case} token {i} group {g}: membership {} vs {}", got_m[g], want_m[g]);
                    assert_eq!(rec[groups + g] as f32, got_m[g], "the record holds the mirror's memberships");
                }
                // The set is the host rule applied to the device's memberships, and the host's
                // own set unless two memberships are within rounding of the k-th place.
                assert_eq!(got_mask, topk_mask(&got_m, k), "case {case} token {i}: top-k set of the device's memberships");
                checked += 1;
                if near_tie(&want_m, k, 1e-4) {
                    ties += 1;
                } else {
                    assert_eq!(got_mask, topk_mask(&want_m, k), "case {case} token {i}: top-k set");
                }
                for (a, b) in rec[2 * groups..].iter().zip(host.state()) {
                    assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "case {case} token {i}: state {a} vs {b}");
                }
                // The host taking the device's state over routes the next token as the device.
                host.set_state(&rec[2 * groups..]);
            }
        }
        // Near-uniform rows (no Sinkhorn iteration, K = 64) tie often; the sets must still be
        // decided by the inputs for most tokens, or the test would check little (112 of the
        // tokens tied on the H200, 2026-12-03).
        assert!(ties * 4 < checked, "{ties} of {checked} tokens near a tie: the inputs decide too few sets");
    }

    /// A prefill's device routing gives the host's top-k sets (Sinkhorn in f64, then
    /// `topk_mask`) for every token but those whose k-th and (k+1)-th memberships are within
    /// rounding: whole and causal Sinkhorn, no and ten iterations, K from 2 to 32, one token to
    /// past the one block's 1,024 threads and over 78 blocks of 256 tokens. A non-finite score gives mask 0 where it reaches;
    /// shapes the kernel cannot take are refused.
    #[test]
    fn cuda_topk_masks_equal_the_host_routing() {
        use crate::focus::sinkhorn::sinkhorn;
        let dev = crate::device::cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(5);
        let (mut ties, mut checked) = (0usize, 0usize);
        for case in 0..16 {
            let t = [1, 37, 1500, 20_000][case % 4];
            let groups = [2, 8, 13, 32][(case / 4) % 4];
            let iters = [10, 0][case % 2];
            let causal = case % 3 == 0;
            let tau = [0.1, 1.0][(case / 2) % 2];
            let k = rng.gen_range(1..=3.min(groups));
            // Scores as a router's: a per-group offset (uneven group sizes) plus token noise.
            let offs: Vec<f32> = (0..groups).map(|_| rng.gen::<f32>() * 0.5).collect();
            let scores: Vec<f32> = (0..t * groups).map(|i| offs[i % groups] + rng.gen::<f32>() * 2.0 - 1.0).collect();
            let st = Tensor::from_slice(&scores, (t, groups), &dev).unwrap();
            let got = topk_masks(&st, tau, iters, causal, k).unwrap().to_vec1::<u32>().unwrap();
            let want = sinkhorn(&scores, t, groups, tau, iters, causal);
            for (i, row) in want.chunks(groups).enumerate() {
                checked += 1;
                if near_tie(row, k, 1e-5) {
                    ties += 1;
                    assert_eq!(got[i].count_ones() as usize, k, "case {case} token {i}: a set of k groups");
                } else {
                    assert_eq!(got[i] as u64, topk_mask(row, k), "case {case} (T {t}, K {groups}, k {k}, {iters} iterations, causal {causal}) token {i}");
                }
            }
        }
        assert!(ties * 100 < checked, "{ties} of {checked} tokens near a tie: the inputs decide too few sets");
        // A NaN score: its row's mask is 0 (causal: the rows before it are routed).
        let mut scores: Vec<f32> = (0..50 * 8).map(|_| rng.gen::<f32>()).collect();
        scores[20 * 8 + 3] = f32::NAN;
        for causal in [false, true] {
            let m = topk_masks(&Tensor::from_slice(&scores, (50, 8), &dev).unwrap(), 0.1, 10, causal, 2).unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(m[20], 0, "causal {causal}: the NaN row");
            if causal {
                assert!(m[..20].iter().all(|x| x.count_ones() == 2), "causal: rows before the NaN keep their sets");
            }
        }
        let z = |t: usize, g: usize| Tensor::zeros((t, g), DType::F32, &dev).unwrap();
        for (s, k) in [(z(4, 33), 2), (z(4, 8), 0), (z(4, 8), 9), (z(0, 8), 1)] {
            let e = topk_masks(&s, 0.1, 10, false, k).unwrap_err();
            assert!(e.to_string().contains("topk_masks"), "{e}");
        }
        assert!(topk_masks(&Tensor::zeros((4, 8), DType::F32, &Device::Cpu).unwrap(), 0.1, 10, false, 2).is_err(), "CPU scores are refused");
    }

    /// The routing kernel's time per call at SmolLM2's and Qwen2.5's shapes (d_model 576 / 896,
    /// d_g 16, K 8, k 2), with 10 Sinkhorn iterations and with none (which isolates the
    /// Sinkhorn chain): 300 calls between two synchronisations, median of 9 rounds. A benchmark
    /// (issue 32: a top-k decode step on the H200 spends ~33-40 us a layer routing): the
    /// `--features cuda` test binary with `attention::cuda::route::tests::route_speed --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn route_speed() {
        let dev = crate::device::cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(9);
        for (dm, iters) in [(576, 10), (576, 0), (896, 10), (896, 0)] {
            let (dg, groups, calls) = (16, 8, 300);
            let mut r = |n: usize| Tensor::from_vec((0..n).map(|_| rng.gen::<f32>() - 0.5).collect::<Vec<f32>>(), n, &dev).unwrap();
            let (proj, cents, h) = (r(dm * dg).reshape((dm, dg)).unwrap(), r(groups * dg).reshape((groups, dg)).unwrap(), r(dm).reshape((1, dm)).unwrap());
            let run = Tensor::from_vec(vec![f64::NEG_INFINITY; iters.max(1) * groups], iters.max(1) * groups, &dev).unwrap();
            let (memb, masks) = (Tensor::zeros((calls, groups), DType::F32, &dev).unwrap(), Tensor::zeros(calls, DType::I64, &dev).unwrap());
            let record = Tensor::zeros(record_len(groups, iters), DType::F64, &dev).unwrap();
            let steps: Vec<Tensor> = (0..calls as u32).map(|i| Tensor::new(&[0u32, i], &dev).unwrap()).collect();
            let mut times = Vec::new();
            for _ in 0..9 {
                dev.synchronize().unwrap();
                let t0 = std::time::Instant::now();
                for step in &steps {
                    let p = RouteParams { proj: &proj, centroids: &cents, input_scale: None, cosine: false, tau: 0.1, iters, k: 2, norm: None };
                    route_newest(&h, p, RouteTarget { run: &run, memberships: &memb, masks: &masks, step, record: &record, record_at: 0 }).unwrap();
                }
                dev.synchronize().unwrap();
                times.push(t0.elapsed().as_secs_f64() / calls as f64);
            }
            times.sort_by(f64::total_cmp);
            eprintln!("route_newest d_model {dm}, d_g {dg}, K {groups}, {iters} Sinkhorn iterations: {:.1} us per call", times[4] * 1e6);
        }
    }

    /// A prefill's device routing per layer at Qwen2.5's router shape (K 8, 10 iterations, k 2)
    /// and the lengths of issue 52, whole and causal Sinkhorn: 20 calls between two
    /// synchronisations, median of 5 rounds. A benchmark: the `--features cuda` test binary with
    /// `attention::cuda::route::tests::topk_masks_speed --ignored --nocapture`.
    #[test]
    #[ignore]
    fn topk_masks_speed() {
        let dev = crate::device::cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(4);
        for t in [4096, 16384, 32768] {
            let s = Tensor::from_vec((0..t * 8).map(|_| rng.gen::<f32>() - 0.5).collect::<Vec<f32>>(), (t, 8), &dev).unwrap();
            for causal in [false, true] {
                let mut times = Vec::new();
                for _ in 0..5 {
                    dev.synchronize().unwrap();
                    let t0 = std::time::Instant::now();
                    for _ in 0..20 {
                        topk_masks(&s, 0.1, 10, causal, 2).unwrap();
                    }
                    dev.synchronize().unwrap();
                    times.push(t0.elapsed().as_secs_f64() / 20.0);
                }
                times.sort_by(f64::total_cmp);
                eprintln!("topk_masks T {t}, K 8, 10 iterations, causal {causal}: {:.1} us per layer", times[2] * 1e6);
            }
        }
    }

    /// Bad shapes are one clear error, not a launch.
    #[test]
    fn cuda_route_newest_rejects_mismatched_shapes() {
        let dev = crate::device::cuda(0).expect("a CUDA device");
        let z = |s: &[usize], dt| Tensor::zeros(s, dt, &dev).unwrap();
        let (proj, cents, h) = (z(&[8, 4], DType::F32), z(&[3, 4], DType::F32), z(&[1, 9], DType::F32));
        let (run, memb, masks, rec, step) = (z(&[3], DType::F64), z(&[4, 3], DType::F32), z(&[4], DType::I64), z(&[9], DType::F64), z(&[2], DType::U32));
        let p = RouteParams { proj: &proj, centroids: &cents, input_scale: None, cosine: false, tau: 1.0, iters: 1, k: 1, norm: None };
        let e = route_newest(&h, p, RouteTarget { run: &run, memberships: &memb, masks: &masks, step: &step, record: &rec, record_at: 0 }).unwrap_err();
        assert!(e.to_string().contains("route_newest"), "{e}");
    }
}
