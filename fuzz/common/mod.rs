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

/// The tiny Llama fixture used by the tests (2 layers, d_model 64, vocab 512).
pub fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf_tiny/llama")
}

/// A GGUF writer (v3, little endian): key/values and f32 tensors.
#[derive(Default)]
pub struct Gguf {
    pub n_kv: u64,
    pub kv: Vec<u8>,
    pub n_tensors: u64,
    pub infos: Vec<u8>,
    pub data: Vec<u8>,
}

pub fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

impl Gguf {
    pub fn kv_raw(&mut self, k: &str, ty: u32, value: &[u8]) {
        put_str(&mut self.kv, k);
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend(value);
        self.n_kv += 1;
    }
    pub fn kv_str(&mut self, k: &str, v: &str) {
        let mut b = Vec::new();
        put_str(&mut b, v);
        self.kv_raw(k, 8, &b);
    }
    pub fn kv_u32(&mut self, k: &str, v: u32) {
        self.kv_raw(k, 4, &v.to_le_bytes());
    }
    pub fn kv_f32(&mut self, k: &str, v: f32) {
        self.kv_raw(k, 6, &v.to_le_bytes());
    }
    pub fn kv_str_array(&mut self, k: &str, values: &[String]) {
        let mut b = Vec::new();
        b.extend(8u32.to_le_bytes());
        b.extend((values.len() as u64).to_le_bytes());
        values.iter().for_each(|v| put_str(&mut b, v));
        self.kv_raw(k, 9, &b);
    }
    pub fn kv_u32_array(&mut self, k: &str, values: &[u32]) {
        let mut b = Vec::new();
        b.extend(4u32.to_le_bytes());
        b.extend((values.len() as u64).to_le_bytes());
        values.iter().for_each(|v| b.extend(v.to_le_bytes()));
        self.kv_raw(k, 9, &b);
    }
    pub fn tensor_f32(&mut self, name: &str, ne: &[u64], values: &[f32]) {
        put_str(&mut self.infos, name);
        self.infos.extend((ne.len() as u32).to_le_bytes());
        ne.iter().for_each(|d| self.infos.extend(d.to_le_bytes()));
        self.infos.extend(0u32.to_le_bytes());
        self.infos.extend((self.data.len() as u64).to_le_bytes());
        values.iter().for_each(|v| self.data.extend(v.to_le_bytes()));
        while self.data.len() % 32 != 0 {
            self.data.push(0);
        }
        self.n_tensors += 1;
    }
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(self.n_tensors.to_le_bytes());
        b.extend(self.n_kv.to_le_bytes());
        b.extend(&self.kv);
        b.extend(&self.infos);
        while b.len() % 32 != 0 {
            b.push(0);
        }
        b.extend(&self.data);
        b
    }
}

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
