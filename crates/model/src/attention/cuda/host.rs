//! Exact causal dense and hard top-k Focus attention on CUDA, as candle custom ops over the
//! kernels of `crates/kernels/cuda/focus_attention.cu` (compiled to PTX by build.rs).
//!
//! Inputs are (H, T, 64) queries and (Hkv, T, 64) keys and values, contiguous, f32 or bf16.
//! f32 runs a plain-FMA kernel (exact to ~1e-6); bf16 runs the tensor-core flash kernel.
//! Focus needs a [`FocusPlan`]: the tokens of each group in position order (built on the host
//! from the top-k masks, uploaded once and reusable by every layer that shares the routing).
//! Attention sinks [ours] (`sink` > 0): after the band pass, `focus_sink_*` folds each query's
//! sink keys past its band that share no group with it into the band's partials, so they join
//! the "always attend" set before the group pass merges.

use crate::error::Result;
use crate::attention::cuda::plan::GroupSegments;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CpuStorage, CudaStorage, CustomOp3, DType, Layout, Shape, Tensor};

const BUILT_IN_PTX: &str = focus_kernels::ATTENTION_PTX;
const MODULE: &str = "focus_attention";
const HEAD_DIM: usize = 64;

/// The kernels' PTX: the built-in one, or the file named by `FOCUS_LENS_PTX`, so that kernel
/// variants can be compared on the GPU machine in one session without rebuilding the binary
/// (`experiments/gpu/ptx_ab.sh`). Read once per process.
fn ptx() -> candle_core::Result<&'static str> {
    static PTX: std::sync::OnceLock<Result<&'static str, String>> = std::sync::OnceLock::new();
    PTX.get_or_init(|| match std::env::var_os("FOCUS_LENS_PTX") {
        None => Ok(BUILT_IN_PTX),
        Some(path) => std::fs::read_to_string(&path)
            .map(|s| &*Box::leak(s.into_boxed_str()))
            .map_err(|e| format!("FOCUS_LENS_PTX={}: {e}", path.to_string_lossy())),
    })
    .clone()
    .map_err(candle_core::Error::Msg)
}

/// Query rows per block of the bf16 kernel: 64 (one m16 tile per warp) or 128 (two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    R64,
    R128,
}

impl Rows {
    pub fn count(self) -> usize {
        match self {
            Rows::R64 => 64,
            Rows::R128 => 128,
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Rows::R64 => "m1",
            Rows::R128 => "m2",
        }
    }
}

/// Device-side routing for one sequence: group segments and the query tiles over them.
pub struct FocusPlan {
    pub t: usize,
    pub k: usize,
    pub window: usize,
    /// Attention sinks [ours]: keys j < sink are kept for every later query.
    pub sink: usize,
    idx: CudaSlice<i32>,
    slot: CudaSlice<i32>,
    seg_off: CudaSlice<i32>,
    seg_len: CudaSlice<i32>,
    masks: CudaSlice<u32>,
    /// (tile_seg, tile_row, count) for 64- and 128-row tiles.
    tiles: [(CudaSlice<i32>, CudaSlice<i32>, usize); 2],
}

impl FocusPlan {
    /// Every mask must have the same number k >= 1 of groups (hard top-k routing), K <= 32.
    pub fn new(dev: &CudaDevice, masks: &[u64], window: usize, sink: usize) -> Result<Self> {
        Self::from_segments(dev, &GroupSegments::new(masks)?, masks, window, sink)
    }

    fn from_segments(dev: &CudaDevice, s: &GroupSegments, masks: &[u64], window: usize, sink: usize) -> Result<Self> {
        let tiles_for = |rows: usize| -> Result<(CudaSlice<i32>, CudaSlice<i32>, usize)> {
            let list = s.tiles(rows);
            let segs: Vec<i32> = list.iter().map(|x| x.0).collect();
            let first: Vec<i32> = list.iter().map(|x| x.1).collect();
            Ok((dev.clone_htod(&segs)?, dev.clone_htod(&first)?, list.len()))
        };
        let tiles = [tiles_for(64)?, tiles_for(128)?];
        Ok(FocusPlan {
            t: s.t,
            k: s.k,
            window,
            sink,
            idx: dev.clone_htod(&s.idx)?,
            slot: dev.clone_htod(&s.slot)?,
            seg_off: dev.clone_htod(&s.seg_off)?,
            seg_len: dev.clone_htod(&s.seg_len)?,
            masks: dev.clone_htod(&masks.iter().map(|&m| m as u32).collect::<Vec<u32>>())?,
            tiles,
        })
    }
}

/// Causal dense attention (H, T, 64) x (Hkv, T, 64) -> (H, T, 64).
pub fn dense_attention(q: &Tensor, k: &Tensor, v: &Tensor, rows: Rows) -> Result<Tensor> {
    Ok(q.apply_op3_no_bwd(k, v, &DenseOp { rows })?)
}

/// Exact hard top-k Focus attention with the routing of `plan`.
pub fn focus_attention(q: &Tensor, k: &Tensor, v: &Tensor, plan: &FocusPlan, rows: Rows) -> Result<Tensor> {
    Ok(q.apply_op3_no_bwd(k, v, &FocusOp { plan, rows })?)
}

/// Causal dense attention on the device for the model's forward pass, or `None` where the
/// kernel does not apply (head dim other than 64, dtype other than f32/bf16).
pub fn dense_attention_if_supported(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Option<Tensor>> {
    if q.dim(2)? != HEAD_DIM || !matches!(q.dtype(), DType::F32 | DType::BF16) {
        return Ok(None);
    }
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    Ok(Some(dense_attention(&q, &k, &v, Rows::R128)?))
}

/// Focus attention on the device for the model's forward pass, or `None` where the kernels do
/// not apply (head dim other than 64, more than 32 groups, uneven k, dtype other than f32/bf16),
/// so that the caller can fall back to the CPU kernel.
pub fn focus_attention_if_supported(q: &Tensor, k: &Tensor, v: &Tensor, masks: &[u64], window: usize, sink: usize, dev: &CudaDevice) -> Result<Option<Tensor>> {
    // The routing the kernels cannot take (uneven k, > 32 groups) fails to segment.
    let segments = match GroupSegments::new(masks) {
        Ok(s) if q.dim(2)? == HEAD_DIM && matches!(q.dtype(), DType::F32 | DType::BF16) => s,
        _ => return Ok(None),
    };
    let plan = FocusPlan::from_segments(dev, &segments, masks, window, sink)?;
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    Ok(Some(focus_attention(&q, &k, &v, &plan, Rows::R128)?))
}

struct DenseOp {
    rows: Rows,
}

struct FocusOp<'a> {
    plan: &'a FocusPlan,
    rows: Rows,
}

/// Checked shapes and contiguous views of q, k, v.
struct Inputs<'a, T> {
    q: CudaView<'a, T>,
    k: CudaView<'a, T>,
    v: CudaView<'a, T>,
    heads: usize,
    t: usize,
    rep: usize,
}

fn inputs<'a, T: candle_core::cuda_backend::CudaDType>(
    s: [(&'a CudaStorage, &Layout); 3],
) -> candle_core::Result<Inputs<'a, T>> {
    let mut views = Vec::with_capacity(3);
    let mut dims = Vec::with_capacity(3);
    for (st, l) in s {
        let (a, b) = l
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("CUDA attention needs contiguous q, k, v".into()))?;
        let d = l.shape().dims3()?;
        views.push(st.as_cuda_slice::<T>()?.slice(a..b));
        dims.push(d);
    }
    let (h, t, d) = dims[0];
    let (hk, tk, dk) = dims[1];
    if d != HEAD_DIM || dk != HEAD_DIM || dims[2] != dims[1] || tk != t || hk == 0 || h % hk != 0 || t == 0 {
        return Err(candle_core::Error::Msg(format!(
            "CUDA attention needs q (H, T, 64) and k, v (Hkv, T, 64) with Hkv dividing H; got {:?}",
            dims
        )));
    }
    let mut it = views.into_iter();
    Ok(Inputs { q: it.next().unwrap(), k: it.next().unwrap(), v: it.next().unwrap(), heads: h, t, rep: h / hk })
}

fn scale_log2() -> f32 {
    std::f32::consts::LOG2_E / (HEAD_DIM as f32).sqrt()
}

/// Launch configuration for a flash pass: one block per (query tile, head).
fn flash_cfg(tiles: usize, heads: usize, dtype: DType) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (tiles as u32, heads as u32, 1),
        block_dim: (if dtype == DType::BF16 { 128 } else { 64 }, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn kernel_name(pass: &str, dtype: DType, rows: Rows) -> String {
    match dtype {
        DType::BF16 => format!("focus_{pass}_bf16_{}", rows.suffix()),
        _ => format!("focus_{pass}_f32"),
    }
}

/// Rows per block actually used (the f32 kernel always takes 64).
fn block_rows(dtype: DType, rows: Rows) -> usize {
    if dtype == DType::BF16 {
        rows.count()
    } else {
        64
    }
}

impl CustomOp3 for DenseOp {
    fn name(&self) -> &'static str {
        "focus-dense-attention"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("focus-dense-attention is the CUDA kernel; on the CPU use attention::cpu::dense::causal_attention")
    }

    fn cuda_fwd(&self, s1: &CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout, s3: &CudaStorage, l3: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = s1.device().clone();
        let dtype = s1.dtype();
        macro_rules! run {
            ($t:ty) => {{
                let x = inputs::<$t>([(s1, l1), (s2, l2), (s3, l3)])?;
                let br = block_rows(dtype, self.rows);
                let tiles = x.t.div_ceil(br);
                let out = unsafe { dev.alloc::<$t>(x.heads * x.t * HEAD_DIM)? };
                let f = dev.get_or_load_custom_func(&kernel_name("dense", dtype, self.rows), MODULE, ptx()?)?;
                let null = 0u64;
                let (tn, rep, window, multi, slots, sc) = (x.t as i32, x.rep as i32, 0i32, 0i32, 0i32, scale_log2());
                let mut b = f.builder();
                b.arg(&x.q).arg(&x.k).arg(&x.v).arg(&out);
                for _ in 0..9 {
                    b.arg(&null);
                }
                b.arg(&tn).arg(&rep).arg(&window).arg(&multi).arg(&slots).arg(&sc);
                unsafe { b.launch(flash_cfg(tiles, x.heads, dtype)) }.w()?;
                (CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from((x.heads, x.t, HEAD_DIM)))
            }};
        }
        Ok(match dtype {
            DType::F32 => run!(f32),
            DType::BF16 => run!(half::bf16),
            d => candle_core::bail!("CUDA attention supports f32 and bf16, not {d:?}"),
        })
    }
}

impl CustomOp3 for FocusOp<'_> {
    fn name(&self) -> &'static str {
        "focus-topk-attention"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("focus-topk-attention is the CUDA kernel; on the CPU use attention::cpu::focus::focus_attention")
    }

    fn cuda_fwd(&self, s1: &CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout, s3: &CudaStorage, l3: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = s1.device().clone();
        let dtype = s1.dtype();
        let p = self.plan;
        macro_rules! run {
            ($t:ty, $merge:expr, $gather:expr, $sink:expr) => {{
                let x = inputs::<$t>([(s1, l1), (s2, l2), (s3, l3)])?;
                if x.t != p.t {
                    candle_core::bail!("the Focus plan is for {} tokens, the inputs have {}", p.t, x.t);
                }
                let br = block_rows(dtype, self.rows);
                let (h, t, kk) = (x.heads, x.t, p.k);
                let band_o = unsafe { dev.alloc::<f32>(h * t * HEAD_DIM)? };
                let band_lse = unsafe { dev.alloc::<f32>(h * t)? };
                let out = unsafe { dev.alloc::<$t>(h * t * HEAD_DIM)? };
                // k = 1: the group pass merges with the band and writes `out` itself. k > 1:
                // it writes one partial per (token, group) for the merge pass. Group rows with no
                // distant partner write lse = -inf themselves, so every slot is written: each
                // token has exactly k slots and sits in exactly k segments.
                let fused = kk == 1;
                let partials = if fused { 0 } else { h * t * kk };
                let grp_o = unsafe { dev.alloc::<f32>(partials * HEAD_DIM)? };
                let grp_lse = unsafe { dev.alloc::<f32>(partials)? };
                let null = 0u64;
                let (tn, rep, window, sc) = (t as i32, x.rep as i32, p.window as i32, scale_log2());
                let multi = i32::from(kk > 1);
                // Band: local pairs, original order.
                {
                    let f = dev.get_or_load_custom_func(&kernel_name("band", dtype, self.rows), MODULE, ptx()?)?;
                    let (zero, slots) = (0i32, t as i32);
                    let mut b = f.builder();
                    b.arg(&x.q).arg(&x.k).arg(&x.v).arg(&null).arg(&band_o).arg(&band_lse);
                    for _ in 0..7 {
                        b.arg(&null);
                    }
                    b.arg(&tn).arg(&rep).arg(&window).arg(&zero).arg(&slots).arg(&sc);
                    unsafe { b.launch(flash_cfg(t.div_ceil(br), h, dtype)) }.w()?;
                }
                // Sinks [ours]: the sink keys past each query's band that share no group with
                // it, merged into the band's partials (one warp per (head, token)).
                if p.sink > 0 && t > p.window + 1 {
                    let f = dev.get_or_load_custom_func($sink, MODULE, ptx()?)?;
                    let sink = p.sink.min(t) as i32;
                    let rows = (h * t) as i64;
                    let mut b = f.builder();
                    b.arg(&x.q).arg(&x.k).arg(&x.v).arg(&p.masks).arg(&band_o).arg(&band_lse);
                    b.arg(&tn).arg(&rep).arg(&window).arg(&sink).arg(&rows).arg(&sc);
                    let cfg = LaunchConfig { grid_dim: ((h * t).div_ceil(8) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
                    unsafe { b.launch(cfg) }.w()?;
                }
                // Groups: distant pairs within each group's segment, on q, k, v gathered into
                // segment order so that a tile's rows are contiguous.
                {
                    let rows_total = t * kk;
                    let hkv = h / x.rep;
                    let gather = dev.get_or_load_custom_func($gather, MODULE, ptx()?)?;
                    let chunks = HEAD_DIM * std::mem::size_of::<$t>() / 16;
                    let gathered = |src: &CudaView<'_, $t>, heads: usize| -> candle_core::Result<CudaSlice<$t>> {
                        let dst = unsafe { dev.alloc::<$t>(heads * rows_total * HEAD_DIM)? };
                        let (tn, rows32) = (t as i32, rows_total as i32);
                        let mut b = gather.builder();
                        b.arg(src).arg(&dst).arg(&p.idx).arg(&tn).arg(&rows32);
                        let blocks = (rows_total * chunks).div_ceil(256) as u32;
                        let cfg = LaunchConfig { grid_dim: (blocks, heads as u32, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
                        unsafe { b.launch(cfg) }.w()?;
                        Ok(dst)
                    };
                    let (gq, gk, gv) = (gathered(&x.q, h)?, gathered(&x.k, hkv)?, gathered(&x.v, hkv)?);
                    let (ts, tr, count) = &p.tiles[usize::from(br == 128)];
                    let f = dev.get_or_load_custom_func(&kernel_name("group", dtype, self.rows), MODULE, ptx()?)?;
                    let (rows32, slots) = (rows_total as i32, rows_total as i32);
                    let mut b = f.builder();
                    b.arg(&gq).arg(&gk).arg(&gv);
                    if fused {
                        b.arg(&out).arg(&band_o).arg(&band_lse);
                    } else {
                        b.arg(&null).arg(&grp_o).arg(&grp_lse);
                    }
                    b.arg(&p.idx).arg(&p.slot).arg(&p.seg_off).arg(&p.seg_len).arg(ts).arg(tr).arg(&p.masks);
                    b.arg(&rows32).arg(&rep).arg(&window).arg(&multi).arg(&slots).arg(&sc);
                    unsafe { b.launch(flash_cfg(*count, h, dtype)) }.w()?;
                }
                if !fused {
                    let f = dev.get_or_load_custom_func($merge, MODULE, ptx()?)?;
                    // One warp per (head, token), 8 per block.
                    let (kk32, rows) = (kk as i32, (h * t) as i64);
                    let mut b = f.builder();
                    b.arg(&band_o).arg(&band_lse).arg(&grp_o).arg(&grp_lse).arg(&out).arg(&rows).arg(&kk32);
                    let cfg = LaunchConfig { grid_dim: ((h * t).div_ceil(8) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
                    unsafe { b.launch(cfg) }.w()?;
                }
                (CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from((h, t, HEAD_DIM)))
            }};
        }
        Ok(match dtype {
            DType::F32 => run!(f32, "focus_merge_f32", "focus_gather_f32", "focus_sink_f32"),
            DType::BF16 => run!(half::bf16, "focus_merge_bf16", "focus_gather_bf16", "focus_sink_bf16"),
            d => candle_core::bail!("CUDA attention supports f32 and bf16, not {d:?}"),
        })
    }
}

#[cfg(test)]
mod tests {
    //! These run on the GPU machine (the test binary of a `--features cuda` build); they compare
    //! every kernel with the plain f64 masked-dense reference on the CPU.
    use super::*;
    use crate::focus::mask::balanced_masks;
    use crate::attention::cpu::Shape as S;
    use crate::attention::reference::masked_dense_reference;
    use crate::focus::mask;
    use candle_core::Device;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn gpu() -> CudaDevice {
        match crate::device::cuda(0).expect("these tests need a CUDA GPU") {
            Device::Cuda(d) => d,
            _ => unreachable!(),
        }
    }

    fn rand_vec(n: usize, rng: &mut StdRng, bf16: bool) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let x = rng.gen::<f32>() * 2.0 - 1.0;
                // bf16 inputs: compare against the reference on the rounded values.
                if bf16 { half::bf16::from_f32(x).to_f32() } else { x }
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn run_case(t: usize, heads: usize, kv: usize, groups: usize, k: usize, window: usize, sink: usize, dtype: DType, rows: Rows) -> (f32, f32) {
        let dev = gpu();
        let device = Device::Cuda(dev.clone());
        let mut rng = StdRng::seed_from_u64((t * 31 + groups * 7 + k) as u64);
        let bf = dtype == DType::BF16;
        let q = rand_vec(heads * t * 64, &mut rng, bf);
        let kx = rand_vec(kv * t * 64, &mut rng, bf);
        let v = rand_vec(kv * t * 64, &mut rng, bf);
        let s = S { heads, kv_heads: kv, t, d: 64 };
        let masks = balanced_masks(t, groups, k, 5).unwrap();
        let ten = |x: &[f32], h: usize| Tensor::from_slice(x, (h, t, 64), &device).unwrap().to_dtype(dtype).unwrap();
        let (tq, tk, tv) = (ten(&q, heads), ten(&kx, kv), ten(&v, kv));
        let back = |x: Tensor| x.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let max_err = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);

        let dense = back(dense_attention(&tq, &tk, &tv, rows).unwrap());
        let dense_ref = masked_dense_reference(&q, &kx, &v, s, |i, j| j <= i);
        let plan = FocusPlan::new(&dev, &masks, window, sink).unwrap();
        let focus = back(focus_attention(&tq, &tk, &tv, &plan, rows).unwrap());
        let focus_ref = masked_dense_reference(&q, &kx, &v, s, |i, j| mask::kept(&masks, window, sink, i, j));
        (max_err(&dense, &dense_ref), max_err(&focus, &focus_ref))
    }

    const CASES: [(usize, usize, usize, usize, usize, usize); 7] = [
        // (T, H, Hkv, K, k, window)
        (1, 2, 1, 4, 1, 128),
        (77, 2, 2, 4, 2, 16),
        (300, 4, 2, 8, 1, 16),
        (700, 2, 1, 4, 2, 128),
        (1000, 3, 3, 8, 3, 32),
        (1500, 2, 2, 8, 1, 128),
        (2100, 4, 1, 8, 2, 128),
    ];

    /// Attention sinks [ours] each case runs with: none, the first token, the first four.
    const SINKS: [usize; 3] = [0, 1, 4];

    #[test]
    fn cuda_f32_kernels_equal_the_masked_dense_reference() {
        for &(t, h, kv, g, k, w) in &CASES {
            for s in SINKS {
                let (de, fe) = run_case(t, h, kv, g, k, w, s, DType::F32, Rows::R64);
                assert!(de <= 1e-5 && fe <= 1e-5, "T={t} H={h}/{kv} K={g} k={k} w={w} s={s}: dense {de:e}, focus {fe:e}");
            }
        }
    }

    #[test]
    fn cuda_bf16_kernels_match_the_reference_within_bf16_precision() {
        for rows in [Rows::R64, Rows::R128] {
            for &(t, h, kv, g, k, w) in &CASES {
                for s in SINKS {
                    let (de, fe) = run_case(t, h, kv, g, k, w, s, DType::BF16, rows);
                    // Outputs are means of values in [-1, 1]: bf16 output rounding (2^-9) plus
                    // the bf16 probabilities of P V.
                    assert!(de <= 1e-2 && fe <= 1e-2, "{rows:?} T={t} H={h}/{kv} K={g} k={k} w={w} s={s}: dense {de:e}, focus {fe:e}");
                }
            }
        }
    }

    #[test]
    fn cuda_plan_rejects_uneven_k() {
        assert!(FocusPlan::new(&gpu(), &[1, 3, 1], 4, 0).is_err());
        assert!(FocusPlan::new(&gpu(), &[], 4, 0).is_err());
        assert!(FocusPlan::new(&gpu(), &[1 << 40], 4, 0).is_err());
    }
}
