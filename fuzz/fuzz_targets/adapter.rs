//! Adapter loading (the first input byte picks the case): an arbitrary `adapter_config.json`
//! beside valid weights; the same with its `base_model` replaced by the fixture's, so the
//! fuzzer gets past the identity check to every other field; or a valid config beside
//! arbitrary `adapter_model.safetensors` bytes.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use candle_core::Device;
use focus_core::{Adapter, AdapterSpec, Model};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Fixture {
    model: Model,
    config: String,
    weights: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let model = Model::load(&common::tiny_llama(), &Device::Cpu).unwrap();
        let d = common::scratch().join("adapter");
        let spec = AdapterSpec { groups: 4, window: 4, ..Default::default() };
        Adapter::random(&model.identity(), &Device::Cpu, &spec, 0).unwrap().save(&d).unwrap();
        let config = std::fs::read_to_string(d.join("adapter_config.json")).unwrap();
        let weights = std::fs::read(d.join("adapter_model.safetensors")).unwrap();
        Fixture { model, config, weights }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let Some((&pick, rest)) = data.split_first() else { return };
    let origin = std::path::Path::new("fuzz-adapter");
    let id = f.model.identity();
    match pick % 3 {
        0 => {
            if let Ok(cfg) = std::str::from_utf8(rest) {
                let _ = Adapter::from_bytes(cfg, &f.weights, &id, &Device::Cpu, origin);
            }
        }
        1 => {
            let Ok(serde_json::Value::Object(mut cfg)) = serde_json::from_slice::<serde_json::Value>(rest) else { return };
            cfg.insert("base_model".into(), serde_json::to_value(&id).unwrap());
            let cfg = serde_json::Value::Object(cfg).to_string();
            if let Ok(a) = Adapter::from_bytes(&cfg, &f.weights, &id, &Device::Cpu, origin) {
                // An accepted adapter must route a short sequence without panicking.
                let ids: Vec<u32> = (0..40).collect();
                let _ = f.model.decoder.forward(&ids, &focus_core::model::ForwardOptions::new(focus_core::Mode::TopK(a.config.default_topk()), Some(&a)));
            }
        }
        _ => {
            let _ = Adapter::from_bytes(&f.config, rest, &id, &Device::Cpu, origin);
        }
    }
});
