//! Shared by the fuzz targets: a scratch directory per process (in /dev/shm when there is one)
//! and the tiny model fixture.
#![allow(dead_code)]

use std::path::PathBuf;

/// A directory of this process's own, created once.
pub fn scratch() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let d = base.join(format!("focus-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The tiny Llama fixture used by the tests (2 layers, d_model 64, vocab 512), compiled into
/// the binary and written to this process's scratch directory once, so that a fuzz binary
/// runs from any directory on any machine.
pub fn tiny_llama() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch().join("tiny_llama");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), include_bytes!("../../tests/fixtures/hf_tiny/llama/config.json")).unwrap();
        std::fs::write(d.join("model.safetensors"), include_bytes!("../../tests/fixtures/hf_tiny/llama/model.safetensors")).unwrap();
        d
    })
    .clone()
}

/// The tests' GGUF writer (v3, little endian), shared with the fuzz targets.
#[path = "../../tests/common/gguf_builder.rs"]
pub mod gguf_builder;

/// GPT-2's byte -> character table (printable bytes map to themselves).
pub fn byte_chars() -> Vec<char> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut out = vec![' '; 256];
    for (b, c) in bs.into_iter().zip(cs) {
        out[b as usize] = char::from_u32(c).unwrap();
    }
    out
}

/// A byte-level BPE tokenizer.json of 256 byte tokens (ids 0..256) and no merges: every text
/// encodes, and every id fits the tiny model's vocabulary of 512.
pub fn byte_tokenizer_json() -> String {
    let vocab: serde_json::Map<String, serde_json::Value> = byte_chars().iter().enumerate().map(|(i, c)| (c.to_string(), i.into())).collect();
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
        "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []},
    })
    .to_string()
}
