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

// GGUF metadata value types.
const T_U32: u32 = 4;
const T_F32: u32 = 6;
const T_STR: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;

impl GgufBuilder {
    /// One key-value pair: the key, its type, then `value` writes the value's bytes.
    fn kv(mut self, k: &str, ty: u32, value: impl FnOnce(&mut Vec<u8>)) -> Self {
        put_str(&mut self.kv, k);
        self.kv.extend(ty.to_le_bytes());
        value(&mut self.kv);
        self.n_kv += 1;
        self
    }
    pub fn kv_str(self, k: &str, v: &str) -> Self {
        self.kv(k, T_STR, |b| put_str(b, v))
    }
    pub fn kv_u32(self, k: &str, v: u32) -> Self {
        self.kv(k, T_U32, |b| b.extend(v.to_le_bytes()))
    }
    pub fn kv_u64(self, k: &str, v: u64) -> Self {
        self.kv(k, T_U64, |b| b.extend(v.to_le_bytes()))
    }
    pub fn kv_bool(self, k: &str, v: bool) -> Self {
        self.kv(k, 7, |b| b.push(v as u8))
    }
    pub fn kv_f32(self, k: &str, v: f32) -> Self {
        self.kv(k, T_F32, |b| b.extend(v.to_le_bytes()))
    }
    /// An array of strings.
    pub fn kv_str_array(self, k: &str, values: &[impl AsRef<str>]) -> Self {
        self.kv(k, T_ARRAY, |b| {
            b.extend(T_STR.to_le_bytes());
            b.extend((values.len() as u64).to_le_bytes());
            values.iter().for_each(|v| put_str(b, v.as_ref()));
        })
    }
    /// An array of u32 whose declared length is `declared` but which holds only `values`.
    pub fn kv_u32_array(self, k: &str, declared: u64, values: &[u32]) -> Self {
        self.kv(k, T_ARRAY, |b| {
            b.extend(T_U32.to_le_bytes());
            b.extend(declared.to_le_bytes());
            values.iter().for_each(|v| b.extend(v.to_le_bytes()));
        })
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

