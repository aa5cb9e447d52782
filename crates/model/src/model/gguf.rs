//! A strict GGUF reader. Every count and length in the header is checked against the bytes that
//! are actually in the file before anything is allocated, so a truncated or corrupt file gives a
//! clear error instead of a panic or a giant allocation. Tensor data is memory-mapped and
//! handed to candle's dequantizers only after its byte range has been validated.

use crate::error::{Error, Result};
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QTensor};
use candle_core::Device;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
/// GGML tensors have at most 4 dimensions.
const MAX_DIMS: u32 = 4;
/// At most this many metadata values (array elements included) are parsed from one file. A
/// parsed value takes 32 bytes, so this bounds the metadata at ~130 MB whatever the header
/// says; the largest real vocabularies (tokens + scores + types + merges) hold ~1.2M.
pub const MAX_METADATA_VALUES: usize = 4 << 20;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) if v >= 0 => Some(v as u64),
            Value::I16(v) if v >= 0 => Some(v as u64),
            Value::I32(v) if v >= 0 => Some(v as u64),
            Value::I64(v) if v >= 0 => Some(v as u64),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Shape in candle order (slowest dimension first), i.e. GGUF's `ne` reversed.
    pub shape: Vec<usize>,
    pub dtype: GgmlDType,
    /// Byte range inside the memory map.
    pub start: usize,
    pub len: usize,
}

pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: BTreeMap<String, TensorInfo>,
    mmap: std::sync::Arc<memmap2::Mmap>,
}

fn dtype_from_u32(t: u32) -> Option<GgmlDType> {
    Some(match t {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// A bounds-checked little-endian cursor over the file bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
    /// Metadata values parsed so far (see `MAX_METADATA_VALUES`).
    values: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: &str) -> Error {
        Error::bad_file(self.path, format!("corrupt GGUF at byte {}: {what}", self.pos))
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::bad_file(
                self.path,
                format!(
                    "truncated GGUF: {what} needs {n} bytes at byte {} but the file has {} bytes",
                    self.pos,
                    self.buf.len()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1, "a u8")?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, "a u16")?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, "a u32")?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, "a u64")?.try_into().unwrap()))
    }
    /// A count that must fit in the rest of the file when every item takes at least `min_item` bytes.
    fn count(&mut self, min_item: usize, what: &str) -> Result<usize> {
        let n = self.u64()?;
        if n.saturating_mul(min_item as u64) > self.remaining() as u64 {
            // Either the count is corrupt or the file was cut short: say both.
            return Err(Error::bad_file(
                self.path,
                format!(
                    "truncated or corrupt GGUF at byte {}: {what} count {n} cannot fit in the {} bytes left",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> Result<String> {
        let n = self.count(1, "string length")?;
        let bytes = self.take(n, "a string")?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.err("string is not UTF-8"))
    }
    fn value(&mut self, ty: u32, depth: u32) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.u8()?),
            1 => Value::I8(self.u8()? as i8),
            2 => Value::U16(self.u16()?),
            3 => Value::I16(self.u16()? as i16),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(self.u32()? as i32),
            6 => Value::F32(f32::from_bits(self.u32()?)),
            7 => Value::Bool(self.u8()? != 0),
            8 => Value::String(self.string()?),
            9 => {
                if depth > 2 {
                    return Err(self.err("arrays nested too deeply"));
                }
                let inner = self.u32()?;
                let min = match inner {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10 | 11 | 12 => 8,
                    9 => 12,
                    t => return Err(self.err(&format!("unknown array element type {t}"))),
                };
                let n = self.count(min, "array")?;
                self.values = self.values.saturating_add(n);
                if self.values > MAX_METADATA_VALUES {
                    return Err(self.err(&format!("metadata holds more than {MAX_METADATA_VALUES} values (an array of {n})")));
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(inner, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_bits(self.u64()?)),
            t => return Err(self.err(&format!("unknown metadata value type {t}"))),
        })
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::io::open_input(path, u64::MAX, "model")?;
        // SAFETY: the map is read-only and private to this process; a file truncated under us
        // while mapped is outside what we can defend against (the same holds for every mmap user).
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let mut c = Cursor { buf: &mmap, pos: 0, path, values: 0 };
        if mmap.len() < 4 || &mmap[..4] != MAGIC {
            return Err(Error::bad_file(path, "not a GGUF file (wrong magic; expected \"GGUF\")"));
        }
        c.pos = 4;
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(Error::bad_file(path, format!("unsupported GGUF version {version} (need 2 or 3)")));
        }
        // A tensor info takes at least 8 (name) + 4 + 8 + 4 + 8 bytes; a key/value at least 8 + 4 + 1.
        let n_tensors = c.count(32, "tensor")?;
        let n_kv = c.count(13, "metadata")?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let ty = c.u32()?;
            let v = c.value(ty, 0)?;
            metadata.insert(key, v);
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= 1 << 16 => a as usize,
                _ => return Err(Error::bad_file(path, format!("invalid general.alignment {v:?}"))),
            },
        };
        let mut infos = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(c.err(&format!("tensor {name} has {n_dims} dimensions (1..=4 allowed)")));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                ne.push(c.u64()?);
            }
            let ty = c.u32()?;
            let dtype = dtype_from_u32(ty)
                .ok_or_else(|| c.err(&format!("tensor {name} has unsupported type {ty}")))?;
            let offset = c.u64()?;
            infos.push((name, ne, dtype, offset));
        }
        let data_start = c.pos.div_ceil(alignment) * alignment;
        let data_len = mmap.len().saturating_sub(data_start);
        let mut tensors = BTreeMap::new();
        for (name, ne, dtype, offset) in infos {
            let mut elems: u64 = 1;
            for &d in &ne {
                if d == 0 {
                    return Err(Error::bad_file(path, format!("tensor {name} has a zero dimension")));
                }
                elems = elems.checked_mul(d).filter(|&e| e <= data_len as u64 * 8).ok_or_else(|| {
                    Error::bad_file(path, format!("tensor {name}: dimensions {ne:?} are larger than the file"))
                })?;
            }
            let bs = dtype.block_size() as u64;
            if !elems.is_multiple_of(bs) {
                return Err(Error::bad_file(
                    path,
                    format!("tensor {name}: {elems} elements is not a multiple of the block size {bs}"),
                ));
            }
            let bytes = elems / bs * dtype.type_size() as u64;
            if offset.checked_add(bytes).is_none_or(|end| end > data_len as u64) {
                return Err(Error::bad_file(
                    path,
                    format!(
                        "truncated GGUF: tensor {name} needs bytes {offset}..{} of a {data_len}-byte data section",
                        offset.saturating_add(bytes)
                    ),
                ));
            }
            // candle reads tensor data in place as f32/f16/block slices, which must be aligned
            // (found by fuzzing: an unaligned offset is undefined behaviour there). Real files
            // align every tensor to `general.alignment` (32 by default), as llama.cpp requires.
            if !(data_start as u64 + offset).is_multiple_of(8) || !offset.is_multiple_of(alignment as u64) {
                return Err(Error::bad_file(path, format!("tensor {name}: data offset {offset} is not aligned to {alignment} bytes")));
            }
            let shape = ne.iter().rev().map(|&d| d as usize).collect();
            let info = TensorInfo { name: name.clone(), shape, dtype, start: data_start + offset as usize, len: bytes as usize };
            if tensors.insert(name.clone(), info).is_some() {
                return Err(Error::bad_file(path, format!("tensor {name} appears twice")));
            }
        }
        Ok(GgufFile { path: path.to_path_buf(), version, metadata, tensors, mmap: std::sync::Arc::new(mmap) })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn need(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| Error::bad_file(&self.path, format!("missing metadata key {key}")))
    }
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.need(key)?
            .as_u64()
            .ok_or_else(|| Error::bad_file(&self.path, format!("metadata {key} is not an integer")))
    }
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.need(key)?
            .as_f64()
            .ok_or_else(|| Error::bad_file(&self.path, format!("metadata {key} is not a number")))
    }
    pub fn str(&self, key: &str) -> Result<&str> {
        self.need(key)?
            .as_str()
            .ok_or_else(|| Error::bad_file(&self.path, format!("metadata {key} is not a string")))
    }

    /// The raw bytes of a tensor (quantized blocks as stored).
    pub fn raw(&self, info: &TensorInfo) -> &[u8] {
        &self.mmap[info.start..info.start + info.len]
    }

    /// A 2-D tensor's blocks as a (rows, cols) matrix read in place from the file's map;
    /// `None` when its type is no weight type or the shape does not match.
    pub fn matrix(&self, info: &TensorInfo, rows: usize, cols: usize) -> Option<crate::model::qmatvec::QMatrix> {
        crate::model::qmatvec::QMatrix::mapped(info.dtype, &self.mmap, info.start, info.len, rows, cols)
    }

    pub fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::Unsupported(format!("{}: missing tensor {name}", self.path.display())))
    }

    pub fn qtensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        let info = self.info(name)?;
        Ok(qtensor_from_ggml(info.dtype, self.raw(info), info.shape.clone(), device)?)
    }
}
