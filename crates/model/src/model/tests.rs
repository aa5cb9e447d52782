//! Tests of the model folder that load a whole `Model` (so they sit above every file they use).

use super::step::DeviceStep;
use super::Model;
use candle_core::Device;

/// What a device step reads by index equals what a host step computes: the RoPE rows
/// bitwise those of `rope_tables_from(position, 1)` (the claim that lets a captured GPU
/// step replace the host's rows), and the embedded token (with GPT-2's position embedding)
/// bitwise `embed_at`'s. Run on the CPU, where the same tensor ops run.
#[test]
fn device_step_rows_equal_the_host_step_rows() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_tiny");
    for arch in ["llama", "gpt2", "gemma2"] {
        let m = Model::load(&dir.join(arch), &Device::Cpu).unwrap();
        let cfg = m.config();
        let step = DeviceStep::new(cfg, &Device::Cpu).unwrap();
        for (id, pos) in [(7u32, 0usize), (100, 1), (3, 63), (511, cfg.context - 1)] {
            step.write(id, pos).unwrap();
            for ((theta, _), cos, sin) in step.rope_rows().unwrap() {
                let (c, s) = crate::model::block::rope_tables_from(pos, 1, cfg.head_dim, theta, &Device::Cpu).unwrap();
                assert_eq!(cos.to_vec2::<f32>().unwrap(), c.to_vec2::<f32>().unwrap(), "{arch} position {pos}: cos row");
                assert_eq!(sin.to_vec2::<f32>().unwrap(), s.to_vec2::<f32>().unwrap(), "{arch} position {pos}: sin row");
            }
            let (a, b) = (m.decoder.embed_step(&step).unwrap(), m.decoder.embed_at(&[&[id]], pos).unwrap());
            assert_eq!(a.to_vec2::<f32>().unwrap(), b.to_vec2::<f32>().unwrap(), "{arch} token {id} at {pos}: embedding");
        }
        assert!(step.write(0, u32::MAX as usize + 1).is_err(), "a position past u32 is refused");
    }
}

/// `Model::load_reporting` counts the checkpoint's bytes as it reads them: rising, ending at
/// the sum of every tensor's stored size.
#[test]
fn load_reports_bytes_read() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    for path in [dir.join("hf_tiny/llama"), dir.join("gguf_tiny/qwen3.gguf")] {
        let calls = std::sync::Mutex::new(Vec::new());
        let m = Model::load_reporting(&path, &Device::Cpu, &|done, total| calls.lock().unwrap().push((done, total))).unwrap();
        let calls = calls.into_inner().unwrap();
        let src = match m.format {
            "gguf" => super::weights::WeightSource::Gguf(super::gguf::GgufFile::open(&path).unwrap()),
            _ => super::weights::WeightSource::SafeTensors(super::weights::SafeTensorsDir::open(&path).unwrap()),
        };
        let total = src.total_bytes();
        assert!(total > 0 && calls.len() > 3, "{}: {} calls", path.display(), calls.len());
        assert!(calls.iter().all(|&(d, t)| t == total && d <= t), "{}", path.display());
        assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0), "{}: the count never falls", path.display());
        assert_eq!(calls.last(), Some(&(total, total)), "{}", path.display());
    }
}

/// A top-k prefill whose routing nobody reads (`ForwardOptions::routing_unused`) routes on the
/// GPU, and only its masks cross to the host: its logits equal the same pass routed on the host
/// (f64 Sinkhorn), for whole and causal Sinkhorn, k = 1 and 2, a sink, and Gemma 2's soft-capped
/// attention, wherever no token's k-th and (k+1)-th memberships are within f32 rounding (a tie
/// may go either way, and the layers after it then differ). It returns no routing.
#[cfg(feature = "cuda")]
#[test]
fn cuda_prefill_routed_on_the_device_equals_host_routing() {
    use crate::attention::Mode;
    use crate::focus::adapter::{Adapter, AdapterSpec};
    use crate::focus::mask::{top_k_indices, TopK};
    use crate::model::decoder::ForwardOptions;
    let gpu = Device::new_cuda(0).expect("a CUDA device");
    // From the crate's folder (the test binary's working directory) or the repository's.
    let dir = ["../../tests/fixtures/hf_tiny", "tests/fixtures/hf_tiny", concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/hf_tiny")]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|d| d.exists())
        .expect("tests/fixtures/hf_tiny");
    let (mut compared, mut cases) = (0, 0);
    for arch in ["llama", "qwen2", "gemma2"] {
        let m = Model::load_as(&dir.join(arch), &gpu, candle_core::DType::F32, &|_, _| {}).unwrap();
        let n_layers = m.config().n_layers;
        // The tiny checkpoints' whole context (128 tokens), most pairs past the window.
        let ids: Vec<u32> = (0..m.config().context as u32).map(|i| (i * 37 + 11) % m.config().vocab as u32).collect();
        for causal in [false, true] {
            let spec = AdapterSpec { groups: 8, window: 8, sink: 1, causal_sinkhorn: causal, ..Default::default() };
            let a = Adapter::random(&m.identity(), &gpu, &spec, 3).unwrap();
            for k in [1, 2] {
                let mode = Mode::TopK(TopK::new(k, 8).unwrap());
                let host = m.decoder.forward(&ids, &ForwardOptions::new(mode, Some(&a))).unwrap();
                assert_eq!(host.routing.len(), n_layers, "{arch}: the host pass returns its routing");
                let on_dev = m.decoder.forward(&ids, &ForwardOptions { routing_unused: true, ..ForwardOptions::new(mode, Some(&a)) }).unwrap();
                assert!(on_dev.routing.is_empty(), "{arch}: routed on the device, no routing comes back");
                cases += 1;
                // Near: within 1e-5 relative (the memberships of tau 0.1 are often ~1e-6 or
                // less, where an absolute margin would call every row tied; f32 Sinkhorn in the
                // log domain is off by ~1e-6 relative).
                let tie = host.routing.iter().any(|r| (0..r.t).any(|i| {
                    let row = r.row(i);
                    let top = top_k_indices(row, k + 1);
                    let (a, b) = (row[top[k - 1]], row[top[k]]);
                    a - b < 1e-5 * a
                }));
                if tie {
                    continue;
                }
                compared += 1;
                let (h, d) = (host.logits.to_vec2::<f32>().unwrap(), on_dev.logits.to_vec2::<f32>().unwrap());
                for (p, (x, y)) in h.iter().zip(&d).enumerate() {
                    let scale = x.iter().fold(1f32, |a, v| a.max(v.abs()));
                    let err = x.iter().zip(y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                    assert!(err <= 1e-5, "{arch} causal {causal} k {k} position {p}: relative logit difference {err}");
                }
            }
        }
    }
    // The inputs are fixed, so the count is too: on an H100 (round 10 of issue 52) 3 of the 12
    // passes were free of ties under an absolute margin of 1e-5, which flags every row the
    // relative margin above flags.
    eprintln!("{compared} of {cases} passes free of near-ties compared");
    assert!(compared * 4 >= cases, "only {compared} of {cases} passes free of near-ties: the comparison checks too little");
}
