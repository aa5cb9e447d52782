//! The generator's CPU tests: a step's timed parts add up; decode with sinks equals the full
//! forward.

use super::*;
use crate::focus::adapter::AdapterSpec;
use crate::focus::mask::TopK;
use crate::model::Model;
use candle_core::Device;

/// An instrumented step reports its parts, which add up to its time; a plain step none.
#[test]
fn step_split_parts_add_up() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_tiny");
    let m = Model::load(&dir.join("llama"), &Device::Cpu).unwrap();
    let spec = AdapterSpec { groups: 4, window: 4, causal_sinkhorn: true, ..Default::default() };
    let a = Adapter::random(&m.identity(), &Device::Cpu, &spec, 2).unwrap();
    let mut g = Generator::new(&m.decoder, Some(&a), Mode::TopK(TopK::new(2, 4).unwrap())).unwrap();
    g.feed(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
    assert!(g.feed(&[11]).unwrap().split.is_none());
    g.set_split(true);
    let s = g.feed(&[12]).unwrap().split.expect("an instrumented step");
    assert!(s.routing_s > 0.0 && s.attention_s > 0.0 && s.total_s > 0.0, "{s:?}");
    assert!((s.routing_s + s.attention_s + s.rest_s - s.total_s).abs() <= 1e-9 + 1e-6 * s.total_s, "{s:?}");
}

/// Attention sinks [ours]: a cached step on the CPU (top-k through the bucketed rows, soft
/// through the gates) gives the full forward's logits row, for s = 0, 1 and 4 with a window
/// small enough that the first tokens are distant.
#[test]
fn cpu_decode_with_sinks_equals_the_full_forward() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_tiny");
    for arch in ["llama", "gpt2"] {
        let m = Model::load(&dir.join(arch), &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..64u32).map(|i| (i * 37 + 11) % m.config().vocab as u32).collect();
        for sink in [0, 1, 4] {
            let spec = AdapterSpec { groups: 4, window: 4, sink, causal_sinkhorn: true, ..Default::default() };
            let a = Adapter::random(&m.identity(), &Device::Cpu, &spec, 2).unwrap();
            for mode in [Mode::TopK(TopK::new(1, 4).unwrap()), Mode::TopK(TopK::new(2, 4).unwrap()), Mode::Soft] {
                let full = m.decoder.forward(&ids, &ForwardOptions::new(mode, Some(&a))).unwrap().logits.to_vec2::<f32>().unwrap();
                let mut g = Generator::new(&m.decoder, Some(&a), mode).unwrap();
                assert_eq!(g.strategy(), Strategy::KvCache);
                g.feed(&ids[..20]).unwrap();
                for (p, &id) in ids.iter().enumerate().skip(20) {
                    let s = g.feed(&[id]).unwrap();
                    let scale = full[p].iter().fold(1f32, |a, x| a.max(x.abs()));
                    let err = s.logits.iter().zip(&full[p]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                    assert!(err <= 1e-4, "{arch} {mode} sink {sink} position {p}: relative logit difference {err}");
                }
            }
        }
    }
}
