//! Reading a Hugging Face `config.json`, with errors that name the file and the key.

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
