//! The identity of a base model: what an adapter records about the model it was trained for, and
//! what loading an adapter checks against. Plain data, so that an adapter can be built, saved
//! and checked without a loaded model.

use serde::{Deserialize, Serialize};

/// Identity of the base model an adapter was made for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseModel {
    pub arch: String,
    pub name: String,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub vocab: usize,
    /// `WeightSource::fingerprint` of the base weights.
    pub fingerprint: String,
}
