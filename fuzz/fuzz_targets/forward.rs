//! The whole path on the tiny Llama fixture: an arbitrary text is loaded, tokenized
//! (byte-level BPE) and run dense, soft or hard top-k with a random adapter. Any result must be
//! finite logits or an error.
#![no_main]
#[path = "../common/mod.rs"]
mod common;
use candle_core::Device;
use focus_core::model::tokenizer::Tokenizer;
use focus_core::model::ForwardOptions;
use focus_core::{Adapter, AdapterSpec, Mode, Model};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Fixture {
    model: Model,
    tokenizer: Tokenizer,
    adapter: Adapter,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let model = Model::load(&common::tiny_llama(), &Device::Cpu).unwrap();
        let p = common::scratch().join("byte-tokenizer.json");
        std::fs::write(&p, common::byte_tokenizer_json()).unwrap();
        let tokenizer = Tokenizer::from_file(&p).unwrap();
        let spec = AdapterSpec { groups: 4, window: 4, top_k: 2, ..Default::default() };
        let adapter = Adapter::random(&model.identity(), &Device::Cpu, &spec, 1).unwrap();
        Fixture { model, tokenizer, adapter }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let Some((&pick, rest)) = data.split_first() else { return };
    let Ok(text) = focus_core::io::text::text_from_bytes(rest.to_vec(), "fuzz input") else { return };
    let Ok(enc) = f.tokenizer.encode(&text, pick & 1 == 1) else { return };
    let mut ids = enc.ids;
    ids.truncate(f.model.config().context);
    let mode = match (pick >> 1) % 4 {
        0 => Mode::Dense,
        1 => Mode::Soft,
        k => match f.adapter.config.topk(k as usize - 1) {
            Ok(k) => Mode::TopK(k),
            Err(_) => return,
        },
    };
    let opts = ForwardOptions::new(mode, Some(&f.adapter));
    if let Ok(out) = f.model.decoder.forward(&ids, &opts) {
        let v = out.logits.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(v.iter().all(|x| x.is_finite()), "non-finite logits returned as a result");
    }
});
