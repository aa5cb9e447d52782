//! Reading a Hugging Face `config.json`, with errors that name the file and the key.

use super::config::RopeScaling;
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
        Ok(HfConfig { path: path.to_path_buf(), json: Self::language_model(json) })
    }
    /// A multimodal checkpoint's language model: Gemma 3's `gemma3` config nests the decoder's
    /// in `text_config` (model_type `gemma3_text`), and its weights sit under `language_model.`
    /// (the family's optional prefix); the vision tower is not read.
    fn language_model(json: Value) -> Value {
        let nested = json.get("model_type").and_then(Value::as_str) == Some("gemma3") && json.get("text_config").is_some_and(Value::is_object);
        if !nested {
            return json;
        }
        let mut text = json["text_config"].clone();
        if let Some(t) = text.as_object_mut() {
            t.entry("model_type").or_insert_with(|| Value::from("gemma3_text"));
            if let Some(tie) = json.get("tie_word_embeddings") {
                t.entry("tie_word_embeddings").or_insert_with(|| tie.clone());
            }
        }
        text
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
    /// The RoPE of the global layers (base and scaling) and the sliding layers' base when the
    /// checkpoint gives one. transformers >= 5 writes `rope_parameters: {rope_theta, rope_type,
    /// ...}`, or one such entry per layer type (`full_attention`, `sliding_attention`: Gemma 3);
    /// older checkpoints a top-level `rope_theta` (`rope_local_base_freq`) and `rope_scaling`.
    pub fn rope(&self, default_theta: f64) -> Result<HfRope> {
        let params = ["rope_parameters", "rope_scaling"].into_iter().find_map(|k| self.json.get(k).filter(|v| !v.is_null()).map(|v| (k, v)));
        let (global, local) = match params {
            Some((k, p)) if p.get("full_attention").is_some() || p.get("sliding_attention").is_some() => {
                (p.get("full_attention").map(|g| (format!("{k}.full_attention"), g)), p.get("sliding_attention").map(|l| (format!("{k}.sliding_attention"), l)))
            }
            Some((k, p)) => (Some((k.to_string(), p)), None),
            None => (None, None),
        };
        let theta_in = |at: &Option<(String, &Value)>, top: &str, default: f64| -> Result<f64> {
            match at.as_ref().and_then(|(k, p)| p.get("rope_theta").filter(|v| !v.is_null()).map(|v| (k, v))) {
                Some((k, v)) => v.as_f64().ok_or_else(|| self.err(&format!("{k}.rope_theta"), &format!("{v} is not a number"))),
                None => self.f64_or(top, default),
            }
        };
        let theta = theta_in(&global, "rope_theta", default_theta)?;
        let scaling = match &global {
            Some((k, p)) => self.rope_scaling(k, p)?,
            None => None,
        };
        let local_theta = match &local {
            Some((k, p)) => {
                if self.rope_scaling(k, p)?.is_some() {
                    return Err(Error::Unsupported(format!("{}: RoPE scaling on the sliding layers ({k})", self.path.display())));
                }
                Some(theta_in(&local, "rope_local_base_freq", 10000.0)?)
            }
            None => self.json.get("rope_local_base_freq").filter(|v| !v.is_null()).map(|_| self.f64_or("rope_local_base_freq", 10000.0)).transpose()?,
        };
        Ok(HfRope { theta, scaling, local_theta })
    }

    /// One `rope_parameters` entry's scaling, as transformers' `modeling_rope_utils` reads it.
    fn rope_scaling(&self, at: &str, p: &Value) -> Result<Option<RopeScaling>> {
        let ty = p.get("rope_type").or_else(|| p.get("type")).and_then(|v| v.as_str()).unwrap_or("default");
        let num = |key: &str| -> Result<Option<f64>> {
            match p.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| self.err(&format!("{at}.{key}"), &format!("{v} is not a number"))),
            }
        };
        let need = |key: &str| -> Result<f64> { num(key)?.ok_or_else(|| self.err(&format!("{at}.{key}"), &format!("missing (RoPE type {ty:?} needs it)"))) };
        if let Some(f) = num("partial_rotary_factor")?.or(self.json.get("partial_rotary_factor").and_then(Value::as_f64)) {
            if f != 1.0 {
                return Err(Error::Unsupported(format!("{}: partial rotary embeddings (partial_rotary_factor = {f})", self.path.display())));
            }
        }
        // The pretraining context: in the entry, else top-level (Phi-3), else the model's.
        let original = || -> Result<usize> {
            let v = match num("original_max_position_embeddings")? {
                Some(v) => v,
                None => match self.opt_usize("original_max_position_embeddings")? {
                    Some(v) => v as f64,
                    None => self.usize("max_position_embeddings")? as f64,
                },
            };
            if !(v >= 1.0 && v.fract() == 0.0) {
                return Err(self.err(&format!("{at}.original_max_position_embeddings"), &format!("{v} is not a positive integer")));
            }
            Ok(v as usize)
        };
        Ok(match ty {
            "default" => None,
            "linear" => Some(RopeScaling::Linear { factor: need("factor")? }),
            "llama3" => Some(RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_context: {
                    need("original_max_position_embeddings")?;
                    original()?
                },
            }),
            "yarn" => {
                if p.get("truncate").and_then(Value::as_bool) == Some(false) {
                    return Err(Error::Unsupported(format!("{}: YaRN without truncation ({at}.truncate = false)", self.path.display())));
                }
                let original_context = original()?;
                let factor = match num("factor")? {
                    Some(f) => f,
                    None => self.usize("max_position_embeddings")? as f64 / original_context as f64,
                };
                // yarn_get_mscale: 0.1 * m * ln(factor) + 1 above a factor of 1.
                let mscale = |m: f64| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
                let attention_factor = match (num("attention_factor")?, num("mscale")?, num("mscale_all_dim")?) {
                    (Some(a), _, _) => a,
                    (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(m) / mscale(all),
                    _ => mscale(1.0),
                };
                Some(RopeScaling::Yarn {
                    factor,
                    original_context,
                    beta_fast: num("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0),
                    beta_slow: num("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0),
                    attention_factor,
                })
            }
            other => {
                return Err(Error::Unsupported(format!("{}: RoPE type {other:?} in {at} (supported: default, linear, llama3, yarn)", self.path.display())));
            }
        })
    }
}

/// A checkpoint's RoPE (`HfConfig::rope`).
pub struct HfRope {
    /// The global layers' base and scaling.
    pub theta: f64,
    pub scaling: Option<RopeScaling>,
    /// The sliding layers' own base (Gemma 3), unscaled.
    pub local_theta: Option<f64>,
}
