use focus_core::topk::Shape;
use std::time::Instant;
fn main() {
    for t in [512usize, 2048] {
        let s = Shape { heads: 9, kv_heads: 3, t, d: 64 };
        let q: Vec<f32> = (0..9 * t * 64).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let k: Vec<f32> = (0..3 * t * 64).map(|i| ((i * 104729) % 1000) as f32 / 500.0 - 1.0).collect();
        let v = k.clone();
        focus_core::flash::causal_attention(&q, &k, &v, s);
        let t0 = Instant::now();
        let n = 5;
        for _ in 0..n { focus_core::flash::causal_attention(&q, &k, &v, s); }
        let sec = t0.elapsed().as_secs_f64() / n as f64;
        let flops = 9.0 * (t * t) as f64 / 2.0 * 64.0 * 4.0;
        println!("T={t}: {:.2} ms  {:.1} GFLOP/s (causal)", sec * 1e3, flops / sec / 1e9);
    }
}
