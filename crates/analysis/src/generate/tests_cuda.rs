//! The generator on a GPU against the CPU: the device cache's logits, routing and mirror equal
//! the CPU forward's, and graph-replayed steps equal eager ones, on the tiny checkpoints of every
//! family and on a real GGUF. Built only with the `cuda` feature.

use super::*;

mod tiny_checkpoints {
    use super::*;
    use crate::focus::mask::TopK;
    use crate::focus::adapter::AdapterSpec;
    use crate::model::Model;
    use candle_core::Device;

    /// The tiny checkpoints of tests/fixtures (run from the repository root or the crate's).
    fn fixture(arch: &str) -> std::path::PathBuf {
        let here = std::path::Path::new("tests/fixtures/hf_tiny").join(arch);
        if here.exists() { here } else { std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_tiny").join(arch) }
    }

    /// Generation with the cache on the GPU gives the CPU's full-forward logits, for every
    /// architecture (sliding layers and soft-caps in Gemma 2) and every mode.
    #[test]
    fn gpu_decode_equals_the_cpu_forward() {
        let gpu = Device::new_cuda(0).expect("a CUDA device");
        for arch in ["gpt2", "llama", "qwen2", "gemma2", "olmo2"] {
            // f32 weights on the GPU too, so the two agree to f32 rounding.
            let (cpu_m, gpu_m) = (Model::load(&fixture(arch), &Device::Cpu).unwrap(), Model::load_as(&fixture(arch), &gpu, candle_core::DType::F32, &|_, _| {}).unwrap());
            let ids: Vec<u32> = (0..100u32).map(|i| (i * 37 + 11) % cpu_m.config().vocab as u32).collect();
            // Sinks [ours]: none, the first token, the first four.
            for sink in [0, 1, 4] {
            let spec = AdapterSpec { groups: 4, window: 8, sink, causal_sinkhorn: true, ..Default::default() };
            let (ac, ag) = (Adapter::random(&cpu_m.identity(), &Device::Cpu, &spec, 2).unwrap(), Adapter::random(&gpu_m.identity(), &gpu, &spec, 2).unwrap());
            for (mode, routed) in [(Mode::Dense, false), (Mode::TopK(TopK::new(1, 4).unwrap()), true), (Mode::TopK(TopK::new(2, 4).unwrap()), true), (Mode::Soft, true)] {
                let full = cpu_m.decoder.forward(&ids, &ForwardOptions::new(mode, routed.then_some(&ac))).unwrap().logits.to_vec2::<f32>().unwrap();
                let mut g = Generator::new(&gpu_m.decoder, routed.then_some(&ag), mode).unwrap();
                assert!(g.layers()[0].device.is_some(), "the cache is on the GPU");
                // The same generation on the CPU: its routing (host Sinkhorn) is the reference
                // for the GPU's (routed on the device, its host copy filled after each step).
                let mut c = Generator::new(&cpu_m.decoder, routed.then_some(&ac), mode).unwrap();
                g.feed(&ids[..30]).unwrap();
                c.feed(&ids[..30]).unwrap();
                for (p, &id) in ids.iter().enumerate().skip(30) {
                    let s = g.feed(&[id]).unwrap();
                    let scale = full[p].iter().fold(1f32, |a, x| a.max(x.abs()));
                    let err = s.logits.iter().zip(&full[p]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                    assert!(err <= 1e-4, "{arch} {mode} sink {sink} position {p}: relative logit difference {err}");
                    c.feed(&[id]).unwrap();
                    assert_routing_agrees(&c, &g, &format!("{arch} {mode} sink {sink} position {p}"));
                }
                assert_device_mirror_agrees(&g, &format!("{arch} {mode} sink {sink}"));
            }
            }
        }
    }

    /// The GPU's default weights are bf16 (two bytes a parameter, f32 accumulation, the one-row
    /// kernels' `_bf16` variants): decode logits stay within bf16's rounding of the CPU's f32
    /// forward (a wrong weight would move them by their own size).
    #[test]
    fn gpu_bf16_weights_decode_near_the_cpu_forward() {
        let gpu = Device::new_cuda(0).expect("a CUDA device");
        for arch in ["llama", "qwen2", "gemma2", "olmo2"] {
            let (cpu_m, gpu_m) = (Model::load(&fixture(arch), &Device::Cpu).unwrap(), Model::load(&fixture(arch), &gpu).unwrap());
            let w = gpu_m.decoder.blocks[0].q.w.tensor().expect("a device tensor");
            assert_eq!(w.dtype(), candle_core::DType::BF16, "{arch}: bf16 weights on the GPU");
            let ids: Vec<u32> = (0..60u32).map(|i| (i * 37 + 11) % cpu_m.config().vocab as u32).collect();
            let full = cpu_m.decoder.forward(&ids, &ForwardOptions::new(Mode::Dense, None)).unwrap().logits.to_vec2::<f32>().unwrap();
            let mut g = Generator::new(&gpu_m.decoder, None, Mode::Dense).unwrap();
            g.feed(&ids[..30]).unwrap();
            let mut worst = 0f32;
            for (p, &id) in ids.iter().enumerate().skip(30) {
                let s = g.feed(&[id]).unwrap();
                let scale = full[p].iter().fold(1f32, |a, x| a.max(x.abs()));
                let err = s.logits.iter().zip(&full[p]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                worst = worst.max(err);
            }
            println!("{arch}: bf16 GPU decode vs f32 CPU forward, worst relative logit difference {worst:.2e}");
            assert!(worst <= 5e-2 && worst > 0.0, "{arch}: {worst}");
        }
    }

    /// Graph steps equal eager steps (`assert_graph_equals_eager`) for every family (Gemma 2's
    /// sliding layers of 8 tokens and soft-caps, GPT-2's position embedding) and every mode.
    #[test]
    fn gpu_graph_steps_equal_eager_steps() {
        let gpu = crate::device::cuda(0).expect("a CUDA device");
        for arch in ["gpt2", "llama", "qwen2", "gemma2", "olmo2"] {
            let m = Model::load(&fixture(arch), &gpu).unwrap();
            let ids: Vec<u32> = (0..100u32).map(|i| (i * 37 + 11) % m.config().vocab as u32).collect();
            let spec = AdapterSpec { groups: 4, window: 8, sink: 1, causal_sinkhorn: true, ..Default::default() };
            let a = Adapter::random(&m.identity(), &gpu, &spec, 2).unwrap();
            for (mode, routed) in [(Mode::Dense, false), (Mode::Dense, true), (Mode::TopK(TopK::new(2, 4).unwrap()), true), (Mode::Soft, true)] {
                assert_graph_equals_eager(&m, routed.then_some(&a), mode, &ids, 30, &format!("{arch} {mode} routed {routed}"));
            }
        }
    }
}

/// Steps replayed from a CUDA graph equal steps launched one kernel at a time, bitwise (logits,
/// reported groups, the host's copy of the routing, the bytes read), in every mode and every
/// family, and across a growth of the caches' capacity (64 to 128 tokens after a 30-token
/// prefill), which moves the buffers and makes the generator capture again.
fn assert_graph_equals_eager(gpu: &crate::model::Model, adapter: Option<&Adapter>, mode: Mode, ids: &[u32], prefill: usize, at: &str) {
    let mut g = Generator::new(&gpu.decoder, adapter, mode).unwrap();
    let mut e = Generator::new(&gpu.decoder, adapter, mode).unwrap();
    e.set_graph(false);
    g.feed(&ids[..prefill]).unwrap();
    e.feed(&ids[..prefill]).unwrap();
    for (p, &id) in ids.iter().enumerate().skip(prefill) {
        let (sg, se) = (g.feed(&[id]).unwrap(), e.feed(&[id]).unwrap());
        assert!(sg.logits == se.logits, "{at} position {p}: graph and eager logits differ");
        assert_eq!(sg.groups, se.groups, "{at} position {p}: groups");
        assert_eq!(sg.read, se.read, "{at} position {p}: bytes read");
    }
    for (l, (a, b)) in g.layers().iter().zip(e.layers()).enumerate() {
        assert_eq!(a.len(), b.len(), "{at} layer {l}: cached tokens");
        if let (Some(ra), Some(rb)) = (&a.routing, &b.routing) {
            assert_eq!((&ra.memberships, &ra.masks), (&rb.memberships, &rb.masks), "{at} layer {l}: routing");
        }
    }
    let (sg, se) = (g.graph_stats(), e.graph_stats());
    assert_eq!(sg.fallback, None, "{at}: the capture failed");
    // One capture per capacity (64 and 128), each after a warm-up step; the rest replayed.
    assert_eq!(sg.captures, 2, "{at}: {sg:?}");
    assert_eq!(sg.replays, ids.len() - prefill - 4, "{at}: {sg:?}");
    assert_eq!((se.captures, se.replays), (0, 0), "{at}: graphs off");
}

/// The GPU generator's routing (the host copy its steps fill from the device) equals the CPU
/// generator's for every cached token: memberships to float tolerance, top-k sets exactly unless
/// two memberships are within rounding of the k-th place.
fn assert_routing_agrees(cpu: &Generator, gpu: &Generator, at: &str) {
    for (l, (a, b)) in cpu.layers().iter().zip(gpu.layers()).enumerate() {
        let (Some(ra), Some(rb)) = (a.routing.as_ref(), b.routing.as_ref()) else {
            assert_eq!(a.routing.is_some(), b.routing.is_some(), "{at} layer {l}: routed on one device only");
            continue;
        };
        assert_eq!(ra.masks.len(), rb.masks.len(), "{at} layer {l}: routed tokens");
        let i = ra.masks.len() - 1;
        let (ma, mb) = (ra.row(i), rb.row(i));
        let err = ma.iter().zip(mb).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(err <= 1e-3, "{at} layer {l}: newest memberships differ by {err}: {ma:?} vs {mb:?}");
        let mut sorted = ma.to_vec();
        sorted.sort_by(|x, y| y.total_cmp(x));
        let tie = ra.k < sorted.len() && sorted[ra.k - 1] - sorted[ra.k] < 1e-3;
        if !tie {
            assert_eq!(ra.masks[i], rb.masks[i], "{at} layer {l}: newest top-k set");
        }
        let sa = ra.sinkhorn.as_ref().map(|s| s.state().to_vec());
        let sb = rb.sinkhorn.as_ref().map(|s| s.state().to_vec());
        if let (Some(sa), Some(sb)) = (sa, sb) {
            let err = sa.iter().zip(&sb).map(|(x, y)| (x - y).abs() / (1.0 + x.abs())).fold(0f64, f64::max);
            assert!(err <= 1e-3, "{at} layer {l}: Sinkhorn state differs by {err}");
        }
    }
}

/// The GPU generator's device mirror (what the decode kernel reads) equals its host copy.
fn assert_device_mirror_agrees(gpu: &Generator, at: &str) {
    for (l, c) in gpu.layers().iter().enumerate() {
        let (Some(r), Some(kv)) = (c.routing.as_ref(), c.device.as_ref()) else { continue };
        assert_eq!(kv.routed, r.masks.len(), "{at} layer {l}: device rows");
        let n = r.masks.len();
        let masks = kv.masks.as_ref().unwrap().narrow(0, 0, n).unwrap().to_vec1::<i64>().unwrap();
        assert_eq!(masks.iter().map(|&m| m as u64).collect::<Vec<_>>(), r.masks, "{at} layer {l}: device top-k sets");
        let memb = kv.memberships.as_ref().unwrap().narrow(0, 0, n).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(memb, r.memberships, "{at} layer {l}: device memberships");
        if let (Some(st), Some(d)) = (r.sinkhorn.as_ref(), kv.sinkhorn_state.as_ref()) {
            let d = d.to_vec1::<f64>().unwrap();
            assert_eq!(&d[..st.state().len()], st.state(), "{at} layer {l}: device Sinkhorn state");
        }
    }
}

mod real_model {
    use super::*;
    use crate::focus::adapter::AdapterSpec;
    use crate::focus::mask::TopK;
    use crate::model::Model;
    use candle_core::Device;

    /// A real GGUF for the GPU tests: `FOCUS_LENS_TEST_GGUF`, else SmolLM2-135M in
    /// ~/.cache/focus-lens; `None` (the test says it skipped) when neither exists.
    fn real_model() -> Option<std::path::PathBuf> {
        let p = std::env::var_os("FOCUS_LENS_TEST_GGUF").map(std::path::PathBuf::from).or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/focus-lens/SmolLM2-135M-Instruct.Q4_1.gguf"))
        })?;
        if p.exists() {
            Some(p)
        } else {
            eprintln!("SKIPPED: no real model at {} (set FOCUS_LENS_TEST_GGUF)", p.display());
            None
        }
    }

    /// Greedy generation with hard top-k on a real model: on the GPU (routing on the device)
    /// it gives the CPU's tokens, and each step's routing (memberships, top-k sets, Sinkhorn
    /// state) agrees with the CPU's; the device mirror equals the host copy at the end.
    #[test]
    fn cuda_topk_generation_on_a_real_model_equals_the_cpu() {
        let Some(path) = real_model() else { return };
        let gpu = crate::device::cuda(0).expect("a CUDA device");
        let (cm, gm) = (Model::load(&path, &Device::Cpu).unwrap(), Model::load_as(&path, &gpu, candle_core::DType::F32, &|_, _| {}).unwrap());
        let spec = AdapterSpec { groups: 8, window: 16, causal_sinkhorn: true, ..Default::default() };
        let (ac, ag) = (Adapter::random(&cm.identity(), &Device::Cpu, &spec, 7).unwrap(), Adapter::random(&gm.identity(), &gpu, &spec, 7).unwrap());
        let prompt = cm.tokenizer().unwrap().encode("The quick brown fox jumps over the lazy dog. Attention routes each token to a few groups, and", false).unwrap().ids;
        for k in [1, 2] {
            let mode = Mode::TopK(TopK::new(k, 8).unwrap());
            let (mut c, mut g) = (Generator::new(&cm.decoder, Some(&ac), mode).unwrap(), Generator::new(&gm.decoder, Some(&ag), mode).unwrap());
            let (mut sc, mut sg) = (c.feed(&prompt).unwrap(), g.feed(&prompt).unwrap());
            let argmax = |l: &[f32]| l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32;
            for step in 0..40 {
                let (tc, tg) = (argmax(&sc.logits), argmax(&sg.logits));
                assert_eq!(tc, tg, "k {k} step {step}: greedy tokens");
                sc = c.feed(&[tc]).unwrap();
                sg = g.feed(&[tg]).unwrap();
                assert_routing_agrees(&c, &g, &format!("k {k} step {step}"));
                assert_eq!(sc.groups.len(), sg.groups.len());
            }
            assert_device_mirror_agrees(&g, &format!("k {k}"));
        }
    }

    /// On a real model, graph steps equal eager steps across the decode kernel's chunk
    /// boundaries and the capacity growth from 256 to 512 tokens, dense and top-k.
    #[test]
    fn cuda_graph_steps_equal_eager_steps_on_a_real_model() {
        let Some(path) = real_model() else { return };
        let gpu = crate::device::cuda(0).expect("a CUDA device");
        let m = Model::load(&path, &gpu).unwrap();
        let spec = AdapterSpec { groups: 8, window: 16, sink: 1, causal_sinkhorn: true, ..Default::default() };
        let a = Adapter::random(&m.identity(), &gpu, &spec, 7).unwrap();
        let text = "The quick brown fox jumps over the lazy dog. Attention routes each token to a few groups. ".repeat(20);
        let ids: Vec<u32> = m.tokenizer().unwrap().encode(&text, false).unwrap().ids.into_iter().take(280).collect();
        assert_eq!(ids.len(), 280, "the text is long enough");
        for (mode, routed) in [(Mode::Dense, false), (Mode::TopK(TopK::new(2, 8).unwrap()), true)] {
            assert_graph_equals_eager(&m, routed.then_some(&a), mode, &ids, 200, &format!("{mode}"));
        }
    }
}
