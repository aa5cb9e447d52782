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
    let t = 2048;
    let q = Tensor::randn(0f32, 1., (3, 3 * t, 64), &dev)?;
    let k = Tensor::randn(0f32, 1., (3, t, 64), &dev)?;
    let v = Tensor::randn(0f32, 1., (3, t, 64), &dev)?;
    let s = q.matmul(&k.t()?)?;
    time("qk^T (t view)", 3, || { q.matmul(&k.t()?)?; Ok(()) })?;
    time("causal softmax", 3, || { s.apply_op1_no_bwd(&focus_core::kernels::CausalSoftmax { scale: 0.125 })?; Ok(()) })?;
    time("pv", 3, || { s.matmul(&v)?; Ok(()) })?;
    Ok(())
}
