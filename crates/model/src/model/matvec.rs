//! One row times a weight matrix on the CPU (on CUDA: `fused::row_times`): y = W x + b with
//! W (out, in) row-major, each output a contiguous dot product. A generation step multiplies one token's row by every
//! weight; candle's gemm packs the whole (transposed) weight for that, which costs more than
//! the product (measured: ~0.5 s of CPU per SmolLM2 step). A weight that also has its GGUF
//! blocks (`qmatvec`) is read from those, a fraction of the bytes. Inference only (no backward).

use super::qmatvec::QMatrix;
use crate::attention::cpu::simd::rows_dot;
use crate::error::Result;
use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

/// Output rows per parallel task.
const ROWS: usize = 64;

/// `Some(x W^T + b)` when `x` is one f32 row on the CPU that no gradient tracks and `w` is a
/// contiguous f32 CPU matrix; `None` leaves the product to candle. `q`: the same weight in
/// quantized blocks, which are read instead of `w`.
pub fn row_times(x: &Tensor, w: &Tensor, q: Option<&QMatrix>, b: Option<&Tensor>) -> Result<Option<Tensor>> {
    // On CUDA: one kernel (`fused::row_times`), where cuBLAS's M = 1 product is launch-bound.
    if x.device().is_cuda() {
        return super::fused::row_times(x, w, b);
    }
    let fits = |t: &Tensor| matches!(t.device(), Device::Cpu) && t.dtype() == DType::F32 && !t.track_op();
    if x.rank() != 2 || x.dim(0)? != 1 || w.rank() != 2 || !fits(x) || !fits(w) || !w.is_contiguous() || b.is_some_and(|b| !fits(b)) {
        return Ok(None);
    }
    let (out, inp) = w.dims2()?;
    if x.dim(1)? != inp {
        return Ok(None);
    }
    let xv = x.flatten_all()?.to_vec1::<f32>()?;
    let bias = b.map(|b| b.to_vec1::<f32>()).transpose()?;
    let mut y = vec![0f32; out];
    match q {
        Some(q) if (q.rows, q.cols) == (out, inp) => q.times(&xv, &mut y),
        _ => {
            let (storage, layout) = w.storage_and_layout();
            let candle_core::Storage::Cpu(cpu) = &*storage else { return Ok(None) };
            let wv = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + out * inp];
            y.par_chunks_mut(ROWS).enumerate().for_each(|(c, ys)| rows_dot(&wv[c * ROWS * inp..], inp, &xv, ys));
        }
    }
    if let Some(b) = bias {
        y.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
    }
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
            let got = row_times(&x, &w, None, Some(&b)).unwrap().expect("takes one row");
            let want = x.matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
            let err = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(err < 1e-4 * (inp as f32).sqrt(), "{out}x{inp}: {err}");
        }
        // Two rows are left to candle.
        let x = Tensor::zeros((2, 3), DType::F32, &dev).unwrap();
        assert!(row_times(&x, &Tensor::zeros((4, 3), DType::F32, &dev).unwrap(), None, None).unwrap().is_none());
    }
}
