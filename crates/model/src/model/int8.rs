//! The integer route's entry points for any block type: the definition (`dot_reference`) and
//! the VNNI panels (`matmul`), each the 32-value types' form (`qmatmul_int8`) or the
//! K-quants' (`kquants`). X is quantized for a weight by `Q8Rows::quantize_for`; the AMX tiles
//! (`qmatmul_amx`) and the one-row kernels (`qmatvec_int8`) take both forms themselves.

use super::kquants::{self, is_k};
use super::qmatmul_int8::{self, Q8Rows};
use super::qmatvec::{QMatrix, QType};

/// Weight row `row` (bytes of block type `ty`) . X row i (`Q8Rows::quantize_for(ty, ..)`): the
/// definition every kernel reproduces bit for bit (`qmatmul_int8::dot_reference`,
/// `kquants::dot_reference`).
pub fn dot_reference(ty: QType, row: &[u8], x: &Q8Rows, i: usize) -> f32 {
    if is_k(ty) {
        kquants::dot_reference(ty, row, x, i)
    } else {
        qmatmul_int8::dot_reference(ty, row, x, i)
    }
}

/// Y = X W^T by the VNNI panels (where there is no AMX); `x` quantized for `q.ty`, `y`
/// (m, q.rows) overwritten.
pub fn matmul(q: &QMatrix, x: &Q8Rows, y: &mut [f32]) {
    if is_k(q.ty) {
        kquants::matmul(q, x, y)
    } else {
        qmatmul_int8::matmul(q, x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatmul_int8::tests::{block_types, case};
    use crate::model::qmatmul_int8::XKind;
    use rand::{rngs::StdRng, SeedableRng};

    /// The definition: the f64 product of candle's dequantized W with X as quantized (q * d),
    /// up to f32 rounding of the terms (1e-5 of the sum of |products|), and X itself within
    /// the activations' 8-bit rounding (1% of that sum here).
    #[test]
    fn reference_equals_dequantized_product() {
        let mut rng = StdRng::seed_from_u64(21);
        for dtype in block_types() {
            let (m, out, inp) = (3, 5, 768);
            let (q, w, x, xq) = case(dtype, m, out, inp, &mut rng);
            let per = if xq.kind == XKind::Q8K { 256 } else { 32 };
            let xd: Vec<f32> = (0..m * inp).map(|k| xq.q[k] as f32 * xq.d[k / per]).collect();
            for i in 0..m {
                for o in 0..out {
                    let got = dot_reference(q.ty, &q.data()[o * q.row_bytes()..(o + 1) * q.row_bytes()], &xq, i) as f64;
                    let wr = &w[o * inp..(o + 1) * inp];
                    let dot = |xs: &[f32]| -> (f64, f64) {
                        let p = xs[i * inp..(i + 1) * inp].iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64);
                        (p.clone().sum(), p.map(f64::abs).sum())
                    };
                    let ((want, mag), (exact, _)) = (dot(&xd), dot(&x));
                    assert!((got - want).abs() <= 1e-5 * mag + 1e-30, "{dtype:?} ({i},{o}): {got} vs {want}");
                    assert!((got - exact).abs() <= 1e-2 * mag + 1e-30, "{dtype:?} ({i},{o}): {got} vs unquantized {exact}");
                }
            }
        }
    }

    /// The VNNI panels (where this CPU has them) and their portable twin equal the definition
    /// bit for bit: every block type, X row counts that leave a partial group of 4, outputs
    /// that leave a partial panel.
    #[test]
    fn panels_equal_the_reference_bit_for_bit() {
        let mut rng = StdRng::seed_from_u64(22);
        for dtype in block_types() {
            for (m, out, inp) in [(1, 7, 256), (6, 37, 512)] {
                let (q, _, _, xq) = case(dtype, m, out, inp, &mut rng);
                let mut y = vec![f32::NAN; m * out];
                matmul(&q, &xq, &mut y);
                let mut portable = [[0f32; 16]; 4];
                if is_k(q.ty) {
                    kquants::panel_portable(&q, &xq, m.min(4), &mut portable);
                } else {
                    qmatmul_int8::panel_portable(&q, &xq, m.min(4), &mut portable);
                }
                for i in 0..m {
                    for o in 0..out {
                        let want = dot_reference(q.ty, &q.data()[o * q.row_bytes()..(o + 1) * q.row_bytes()], &xq, i);
                        assert_eq!(y[i * out + o].to_bits(), want.to_bits(), "{dtype:?} {m}x{inp}x{out} ({i},{o}): {} vs {want}", y[i * out + o]);
                        if i < 4 && o < 16 {
                            assert_eq!(portable[i][o].to_bits(), want.to_bits(), "{dtype:?} portable ({i},{o})");
                        }
                    }
                }
            }
        }
    }
}
