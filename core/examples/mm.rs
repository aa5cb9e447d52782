use candle_core::{Device, Tensor};
use std::time::Instant;
fn time(name: &str, n: usize, mut f: impl FnMut() -> candle_core::Result<()>) -> candle_core::Result<()> {
    f()?;
    let t0 = Instant::now();
    for _ in 0..n { f()?; }
    println!("{name}: {:.3} ms", t0.elapsed().as_secs_f64() / n as f64 * 1e3);
    Ok(())
}
fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let q = Tensor::randn(0f32, 1., (3, 1536, 64), &dev)?;
    let k = Tensor::randn(0f32, 1., (3, 512, 64), &dev)?;
    let kt = k.t()?.contiguous()?;
    let s = q.matmul(&kt)?;
    let bias = Tensor::zeros((512, 512), candle_core::DType::F32, &dev)?;
    time("qk^T (t view)", 20, || { q.matmul(&k.t()?)?; Ok(()) })?;
    time("qk^T (contig)", 20, || { q.matmul(&kt)?; Ok(()) })?;
    time("softmax", 20, || { candle_nn::ops::softmax_last_dim(&s)?; Ok(()) })?;
    time("scale", 20, || { let _ = (&s * 0.125)?; Ok(()) })?;
    let s9 = s.reshape((9, 512, 512))?;
    time("bias add", 20, || { s9.broadcast_add(&bias)?; Ok(()) })?;
    let v = Tensor::randn(0f32, 1., (3, 512, 64), &dev)?;
    time("pv", 20, || { s.matmul(&v)?; Ok(()) })?;
    Ok(())
}
