//! Decode attention: the newest token's attention over one layer's KV cache (`kv_cache`), in
//! every mode: dense (every cached key), soft (every key, gated as `focus::gate::GateFn` gates
//! it), or hard top-k, which reads only the local window and the keys whose top-k sets meet the
//! query's. `attend` is the one entry point; it dispatches to the CPU kernels
//! (`cpu::decode`) or, for a cache on a GPU, the CUDA kernel (`cuda::decode`), as
//! `attention::attend` does for a whole sequence. Both keep exactly the mask's row
//! (`mask::classify`); the tests check them against the masked dense reference.

use super::kv_cache::LayerCache;
use super::LayerAttention;
use crate::error::{Error, Result};
use candle_core::Tensor;
// What the dispatcher and the kernels share sits below both (`decode_keys`).
pub use super::decode_keys::{device_read_bytes, selected_keys, DecodeAttention, ReadBytes};

/// The newest token's attention output (1, H, 1, D) from its queries `q` ((1, H, 1, D), after
/// RoPE and the layer's score scale) over `cache`, and the bytes read. `own` is the layer's own
/// attention: a sliding window drops the keys outside it (in every mode: the Focus mask
/// composes with it), a soft-cap acts on each scaled logit before any gate.
pub fn attend(q: &Tensor, heads: usize, cache: &LayerCache, how: DecodeAttention, own: &LayerAttention) -> Result<(Tensor, ReadBytes)> {
    if cache.device.is_some() {
        return attend_on_device(q, heads, cache, how, own);
    }
    let (o, read) = super::cpu::decode::attend(&q.flatten_all()?.to_vec1::<f32>()?, heads, cache, how, own)?;
    Ok((Tensor::from_vec(o, (1, heads, 1, cache.head_dim), q.device())?, read))
}

/// The newest token's attention output (1, H, 1, D) from its queries `q` (any shape of H x D
/// values, on the cache's device) over a cache on a GPU (`LayerCache::to_device`) whose last
/// row is the newest token, and the bytes read (`device_read_bytes`): the kernels of
/// `attention::cuda::decode`, which keep the same pairs as the CPU's.
fn attend_on_device(q: &Tensor, heads: usize, cache: &LayerCache, how: DecodeAttention, own: &LayerAttention) -> Result<(Tensor, ReadBytes)> {
    let read = device_read_bytes(cache, how, own)?;
    let kv = cache.device.as_ref().ok_or_else(|| Error::Invalid("attend_on_device: the cache is on the host".into()))?;
    if how != DecodeAttention::Dense && kv.routed < kv.len {
        return Err(Error::Invalid("decode on the GPU: the cache's routing was not synced to the device".into()));
    }
    // The kernels read the newest token's position from the device, as a generation step's.
    let step = Tensor::new(&[0u32, (kv.len - 1) as u32], q.device())?;
    Ok((attend_step(q, heads, cache, how, own, &step)?, read))
}

/// `attend` inside a generation step on a GPU: the newest token's key and value rows (and its
/// routing) sit at the position `step` holds ([token id, position], u32 on the device), written
/// this step; the host's counts do not include it yet. The output alone, with no host data
/// read, so that the step can be captured as a CUDA graph; the generator counts the bytes
/// (`device_read_bytes`) after the step.
pub fn attend_step(q: &Tensor, heads: usize, cache: &LayerCache, how: DecodeAttention, own: &LayerAttention, step: &Tensor) -> Result<Tensor> {
    let kv = cache.device.as_ref().ok_or_else(|| Error::Invalid("attend_step: the cache is on the host".into()))?;
    let d = cache.head_dim;
    if how != DecodeAttention::Dense && cache.routing.is_none() {
        return Err(Error::Invalid("top-k and soft decode need cached routing".into()));
    }
    #[cfg(feature = "cuda")]
    {
        use crate::attention::cuda::decode::{decode_attention, DecodeStep, MAX_HEAD_DIM};
        if d > MAX_HEAD_DIM {
            return Err(Error::Invalid(format!("decode on the GPU takes head dims up to {MAX_HEAD_DIM}, not {d}")));
        }
        if heads > crate::attention::kv_cache::ARRIVALS {
            return Err(Error::Invalid(format!("decode on the GPU takes up to {} query heads, not {heads}", crate::attention::kv_cache::ARRIVALS)));
        }
        let step = DecodeStep {
            step,
            own_window: own.window,
            topk: match (how, kv.masks.as_ref()) {
                (DecodeAttention::TopK { .. }, Some(m)) => Some(m),
                _ => None,
            },
            window: match how {
                DecodeAttention::TopK { window, .. } | DecodeAttention::Soft { window, .. } => window,
                DecodeAttention::Dense => 0,
            },
            sink: match how {
                DecodeAttention::TopK { sink, .. } | DecodeAttention::Soft { sink, .. } => sink,
                DecodeAttention::Dense => 0,
            },
            soft: match (how, kv.memberships.as_ref()) {
                (DecodeAttention::Soft { gate, .. }, Some(m)) => Some((gate, m)),
                _ => None,
            },
            softcap: own.softcap.map(|c| c as f32),
            arrivals: &kv.arrivals,
        };
        let q = q.to_dtype(candle_core::DType::F32)?.reshape((heads, d))?.contiguous()?;
        let o = decode_attention(&q, &kv.k, &kv.v, step)?;
        Ok(o.reshape((1, heads, 1, d))?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (q, heads, d, kv, own, step);
        Err(Error::Invalid("a cache on a device needs a build with the cuda feature".into()))
    }
}

/// The GPU's decode step against the CPU's (`cpu::decode`, the reference), and its speed.
#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;
    use crate::attention::cpu::decode::attend as cpu_attend;
    use crate::attention::cpu::decode::tests::routed_cache;
    use crate::attention::kv_cache::CachedRouting;
    use crate::focus::gate::GateFn;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// Decode attention alone on a GPU at Qwen2.5-0.5B's shapes (24 layers, 2 KV heads of 64, 14
    /// query heads) over a 32K cache, or SmolLM2's with DECODE_SHAPE=smollm2 (30 layers, 3 KV
    /// heads of 64, 9 query heads, 8150 cached): microseconds per step (all layers, one
    /// synchronisation around them), dense vs top-k (K=8, k=2, window 128), 20 steps a mode
    /// (DECODE_REPS), dense first (so a profiler's first `decode_partial` launch is dense,
    /// launch 20 x layers top-k). DECODE_N sets the cached tokens, DECODE_CHUNKS a list of
    /// chunk sizes to run in turn (`experiments/gpu/chunk_sweep.sh`). A benchmark: the
    /// `--features cuda` test binary with `attention::decode::tests::device_speed
    /// --ignored --nocapture`.
    #[test]
    #[ignore]
    fn device_speed() {
        use candle_core::{Device, Tensor};
        let dev = Device::new_cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(5);
        let smollm2 = std::env::var("DECODE_SHAPE").is_ok_and(|s| s == "smollm2");
        let (hkv, heads, d, layers, n0) = if smollm2 { (3, 9, 64, 30, 8150) } else { (2, 14, 64, 24, 32000) };
        let n: usize = std::env::var("DECODE_N").ok().and_then(|v| v.parse().ok()).unwrap_or(n0);
        let caches: Vec<LayerCache> = (0..layers).map(|_| routed_cache(&mut rng, hkv, d, n).to_device(&dev).unwrap()).collect();
        let q = Tensor::from_vec((0..heads * d).map(|_| rng.gen::<f32>() - 0.5).collect::<Vec<f32>>(), (1, heads, 1, d), &dev).unwrap();
        let own = LayerAttention::default();
        // DECODE_CHUNKS=64,128,256: each chunk size in turn (Nsight Compute's per-kernel times
        // tell them apart: launches in this order, each mode twice).
        let chunks: Vec<usize> = std::env::var("DECODE_CHUNKS").map_or(vec![0], |v| v.split(',').filter_map(|c| c.parse().ok()).collect());
        for chunk in chunks {
            crate::attention::cuda::decode::CHUNK_OVERRIDE.store(chunk, std::sync::atomic::Ordering::Relaxed);
            for how in [DecodeAttention::Dense, DecodeAttention::TopK { window: 128, sink: 0 }, DecodeAttention::Dense, DecodeAttention::TopK { window: 128, sink: 0 }] {
                let mut times = Vec::new();
                let mut read = ReadBytes::default();
                let reps: usize = std::env::var("DECODE_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
                for _ in 0..reps {
                    dev.synchronize().unwrap();
                    let t0 = std::time::Instant::now();
                    read = ReadBytes::default();
                    for c in &caches {
                        let (o, r) = attend(&q, heads, c, how, &own).unwrap();
                        std::hint::black_box(o);
                        read.add(r);
                    }
                    dev.synchronize().unwrap();
                    times.push(t0.elapsed().as_secs_f64());
                }
                times.sort_by(f64::total_cmp);
                let t = times[times.len() / 2];
                eprintln!("chunk {chunk} {how:?} n {n}: {:.1} us per step, {:.0} GB/s of cache rows, read {:.1}% of dense", t * 1e6, read.kv as f64 / t / 1e9, 100.0 * read.fraction());
            }
        }
    }

    /// On a GPU, the decode kernel gives the CPU's output and reads the same rows: dense, top-k
    /// and soft, with a sliding window, a soft-cap, head dims that do not fill a warp's lanes,
    /// contexts over several chunks, and blocks of one or two query heads (up to 7 heads a KV
    /// head: a last block with one head when two does not divide them).
    #[test]
    fn device_decode_equals_the_cpu() {
        use candle_core::{Device, Tensor};
        let dev = Device::new_cuda(0).expect("a CUDA device");
        let mut rng = StdRng::seed_from_u64(11);
        for case in 0..16 {
            let hkv = rng.gen_range(1..=3);
            let heads = hkv * rng.gen_range(1..=7);
            let d = [13, 64, 256][case % 3];
            let t = rng.gen_range(1..1500);
            let window = if case % 2 == 0 { rng.gen_range(0..200) } else { rng.gen_range(0..16) };
            // Sinks [ours]: 0, 1 and 4.
            let sink = [0, 1, 4][case % 3];
            let (groups, k) = (8, rng.gen_range(1..=3));
            let own = LayerAttention { window: (case % 4 == 1).then(|| rng.gen_range(1..600)), softcap: (case % 5 == 2).then_some(3.0), ..LayerAttention::default() };
            let mut r = |n: usize, a: f32| (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * a).collect::<Vec<f32>>();
            let (q, kk, v) = (r(heads * d, 2.0), r(hkv * t * d, 2.0), r(hkv * t * d, 1.0));
            let memb: Vec<f32> = r(t * groups, 1.0).iter().map(|x| x.abs()).collect();
            let mut cache = LayerCache::new(hkv, d, Some(CachedRouting::new(groups, k, None)));
            cache.push_kv(&kk, &v, t);
            let ro = cache.routing.as_mut().unwrap();
            (0..t).for_each(|i| ro.push(&memb[i * groups..(i + 1) * groups], &memb[i * groups..(i + 1) * groups]));
            let on_gpu = cache.clone().to_device(&dev).unwrap();
            let qt = Tensor::from_slice(&q, (1, heads, 1, d), &dev).unwrap();
            for how in [DecodeAttention::Dense, DecodeAttention::TopK { window, sink }, DecodeAttention::Soft { gate: GateFn::Log { eps: 1e-6 }, window, sink }, DecodeAttention::Soft { gate: GateFn::Paper { lambda: 10.0 }, window, sink }] {
                let (want, rw) = cpu_attend(&q, heads, &cache, how, &own).unwrap();
                for per in [1, 2] {
                    crate::attention::cuda::decode::HEADS_OVERRIDE.store(per, std::sync::atomic::Ordering::Relaxed);
                    let (got, rg) = attend(&qt, heads, &on_gpu, how, &own).unwrap();
                    let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(err < 2e-5, "case {case} {how:?} t {t} d {d} w {window} s {sink} own {own:?} heads {heads}/{hkv} per block {per}: {err}");
                    assert_eq!((rg.kv, rg.dense), (rw.kv, rw.dense), "case {case} {how:?}: rows read");
                }
                crate::attention::cuda::decode::HEADS_OVERRIDE.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}
