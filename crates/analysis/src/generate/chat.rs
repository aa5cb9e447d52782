//! What a model's own files say about chatting with it: its chat template (GGUF metadata
//! `tokenizer.chat_template`, or `chat_template` in a Hugging Face `tokenizer_config.json`),
//! rendered with minijinja as Hugging Face renders it (`messages`, `add_generation_prompt`,
//! `bos_token`, `eos_token`, `raise_exception`), and the ids that end a turn.

use crate::error::{Error, Result};
use crate::model::gguf::{GgufFile, Value};
use crate::model::Model;
use std::path::Path;

/// A chat template and where it came from (named in every error about it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    /// `tokenizer.chat_template in PATH` or `chat_template in PATH`.
    pub source: String,
    pub text: String,
}

/// What one rendering may take: templates come with downloaded models and are untrusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// minijinja instructions (fuel): real templates take a few thousand for one turn.
    pub fuel: u64,
    /// Bytes of rendered prompt: the text budget, since the prompt is tokenized like a text.
    pub output_bytes: usize,
    /// Bytes allocated at once while rendering (enforced where `io::budget::BudgetAlloc` is
    /// the global allocator, as in the focus-lens binary).
    pub memory_bytes: usize,
    /// Wall-clock seconds: minijinja does some work inside one instruction (iterating a
    /// lazily repeated sequence), which no fuel counts.
    pub seconds: u64,
}

pub const LIMITS: Limits = Limits { fuel: 10_000_000, output_bytes: crate::io::text::MAX_TEXT_BYTES as usize, memory_bytes: 256 << 20, seconds: 10 };

fn gguf_type(v: &Value) -> &'static str {
    match v {
        Value::U8(_) => "a u8",
        Value::I8(_) => "an i8",
        Value::U16(_) => "a u16",
        Value::I16(_) => "an i16",
        Value::U32(_) => "a u32",
        Value::I32(_) => "an i32",
        Value::U64(_) => "a u64",
        Value::I64(_) => "an i64",
        Value::F32(_) => "an f32",
        Value::F64(_) => "an f64",
        Value::Bool(_) => "a bool",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The model's chat template, if it ships one. A template of the wrong type is an error naming
/// the type, not "no template".
pub fn chat_template(model: &Model) -> Result<Option<ChatTemplate>> {
    if model.format == "gguf" {
        return gguf_chat_template(&GgufFile::open(&model.path)?);
    }
    hf_chat_template(&model.path.join("tokenizer_config.json"))
}

/// `tokenizer.chat_template` of a GGUF file.
pub fn gguf_chat_template(g: &GgufFile) -> Result<Option<ChatTemplate>> {
    match g.get("tokenizer.chat_template") {
        None => Ok(None),
        Some(Value::String(t)) => Ok(Some(ChatTemplate { source: format!("tokenizer.chat_template in {}", g.path.display()), text: t.clone() })),
        Some(v) => Err(Error::bad_file(&g.path, format!("tokenizer.chat_template is {}, not a string", gguf_type(v)))),
    }
}

/// `chat_template` of a Hugging Face `tokenizer_config.json` (absent file: none).
pub fn hf_chat_template(path: &Path) -> Result<Option<ChatTemplate>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::io::read_capped_string(path, crate::io::MAX_JSON_BYTES, "tokenizer config")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::bad_file(path, format!("invalid JSON: {e}")))?;
    let source = format!("chat_template in {}", path.display());
    let template = match v.get("chat_template") {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(t)) => t.clone(),
        // Hugging Face's named templates: [{"name": "default", "template": "..."}, ...].
        Some(serde_json::Value::Array(list)) => {
            let default = list.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
            match default.and_then(|t| t.get("template")) {
                Some(serde_json::Value::String(t)) => t.clone(),
                Some(t) => return Err(Error::bad_file(path, format!("chat_template \"default\" is {}, not a string", json_type(t)))),
                None => return Err(Error::bad_file(path, "chat_template is a list without a \"default\" template")),
            }
        }
        Some(t) => return Err(Error::bad_file(path, format!("chat_template is {}, not a string", json_type(t)))),
    };
    Ok(Some(ChatTemplate { source, text: template }))
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

/// One user turn rendered with `template`, ending with the prompt of the assistant's turn,
/// within `LIMITS`.
pub fn render_user_turn(template: &ChatTemplate, user: &str, bos: &str, eos: &str) -> Result<String> {
    render_user_turn_within(template, user, bos, eos, LIMITS)
}

/// The rendered output, refused past `cap` bytes.
struct CappedOutput {
    buf: Vec<u8>,
    cap: usize,
    over: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("output cap"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `render_user_turn` within `limits`. Each limit gives its own error, naming the template.
pub fn render_user_turn_within(template: &ChatTemplate, user: &str, bos: &str, eos: &str, limits: Limits) -> Result<String> {
    let source = &template.source;
    if template.text.len() > MAX_TEMPLATE_BYTES {
        return Err(Error::Invalid(format!("the chat template ({source}) is {} bytes; at most {MAX_TEMPLATE_BYTES} are accepted", template.text.len())));
    }
    let run = longest_unary_run(&template.text);
    if run > MAX_UNARY_RUN {
        return Err(Error::Invalid(format!("the chat template ({source}) chains {run} unary operators (-, +, not); at most {MAX_UNARY_RUN}")));
    }
    let (text, user, bos, eos) = (template.text.clone(), user.to_string(), bos.to_string(), eos.to_string());
    // Everything that touches the template's values runs under the budget, the error's text
    // included: a value may be cyclic (`ns.r = (ns, ...)`), and showing it would never end. The
    // plain message (not `{:#}`, which lists the variables' values) is kept, at most 1000 bytes.
    let render = move || -> std::result::Result<String, Failure> {
        let fail = |e: minijinja::Error, over: bool| match e.kind() {
            _ if over => Failure::Output,
            minijinja::ErrorKind::OutOfFuel => Failure::Fuel,
            _ => {
                let mut msg = e.to_string();
                if msg.len() > 1000 {
                    msg.truncate(msg.floor_char_boundary(1000));
                    msg.push_str("...");
                }
                Failure::Other(msg)
            }
        };
        let mut env = minijinja::Environment::new();
        env.set_fuel(Some(limits.fuel));
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        let t = env.template_from_str(&text).map_err(|e| fail(e, false))?;
        let mut out = CappedOutput { buf: Vec::new(), cap: limits.output_bytes, over: false };
        let ctx = minijinja::context! {
            messages => vec![minijinja::context! { role => "user", content => user }],
            add_generation_prompt => true,
            bos_token => bos,
            eos_token => eos,
        };
        if let Err(e) = t.render_captured_to(ctx, &mut out) {
            return Err(fail(e, out.over));
        }
        String::from_utf8(out.buf).map_err(|_| Failure::Other("the output is not UTF-8".into()))
    };
    match crate::io::budget::run_within(limits.memory_bytes, std::time::Duration::from_secs(limits.seconds), render) {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(Failure::Output)) => Err(Error::Invalid(format!("the chat template ({source}) renders more than {} bytes, the text budget", limits.output_bytes))),
        Ok(Err(Failure::Fuel)) => Err(Error::Invalid(format!("the chat template ({source}) ran past its budget of {} instructions", limits.fuel))),
        Ok(Err(Failure::Other(msg))) => Err(Error::Invalid(format!("the chat template ({source}) cannot be rendered: {msg}"))),
        Err(crate::io::budget::Exceeded::Memory) => Err(Error::Invalid(format!("the chat template ({source}) needs more than {} bytes of memory to render", limits.memory_bytes))),
        Err(crate::io::budget::Exceeded::Time) => Err(Error::Invalid(format!("the chat template ({source}) ran past its time limit of {} s", limits.seconds))),
    }
}

/// The largest template accepted: real ones are tens of KB. Bounds the nesting minijinja's
/// parser follows by recursion (at most ~90,000 levels of `1 if 1 else ...` in 1 MiB, within
/// the rendering thread's stack, `io::budget::STACK_BYTES`).
const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// The longest chain of unary operators accepted in a template's expressions. minijinja parses
/// such a chain by recursion without its nesting limit: `{{ ----...1 }}` with 20,000 signs
/// overflows the stack (found by the chat_template fuzz target).
const MAX_UNARY_RUN: usize = 64;

/// The longest chain of unary operators (`-`, `+`, `not`, with whitespace between) inside the
/// template's `{{ }}` and `{% %}` blocks, string literals skipped.
fn longest_unary_run(t: &str) -> usize {
    let b = t.as_bytes();
    let (mut i, mut in_block, mut run, mut longest) = (0, false, 0usize, 0usize);
    while i < b.len() {
        let two = &b[i..(i + 2).min(b.len())];
        if !in_block {
            in_block = two == b"{{" || two == b"{%";
            i += if in_block { 2 } else { 1 };
            continue;
        }
        match b[i] {
            _ if two == b"}}" || two == b"%}" => {
                in_block = false;
                run = 0;
                i += 2;
                continue;
            }
            q @ (b'\'' | b'"') => {
                run = 0;
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'-' | b'+' => run += 1,
            c if c.is_ascii_whitespace() => {}
            b'n' if b[i..].starts_with(b"not") && !b.get(i + 3).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) => {
                run += 1;
                i += 2;
            }
            _ => run = 0,
        }
        longest = longest.max(run);
        i += 1;
    }
    longest
}

/// Why a rendering failed.
enum Failure {
    /// Past the output cap.
    Output,
    /// Out of fuel.
    Fuel,
    Other(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-Instruct's template (from its GGUF), as Hugging Face renders it.
    #[test]
    fn renders_a_chatml_template() {
        let tmpl = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        let t = |text: &str| ChatTemplate { source: "test".into(), text: text.into() };
        let got = render_user_turn(&t(tmpl), "Hi!", "<s>", "</s>").unwrap();
        assert_eq!(got, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
        let err = render_user_turn(&t("{{ raise_exception('no system role') }}"), "x", "", "").unwrap_err().to_string();
        assert!(err.contains("no system role"), "{err}");
    }

    #[test]
    fn counts_chains_of_unary_operators_in_expressions_only() {
        assert_eq!(longest_unary_run("---- text {{ - -1 + 2 }} {{ '------' }}"), 2);
        assert_eq!(longest_unary_run("{% if not not not x %}{% endif %}{{ nothing }}"), 3);
        assert_eq!(longest_unary_run(&format!("{{{{ {}1 }}}}", "-".repeat(100))), 100);
    }
}
