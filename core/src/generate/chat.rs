//! What a model's own files say about chatting with it: its chat template (GGUF metadata
//! `tokenizer.chat_template`, or `chat_template` in a Hugging Face `tokenizer_config.json`),
//! rendered with minijinja as Hugging Face renders it (`messages`, `add_generation_prompt`,
//! `bos_token`, `eos_token`, `raise_exception`), and the ids that end a turn.

use crate::error::{Error, Result};
use crate::model::gguf::GgufFile;
use crate::model::Model;

/// The model's chat template, if it ships one.
pub fn chat_template(model: &Model) -> Result<Option<String>> {
    if model.format == "gguf" {
        let g = GgufFile::open(&model.path)?;
        return Ok(g.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string));
    }
    let path = model.path.join("tokenizer_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::io::read_capped_string(&path, crate::io::MAX_JSON_BYTES, "tokenizer config")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(&path, format!("invalid JSON: {e}")))?;
    Ok(v.get("chat_template").and_then(|t| t.as_str()).map(str::to_string))
}

/// Token ids that end generation: EOS, and the end-of-turn token when the GGUF names one.
pub fn stop_ids(model: &Model) -> Result<Vec<u32>> {
    let mut ids: Vec<u32> = model.tokenizer()?.eos_id().into_iter().collect();
    if model.format == "gguf" {
        let g = GgufFile::open(&model.path)?;
        ids.extend(g.get("tokenizer.ggml.eot_token_id").and_then(|v| v.as_u64()).map(|v| v as u32));
    }
    ids.dedup();
    Ok(ids)
}

/// One user turn rendered with `template`, ending with the prompt of the assistant's turn.
pub fn render_user_turn(template: &str, user: &str, bos: &str, eos: &str) -> Result<String> {
    let bad = |e: minijinja::Error| Error::Invalid(format!("the model's chat template cannot be rendered: {e:#}"));
    let mut env = minijinja::Environment::new();
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    let t = env.template_from_str(template).map_err(bad)?;
    t.render(minijinja::context! {
        messages => vec![minijinja::context! { role => "user", content => user }],
        add_generation_prompt => true,
        bos_token => bos,
        eos_token => eos,
    })
    .map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-Instruct's template (from its GGUF), as Hugging Face renders it.
    #[test]
    fn renders_a_chatml_template() {
        let t = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        let got = render_user_turn(t, "Hi!", "<s>", "</s>").unwrap();
        assert_eq!(got, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
        let err = render_user_turn("{{ raise_exception('no system role') }}", "x", "", "").unwrap_err().to_string();
        assert!(err.contains("no system role"), "{err}");
    }
}
