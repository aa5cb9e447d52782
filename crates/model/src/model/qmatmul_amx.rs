//! The integer route's many-row product on Intel AMX tiles (Sapphire Rapids and later): the
//! same sums as `qmatmul_int8` and `kquants`, bit for bit, 16 weight rows by 16 X rows by 32
//! or 64 values per tile instruction instead of 16 by 1 by 4 per VNNI instruction.
//!
//! **32-value block types.** Per task, a panel of 16 weight rows is unpacked
//! (`qmatmul_int8::unpack`) to unsigned quants, row-major (tile A: 16 rows x 32 bytes, each
//! block's contiguous), with each block's scale D and offset C per row. X's quantized rows are
//! laid out once per call in tiles B (8 rows of 16 X rows x 4 bytes, the layout `tdpbusd`
//! reads). Per block, `tdpbusd` gives the 16 x 16 integer sums S; they are stored, converted
//! and added into 16 f32 accumulators (one a weight row, a lane an X row) as `dot_reference`
//! adds them: acc = S * (D * dx) + acc, then acc = C * xs + acc, block after block. Two blocks
//! are in flight at a time (tiles 0-5) so one's stores and scaling overlap the other's product.
//!
//! **K-quants** (`kquants`'s form): the panel holds each value's integer weight
//! w = sc(h) (u - o) (|w| <= 4096) split into bytes, lo = w mod 256 (unsigned) and
//! hi = w >> 8 (signed), as tiles B (16 rows x 64 values, in `tdpbusd`'s interleaved layout).
//! X's quantized rows are copied into tiles A (16 rows x 64 bytes each, contiguous), so a sum
//! tile's row is an X row and its lanes 16 weight rows: the layout of Y. Per 64 values, two
//! tiles of X (32 rows) against both weight tiles: `tdpbsud` for lo, `tdpbssd` for hi, summed
//! over a whole super-block in four tiles; S = lo + 256 hi is stored once per super-block
//! (where the 32-value form stores per block) and scaled as `kquants::dot_reference` does,
//! while the vector units compute the mins' M = sum of m(h) bsum(h) with `vpdpwssd`.
//!
//! Linux gives a process the AMX state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`):
//! `available` asks once. The tile instructions are written as inline assembly (stable Rust
//! has no AMX intrinsics); each task loads the tile configuration and releases the tiles.

use super::kquants::{self, has_mins, is_k, KBlock};
use super::qmatmul_int8::{supports, unpack_with, Q8Rows, SendPtr, XKind};
use super::qmatvec::QType;
use super::qmatvec::QMatrix;
use rayon::prelude::*;

/// Whether this CPU has AMX-INT8 and the kernel lets this process use the tiles (asked once).
/// `FOCUS_LENS_NO_AMX=1` turns the AMX kernels off (the VNNI panels then compute the same
/// values), for benchmarks of one against the other.
pub fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            if std::env::var_os("FOCUS_LENS_NO_AMX").is_some_and(|v| v != "0") {
                return false;
            }
            // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
            // (Leaf 7 reports 0s where a feature is absent.)
            let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
            if edx & (3 << 24) != 3 << 24 || !super::qmatmul_int8::available() {
                return false;
            }
            // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18).
            // SAFETY: a syscall with integer arguments; it changes only this process's
            // permitted register state.
            unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1023, 18) == 0 }
        })
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}

/// Y = X W^T on the tiles (`x` already quantized); `y` (m, q.rows) overwritten. Call only where
/// `available()`.
pub fn matmul(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    assert!(supports(q.ty) && x.cols == q.cols && y.len() == x.m * q.rows && x.kind == XKind::of(q.ty), "{q:?} by the AMX route");
    assert!(available(), "the AMX kernels need a CPU with AMX-INT8 and the kernel's permission");
    if is_k(q.ty) {
        return matmul_k(q, x, y);
    }
    let (out, m, cols) = (q.rows, x.m, q.cols);
    let xt = XTiles::new(x, 32);
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(16)).into_par_iter().for_each_init(
        || WPanel { a: vec![0u8; 16 * cols], d: vec![0f32; cols / 32 * 16], c: vec![0f32; cols / 32 * 16] },
        |p, c| {
            let (r0, n) = (c * 16, 16.min(out - c * 16));
            p.fill(q, r0, n);
            let yp = &yp;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `available()` (asserted above) means the CPU has AMX-INT8 and AVX-512
            // and the process may use the tiles; the pointers cover the tiles' rows (see
            // `kernel`).
            unsafe {
                kernel::configure(32);
                for t in 0..m.div_ceil(16) {
                    let mut acc = [[0f32; 16]; 16];
                    kernel::panel_times(p, &xt, t, 32, &mut acc);
                    store_transposed(&acc, yp, t, m, out, r0, n);
                }
                kernel::release();
            }
        },
    );
}

/// X's quantized rows (Q8_0) as tiles B for the 32-value types: for tile t (X rows 16t..16t +
/// 16, zeros past m) and unit u of K values, K/4 rows of 64 bytes at `q[(t * units + u) * 16 K
/// ..]`: row g holds, for each X row i, its quants 4g..4g + 4 of the unit; `f` holds per (t, u)
/// the 16 rows' dx, then their xs.
struct XTiles {
    q: Vec<i8>,
    f: Vec<f32>,
    units: usize,
}

impl XTiles {
    /// X in tiles for units of `k` values (32).
    fn new(x: &Q8Rows, k: usize) -> XTiles {
        assert_eq!(x.kind, XKind::Q8_0);
        let (nb, units) = (x.cols / 32, x.cols / k);
        let tiles = x.m.div_ceil(16);
        let (mut q, mut f) = (vec![0i8; tiles * 16 * x.cols], vec![0f32; tiles * units * 32]);
        for row in 0..x.m {
            let (t, i) = (row / 16, row % 16);
            let xr = x.row(row);
            for u in 0..units {
                let base = (t * units + u) * 16 * k;
                for g in 0..k / 4 {
                    q[base + 64 * g + 4 * i..][..4].copy_from_slice(&xr[u * k + 4 * g..][..4]);
                }
                let b = row * nb + u;
                let fu = &mut f[(t * units + u) * 32..][..32];
                fu[i] = x.d[b];
                fu[16 + i] = x.xs[b];
            }
        }
        XTiles { q, f, units }
    }
}

/// 16 weight rows unpacked: `a` their quants unit after unit, each unit's tile A (16 rows x K
/// bytes) contiguous (a row-major panel, 16 rows at a stride of `cols` bytes, put every row in
/// the same two L1 sets); `d` and `c` per unit u the rows' scales and offsets at u * 16 + row
/// (zeros for rows past the matrix).
struct WPanel {
    a: Vec<u8>,
    d: Vec<f32>,
    c: Vec<f32>,
}

impl WPanel {
    fn fill(&mut self, q: &QMatrix, r0: usize, n: usize) {
        let (rb, nb) = (q.row_bytes(), q.cols / 32);
        if n < 16 {
            self.a.fill(0);
            self.d.fill(0.0);
            self.c.fill(0.0);
        }
        fill_rows(q.ty, &q.data()[r0 * rb..(r0 + n) * rb], rb, nb, &mut self.a, &mut self.d, &mut self.c);
    }
}

/// `WPanel::fill` of the rows in `rows` (`rb` bytes each, `nb` blocks), compiled for the CPUs
/// the route runs on (F16C converts the scales).
#[allow(clippy::too_many_arguments)]
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+f16c+fma"))]
fn fill_rows(ty: QType, rows: &[u8], rb: usize, nb: usize, a: &mut [u8], d: &mut [f32], c: &mut [f32]) {
    let f16c = multiversion::target::target_cfg_f!(target_feature = "f16c");
    for (r, row) in rows.chunks_exact(rb).enumerate() {
        for b in 0..nb {
            let dst: &mut [u8; 32] = (&mut a[(b * 16 + r) * 32..][..32]).try_into().expect("32 bytes");
            let (dh, ch) = if f16c { unpack_with::<true>(ty, row, b, dst) } else { unpack_with::<false>(ty, row, b, dst) };
            d[b * 16 + r] = dh[0];
            c[b * 16 + r] = ch[0];
        }
    }
}

/// Panels of a K-quant weight per task: their tiles for one super-block (8 KiB each) stay in
/// L1 while every pair of X tiles (8 KiB a super-block) passes over them; four panels and the
/// buffers overflowed a 48 KiB L1.
const GROUP: usize = 2;

/// Y = X W^T for a K-quant weight (X in Q8_K), on the tiles. A task takes `GROUP` panels
/// (32 weight rows) and goes super-block by super-block over every pair of X tiles and its
/// panels, so that a pair's tiles are loaded from L2 once per super-block and reused from L1.
fn matmul_k(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    let (out, m, cols) = (q.rows, x.m, q.cols);
    let xk = XRowsK::new(x, pairs(q.ty));
    let tiles = m.div_ceil(32) * 2;
    let yp = SendPtr(y.as_mut_ptr());
    let (hi, mins) = (q.ty != QType::Q2K, has_mins(q.ty));
    (0..out.div_ceil(16 * GROUP)).into_par_iter().for_each_init(
        || ((0..GROUP).map(|_| KPanel::new(cols)).collect::<Vec<_>>(), Vec::new()),
        |(ps, acc), g| {
            let np = (out - 16 * GROUP * g).div_ceil(16).min(GROUP);
            for (k, p) in ps.iter_mut().enumerate().take(np) {
                let r0 = 16 * (GROUP * g + k);
                p.fill(q, r0, 16.min(out - r0));
            }
            // The task's accumulators, kept between its groups (a fresh 100+ KiB each time
            // was a page fault per page).
            acc.clear();
            acc.resize(np * tiles, [[0f32; 16]; 16]);
            let yp = &yp;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `available()` (asserted by `matmul`); the panels and X's rows cover what
            // the kernel reads (see `kernel::group_times_k`).
            unsafe {
                kernel::configure_k();
                kernel::group_times_k(&ps[..np], &xk, tiles, hi, mins, acc);
                kernel::release();
            }
            // SAFETY: Y is (m, out); columns 16 GROUP g.. of the np panels are this task's alone.
            unsafe { store_group(acc, np, tiles, m, out, 16 * GROUP * g, yp) };
        },
    );
}

/// A task's sums into Y: X row after X row, the `np` panels' 16 columns each, so a row's
/// columns (16 np floats, adjacent) are written together: written panel after panel, each
/// X row's page of Y was visited np times (Y's rows are 8-32 KiB apart, a TLB miss a visit).
///
/// # Safety
/// Y (m, out) at `yp`; columns c0..c0 + 16 np (those below `out`) are this task's alone.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f"))]
unsafe fn store_group(acc: &[[[f32; 16]; 16]], np: usize, tiles: usize, m: usize, out: usize, c0: usize, yp: &SendPtr) {
    for row in 0..m {
        let (t, i) = (row / 16, row % 16);
        for k in 0..np {
            let (r0, a) = (c0 + 16 * k, &acc[k * tiles + t][i]);
            let dst = yp.0.add(row * out + r0);
            if out - r0 >= 16 {
                // A whole run as one 64-byte write (a copy of runtime length is a call).
                dst.cast::<[f32; 16]>().write_unaligned(*a);
            } else {
                std::slice::from_raw_parts_mut(dst, out - r0).copy_from_slice(&a[..out - r0]);
            }
        }
    }
}

/// X in Q8_K for the K-quant tiles: its quants copied into tiles A, tile after tile (16 rows),
/// step after step (64 values): tile t's step c is 1 KiB at (t * cols / 64 + c) * 1024, read at
/// a stride of 64 bytes, padded with zero rows to a multiple of 32 (the kernel takes two tiles
/// at a time). Read in place at X's row stride instead, a tile's 16 rows fell into one or two
/// L1 sets whenever `cols` is a power of two (2048, 8192), and the products ran at a tenth of
/// the tiles' rate. Per (row, super-block) the scale `d` and `bp`, the sums of quants in pairs
/// for `vpdpwssd` (bsum(2p) | bsum(2p + 1) << 16: per 16 values, or with `pairs` = 4 per 32).
struct XRowsK<'a> {
    q: Vec<i8>,
    cols: usize,
    m: usize,
    d: &'a [f32],
    bp: Vec<i32>,
    pairs: usize,
}

impl<'a> XRowsK<'a> {
    fn new(x: &'a Q8Rows, pairs: usize) -> XRowsK<'a> {
        let (m, cols, ns) = (x.m, x.cols, x.cols / 256);
        let rows = m.div_ceil(32) * 32;
        let mut q = vec![0i8; rows * cols];
        for (t, tile) in q.chunks_exact_mut(16 * cols).enumerate() {
            for (c, step) in tile.chunks_exact_mut(1024).enumerate() {
                for (i, dst) in step.chunks_exact_mut(64).enumerate().take(m.saturating_sub(16 * t)) {
                    dst.copy_from_slice(&x.q[(16 * t + i) * cols + 64 * c..][..64]);
                }
            }
        }
        let mut bp = vec![0i32; m * ns * pairs];
        for (b, o) in x.bsum.chunks_exact(16).zip(bp.chunks_exact_mut(pairs)) {
            for (pp, v) in o.iter_mut().enumerate() {
                let (a, c) = if pairs == 8 { (b[2 * pp], b[2 * pp + 1]) } else { (b[4 * pp] + b[4 * pp + 1], b[4 * pp + 2] + b[4 * pp + 3]) };
                *v = (a as u16 as i32) | ((c as i32) << 16);
            }
        }
        XRowsK { q, cols, m, d: &x.d, bp, pairs }
    }
}

/// acc (16 weight rows x 16 X rows) into Y's rows 16t.., columns r0..r0 + n: transposed
/// first, so that each X row's 16 outputs go to Y as one run.
///
/// # Safety
/// Y (m, out) at `yp`; this task alone writes those columns.
unsafe fn store_transposed(acc: &[[f32; 16]; 16], yp: &SendPtr, t: usize, m: usize, out: usize, r0: usize, n: usize) {
    let mut tr = [[0f32; 16]; 16];
    for (r, row) in acc.iter().enumerate() {
        for (i, &v) in row.iter().enumerate() {
            tr[i][r] = v;
        }
    }
    for (i, row) in tr.iter().enumerate().take(16.min(m - 16 * t)) {
        let dst = yp.0.add((16 * t + i) * out + r0);
        if n == 16 {
            // A whole run as one 64-byte write (a copy of runtime length is a libc call).
            dst.cast::<[f32; 16]>().write_unaligned(*row);
        } else {
            std::slice::from_raw_parts_mut(dst, n).copy_from_slice(&row[..n]);
        }
    }
}

/// How many pairs of mins a K-quant super-block has for `vpdpwssd`: 4 where they are per 32
/// values (Q4_K, Q5_K), else 8 (per 16; none for Q3_K and Q6_K, whose M is not computed).
fn pairs(ty: QType) -> usize {
    if matches!(ty, QType::Q4K | QType::Q5K) {
        4
    } else {
        8
    }
}

/// 16 rows of a K-quant weight for the tiles: per 64-value step c, tile B of each part, 1 KiB at
/// c * 1024, whose row g holds for each weight row r its values 4g..4g + 4 of the step (`lo`
/// and `hi`, the bytes of sc(h) (u - o)); per (super-block, pair p), `mp` the 16 rows' mins in
/// pairs (m(2p) | m(2p + 1) << 16 over `pairs(ty)` pairs, a min per 32 or 16 values) at
/// (s * 8 + p) * 16 + row; per (super-block, row) `d` and `mn` (-dmin). Rows past the matrix
/// are zeros.
struct KPanel {
    lo: Vec<u8>,
    /// Signed bytes (as `tdpbssd` reads them), kept as u8.
    hi: Vec<u8>,
    mp: Vec<i32>,
    d: Vec<f32>,
    mn: Vec<f32>,
}

impl KPanel {
    fn new(cols: usize) -> KPanel {
        KPanel { lo: vec![0; 16 * cols], hi: vec![0; 16 * cols], mp: vec![0; cols / 2], d: vec![0.0; cols / 16], mn: vec![0.0; cols / 16] }
    }

    fn fill(&mut self, q: &QMatrix, r0: usize, n: usize) {
        if n < 16 {
            self.lo.fill(0);
            self.hi.fill(0);
            self.mp.fill(0);
            self.d.fill(0.0);
            self.mn.fill(0.0);
        }
        let rb = q.row_bytes();
        let rows = &q.data()[r0 * rb..(r0 + n) * rb];
        #[cfg(target_arch = "x86_64")]
        if matches!(q.ty, QType::Q4K | QType::Q5K | QType::Q6K) {
            // SAFETY: AVX-512BW is present where AMX is (`available()`, asserted by `matmul`);
            // `rows` holds n <= 16 whole rows of `q.cols / 256` super-blocks.
            unsafe { kernel::fill_k_lanes(q.ty, rows, rb, n, q.cols / 256, self) };
            return;
        }
        fill_k(q.ty, rows, rb, q.cols / 256, self);
    }
}

/// `KPanel::fill` of the rows in `rows`, compiled for the CPUs the route runs on (the loops
/// over 16 and 64 values vectorise).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+f16c+fma"))]
fn fill_k(ty: QType, rows: &[u8], rb: usize, ns: usize, p: &mut KPanel) {
    let f16c = multiversion::target::target_cfg_f!(target_feature = "f16c");
    let o = kquants::offset(ty) as i16;
    let np = pairs(ty);
    let mut kb = KBlock::default();
    // A super-block of every row as 32-bit words of 4 lo (hi) bytes, [row][word], then written
    // tile by tile in order (tile B's row g is word g of rows 0..16).
    let (mut lo, mut hi) = ([[0u32; 64]; 16], [[0u32; 64]; 16]);
    for s in 0..ns {
        for (r, row) in rows.chunks_exact(rb).enumerate() {
            if f16c {
                kquants::unpack_with::<true>(ty, row, s, &mut kb)
            } else {
                kquants::unpack_with::<false>(ty, row, s, &mut kb)
            };
            let (mut lb, mut hb) = ([0u8; 256], [0u8; 256]);
            for (h, ((lh, hh), uh)) in lb.chunks_exact_mut(16).zip(hb.chunks_exact_mut(16)).zip(kb.u.chunks_exact(16)).enumerate() {
                let sc = kb.sc[h] as i16;
                for ((l, hv), &uv) in lh.iter_mut().zip(hh.iter_mut()).zip(uh) {
                    let w = sc * (uv as i16 - o);
                    (*l, *hv) = (w as u8, (w >> 8) as u8);
                }
            }
            for (k, (l4, h4)) in lb.chunks_exact(4).zip(hb.chunks_exact(4)).enumerate() {
                lo[r][k] = u32::from_le_bytes(l4.try_into().expect("4 bytes"));
                hi[r][k] = u32::from_le_bytes(h4.try_into().expect("4 bytes"));
            }
            for pp in 0..np {
                // Mins per 32 values are the halves' (equal) mins of sub-blocks 2pp, 2pp + 1.
                let (a, b) = if np == 8 { (kb.m[2 * pp], kb.m[2 * pp + 1]) } else { (kb.m[4 * pp], kb.m[4 * pp + 2]) };
                p.mp[(s * 8 + pp) * 16 + r] = (a as u16 as i32) | (b << 16);
            }
            p.d[s * 16 + r] = kb.d;
            p.mn[s * 16 + r] = -kb.dmin;
        }
        let n = rows.len() / rb;
        for word in 0..64 {
            // Step word / 16, tile row word % 16: 16 rows' words side by side.
            let at = s * 4096 + word * 64;
            for r in 0..n {
                p.lo[at + 4 * r..at + 4 * r + 4].copy_from_slice(&lo[r][word].to_le_bytes());
                p.hi[at + 4 * r..at + 4 * r + 4].copy_from_slice(&hi[r][word].to_le_bytes());
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod kernel {
    use super::super::qmatmul_int8::scale_min_k4 as kquants_scale_min;
    use super::super::qmatvec::{f16_at, QType};
    use super::{KPanel, WPanel, XRowsK, XTiles};
    use std::arch::asm;
    use std::arch::x86_64::*;

    #[repr(C, align(64))]
    struct Aligned<T>(T);

    /// Loads the tile shapes for units of `k` values: tiles 0-1 A (16 rows x k bytes), 2-3 B
    /// (k/4 rows x 64 bytes), 4-5 C (16 rows x 16 i32).
    ///
    /// # Safety
    /// AMX available (`super::available`).
    pub unsafe fn configure(k: usize) {
        let mut cfg = Aligned([0u8; 64]);
        cfg.0[0] = 1;
        let mut set = |t: usize, rows: u8, colsb: u16| {
            cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            cfg.0[48 + t] = rows;
        };
        for t in 0..2 {
            set(t, 16, k as u16);
            set(2 + t, (k / 4) as u8, 64);
            set(4 + t, 16, 64);
        }
        asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
    }

    /// Returns the tiles to their initial state (cheap context switches).
    ///
    /// # Safety
    /// AMX available.
    pub unsafe fn release() {
        asm!("tilerelease", options(nostack, nomem));
    }

    /// acc[r][i] = W panel row r . X row 16t + i, over every unit, in `dot_reference`'s order.
    /// Software-pipelined, since tiles are not renamed and a tile's store is slow to reach the
    /// vector loads: unit u's product is issued, then unit u - 1's sums are stored (from the
    /// other C tile) and unit u - 2's, stored an iteration ago, are scaled (a ring of 3).
    ///
    /// # Safety
    /// AMX-INT8 and AVX-512F available, the tiles configured for `k` (`configure`); the panel
    /// holds 16 rows of `xt.units` units, `xt` at least t + 1 tiles.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn panel_times(p: &WPanel, xt: &XTiles, t: usize, k: usize, acc: &mut [[f32; 16]; 16]) {
        let units = xt.units;
        let mut f = [_mm512_setzero_ps(); 16];
        let mut ring = Aligned([[[0i32; 16]; 16]; 3]);
        let xq = xt.q.as_ptr().add(t * units * 16 * k);
        for u in 0..units + 2 {
            if u < units {
                let (a, b) = (p.a.as_ptr().add(u * 16 * k), xq.add(u * 16 * k));
                if u % 2 == 0 {
                    asm!(
                        "tilezero tmm4",
                        "tileloadd tmm0, [{a} + {sa}*1]",
                        "tileloadd tmm2, [{b} + {s64}*1]",
                        "tdpbusd tmm4, tmm0, tmm2",
                        a = in(reg) a, b = in(reg) b, sa = in(reg) k, s64 = in(reg) 64usize,
                        options(nostack, readonly),
                    );
                } else {
                    asm!(
                        "tilezero tmm5",
                        "tileloadd tmm1, [{a} + {sa}*1]",
                        "tileloadd tmm3, [{b} + {s64}*1]",
                        "tdpbusd tmm5, tmm1, tmm3",
                        a = in(reg) a, b = in(reg) b, sa = in(reg) k, s64 = in(reg) 64usize,
                        options(nostack, readonly),
                    );
                }
            }
            if (1..=units).contains(&u) {
                let dst = ring.0[(u - 1) % 3].as_mut_ptr();
                if (u - 1) % 2 == 0 {
                    asm!("tilestored [{c} + {s64}*1], tmm4", c = in(reg) dst, s64 = in(reg) 64usize, options(nostack));
                } else {
                    asm!("tilestored [{c} + {s64}*1], tmm5", c = in(reg) dst, s64 = in(reg) 64usize, options(nostack));
                }
            }
            if u >= 2 {
                let v = u - 2;
                let s = &ring.0[v % 3];
                let xf = xt.f.as_ptr().add((t * units + v) * 32);
                let (dx, xs) = (_mm512_loadu_ps(xf), _mm512_loadu_ps(xf.add(16)));
                let (d, cw) = (p.d.as_ptr().add(v * 16), p.c.as_ptr().add(v * 16));
                for r in 0..16 {
                    let sr = _mm512_cvtepi32_ps(_mm512_load_si512(s[r].as_ptr().cast()));
                    f[r] = _mm512_fmadd_ps(sr, _mm512_mul_ps(_mm512_set1_ps(*d.add(r)), dx), f[r]);
                    f[r] = _mm512_fmadd_ps(_mm512_set1_ps(*cw.add(r)), xs, f[r]);
                }
            }
        }
        for r in 0..16 {
            _mm512_storeu_ps(acc[r].as_mut_ptr(), f[r]);
        }
    }

    /// `KPanel::fill` for Q4_K, Q5_K and Q6_K (the types of Q4_K_M / Q5_K_M files), the panel's own
    /// layout computed directly: lane r of a vector is weight row r, so one gather of the 16
    /// rows' packed quants gives a tile row (word g: values 4g..4g + 4 of each row) without a
    /// transpose; w = sc (u - o) is formed in 16-bit lanes (|w| <= 4096) and split into the lo
    /// and hi bytes. The same bytes as `fill_k` (the tiles test compares every type's products
    /// with the definition). Per-row factors (scales, mins, d, dmin) are read as `kquants::unpack`
    /// reads them.
    ///
    /// # Safety
    /// AVX-512F/BW available; `rows` holds `n` (1..=16) rows of `ns` super-blocks, `rb` bytes each.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn fill_k_lanes(ty: QType, rows: &[u8], rb: usize, n: usize, ns: usize, p: &mut KPanel) {
        debug_assert!((1..=16).contains(&n) && rows.len() >= n * rb && matches!(ty, QType::Q4K | QType::Q5K | QType::Q6K));
        let mask: __mmask16 = if n == 16 { 0xffff } else { (1u16 << n) - 1 };
        let idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(rb as i32));
        let (m16, m0f) = (_mm512_set1_epi32(0x00ff_00ff), _mm512_set1_epi32(0x0f0f_0f0f));
        let (bsz, qs, o) = match ty {
            QType::Q4K => (144, 16, 0),
            QType::Q5K => (176, 48, 0),
            _ => (210, 0, 32),
        };
        let q6 = ty == QType::Q6K;
        let ov = _mm512_set1_epi16(o);
        // Per sub-block (Q4_K, Q5_K: 8 of 32 values; Q6_K: 16 of 16) the 16 rows' scales, each in
        // both 16-bit halves of its lane.
        let mut sc = [[0i32; 16]; 16];
        for s in 0..ns {
            for r in 0..n {
                let blk = &rows[r * rb + s * bsz..][..bsz];
                if !q6 {
                    let mut pm = [0i32; 8];
                    for (j, m) in pm.iter_mut().enumerate() {
                        let (a, b) = kquants_scale_min(j, &blk[4..16]);
                        sc[j][r] = (a as i32) * 0x0001_0001;
                        *m = b as i32;
                    }
                    for pp in 0..4 {
                        p.mp[(s * 8 + pp) * 16 + r] = (pm[2 * pp] as u16 as i32) | (pm[2 * pp + 1] << 16);
                    }
                    p.d[s * 16 + r] = f16_at::<true>(blk, 0);
                    p.mn[s * 16 + r] = -f16_at::<true>(blk, 2);
                } else {
                    for (h, v) in sc.iter_mut().enumerate() {
                        v[r] = ((blk[192 + h] as i8 as i16 as u16 as u32) * 0x0001_0001) as i32;
                    }
                    p.d[s * 16 + r] = f16_at::<true>(blk, 208);
                    // No mins (never read): -dmin with dmin 0, as `fill_k` writes it.
                    p.mn[s * 16 + r] = -0.0;
                }
            }
            let base = rows.as_ptr().add(s * bsz);
            for g in 0..64 {
                // Values 4g..4g + 4 of the super-block, as 4 unsigned quants per lane.
                let (u, scv) = if !q6 {
                    // Sub-block j = g / 8 (32 values): pair j / 2's bytes, low nibbles for even
                    // j; Q5_K's fifth bit is bit j of qh at the value's position l.
                    let (j, l) = (g / 8, 4 * (g % 8));
                    let q = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, idx, base.add(qs + 32 * (j / 2) + l).cast());
                    let q = if j % 2 == 0 { q } else { _mm512_srli_epi32::<4>(q) };
                    let mut u = _mm512_and_si512(q, m0f);
                    if ty == QType::Q5K {
                        let qh = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, idx, base.add(16 + l).cast());
                        let b5 = _mm512_and_si512(_mm512_srlv_epi32(qh, _mm512_set1_epi32(j as i32)), _mm512_set1_epi32(0x0101_0101));
                        u = _mm512_or_si512(u, _mm512_slli_epi32::<4>(b5));
                    }
                    (u, &sc[j])
                } else {
                    // Half nh (128 values), quarter qq (32), position l: ql's nibble, qh's 2 bits.
                    let (v, nh) = (4 * g, g / 32);
                    let (qq, l) = ((v % 128) / 32, v % 32);
                    let ql = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, idx, base.add(64 * nh + 32 * (qq & 1) + l).cast());
                    let qh = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, idx, base.add(128 + 32 * nh + l).cast());
                    let lo4 = if qq < 2 { ql } else { _mm512_srli_epi32::<4>(ql) };
                    let hi2 = _mm512_and_si512(_mm512_srlv_epi32(qh, _mm512_set1_epi32(2 * qq as i32)), _mm512_set1_epi32(0x0303_0303));
                    (_mm512_or_si512(_mm512_and_si512(lo4, m0f), _mm512_slli_epi32::<4>(hi2)), &sc[v / 16])
                };
                let scv = _mm512_loadu_si512(scv.as_ptr().cast());
                // Bytes 0 and 2 (e), 1 and 3 (od) of each lane as 16-bit values, times sc.
                let e = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(u, m16), ov), scv);
                let od = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(_mm512_srli_epi32::<8>(u), m16), ov), scv);
                let lo = _mm512_or_si512(_mm512_and_si512(e, m16), _mm512_slli_epi16::<8>(od));
                let hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<8>(e), m16), _mm512_andnot_si512(m16, od));
                let at = s * 4096 + g * 64;
                _mm512_storeu_si512(p.lo.as_mut_ptr().add(at).cast(), lo);
                _mm512_storeu_si512(p.hi.as_mut_ptr().add(at).cast(), hi);
            }
        }
    }

    /// Loads the tile shapes of the K-quant kernel: every tile 16 rows x 64 bytes (tiles 0-3
    /// the sums, 4-5 X, 6-7 the weight's lo and hi).
    ///
    /// # Safety
    /// AMX available.
    pub unsafe fn configure_k() {
        let mut cfg = Aligned([0u8; 64]);
        cfg.0[0] = 1;
        for t in 0..8 {
            cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
            cfg.0[48 + t] = 16;
        }
        asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
    }

    /// acc[k * tiles + t][i][r] = X row 16 t + i . row r of panel k, super-block after
    /// super-block in `kquants::dot_reference`'s order. Per (super-block, pair of X tiles,
    /// panel), `products` sums into tiles 0-3 and stores them into one of two buffers, and the
    /// previous triple's buffer is scaled (`scale`) meanwhile.
    ///
    /// # Safety
    /// AMX-INT8, AVX-512F and VNNI available, the tiles configured (`configure_k`); the panels
    /// hold 16 rows of `x.cols / 256` super-blocks, X `tiles` (even) tiles of rows, `acc`
    /// panels x tiles entries.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn group_times_k(ps: &[KPanel], x: &XRowsK, tiles: usize, hi: bool, mins: bool, acc: &mut [[[f32; 16]; 16]]) {
        let ns = x.cols / 256;
        let mut buf = Aligned([[[[0i32; 16]; 16]; 4]; 2]);
        let mut prev: Option<(usize, usize, usize)> = None;
        let mut parity = 0;
        for s in 0..ns {
            for t in (0..tiles).step_by(2) {
                for (k, p) in ps.iter().enumerate() {
                    products(p, x, t, s, hi, &mut buf.0[parity]);
                    if let Some((pk, pt, psb)) = prev {
                        scale(&ps[pk], x, pt, psb, &buf.0[parity ^ 1], hi, mins, &mut acc[pk * tiles + pt..pk * tiles + pt + 2]);
                    }
                    prev = Some((k, t, s));
                    parity ^= 1;
                }
            }
        }
        if let Some((pk, pt, psb)) = prev {
            scale(&ps[pk], x, pt, psb, &buf.0[parity ^ 1], hi, mins, &mut acc[pk * tiles + pt..pk * tiles + pt + 2]);
        }
    }

    /// Super-block s of X tiles t and t + 1 times panel `p`: tiles 0-1 the lo and hi sums of
    /// tile t, 2-3 those of t + 1, 4-5 the X tiles (A, signed), 6-7 the weight's lo (B,
    /// unsigned: `tdpbsud`) and hi (signed: `tdpbssd`; skipped for Q2_K, whose |w| < 256); the
    /// sums stored to `dst` (lo t, hi t, lo t + 1, hi t + 1).
    #[inline(always)]
    unsafe fn products(p: &KPanel, x: &XRowsK, t: usize, s: usize, hi: bool, dst: &mut [[[i32; 16]; 16]; 4]) {
        let nc = x.cols / 64;
        let (x0, x1) = (x.q.as_ptr().add(t * nc * 1024), x.q.as_ptr().add((t + 1) * nc * 1024));
        let s64 = 64usize;
        asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        for c in 4 * s..4 * s + 4 {
            let (at, w) = (1024 * c, c * 1024);
            asm!(
                "tileloadd tmm4, [{a0} + {sx}*1]",
                "tileloadd tmm5, [{a1} + {sx}*1]",
                "tileloadd tmm6, [{lo} + {s}*1]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tdpbsud tmm2, tmm5, tmm6",
                a0 = in(reg) x0.add(at), a1 = in(reg) x1.add(at), sx = in(reg) s64, lo = in(reg) p.lo.as_ptr().add(w), s = in(reg) s64,
                options(nostack, readonly),
            );
            if hi {
                asm!(
                    "tileloadd tmm7, [{hv} + {s}*1]",
                    "tdpbssd tmm1, tmm4, tmm7",
                    "tdpbssd tmm3, tmm5, tmm7",
                    hv = in(reg) p.hi.as_ptr().add(w), s = in(reg) s64,
                    options(nostack, readonly),
                );
            }
        }
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c2} + {s}*1], tmm2",
            c0 = in(reg) dst[0].as_mut_ptr(), c2 = in(reg) dst[2].as_mut_ptr(), s = in(reg) s64,
            options(nostack),
        );
        if hi {
            asm!(
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c3} + {s}*1], tmm3",
                c1 = in(reg) dst[1].as_mut_ptr(), c3 = in(reg) dst[3].as_mut_ptr(), s = in(reg) s64,
                options(nostack),
            );
        }
    }

    /// The two f32 terms of super-block v for X tiles t, t + 1 (their rows below m) from their
    /// stored sums `src`: S = lo + 256 hi, and (types with mins) M = sum of m(h) bsum(h) by
    /// `vpdpwssd`, each lane a weight row.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn scale(p: &KPanel, x: &XRowsK, t: usize, v: usize, src: &[[[i32; 16]; 16]; 4], hi: bool, mins: bool, acc: &mut [[[f32; 16]; 16]]) {
        let ns = x.cols / 256;
        let (dv, mnv) = (_mm512_loadu_ps(p.d.as_ptr().add(v * 16)), _mm512_loadu_ps(p.mn.as_ptr().add(v * 16)));
        let mut mp = [_mm512_setzero_si512(); 8];
        if mins {
            for (pp, m) in mp.iter_mut().enumerate().take(x.pairs) {
                *m = _mm512_loadu_si512(p.mp.as_ptr().add((v * 8 + pp) * 16).cast());
            }
        }
        for (xt, ax) in acc.iter_mut().enumerate() {
            for (i, ar) in ax.iter_mut().enumerate() {
                let row = 16 * (t + xt) + i;
                if row >= x.m {
                    break;
                }
                let dx = _mm512_set1_ps(x.d[row * ns + v]);
                let mut sr = _mm512_load_si512(src[2 * xt][i].as_ptr().cast());
                if hi {
                    sr = _mm512_add_epi32(sr, _mm512_slli_epi32::<8>(_mm512_load_si512(src[2 * xt + 1][i].as_ptr().cast())));
                }
                let mut f = _mm512_loadu_ps(ar.as_ptr());
                f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sr), _mm512_mul_ps(dv, dx), f);
                if mins {
                    let bp = x.bp.as_ptr().add((row * ns + v) * x.pairs);
                    let mut m = _mm512_setzero_si512();
                    for (pp, mv) in mp.iter().enumerate().take(x.pairs) {
                        m = _mm512_dpwssd_epi32(m, *mv, _mm512_set1_epi32(*bp.add(pp)));
                    }
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(mnv, dx), f);
                }
                _mm512_storeu_ps(ar.as_mut_ptr(), f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::int8::dot_reference;
    use crate::model::qmatmul_int8::tests::{block_types, case};
    use crate::model::qmatvec::QType;
    use rand::{rngs::StdRng, SeedableRng};

    /// The tiles equal the definition bit for bit: every block type, X row counts that leave a
    /// partial tile, outputs that leave a partial panel, unit counts odd and even. Skipped (and
    /// said) on a CPU without AMX.
    #[test]
    fn tiles_equal_the_reference_bit_for_bit() {
        if !available() {
            eprintln!("no AMX-INT8 on this CPU (or no permission): the AMX kernels are not tested here");
            return;
        }
        let mut rng = StdRng::seed_from_u64(41);
        for dtype in block_types() {
            let elems = QType::of(dtype).unwrap().block().0;
            for (m, out, inp) in [(1, 7, 256), (17, 37, 512), (40, 33, 768), (5, 16, 2304), (3, 20, 288)] {
                if inp % elems != 0 {
                    continue;
                }
                let (q, _, _, xq) = case(dtype, m, out, inp, &mut rng);
                let mut y = vec![f32::NAN; m * out];
                matmul(&q, &xq, &mut y);
                for i in 0..m {
                    for o in 0..out {
                        let want = dot_reference(q.ty, &q.data()[o * q.row_bytes()..(o + 1) * q.row_bytes()], &xq, i);
                        assert_eq!(y[i * out + o].to_bits(), want.to_bits(), "{dtype:?} {m}x{inp}x{out} ({i},{o}): {} vs {want}", y[i * out + o]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod panels {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// `fill_k_lanes` writes the bytes `fill_k` (the generic unpacking) writes, for weights of
    /// arbitrary bytes: every scale and min value, negative Q6_K scales, partial panels.
    #[test]
    fn lanes_fill_the_generic_panel() {
        if !available() {
            eprintln!("no AMX-INT8 on this CPU: the lane fill is not used here");
            return;
        }
        let mut rng = StdRng::seed_from_u64(3);
        for ty in [QType::Q4K, QType::Q5K, QType::Q6K] {
            let bsz = match ty {
                QType::Q4K => 144,
                QType::Q5K => 176,
                _ => 210,
            };
            for (n, ns) in [(16, 3), (5, 1), (1, 2)] {
                let rb = bsz * ns;
                let mut rows: Vec<u8> = (0..n * rb).map(|_| rng.gen()).collect();
                // Finite factors (the panels carry them as they are; NaN would not compare).
                for blk in rows.chunks_exact_mut(bsz) {
                    let at = if ty == QType::Q6K { 208 } else { 0 };
                    blk[at..at + 2].copy_from_slice(&0x3800u16.to_le_bytes());
                    if ty != QType::Q6K {
                        blk[2..4].copy_from_slice(&0x3400u16.to_le_bytes());
                    }
                }
                let (mut a, mut b) = (KPanel::new(256 * ns), KPanel::new(256 * ns));
                fill_k(ty, &rows, rb, ns, &mut a);
                // SAFETY: AVX-512BW is present where AMX is; `rows` holds n rows of ns super-blocks.
                unsafe { kernel::fill_k_lanes(ty, &rows, rb, n, ns, &mut b) };
                assert!(a.lo == b.lo && a.hi == b.hi, "{ty:?} {n} rows x {ns}: weight bytes differ");
                assert!(a.mp == b.mp, "{ty:?} {n} rows x {ns}: mins differ");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert!(bits(&a.d) == bits(&b.d) && bits(&a.mn) == bits(&b.mn), "{ty:?} {n} rows x {ns}: factors differ");
            }
        }
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use crate::model::qmatmul_int8::tests::case;
    use rand::{rngs::StdRng, SeedableRng};
    use std::time::Instant;

    /// Where a many-row product's time goes: X quantized, X laid out in tiles, the product
    /// (panels unpacked and multiplied), each the fastest of 7 runs. `cargo test --release -p focus-model --lib
    /// qmatmul_amx::speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        if !available() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(1);
        for dtype in [candle_core::quantized::GgmlDType::Q4K, candle_core::quantized::GgmlDType::Q5K, candle_core::quantized::GgmlDType::Q6K, candle_core::quantized::GgmlDType::Q4_0] {
            for (m, out, inp) in [(512, 8192, 2048), (512, 2048, 8192)] {
            let (q, _, x, _) = case(dtype, m, out, inp, &mut rng);
            let mut y = vec![0f32; m * out];
            // The fastest of 7 (other work on the machine only slows a run down).
            let mut best = [f64::INFINITY; 5];
            for _ in 0..7 {
                let t0 = Instant::now();
                let xq = Q8Rows::quantize_for(q.ty, &x, m, inp);
                let t1 = Instant::now();
                if is_k(q.ty) {
                    drop(XRowsK::new(&xq, pairs(q.ty)));
                } else {
                    drop(XTiles::new(&xq, 32));
                }
                let t2 = Instant::now();
                matmul(&q, &xq, &mut y);
                let t3 = Instant::now();
                if is_k(q.ty) {
                    let mut p = KPanel::new(inp);
                    for c in 0..out / 16 {
                        p.fill(&q, c * 16, 16);
                    }
                } else {
                    let mut p = WPanel { a: vec![0u8; 16 * inp], d: vec![0f32; inp / 32 * 16], c: vec![0f32; inp / 32 * 16] };
                    for c in 0..out / 16 {
                        p.fill(&q, c * 16, 16);
                    }
                }
                let t4 = Instant::now();
                if is_k(q.ty) {
                    // The generic unpacking (`fill_k`), which `fill_k_lanes` replaces for Q4_K-Q6_K.
                    let mut p = KPanel::new(inp);
                    for c in 0..out / 16 {
                        let rb = q.row_bytes();
                        fill_k(q.ty, &q.data()[c * 16 * rb..(c + 1) * 16 * rb], rb, inp / 256, &mut p);
                    }
                }
                let t5 = Instant::now();
                let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
                for (k, v) in [ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t3, t4), ms(t4, t5)].into_iter().enumerate() {
                    best[k] = best[k].min(v);
                }
            }
            eprintln!("{dtype:?} {m}x{inp}x{out}: quantize {:.2} ms, tiles of X {:.2} ms, product {:.2} ms (unpacking alone, one thread: {:.2} ms; generic unpacking {:.2} ms)", best[0], best[1], best[2], best[3], best[4]);
            }
        }
    }
}
