//! Qwen2 decoders: Llama-style blocks with biases on Q, K and V (Hugging Face layout).

use super::config::{Arch, ModelConfig};
use super::hf::{self, HfConfig};
use crate::error::Result;

pub fn config_from_hf(c: &HfConfig) -> Result<ModelConfig> {
    hf::llama_style_config(c, Arch::Qwen2, true)
}
