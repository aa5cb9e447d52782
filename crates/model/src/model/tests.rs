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
