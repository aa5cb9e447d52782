//! A GGUF writer for tests: hand-made files, valid or deliberately broken (GGUF v3, little
//! endian; f32 tensors only).
#![allow(dead_code)]

pub fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

#[derive(Default)]
pub struct GgufBuilder {
    pub n_kv: u64,
    pub kv: Vec<u8>,
    pub n_tensors: u64,
    pub infos: Vec<u8>,
    pub data: Vec<u8>,
}

impl GgufBuilder {
    pub fn kv_str(mut self, k: &str, v: &str) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(8u32.to_le_bytes());
        put_str(&mut self.kv, v);
        self.n_kv += 1;
        self
    }
    /// An array of strings.
    pub fn kv_str_array(mut self, k: &str, values: &[&str]) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(8u32.to_le_bytes());
        self.kv.extend((values.len() as u64).to_le_bytes());
        for v in values {
            put_str(&mut self.kv, v);
        }
        self.n_kv += 1;
        self
    }
    pub fn kv_u32(mut self, k: &str, v: u32) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(4u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    pub fn kv_u64(mut self, k: &str, v: u64) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(10u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    pub fn kv_f32(mut self, k: &str, v: f32) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(6u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    /// An array of u32 whose declared length is `declared` but which holds only `values`.
    pub fn kv_u32_array(mut self, k: &str, declared: u64, values: &[u32]) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(4u32.to_le_bytes());
        self.kv.extend(declared.to_le_bytes());
        for v in values {
            self.kv.extend(v.to_le_bytes());
        }
        self.n_kv += 1;
        self
    }
    /// An f32 tensor; `ne` is GGUF order (fastest dimension first), `values` its data.
    pub fn tensor_f32(mut self, name: &str, ne: &[u64], values: &[f32]) -> Self {
        put_str(&mut self.infos, name);
        self.infos.extend((ne.len() as u32).to_le_bytes());
        for d in ne {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(0u32.to_le_bytes());
        self.infos.extend((self.data.len() as u64).to_le_bytes());
        for v in values {
            self.data.extend(v.to_le_bytes());
        }
        while !self.data.len().is_multiple_of(32) {
            self.data.push(0);
        }
        self.n_tensors += 1;
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(self.n_tensors.to_le_bytes());
        b.extend(self.n_kv.to_le_bytes());
        b.extend(&self.kv);
        b.extend(&self.infos);
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        b.extend(&self.data);
        b
    }
}

