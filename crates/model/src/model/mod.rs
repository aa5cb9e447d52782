//! Loading a base model: a GGUF file or a Hugging Face directory. Files: `config` (the decoder's
//! shape), `family` (every family as data), `load` (the one loader that reads them), `hf` and
//! `gguf` (the two file formats), `weights` (tensors from either), `hub` (repo ids in the local
//! cache), `tokenizer`, `decoder` (the layer loop of every pass), `block` (one transformer
//! block), `linear` (a weight, held once: stored blocks on the CPU or a device tensor, and the
//! projection over it), `step` and `fused` (a generation step's forward, and its fused form on a GPU),
//! `matvec` / `qmatvec` (one-row products, plain and over GGUF blocks of every storage type,
//! which `qmatvec` dequantizes; `row_pool` the threads they run on), `qmatmul` (many rows times GGUF blocks: the prefill's product;
//! `qmatmul_avx512` its f32 kernel on AVX-512F; `qmatmul_int8` the integer route it was measured
//! against), `memory` (what a run will need,
//! from the header alone, and what is available); `tests` (tests that load a whole `Model`).

pub mod block;
pub mod config;
pub mod decoder;
pub mod family;
pub mod fused;
pub mod gguf;
pub mod hf;
pub mod hub;
pub mod linear;
pub mod load;
pub mod matvec;
pub mod memory;
pub mod int8;
pub mod kquants;
pub mod qmatmul;
pub mod qmatmul_amx;
pub mod qmatmul_avx512;
pub mod qmatmul_int8;
pub mod qmatvec_int8;
pub mod qmatvec;
pub mod row_pool;
pub mod step;
pub mod tokenizer;
pub mod weights;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::focus::identity::BaseModel;
use crate::model::gguf::GgufFile;
use crate::model::tokenizer::Tokenizer;
use candle_core::{DType, Device};
pub use config::{Arch, ModelConfig};
pub use decoder::{Decoder, ForwardOptions, ForwardOutput};

use std::path::{Path, PathBuf};
use weights::{SafeTensorsDir, WeightSource};

pub struct Model {
    pub path: PathBuf,
    pub decoder: Decoder,
    /// Absent for checkpoints that ship no tokenizer (e.g. test fixtures).
    pub tokenizer: Option<Tokenizer>,
    pub fingerprint: String,
    /// "gguf" or "safetensors"
    pub format: &'static str,
}

impl Model {
    /// `path` is a `.gguf` file, a directory holding `config.json` and `*.safetensors`, or a
    /// Hugging Face repo id (`ORG/NAME[@REV]`) found in the local hub cache (`hub`).
    pub fn load(path: &Path, device: &Device) -> Result<Model> {
        Self::load_reporting(path, device, &|_, _| {})
    }

    /// `load`, calling `progress(bytes read, bytes in all)` after each tensor of the checkpoint
    /// is read and checked (the GUI's load bar).
    pub fn load_reporting(path: &Path, device: &Device, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<Model> {
        Self::load_as(path, device, Self::weight_dtype(device), progress)
    }

    /// The dtype of the weight matrices a model keeps on `device` as tensors: bf16 on a GPU (two
    /// bytes a parameter; the products accumulate in f32). On the CPU they stay in the file's own
    /// form (`linear::Weight::Stored`), whatever this says.
    pub fn weight_dtype(device: &Device) -> DType {
        if device.is_cuda() {
            DType::BF16
        } else {
            DType::F32
        }
    }

    /// `load_reporting` with the weight matrices on a GPU in `dense` (f32 for comparisons with
    /// the CPU to f32 rounding).
    pub fn load_as(path: &Path, device: &Device, dense: DType, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<Model> {
        let resolved = hub::resolve(path)?;
        let path = resolved.as_path();
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            return Self::load_hf(path, device, dense, progress);
        }
        let g = GgufFile::open(path)?;
        let arch = g.str("general.architecture")?;
        let (fam, gf) = family::by_gguf_arch(arch)
            .ok_or_else(|| Error::Unsupported(format!("GGUF architecture {arch:?} (supported: {})", family::supported(true))))?;
        let cfg = load::config_from_gguf(&g, fam, gf)?;
        // Compare the header's counts before building anything from them.
        if let Some(n) = g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(<[_]>::len) {
            if n > cfg.vocab {
                return Err(Error::bad_file(path, format!("tokenizer.ggml.tokens has {n} tokens but the embedding only {} rows", cfg.vocab)));
            }
        }
        let tokenizer = Tokenizer::from_gguf(&g)?;
        if tokenizer.vocab_size() > cfg.vocab {
            return Err(Error::bad_file(path, format!("tokenizer has {} tokens but the embedding only {}", tokenizer.vocab_size(), cfg.vocab)));
        }
        let src = WeightSource::Gguf(g);
        let decoder = load::load_weights(cfg, &src, &gf.names, fam.pre_norms, device, dense, progress)?;
        Ok(Model { path: path.to_path_buf(), decoder, tokenizer: Some(tokenizer), fingerprint: src.fingerprint(), format: "gguf" })
    }

    fn load_hf(dir: &Path, device: &Device, dense: DType, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<Model> {
        let c = hf::HfConfig::open(&dir.join("config.json"))?;
        let src = WeightSource::SafeTensors(SafeTensorsDir::open(dir)?);
        let ty = c.model_type();
        let (fam, h) = family::by_model_type(&ty)
            .ok_or_else(|| Error::Unsupported(format!("{}: model_type {ty:?} (supported: {})", c.path.display(), family::supported(false))))?;
        let decoder = load::load_weights(load::config_from_hf(&c, fam, h)?, &src, &h.names, fam.pre_norms, device, dense, progress)?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.exists() { Some(Tokenizer::from_file(&tok_path)?) } else { None };
        if let Some(t) = &tokenizer {
            if t.vocab_size() > decoder.config.vocab {
                return Err(Error::bad_file(&tok_path, format!("the tokenizer has {} tokens but the model's embedding only {}", t.vocab_size(), decoder.config.vocab)));
            }
        }
        Ok(Model { path: dir.to_path_buf(), decoder, tokenizer, fingerprint: src.fingerprint(), format: "safetensors" })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.decoder.config
    }

    pub fn device(&self) -> &Device {
        &self.decoder.device
    }

    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| Error::Unsupported(format!("{} ships no tokenizer", self.path.display())))
    }

    /// What an adapter records about the model it fits.
    pub fn identity(&self) -> BaseModel {
        let c = self.config();
        BaseModel {
            arch: c.arch.to_string(),
            name: c.name.clone(),
            n_layers: c.n_layers,
            d_model: c.d_model,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            vocab: c.vocab,
            fingerprint: self.fingerprint.clone(),
        }
    }
}
