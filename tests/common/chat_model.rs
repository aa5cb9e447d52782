//! The tiny Llama with a chat template: a byte-level tokenizer and `chat_template` in its
//! tokenizer_config.json. Included with `#[path]` by test files that also have `mod common`
//! and `mod fuzz_common` (`../fuzz/common/mod.rs`, for GPT-2's byte table) at their root.
#![allow(dead_code)]

use crate::common::inputs::tiny_copy;
use crate::fuzz_common::byte_chars;

/// The special tokens of `tiny_chat_model`, ids 256..260.
pub const SPECIALS: [&str; 4] = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"];

/// The tiny Llama (an embedding of 512 rows) with a byte-level tokenizer of 260 ids (256
/// bytes and 4 specials), as padded checkpoints are, and `chat_template` in its
/// tokenizer_config.json.
pub fn tiny_chat_model(chat_template: serde_json::Value) -> tempfile::TempDir {
    let d = tiny_copy("llama");
    let mut vocab: serde_json::Map<String, serde_json::Value> = byte_chars().iter().enumerate().map(|(i, c)| (c.to_string(), i.into())).collect();
    let added: Vec<serde_json::Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            vocab.insert(s.to_string(), (256 + i).into());
            serde_json::json!({"id": 256 + i, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
        "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []},
    });
    std::fs::write(d.path().join("tokenizer.json"), tok.to_string()).unwrap();
    let cfg = serde_json::json!({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true, "chat_template": chat_template});
    std::fs::write(d.path().join("tokenizer_config.json"), cfg.to_string()).unwrap();
    d
}

pub const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
