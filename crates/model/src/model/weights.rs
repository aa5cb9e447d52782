//! Where a model's tensors come from: a GGUF file or a Hugging Face directory of safetensors
//! files. A weight matrix on the CPU stays in its stored form, read in place from the file's
//! memory map (`matrix`); on a GPU, and for the small 1-D tensors (norms, biases), it is read
//! as f32 (`tensor`). Every tensor is checked for the expected shape and for NaN/inf values
//! when it is loaded, so a damaged checkpoint fails at load time with its name.

use crate::error::{Error, Result};
use crate::model::gguf::GgufFile;
use crate::model::linear::Weight;
use crate::model::qmatvec::{dequantize_rows, QMatrix};
use candle_core::quantized::GgmlDType;
use rayon::prelude::*;
use std::sync::Arc;
use candle_core::{DType, Device, Tensor};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub enum WeightSource {
    Gguf(GgufFile),
    SafeTensors(SafeTensorsDir),
}

/// The tensors of every `*.safetensors` file in a directory (sharded checkpoints included).
pub struct SafeTensorsDir {
    pub dir: PathBuf,
    maps: Vec<(PathBuf, Arc<memmap2::Mmap>)>,
    index: BTreeMap<String, StEntry>,
}

struct StEntry {
    file: usize,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    start: usize,
    len: usize,
}

impl SafeTensorsDir {
    pub fn open(dir: &Path) -> Result<Self> {
        // A sharded checkpoint names its files in model.safetensors.index.json (its weight_map):
        // exactly those are read, and each tensor must be in the file the index names. Without
        // an index, every *.safetensors file of the directory.
        let index_path = dir.join("model.safetensors.index.json");
        let index_map: Option<BTreeMap<String, String>> = if index_path.exists() {
            let text = crate::io::read_capped_string(&index_path, crate::io::MAX_JSON_BYTES, "safetensors index")?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(&index_path, format!("invalid JSON: {e}")))?;
            let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::bad_file(&index_path, "no weight_map object"))?;
            let mut out = BTreeMap::new();
            for (name, file) in map {
                let f = file.as_str().filter(|f| !f.contains('/') && !f.contains('\\') && f.ends_with(".safetensors"));
                let f = f.ok_or_else(|| Error::bad_file(&index_path, format!("weight_map[{name:?}] = {file} is not a .safetensors file name in this directory")))?;
                out.insert(name.clone(), f.to_string());
            }
            Some(out)
        } else {
            None
        };
        let mut files: Vec<PathBuf> = match &index_map {
            Some(m) => {
                let mut names: Vec<&String> = m.values().collect();
                names.sort();
                names.dedup();
                names.into_iter().map(|n| dir.join(n)).collect()
            }
            None => std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect(),
        };
        files.sort();
        if files.is_empty() {
            return Err(Error::bad_file(dir, "no *.safetensors file in the model directory"));
        }
        let mut maps = Vec::new();
        let mut index = BTreeMap::new();
        for (fi, path) in files.into_iter().enumerate() {
            let f = crate::io::open_input(&path, u64::MAX, "safetensors")?;
            // SAFETY: read-only private map; see gguf.rs.
            let mmap = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(&path, e))?;
            // `deserialize` validates the header size, the JSON, and every tensor's byte range.
            let st = safetensors::SafeTensors::deserialize(&mmap)
                .map_err(|e| Error::bad_file(&path, format!("invalid safetensors file: {e}")))?;
            let base = mmap.as_ptr() as usize;
            for (name, view) in st.tensors() {
                let start = view.data().as_ptr() as usize - base;
                let entry = StEntry { file: fi, dtype: view.dtype(), shape: view.shape().to_vec(), start, len: view.data().len() };
                if let Some(prev) = index.insert(name.clone(), entry) {
                    // Two copies of a tensor (e.g. a stray extra checkpoint): which one is meant
                    // is unknowable, so refuse rather than pick one silently.
                    return Err(Error::bad_file(
                        dir,
                        format!("tensor {name} is in both {} and {}", maps_path(&maps, prev.file, &path).display(), path.display()),
                    ));
                }
            }
            drop(st);
            maps.push((path, Arc::new(mmap)));
        }
        if let Some(m) = &index_map {
            for (name, file) in m {
                let found = index.get(name).map(|e| maps[e.file].0.file_name().is_some_and(|f| f == file.as_str()));
                if found != Some(true) {
                    return Err(Error::bad_file(&index_path, format!("tensor {name} is not in {file}, where the index puts it")));
                }
            }
        }
        Ok(SafeTensorsDir { dir: dir.to_path_buf(), maps, index })
    }

    fn names(&self) -> impl Iterator<Item = &String> {
        self.index.keys()
    }
}

/// The path of file `i`: an earlier, already mapped file, or the one being read.
fn maps_path<'a>(maps: &'a [(PathBuf, Arc<memmap2::Mmap>)], i: usize, current: &'a Path) -> &'a Path {
    maps.get(i).map_or(current, |(p, _)| p.as_path())
}

fn check_finite(path: &Path, name: &str, v: &[f32]) -> Result<()> {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::bad_file(path, format!("tensor {name} holds a non-finite value ({}) at element {i}", v[i])));
    }
    Ok(())
}

/// A stored matrix as a host tensor of `dtype` (for the upload to a GPU), converted a chunk of
/// rows at a time, so the host holds one copy in `dtype` and never the whole matrix in f32; bf16
/// stored as bf16 is copied as it is. Values as `to_dense(F32)` then candle's `to_dtype` give;
/// checked finite on the way (`check_finite_stored`'s error, `name` of the file at `path`).
pub(crate) fn dense_copy(path: &Path, name: &str, q: &QMatrix, dtype: DType) -> Result<Tensor> {
    use crate::model::qmatvec::QType;
    let shape = (q.rows, q.cols);
    if (q.ty, dtype) == (QType::BF16, DType::BF16) {
        check_finite_stored(path, name, q)?;
        return Ok(Tensor::from_raw_buffer(q.data(), DType::BF16, &[q.rows, q.cols], &Device::Cpu)?);
    }
    // About a million values (4 MB of f32) a chunk.
    let per = ((1 << 20) / q.cols.max(1)).clamp(1, q.rows.max(1));
    let convert = |out: &mut dyn FnMut(&[f32])| -> Result<()> {
        let mut buf = vec![0f32; per * q.cols];
        for r0 in (0..q.rows).step_by(per) {
            let chunk = &mut buf[..per.min(q.rows - r0) * q.cols];
            dequantize_rows(q, r0, chunk);
            if let Some(i) = chunk.iter().position(|x| !x.is_finite()) {
                return Err(Error::bad_file(path, format!("tensor {name} holds a non-finite value ({}) at element {}", chunk[i], r0 * q.cols + i)));
            }
            out(chunk);
        }
        Ok(())
    };
    fn collect<T>(n: usize, convert: impl Fn(&mut dyn FnMut(&[f32])) -> Result<()>, from: impl Fn(f32) -> T) -> Result<Vec<T>> {
        let mut v = Vec::with_capacity(n);
        convert(&mut |c: &[f32]| v.extend(c.iter().map(|&x| from(x))))?;
        Ok(v)
    }
    let n = q.rows * q.cols;
    Ok(match dtype {
        DType::BF16 => Tensor::from_vec(collect(n, convert, half::bf16::from_f32)?, shape, &Device::Cpu)?,
        DType::F16 => Tensor::from_vec(collect(n, convert, half::f16::from_f32)?, shape, &Device::Cpu)?,
        DType::F32 => Tensor::from_vec(collect(n, convert, |x| x)?, shape, &Device::Cpu)?,
        other => Tensor::from_vec(collect(n, convert, |x| x)?, shape, &Device::Cpu)?.to_dtype(other)?,
    })
}

/// `check_finite` of a stored matrix, dequantized a chunk of rows at a time (in parallel), so
/// a damaged block fails the load as a damaged f32 value does.
fn check_finite_stored(path: &Path, name: &str, q: &QMatrix) -> Result<()> {
    let per = (65536 / q.cols.max(1)).clamp(1, q.rows.max(1));
    let bad = (0..q.rows.div_ceil(per)).into_par_iter().find_map_first(|c| {
        let (r0, n) = (c * per, per.min(q.rows - c * per));
        let mut v = vec![0f32; n * q.cols];
        dequantize_rows(q, r0, &mut v);
        v.iter().position(|x| !x.is_finite()).map(|i| (r0 * q.cols + i, v[i]))
    });
    match bad {
        Some((i, x)) => Err(Error::bad_file(path, format!("tensor {name} holds a non-finite value ({x}) at element {i}"))),
        None => Ok(()),
    }
}

impl WeightSource {
    pub fn path(&self) -> &Path {
        match self {
            WeightSource::Gguf(g) => &g.path,
            WeightSource::SafeTensors(s) => &s.dir,
        }
    }

    pub fn has(&self, name: &str) -> bool {
        match self {
            WeightSource::Gguf(g) => g.tensors.contains_key(name),
            WeightSource::SafeTensors(s) => s.index.contains_key(name),
        }
    }

    /// Every tensor name in the checkpoint.
    pub fn names(&self) -> Vec<&str> {
        match self {
            WeightSource::Gguf(g) => g.tensors.keys().map(String::as_str).collect(),
            WeightSource::SafeTensors(s) => s.names().map(String::as_str).collect(),
        }
    }

    /// Bytes `name` takes in the checkpoint (0 when absent).
    pub fn stored_bytes(&self, name: &str) -> u64 {
        match self {
            WeightSource::Gguf(g) => g.tensors.get(name).map_or(0, |t| t.len as u64),
            WeightSource::SafeTensors(s) => s.index.get(name).map_or(0, |e| e.len as u64),
        }
    }

    /// Bytes of every tensor in the checkpoint.
    pub fn total_bytes(&self) -> u64 {
        self.names().iter().map(|n| self.stored_bytes(n)).sum()
    }

    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        match self {
            WeightSource::Gguf(g) => g.tensors.get(name).map(|t| t.shape.clone()),
            WeightSource::SafeTensors(s) => s.index.get(name).map(|t| t.shape.clone()),
        }
    }

    /// Loads `name` as f32 with exactly `shape` (candle order), checking that every value is finite.
    pub fn tensor(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        let found = self
            .shape(name)
            .ok_or_else(|| Error::Unsupported(format!("{}: missing tensor {name}", self.path().display())))?;
        if found != shape {
            return Err(Error::bad_file(
                self.path(),
                format!("tensor {name} has shape {found:?}, the config implies {shape:?}"),
            ));
        }
        let values: Vec<f32> = match self {
            WeightSource::Gguf(g) => {
                let deq = || -> Result<Vec<f32>> { Ok(g.qtensor(name, &Device::Cpu)?.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?) };
                deq().map_err(|e| Error::bad_file(&g.path, format!("tensor {name} ({:?}, shape {found:?}) cannot be read: {e}", g.tensors[name].dtype)))?
            }
            WeightSource::SafeTensors(s) => {
                let e = &s.index[name];
                let bytes = &s.maps[e.file].1[e.start..e.start + e.len];
                let raw = |dt: DType| Tensor::from_raw_buffer(bytes, dt, &e.shape, &Device::Cpu);
                let t = match e.dtype {
                    safetensors::Dtype::F32 => raw(DType::F32)?,
                    safetensors::Dtype::F16 => raw(DType::F16)?,
                    safetensors::Dtype::BF16 => raw(DType::BF16)?,
                    d => return Err(Error::Unsupported(format!("tensor {name} has dtype {d:?} (need f32, f16 or bf16)"))),
                };
                t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?
            }
        };
        check_finite(self.path(), name, &values)?;
        Ok(Tensor::from_vec(values, shape, device)?)
    }

    /// The (rows, cols) weight matrix `name` on `device`: on the CPU in its stored form (GGUF
    /// blocks of a weight type, or safetensors f32 / f16 / bf16), read in place from the map;
    /// elsewhere as a tensor of `dense`, converted on the host a chunk of rows at a time
    /// (`dense_copy`) and uploaded (nothing of it stays on the host). Its shape and values are
    /// checked as `tensor` checks them.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize, device: &Device, dense: DType) -> Result<Weight> {
        let found = self
            .shape(name)
            .ok_or_else(|| Error::Unsupported(format!("{}: missing tensor {name}", self.path().display())))?;
        if found != [rows, cols] {
            return Err(Error::bad_file(self.path(), format!("tensor {name} has shape {found:?}, the config implies {:?}", [rows, cols])));
        }
        let q = match self {
            WeightSource::Gguf(g) => {
                let info = &g.tensors[name];
                g.matrix(info, rows, cols).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "{}: tensor {name} is stored as {:?}, which no weight is read in (supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, F16, BF16, F32)",
                        g.path.display(),
                        info.dtype
                    ))
                })?
            }
            WeightSource::SafeTensors(s) => {
                let e = &s.index[name];
                let ty = match e.dtype {
                    safetensors::Dtype::F32 => GgmlDType::F32,
                    safetensors::Dtype::F16 => GgmlDType::F16,
                    safetensors::Dtype::BF16 => GgmlDType::BF16,
                    d => return Err(Error::Unsupported(format!("tensor {name} has dtype {d:?} (need f32, f16 or bf16)"))),
                };
                QMatrix::mapped(ty, &s.maps[e.file].1, e.start, e.len, rows, cols)
                    .ok_or_else(|| Error::bad_file(&s.maps[e.file].0, format!("tensor {name} holds {} bytes, not a {rows}x{cols} {ty:?} matrix", e.len)))?
            }
        };
        if device.is_cpu() {
            check_finite_stored(self.path(), name, &q)?;
            return Ok(Weight::Stored(Arc::new(q)));
        }
        Ok(Weight::Dense(dense_copy(self.path(), name, &q, dense)?.to_device(device)?))
    }

    /// A cheap identity of the weights: sha256 over every tensor's name, shape, type and up to
    /// 64 KiB of its bytes taken from the start, the middle and the end. Two checkpoints that
    /// differ anywhere in size or layout, or in most places in value, get different fingerprints.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        let mut feed = |name: &str, shape: &[usize], ty: String, bytes: &[u8]| {
            h.update(name.as_bytes());
            h.update(format!("{shape:?}{ty}").as_bytes());
            let n = bytes.len();
            let s = 8192.min(n);
            for start in [0, n / 4, n / 2, 3 * n / 4, n - s] {
                let start = start.min(n - s);
                h.update(&bytes[start..start + s]);
            }
        };
        match self {
            WeightSource::Gguf(g) => {
                for (name, t) in &g.tensors {
                    feed(name, &t.shape, format!("{:?}", t.dtype), g.raw(t));
                }
            }
            WeightSource::SafeTensors(s) => {
                for name in s.names() {
                    let e = &s.index[name];
                    feed(name, &e.shape, format!("{:?}", e.dtype), &s.maps[e.file].1[e.start..e.start + e.len]);
                }
            }
        }
        let d = h.finalize();
        d.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qmatvec::tests::{random, ALL};
    use rand::{rngs::StdRng, SeedableRng};

    /// The upload's host copy holds what the f32 matrix cast by candle holds, for every stored
    /// type and the GPU's dtypes (chunks of rows that do and do not divide the matrix).
    #[test]
    fn dense_copy_equals_the_cast_f32_matrix() {
        let mut rng = StdRng::seed_from_u64(21);
        for dtype in ALL {
            for (rows, cols) in [(3, 256), (4100, 512)] {
                let (raw, _) = random(dtype, rows, cols, &mut rng);
                let q = QMatrix::new(dtype, &raw, rows, cols).unwrap();
                let f = crate::model::linear::Weight::Stored(Arc::new(q.clone())).to_dense(DType::F32, &Device::Cpu).unwrap();
                for to in [DType::BF16, DType::F16, DType::F32] {
                    let got = dense_copy(Path::new("x.gguf"), "w", &q, to).unwrap();
                    assert_eq!((got.dtype(), got.dims2().unwrap()), (to, (rows, cols)));
                    let want = f.to_dtype(to).unwrap().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    let got = got.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    assert!(got == want, "{dtype:?} {rows}x{cols} as {to:?}");
                }
            }
        }
        // A non-finite value fails the copy with the tensor's name and the element.
        let mut raw = vec![0u8; 2 * 4 * 32];
        raw[2 * 37..2 * 38].copy_from_slice(&half::f16::INFINITY.to_le_bytes());
        let q = QMatrix::new(candle_core::quantized::GgmlDType::F16, &raw, 4, 32).unwrap();
        let e = dense_copy(Path::new("x.gguf"), "blk.0.w", &q, DType::BF16).unwrap_err().to_string();
        assert!(e.contains("blk.0.w") && e.contains("element 37"), "{e}");
    }
}
