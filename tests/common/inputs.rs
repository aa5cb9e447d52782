//! Helpers of the bad-input tests: error messages, and edited copies of the tiny fixtures.
#![allow(dead_code)]

use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// The error message of a result that must be an error.
pub fn err_msg<T>(r: focus_core::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error, got Ok"),
        Err(e) => e.to_string(),
    }
}

pub fn assert_has(msg: &str, phrases: &[&str]) {
    for p in phrases {
        assert!(msg.contains(p), "error message {msg:?} lacks {p:?}");
    }
}

/// A copy of a tiny fixture (config.json and model.safetensors) in a temporary directory.
pub fn tiny_copy(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(super::fixture("hf_tiny").join(name).join(f), tmp.path().join(f)).unwrap();
    }
    tmp
}

pub fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    edit(v.as_object_mut().unwrap());
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Rewrites one tensor of a directory's model.safetensors.
pub fn edit_tensor(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<f32>)) {
    let p = dir.join("model.safetensors");
    let mut ts: HashMap<String, Tensor> = candle_core::safetensors::load(&p, &Device::Cpu).unwrap();
    let t = ts.get(name).unwrap_or_else(|| panic!("no tensor {name}"));
    let shape = t.dims().to_vec();
    let mut v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    edit(&mut v);
    ts.insert(name.to_string(), Tensor::from_vec(v, shape, &Device::Cpu).unwrap());
    candle_core::safetensors::save(&ts, &p).unwrap();
}
