//! A weight matrix and the projection over it, y = x W^T + b, with W stored as (out, in) like
//! PyTorch's nn.Linear. A weight is held once, in one of two forms:
//! - `Stored`, on the CPU: the checkpoint's own storage (GGUF blocks, or a safetensors file's
//!   f32 / f16 / bf16), read in place from the file's memory map. Every product reads it there:
//!   one row (`qmatvec`), many rows (`qmatmul`), and training's graph (`StoredProduct`, whose
//!   backward gives x its gradient through the same blocks; a frozen weight gets none).
//! - `Dense`: a tensor on the model's device (every weight on CUDA; weights made in code).
//!
//! `to_dense` makes the one explicit copy anything takes (the GPU upload, a dtype cast), so a
//! second copy of a model's weights shows in the code that asks for it.

use super::qmatmul::Products;
use super::qmatvec::{dequantize_rows, QMatrix};
use crate::error::{Error, Result};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Weight {
    Dense(Tensor),
    Stored(Arc<QMatrix>),
}

impl Weight {
    /// The route of products with a stored weight (`qmatmul::Products`). A new handle to the
    /// same bytes: a weight shared with another part (a tied embedding) keeps its own setting.
    pub fn set_products(&mut self, p: Products) {
        if let Weight::Stored(q) = self {
            let mut n = (**q).clone();
            n.products = p;
            *q = Arc::new(n);
        }
    }

    /// (out, in).
    pub fn dims2(&self) -> Result<(usize, usize)> {
        Ok(match self {
            Weight::Dense(t) => t.dims2()?,
            Weight::Stored(q) => (q.rows, q.cols),
        })
    }

    /// The tensor of a dense weight (the CUDA kernels read these); `None` for a stored one.
    pub fn tensor(&self) -> Option<&Tensor> {
        match self {
            Weight::Dense(t) => Some(t),
            Weight::Stored(_) => None,
        }
    }

    /// The blocks of a stored weight.
    pub fn stored(&self) -> Option<&QMatrix> {
        match self {
            Weight::Dense(_) => None,
            Weight::Stored(q) => Some(q),
        }
    }

    /// Bytes held in memory: the tensor's, or the stored blocks'.
    pub fn bytes(&self) -> usize {
        match self {
            Weight::Dense(t) => t.elem_count() * t.dtype().size_in_bytes(),
            Weight::Stored(q) => q.bytes(),
        }
    }

    /// The whole weight as a new tensor of `dtype` on `device`: an explicit copy.
    pub fn to_dense(&self, dtype: DType, device: &Device) -> Result<Tensor> {
        Ok(match self {
            Weight::Dense(t) => t.to_device(device)?.to_dtype(dtype)?,
            Weight::Stored(q) => {
                let mut v = vec![0f32; q.rows * q.cols];
                dequantize_rows(q, 0, &mut v);
                Tensor::from_vec(v, (q.rows, q.cols), device)?.to_dtype(dtype)?
            }
        })
    }

    /// Rows `ids` of the weight (an embedding lookup), (ids.len(), in) f32 on `device`.
    pub fn rows(&self, ids: &[u32], device: &Device) -> Result<Tensor> {
        match self {
            Weight::Dense(t) => Ok(t.index_select(&Tensor::from_slice(ids, ids.len(), t.device())?, 0)?.to_dtype(DType::F32)?),
            Weight::Stored(q) => {
                let mut v = vec![0f32; ids.len() * q.cols];
                for (&id, row) in ids.iter().zip(v.chunks_exact_mut(q.cols)) {
                    let id = id as usize;
                    if id >= q.rows {
                        return Err(Error::Invalid(format!("token id {id} is outside the vocabulary of {}", q.rows)));
                    }
                    dequantize_rows(q, id, row);
                }
                Ok(Tensor::from_vec(v, (ids.len(), q.cols), device)?)
            }
        }
    }

    /// x W^T + b for x (..., in): one row by `matvec` (a kernel of its own on CUDA), many rows
    /// on the CPU over the stored blocks (`qmatmul`), under a gradient by `StoredProduct`,
    /// else candle's matmul.
    pub fn forward(&self, x: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        if let Some(y) = super::matvec::row_times(x, self.tensor(), self.stored(), b)? {
            return Ok(y);
        }
        let y = match self {
            Weight::Dense(w) if w.dtype() == x.dtype() => x.broadcast_matmul(&w.t()?)?,
            // bf16 weights on a GPU: the product in bf16 (f32 accumulation), the result in x's dtype.
            Weight::Dense(w) => x.to_dtype(w.dtype())?.broadcast_matmul(&w.t()?)?.to_dtype(x.dtype())?,
            Weight::Stored(q) => match super::qmatmul::forward(x, q, None)? {
                Some(y) => y,
                None => {
                    // Training's graph (or an input that is not f32): the op with a backward.
                    let mut dims = x.dims().to_vec();
                    let rows = x.elem_count() / q.cols;
                    let x2 = x.to_dtype(DType::F32)?.reshape((rows, q.cols))?.contiguous()?;
                    let y = x2.apply_op1(StoredProduct { q: q.clone() })?;
                    *dims.last_mut().ok_or_else(|| Error::Invalid("a product of a scalar".into()))? = q.rows;
                    y.reshape(dims)?.to_dtype(x.dtype())?
                }
            },
        };
        Ok(match b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// x W^T over a stored weight, as an op of candle's graph: forward `qmatmul::product`, backward
/// dX = dY W (`qmatmul::matmul_t`) through the same blocks; W gets no gradient (frozen).
struct StoredProduct {
    q: Arc<QMatrix>,
}

impl CustomOp1 for StoredProduct {
    fn name(&self) -> &'static str {
        "focus-stored-product"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = l.shape().dims2()?;
        if k != self.q.cols {
            candle_core::bail!("stored product: input width {k}, weight {:?}", self.q);
        }
        let x = match s {
            CpuStorage::F32(v) => match l.contiguous_offsets() {
                Some((a, b)) => &v[a..b],
                None => candle_core::bail!("stored product: input not contiguous"),
            },
            _ => candle_core::bail!("stored product: input not f32"),
        };
        let mut y = vec![0f32; m * self.q.rows];
        super::qmatmul::product(&self.q, x, m, &mut y);
        Ok((CpuStorage::F32(y), Shape::from((m, self.q.rows))))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let (m, _) = grad.dims2()?;
        let dy = grad.to_dtype(DType::F32)?.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; m * self.q.cols];
        super::qmatmul::matmul_t(&self.q, &dy, m, &mut dx);
        Ok(Some(Tensor::from_vec(dx, (m, self.q.cols), x.device())?.to_dtype(x.dtype())?))
    }
}

/// y = x W^T + b.
#[derive(Debug, Clone)]
pub struct Linear {
    pub w: Weight,
    pub b: Option<Tensor>,
}

impl Linear {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.w.forward(x, self.b.as_ref())
    }

    /// `forward` of several projections of one input (Q, K and V; gate and up). A decode
    /// step's row on the integer route runs them as one parallel loop
    /// (`qmatvec_int8::times_many`, X quantized once per kind); the same values as one by one.
    pub fn forward_many<const N: usize>(ls: [&Linear; N], x: &Tensor) -> Result<[Tensor; N]> {
        if let Some(ys) = one_row_int8(&ls, x)? {
            return Ok(ys);
        }
        let mut out = Vec::with_capacity(N);
        for l in ls {
            out.push(l.forward(x)?);
        }
        Ok(out.try_into().unwrap_or_else(|_| unreachable!("N outputs")))
    }

    /// x W^T + b + r: a product and the residual added to it (one kernel for a step's row on
    /// CUDA).
    pub fn forward_plus(&self, x: &Tensor, r: &Tensor) -> Result<Tensor> {
        if let Some(w) = self.w.tensor() {
            if let Some(y) = super::fused::rows_times(x, &[(w, self.b.as_ref())], Some(r), None)? {
                return Ok(y);
            }
        }
        Ok((self.forward(x)? + r)?)
    }

    /// `Weight::set_products` of the matrix.
    pub fn set_products(&mut self, p: Products) {
        self.w.set_products(p)
    }

    /// Rows r0 .. r0 + n of the projection (a part of a fused one: Phi-3's qkv_proj).
    pub fn rows(&self, r0: usize, n: usize) -> Result<Linear> {
        let w = match &self.w {
            Weight::Dense(t) => Weight::Dense(t.narrow(0, r0, n)?.contiguous()?),
            Weight::Stored(q) => Weight::Stored(Arc::new(q.rows_slice(r0, n))),
        };
        let b = match &self.b {
            Some(b) => Some(b.narrow(0, r0, n)?.contiguous()?),
            None => None,
        };
        Ok(Linear { w, b })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatvec::tests::random;
    use candle_core::quantized::GgmlDType;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Several projections of one row as one loop (`forward_many`, a decode step's Q, K, V)
    /// give each projection's `forward` bit for bit: types of both X kinds mixed (Q4_K with
    /// Q6_K and Q4_1), a bias, row counts that leave partial chunks.
    #[test]
    fn forward_many_equals_one_by_one() {
        if !crate::model::qmatmul_int8::available() {
            eprintln!("no AVX-512 VNNI here: the integer route is not taken");
            return;
        }
        let mut rng = StdRng::seed_from_u64(9);
        let inp = 512;
        let lin = |dtype, out, bias: bool, rng: &mut StdRng| {
            let (raw, _) = random(dtype, out, inp, rng);
            let mut w = Weight::Stored(Arc::new(QMatrix::new(dtype, &raw, out, inp).unwrap()));
            w.set_products(Products::Int8);
            let b = bias.then(|| Tensor::randn(0f32, 1.0, out, &Device::Cpu).unwrap());
            Linear { w, b }
        };
        let (q, k, v) = (lin(GgmlDType::Q4K, 300, true, &mut rng), lin(GgmlDType::Q6K, 37, false, &mut rng), lin(GgmlDType::Q4_1, 1000, true, &mut rng));
        let x = Tensor::randn(0f32, 1.0, (1, inp), &Device::Cpu).unwrap();
        let many = Linear::forward_many([&q, &k, &v], &x).unwrap();
        for (l, got) in [&q, &k, &v].into_iter().zip(many) {
            let want = l.forward(&x).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
        // Not the route's (two rows): the same values as one by one, through `forward`.
        let x2 = Tensor::randn(0f32, 1.0, (2, inp), &Device::Cpu).unwrap();
        let [a, _] = Linear::forward_many([&q, &k], &x2).unwrap();
        assert_eq!(a.dims(), &[2, 300]);
    }

    /// A stored weight's product under a gradient (`StoredProduct`) gives the values and the
    /// input gradient of the same product over its dequantized tensor.
    #[test]
    fn stored_product_backward_equals_dense() {
        let mut rng = StdRng::seed_from_u64(5);
        let (out, inp) = (48, 256);
        let (raw, _) = random(GgmlDType::Q4K, out, inp, &mut rng);
        let stored = Weight::Stored(Arc::new(QMatrix::new(GgmlDType::Q4K, &raw, out, inp).unwrap()));
        let dense = Weight::Dense(stored.to_dense(DType::F32, &Device::Cpu).unwrap());
        // From the seeded generator: with candle's unseeded randn the test failed once in ~20
        // runs (2026-12-07; a loss drawn near 0 makes the relative bound below tighter than
        // rounding). Seeded, every run checks the same draw.
        let mut draw = |n: usize| (0..n).map(|_| rng.gen::<f32>() * 2.0 - 1.0).collect::<Vec<f32>>();
        let x0 = Tensor::from_vec(draw(2 * 3 * inp), (2, 3, inp), &Device::Cpu).unwrap();
        let r = Tensor::from_vec(draw(2 * 3 * out), (2, 3, out), &Device::Cpu).unwrap();
        let grads = |w: &Weight| {
            let x = candle_core::Var::from_tensor(&x0).unwrap();
            let y = w.forward(x.as_tensor(), None).unwrap();
            assert!(y.track_op(), "the product joined the graph");
            let loss = (y * &r).unwrap().sum_all().unwrap();
            let g = loss.backward().unwrap();
            (loss.to_scalar::<f32>().unwrap(), g.get(x.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap())
        };
        let ((ls, gs), (ld, gd)) = (grads(&stored), grads(&dense));
        assert!((ls - ld).abs() <= 1e-4 * ld.abs().max(1.0), "loss {ls} vs {ld}");
        for (i, (a, b)) in gs.iter().zip(&gd).enumerate() {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "dx[{i}] {a} vs {b}");
        }
    }

    /// A part of a stored projection is the same rows as the dense part; rows are looked up
    /// as dequantized rows.
    #[test]
    fn rows_of_a_stored_weight() {
        let mut rng = StdRng::seed_from_u64(6);
        let (raw, _) = random(GgmlDType::Q8_0, 10, 64, &mut rng);
        let lin = Linear { w: Weight::Stored(Arc::new(QMatrix::new(GgmlDType::Q8_0, &raw, 10, 64).unwrap())), b: None };
        let dense = lin.w.to_dense(DType::F32, &Device::Cpu).unwrap();
        let part = lin.rows(3, 4).unwrap().w.to_dense(DType::F32, &Device::Cpu).unwrap();
        assert_eq!(part.to_vec2::<f32>().unwrap(), dense.narrow(0, 3, 4).unwrap().to_vec2::<f32>().unwrap());
        let looked = lin.w.rows(&[9, 0, 9], &Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        let d = dense.to_vec2::<f32>().unwrap();
        assert_eq!(looked, vec![d[9].clone(), d[0].clone(), d[9].clone()]);
        assert!(lin.w.rows(&[10], &Device::Cpu).is_err());
    }
}

/// `Linear::forward_many`'s shared loop: `Some` when x is one f32 row on the CPU that no
/// gradient tracks and every weight is stored and on the integer route.
fn one_row_int8<const N: usize>(ls: &[&Linear; N], x: &Tensor) -> Result<Option<[Tensor; N]>> {
    use super::qmatmul_int8::{Q8Rows, XKind};
    let cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32 && !t.track_op();
    if N == 0 || x.rank() != 2 || x.dim(0)? != 1 || !cpu_f32(x) {
        return Ok(None);
    }
    let inp = x.dim(1)?;
    let mut qs = Vec::with_capacity(N);
    for l in ls {
        match l.w.stored() {
            Some(q) if q.cols == inp && super::qmatmul::int8_route(q) && l.b.as_ref().is_none_or(|b| cpu_f32(b) && b.elem_count() == q.rows) => qs.push(q),
            _ => return Ok(None),
        }
    }
    let xv = x.flatten_all()?.to_vec1::<f32>()?;
    // X quantized once per kind the weights take (Q8_0 for 32-value blocks, Q8_K for K-quants).
    let (mut q8_0, mut q8_k) = (None, None);
    for q in &qs {
        let slot = if XKind::of(q.ty) == XKind::Q8K { &mut q8_k } else { &mut q8_0 };
        if slot.is_none() {
            *slot = Some(Q8Rows::quantize_for(q.ty, &xv, 1, inp));
        }
    }
    let mut ys: Vec<Vec<f32>> = qs.iter().map(|q| vec![0f32; q.rows]).collect();
    {
        let mut parts: Vec<_> = qs
            .iter()
            .zip(ys.iter_mut())
            .map(|(q, y)| {
                let xq = if XKind::of(q.ty) == XKind::Q8K { q8_k.as_ref() } else { q8_0.as_ref() };
                (*q, xq.expect("quantized above"), y.as_mut_slice())
            })
            .collect();
        super::qmatvec_int8::times_many(&mut parts);
    }
    let mut out = Vec::with_capacity(N);
    for (l, mut y) in ls.iter().zip(ys) {
        if let Some(b) = &l.b {
            let b = b.flatten_all()?.to_vec1::<f32>()?;
            y.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
        }
        let n = y.len();
        out.push(Tensor::from_vec(y, (1, n), x.device())?);
    }
    Ok(Some(out.try_into().unwrap_or_else(|_| unreachable!("N outputs"))))
}
