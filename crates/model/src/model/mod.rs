//! Loading a base model: a GGUF file or a Hugging Face directory, one family per file.

pub mod block;
pub mod config;
pub mod decoder;
pub mod fused;
pub mod gemma2;
pub mod gemma3;
pub mod gguf;
pub mod gpt2;
pub mod hf;
pub mod hub;
pub mod llama;
pub mod matvec;
pub mod qmatvec;
pub mod olmo2;
pub mod qwen2;
pub mod step;
pub mod tokenizer;
pub mod weights;

use crate::error::{Error, Result};
use crate::focus::identity::BaseModel;
use crate::model::gguf::GgufFile;
use crate::model::tokenizer::Tokenizer;
use candle_core::Device;
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
        let resolved = hub::resolve(path)?;
        let path = resolved.as_path();
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            return Self::load_hf(path, device);
        }
        let g = GgufFile::open(path)?;
        let (cfg, names) = match g.get("general.architecture").and_then(|v| v.as_str()) {
            Some("gemma3") => (gemma3::config_from_gguf(&g)?, &gemma3::GGUF_NAMES),
            _ => (llama::config_from_gguf(&g)?, &llama::GGUF_NAMES),
        };
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
        let decoder = llama::load_weights(cfg, &src, names, device)?;
        Ok(Model { path: path.to_path_buf(), decoder, tokenizer: Some(tokenizer), fingerprint: src.fingerprint(), format: "gguf" })
    }

    fn load_hf(dir: &Path, device: &Device) -> Result<Model> {
        let c = hf::HfConfig::open(&dir.join("config.json"))?;
        let src = WeightSource::SafeTensors(SafeTensorsDir::open(dir)?);
        let decoder = match c.model_type().as_str() {
            "gpt2" => gpt2::load_weights(gpt2::config_from_hf(&c)?, &src, device)?,
            "llama" | "mistral" => llama::load_weights(llama::config_from_hf(&c)?, &src, &llama::HF_NAMES, device)?,
            "qwen2" => llama::load_weights(qwen2::config_from_hf(&c)?, &src, &llama::HF_NAMES, device)?,
            "gemma2" => llama::load_weights(gemma2::config_from_hf(&c)?, &src, &gemma2::HF_NAMES, device)?,
            "olmo2" => llama::load_weights(olmo2::config_from_hf(&c)?, &src, &olmo2::HF_NAMES, device)?,
            other => {
                return Err(Error::Unsupported(format!(
                    "{}: model_type {other:?} (supported: gpt2, llama, mistral, qwen2, gemma2, olmo2)",
                    c.path.display()
                )))
            }
        };
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
