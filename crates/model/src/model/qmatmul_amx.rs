//! The integer route's many-row product on Intel AMX tiles (Sapphire Rapids and later): the
//! same sums as `qmatmul_int8`, bit for bit, 16 weight rows by 16 X rows by 32 (or 16) values
//! per tile instruction instead of 16 by 1 by 4 per VNNI instruction.
//!
//! Per task, a panel of 16 weight rows is unpacked (`qmatmul_int8::unpack`) to unsigned quants,
//! row-major (tile A: 16 rows x K bytes, each unit's contiguous), with each block's (or
//! half block's) scale D and offset C per row. X's quantized rows are laid out once per call
//! in tiles B (K/4 rows of 16 X rows x 4 bytes, the layout `tdpbusd` reads). For each unit of
//! K values (a block, K = 32, or a half block, K = 16, for types with a scale per 16 values),
//! `tdpbusd` gives the 16 x 16 integer sums S; they are stored, converted and added into 16
//! f32 accumulators (one a weight row, a lane an X row) as `dot_reference` adds them:
//! acc = S * (D * dx) + acc, then acc = C * xs + acc, unit after unit. Two units are in flight
//! at a time (tiles 0-5) so one's stores and scaling overlap the other's product.
//!
//! Linux gives a process the AMX state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`):
//! `available` asks once. The tile instructions are written as inline assembly (stable Rust
//! has no AMX intrinsics); each task loads the tile configuration and releases the tiles.

use super::qmatmul_int8::{halves, supports, unpack_with, Q8Rows, SendPtr};
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
    assert!(supports(q.ty) && x.cols == q.cols && y.len() == x.m * q.rows, "{q:?} by the AMX route");
    assert!(available(), "the AMX kernels need a CPU with AMX-INT8 and the kernel's permission");
    let (out, m, cols) = (q.rows, x.m, q.cols);
    let k = if halves(q.ty) { 16 } else { 32 };
    let xt = XTiles::new(x, k);
    let yp = SendPtr(y.as_mut_ptr());
    (0..out.div_ceil(16)).into_par_iter().for_each_init(
        || WPanel { a: vec![0u8; 16 * cols], d: vec![0f32; cols / k * 16], c: vec![0f32; cols / k * 16] },
        |p, c| {
            let (r0, n) = (c * 16, 16.min(out - c * 16));
            p.fill(q, r0, n, k);
            let yp = &yp;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `available()` (asserted above) means the CPU has AMX-INT8 and AVX-512
            // and the process may use the tiles; the pointers cover the tiles' rows (see
            // `kernel`).
            unsafe {
                kernel::configure(k);
                for t in 0..m.div_ceil(16) {
                    let mut acc = [[0f32; 16]; 16];
                    kernel::panel_times(p, &xt, t, k, &mut acc);
                    // Transposed here, so that each X row's 16 outputs go to Y as one run.
                    let mut tr = [[0f32; 16]; 16];
                    for (r, row) in acc.iter().enumerate() {
                        for (i, &v) in row.iter().enumerate() {
                            tr[i][r] = v;
                        }
                    }
                    for (i, row) in tr.iter().enumerate().take(16.min(m - 16 * t)) {
                        // Y (16t + i, r0 .. r0 + n): this task's columns alone.
                        std::slice::from_raw_parts_mut(yp.0.add((16 * t + i) * out + r0), n).copy_from_slice(&row[..n]);
                    }
                }
                kernel::release();
            }
        },
    );
}

/// X's quantized rows as tiles B: for tile t (X rows 16t..16t + 16, zeros past m) and unit u,
/// K/4 rows of 64 bytes at `q[(t * units + u) * 16 K ..]`: row g holds, for each X row i, its
/// quants 4g..4g + 4 of the unit. `f` holds per (t, u) the 16 rows' dx, then their xs.
struct XTiles {
    q: Vec<i8>,
    f: Vec<f32>,
    units: usize,
}

impl XTiles {
    fn new(x: &Q8Rows, k: usize) -> XTiles {
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
                let b = row * nb + u * k / 32;
                let fu = &mut f[(t * units + u) * 32..][..32];
                fu[i] = x.d[b];
                fu[16 + i] = if k == 16 { x.xs16[2 * b + u % 2] } else { x.xs[b] };
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
    fn fill(&mut self, q: &QMatrix, r0: usize, n: usize, k: usize) {
        let (rb, nb) = (q.row_bytes(), q.cols / 32);
        if n < 16 {
            self.a.fill(0);
            self.d.fill(0.0);
            self.c.fill(0.0);
        }
        fill_rows(q.ty, &q.data()[r0 * rb..(r0 + n) * rb], rb, nb, k, &mut self.a, &mut self.d, &mut self.c);
    }
}

/// `WPanel::fill` of the rows in `rows` (`rb` bytes each, `nb` blocks, units of `k`), compiled
/// for the CPUs the route runs on (F16C converts the scales).
#[allow(clippy::too_many_arguments)]
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+f16c+fma"))]
fn fill_rows(ty: QType, rows: &[u8], rb: usize, nb: usize, k: usize, a: &mut [u8], d: &mut [f32], c: &mut [f32]) {
    let f16c = multiversion::target::target_cfg_f!(target_feature = "f16c");
    let mut u = [0u8; 32];
    for (r, row) in rows.chunks_exact(rb).enumerate() {
        for b in 0..nb {
            if k == 32 {
                let dst: &mut [u8; 32] = (&mut a[(b * 16 + r) * 32..][..32]).try_into().expect("32 bytes");
                let (dh, ch) = if f16c { unpack_with::<true>(ty, row, b, dst) } else { unpack_with::<false>(ty, row, b, dst) };
                d[b * 16 + r] = dh[0];
                c[b * 16 + r] = ch[0];
            } else {
                let (dh, ch) = if f16c { unpack_with::<true>(ty, row, b, &mut u) } else { unpack_with::<false>(ty, row, b, &mut u) };
                a[(2 * b * 16 + r) * 16..][..16].copy_from_slice(&u[..16]);
                a[((2 * b + 1) * 16 + r) * 16..][..16].copy_from_slice(&u[16..]);
                for h in 0..2 {
                    d[(2 * b + h) * 16 + r] = dh[h];
                    c[(2 * b + h) * 16 + r] = ch[h];
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod kernel {
    use super::{WPanel, XTiles};
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatmul_int8::{dot_reference, tests::{block_types, case}};
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
mod speed {
    use super::*;
    use crate::model::qmatmul_int8::tests::case;
    use rand::{rngs::StdRng, SeedableRng};
    use std::time::Instant;

    /// Where a many-row product's time goes: X quantized, X laid out in tiles, the product
    /// (panels unpacked and multiplied). `cargo test --release -p focus-model --lib
    /// qmatmul_amx::speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        if !available() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(1);
        for dtype in [candle_core::quantized::GgmlDType::Q4K, candle_core::quantized::GgmlDType::Q6K, candle_core::quantized::GgmlDType::Q4_0] {
            let (m, out, inp) = (512, 8192, 2048);
            let (q, _, x, _) = case(dtype, m, out, inp, &mut rng);
            let mut y = vec![0f32; m * out];
            for _ in 0..3 {
                let t0 = Instant::now();
                let xq = Q8Rows::quantize(&x, m, inp);
                let t1 = Instant::now();
                let xt = XTiles::new(&xq, if halves(q.ty) { 16 } else { 32 });
                let t2 = Instant::now();
                drop(xt);
                matmul(&q, &xq, &mut y);
                let t3 = Instant::now();
                let mut p = WPanel { a: vec![0u8; 16 * inp], d: vec![0f32; inp / 16 * 16], c: vec![0f32; inp / 16 * 16] };
                for c in 0..out / 16 {
                    p.fill(&q, c * 16, 16, if halves(q.ty) { 16 } else { 32 });
                }
                let t4 = Instant::now();
                let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
                eprintln!("{dtype:?} {m}x{inp}x{out}: quantize {:.2} ms, tiles of X {:.2} ms, product {:.2} ms (unpacking alone, one thread: {:.2} ms)", ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t3, t4));
            }
        }
    }
}
