//! Reading a Hugging Face `config.json`, with errors that name the file and the key.

use super::config::{Arch, MlpKind, ModelConfig, NormKind, Positions};
use crate::error::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub struct HfConfig {
    pub path: PathBuf,
    pub json: Value,
}

impl HfConfig {
    pub fn open(path: &Path) -> Result<Self> {
        let text = crate::io::read_capped_string(path, crate::io::MAX_JSON_BYTES, "config.json")?;
        let json: Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(path, format!("invalid JSON: {e}")))?;
        if !json.is_object() {
            return Err(Error::bad_file(path, "config.json is not a JSON object"));
        }
        Ok(HfConfig { path: path.to_path_buf(), json })
    }
    fn err(&self, key: &str, what: &str) -> Error {
        Error::bad_file(&self.path, format!("key {key:?}: {what}"))
    }
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(|x| Some(x as usize)).ok_or_else(|| self.err(key, "not a non-negative integer")),
        }
    }
    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| self.err(key, "missing"))
    }
    /// A number, `default` when the key is absent or null; a value of another type is an error
    /// (a string "10000" must not silently become the default).
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, &format!("{v} is not a number"))),
        }
    }
    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        self.json.get(key).and_then(|v| v.as_bool()).unwrap_or(default)
    }
    pub fn str_or(&self, key: &str, default: &str) -> String {
        self.json.get(key).and_then(|v| v.as_str()).unwrap_or(default).to_string()
    }
    pub fn model_type(&self) -> String {
        self.str_or("model_type", "")
    }
    pub fn name(&self) -> String {
        let dir = self.path.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        dir.unwrap_or_else(|| self.model_type())
    }
    /// RoPE theta: transformers >= 5 writes `rope_parameters: {rope_theta, rope_type}`, older
    /// checkpoints a top-level `rope_theta`. Only plain RoPE is supported.
    pub fn rope_theta(&self, default: f64) -> Result<f64> {
        for key in ["rope_parameters", "rope_scaling"] {
            if let Some(p) = self.json.get(key).filter(|v| !v.is_null()) {
                let ty = p.get("rope_type").or_else(|| p.get("type")).and_then(|v| v.as_str()).unwrap_or("default");
                if ty != "default" {
                    return Err(Error::Unsupported(format!("{}: RoPE type {ty:?} (only \"default\")", self.path.display())));
                }
                match p.get("rope_theta") {
                    None | Some(Value::Null) => {}
                    Some(v) => return v.as_f64().ok_or_else(|| self.err(&format!("{key}.rope_theta"), &format!("{v} is not a number"))),
                }
            }
        }
        self.f64_or("rope_theta", default)
    }
}

pub fn llama_style_config(c: &HfConfig, arch: Arch, qkv_bias: bool) -> Result<ModelConfig> {
    let act = c.str_or("hidden_act", "silu");
    if act != "silu" {
        return Err(Error::Unsupported(format!("{}: hidden_act {act:?} (supported: silu)", c.path.display())));
    }
    let d_model = c.usize("hidden_size")?;
    let n_heads = c.usize("num_attention_heads")?;
    // Sliding-window attention (Mistral; Qwen2 with use_sliding_window) keeps the keys
    // i - j < W. Up to W tokens that is exactly full attention, so the decoder (which has no
    // sliding window) is exact there; longer inputs are refused by capping the context.
    let mut context = c.usize("max_position_embeddings")?;
    if c.bool_or("use_sliding_window", true) {
        if let Some(w) = c.opt_usize("sliding_window")? {
            context = context.min(w);
        }
    }
    let cfg = ModelConfig {
        arch,
        name: c.name(),
        n_layers: c.usize("num_hidden_layers")?,
        d_model,
        n_heads,
        n_kv_heads: c.opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
        head_dim: c.opt_usize("head_dim")?.unwrap_or(d_model / n_heads.max(1)),
        ffn_dim: c.usize("intermediate_size")?,
        vocab: c.usize("vocab_size")?,
        context,
        norm: NormKind::Rms,
        norm_eps: c.f64_or("rms_norm_eps", 1e-6)?,
        mlp: MlpKind::SwiGlu,
        positions: Positions::Rope { theta: c.rope_theta(10000.0)?, interleaved: false },
        qkv_bias,
        tied_embeddings: c.bool_or("tie_word_embeddings", false),
    };
    cfg.validate().map_err(|e| Error::bad_file(&c.path, format!("invalid config: {e}")))?;
    Ok(cfg)
}
