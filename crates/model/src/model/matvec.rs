//! One row times a weight matrix on the CPU (on CUDA: `fused::row_times`): y = W x + b with
//! W (out, in) row-major, each output a contiguous dot product. A generation step multiplies one token's row by every
//! weight; candle's gemm packs the whole (transposed) weight for that, which costs more than
//! the product (measured: ~0.5 s of CPU per SmolLM2 step). A weight that also has its GGUF
//! blocks (`qmatvec`) is read there, a fraction of the bytes. Inference only (no backward).

use super::qmatvec::QMatrix;
use crate::attention::cpu::simd::rows_dot;
use crate::error::Result;
use candle_core::{DType, Device, Tensor};

/// Output rows per parallel task.
const ROWS: usize = 64;

/// `Some(x W^T + b)` when `x` is one f32 row on the CPU that no gradient tracks and the weight
/// is `q` (its stored blocks, read in place) or `w`, a contiguous f32 CPU matrix; `None` leaves
/// the product to candle.
pub fn row_times(x: &Tensor, w: Option<&Tensor>, q: Option<&QMatrix>, b: Option<&Tensor>) -> Result<Option<Tensor>> {
    // On CUDA: one kernel (`fused::row_times`), where cuBLAS's M = 1 product is launch-bound.
    if x.device().is_cuda() {
        return match w {
            Some(w) => super::fused::row_times(x, w, b),
            None => Ok(None),
        };
    }
    let fits = |t: &Tensor| matches!(t.device(), Device::Cpu) && t.dtype() == DType::F32 && !t.track_op();
    if x.rank() != 2 || x.dim(0)? != 1 || !fits(x) || b.is_some_and(|b| !fits(b)) {
        return Ok(None);
    }
    let inp = x.dim(1)?;
    let y = match (q, w) {
        // A type whose product quantizes X takes it for one row too (`qmatmul::product`).
        (Some(q), _) if q.cols == inp && super::qmatmul::int8_route(q) => return super::qmatmul::forward(x, q, b),
        (Some(q), _) if q.cols == inp => {
            let xv = x.flatten_all()?.to_vec1::<f32>()?;
            let mut y = vec![0f32; q.rows];
            q.times(&xv, &mut y);
            y
        }
        (None, Some(w)) if w.rank() == 2 && fits(w) && w.is_contiguous() && w.dim(1)? == inp => {
            let out = w.dim(0)?;
            let xv = x.flatten_all()?.to_vec1::<f32>()?;
            let mut y = vec![0f32; out];
            let (storage, layout) = w.storage_and_layout();
            let candle_core::Storage::Cpu(cpu) = &*storage else { return Ok(None) };
            let wv = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + out * inp];
            let chunks: Vec<_> = y.chunks_mut(ROWS).enumerate().collect();
            super::row_pool::for_each(chunks, |(c, ys)| rows_dot(&wv[c * ROWS * inp..], inp, &xv, ys));
            y
        }
        _ => return Ok(None),
    };
    let mut y = y;
    if let Some(b) = b {
        let b = b.to_vec1::<f32>()?;
        if b.len() != y.len() {
            return Ok(None);
        }
        y.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
    }
    let out = y.len();
    Ok(Some(Tensor::from_vec(y, (1, out), x.device())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_candle_matmul() {
        let dev = Device::Cpu;
        for (out, inp) in [(1, 1), (70, 33), (129, 576)] {
            let w = Tensor::randn(0f32, 1.0, (out, inp), &dev).unwrap();
            let b = Tensor::randn(0f32, 1.0, out, &dev).unwrap();
            let x = Tensor::randn(0f32, 1.0, (1, inp), &dev).unwrap();
            let got = row_times(&x, Some(&w), None, Some(&b)).unwrap().expect("takes one row");
            let want = x.matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
            let err = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(err < 1e-4 * (inp as f32).sqrt(), "{out}x{inp}: {err}");
        }
        // Two rows are left to candle.
        let x = Tensor::zeros((2, 3), DType::F32, &dev).unwrap();
        assert!(row_times(&x, Some(&Tensor::zeros((4, 3), DType::F32, &dev).unwrap()), None, None).unwrap().is_none());
    }
}
