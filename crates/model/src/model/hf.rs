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
    pub fn err(&self, key: &str, what: &str) -> Error {
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
    let mut cfg = decoder_config(c, arch, qkv_bias, c.rope_theta(10000.0)?)?;
    // Sliding-window attention (Mistral; Qwen2 with use_sliding_window) keeps the keys
    // i - j < W. Up to W tokens that is exactly full attention; these families put the window on
    // every layer, and rather than run it the context is capped at W (longer inputs refused).
    if c.bool_or("use_sliding_window", true) {
        if let Some(w) = c.opt_usize("sliding_window")? {
            if w == 0 {
                return Err(Error::bad_file(&c.path, "sliding_window = 0: a window must hold at least 1 token (null, or use_sliding_window false, turns it off)"));
            }
            cfg.context = cfg.context.min(w);
        }
    }
    cfg.validate().map_err(|e| Error::bad_file(&c.path, format!("invalid config: {e}")))?;
    Ok(cfg)
}

/// The fields every Llama-style `config.json` shares (a family file adds its own parts and
/// validates the result): RMSNorm, SwiGLU, RoPE of base `theta` in the Hugging Face layout.
pub fn decoder_config(c: &HfConfig, arch: Arch, qkv_bias: bool, theta: f64) -> Result<ModelConfig> {
    let d_model = c.usize("hidden_size")?;
    let n_heads = c.usize("num_attention_heads")?;
    Ok(ModelConfig {
        arch,
        name: c.name(),
        n_layers: c.usize("num_hidden_layers")?,
        d_model,
        n_heads,
        n_kv_heads: c.opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
        head_dim: c.opt_usize("head_dim")?.unwrap_or(d_model / n_heads.max(1)),
        ffn_dim: c.usize("intermediate_size")?,
        vocab: c.usize("vocab_size")?,
        context: c.usize("max_position_embeddings")?,
        norm: NormKind::Rms,
        norm_eps: c.f64_or("rms_norm_eps", 1e-6)?,
        mlp: MlpKind::SwiGlu,
        positions: Positions::Rope { theta, interleaved: false },
        qkv_bias,
        tied_embeddings: c.bool_or("tie_word_embeddings", false),
        embed_scale: None,
        qk_norm: None,
        post_norms: false,
        attn_scale: None,
        attn_softcap: None,
        final_softcap: None,
        sliding: None,
    })
}

/// Per-layer attention kinds: `layer_types` ("sliding_attention" / "full_attention",
/// transformers >= 4.53) when present, else `default(l)` (true = sliding).
pub fn sliding_layers(c: &HfConfig, n_layers: usize, default: impl Fn(usize) -> bool) -> Result<Vec<bool>> {
    match c.json.get("layer_types").filter(|v| !v.is_null()) {
        None => Ok((0..n_layers).map(default).collect()),
        Some(v) => {
            let a = v.as_array().ok_or_else(|| c.err("layer_types", "not a list"))?;
            if a.len() != n_layers {
                return Err(c.err("layer_types", &format!("{} entries for {n_layers} layers", a.len())));
            }
            a.iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(c.err("layer_types", &format!("{t} is not sliding_attention or full_attention"))),
                })
                .collect()
        }
    }
}

/// A soft-cap value: absent, null or 0 means none.
pub fn softcap(c: &HfConfig, key: &str) -> Result<Option<f64>> {
    Ok(Some(c.f64_or(key, 0.0)?).filter(|&x| x != 0.0))
}
