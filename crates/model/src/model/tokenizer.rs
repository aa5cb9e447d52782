//! Text <-> token ids, from a Hugging Face `tokenizer.json` or from a GGUF file's `tokenizer.ggml.*`
//! metadata. For GGUF we rebuild the tokenizer llama.cpp would use as a tokenizer.json-shaped
//! document and let the `tokenizers` crate parse it, so the ids match llama.cpp's: byte-level
//! BPE plus the same pre-tokenizer regexes, chosen by `tokenizer.ggml.pre` (`gpt2`), or
//! SentencePiece (`llama`, Gemma): llama.cpp's SPM merges the adjacent pair whose union is the
//! highest-scoring token, which is BPE with every split of every token as a merge ranked by the
//! token's score, with byte fallback for characters outside the vocabulary.

use crate::error::{Error, Result};
use crate::model::gguf::{GgufFile, Value};
use serde_json::{json, Value as Json};
use std::collections::HashSet;
use std::path::Path;

type HfTokenizer = tokenizers::Tokenizer;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_NORMAL: u64 = 1;
const TOKEN_TYPE_UNKNOWN: u64 = 2;
const TOKEN_TYPE_CONTROL: u64 = 3;
const TOKEN_TYPE_USER_DEFINED: u64 = 4;

// Pre-tokenizer regexes, copied from llama.cpp (`llm_tokenizer_bpe`). Each one splits the pieces
// the previous one left, keeping both matched and unmatched text as pieces.
const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer of a llama.cpp `tokenizer.ggml.pre` name: its regex list, whether whole
/// pre-tokenized words found in the vocabulary skip BPE (`ignore_merges`), and llama.cpp's
/// default for `add_bos` when the file does not say.
fn pre_tokenizer_for(pre: &str) -> Option<(Vec<&'static str>, bool, bool)> {
    Some(match pre {
        "default" | "" => (
            vec![
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_RE,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            false,
            false,
        ),
        "gpt2" | "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" | "exaone4" => {
            (vec![GPT2_RE], false, false)
        }
        // GPT-2's regex after isolating every digit (SmolLM, StarCoder, ...).
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            (vec![r"\p{N}", GPT2_RE], false, false)
        }
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" => {
            (vec![LLAMA3_RE], true, true)
        }
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "megrez" => (vec![QWEN2_RE], false, false),
        _ => return None,
    })
}

/// Where a long text may be cut into pieces that encode to the ids of the whole text.
#[derive(Debug, Clone)]
enum Cuts {
    /// Between an ASCII letter or digit and the space or newline after it: every pre-tokenizer
    /// regex of our byte-level BPE ends a piece there and starts the next with the whitespace,
    /// whatever follows (a cut inside a whitespace run would change what `\s+(?!\S)` sees; one
    /// after punctuation would split llama3's `[^\s..]+[\r\n]*`).
    Word,
    /// SentencePiece without a space prefix (Gemma): before a space that follows an ASCII
    /// letter or digit `c`, when no token holds `c` followed by `▁` (`after_ok[c]`). The space
    /// becomes `▁` and no merge can join across the cut, so both sides merge alone.
    Spm { after_ok: Box<[bool; 128]> },
    /// None known (a tokenizer.json whose normalizer or pre-tokenizer sees the whole text):
    /// the text is cut only inside a run without whitespace longer than the hard bound.
    None,
}

/// The most bytes of one piece, past which it is cut at a fixed length (at a character
/// boundary; the ids next to such a cut may differ from the whole text's): `chunk` x 2, at
/// least 64 KiB. A text without whitespace would otherwise be one piece, and the tokenizers
/// crate takes ~140 bytes per byte of a piece (4.4 GB for 32 MiB).
fn hard_bound(chunk: usize) -> usize {
    chunk.saturating_mul(2).max(64 << 10)
}

/// The largest character boundary at or below `i` (and above `start`).
fn floor_boundary(text: &str, start: usize, mut i: usize) -> usize {
    while i > start + 1 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl Cuts {
    fn safe(&self, b: &[u8], i: usize) -> bool {
        let (p, c) = (b[i - 1], b[i]);
        match self {
            Cuts::Word => p.is_ascii_alphanumeric() && (c == b' ' || c == b'\n'),
            Cuts::Spm { after_ok } => c == b' ' && p.is_ascii_alphanumeric() && after_ok[p as usize],
            Cuts::None => false,
        }
    }

    /// Where the piece of `text` starting at `start` ends: the first safe cut at or after
    /// `start + chunk` bytes, else a fixed cut at the hard bound, else the end of the text.
    fn piece_end(&self, text: &str, start: usize, chunk: usize) -> usize {
        let b = text.as_bytes();
        let hard = hard_bound(chunk);
        if let Cuts::None = self {
            // Only a whitespace-free run longer than the bound is cut (ids elsewhere stay).
            let mut run = start;
            for (i, &c) in b.iter().enumerate().skip(start) {
                if c.is_ascii_whitespace() {
                    run = i + 1;
                } else if i + 1 - run > hard {
                    return floor_boundary(text, start, run + hard);
                }
            }
            return b.len();
        }
        let limit = start.saturating_add(hard).min(b.len());
        // ASCII bytes only are tested, so a safe `i` is a character boundary.
        if let Some(i) = (start.saturating_add(chunk.max(1))..limit).find(|&i| self.safe(b, i)) {
            return i;
        }
        if limit == b.len() {
            return b.len();
        }
        floor_boundary(text, start, limit)
    }
}

/// The SentencePiece cuts of a vocabulary: a letter or digit may end a piece unless a token
/// (or an added token's text) holds it followed by `▁` or a space.
fn spm_cuts<'a>(tokens: impl Iterator<Item = &'a str>) -> Cuts {
    let mut after_ok = Box::new([true; 128]);
    for t in tokens {
        let mut prev: Option<char> = None;
        for c in t.chars() {
            if let Some(p) = prev.filter(|p| p.is_ascii_alphanumeric()) {
                if c == '\u{2581}' || c == ' ' {
                    after_ok[p as usize] = false;
                }
            }
            prev = Some(c);
        }
    }
    Cuts::Spm { after_ok }
}

/// The most bytes a piece of text may become under a tokenizer.json normalizer.
pub const MAX_NORMALIZED_BYTES: u64 = 256 << 20;
/// The most a tokenizer.json normalizer may grow a text (" " -> "▁" is 3).
pub const MAX_GROWTH: u64 = 1024;

/// How much a tokenizer.json normalizer may grow a text of n bytes at most: (factor, added),
/// to at most factor x n + added bytes. Only the normalizers that can grow text without bound
/// count (`Replace`, `Prepend`, `Append`, nested in `Sequence`); the Unicode forms and the
/// others stay within a few bytes per character.
fn normalizer_growth(n: &Json) -> (u64, u64) {
    let str_len = |k: &str| n.get(k).and_then(Json::as_str).map_or(0, |s| s.len() as u64);
    match n.get("type").and_then(Json::as_str) {
        Some("Sequence") => n.get("normalizers").and_then(Json::as_array).map_or((1, 0), |list| {
            list.iter().map(normalizer_growth).fold((1u64, 0u64), |(f, a), (g, b)| (f.saturating_mul(g), a.saturating_mul(g).saturating_add(b)))
        }),
        Some("Replace") => {
            // A match is at least one byte (a string pattern: its length).
            let pat = n.get("pattern").and_then(|p| p.get("String")).and_then(Json::as_str).map_or(1, |s| s.len().max(1) as u64);
            (str_len("content").div_ceil(pat).max(1), 0)
        }
        Some("Prepend") => (1, str_len("prepend")),
        Some("Append") => (1, str_len("append")),
        _ => (1, 0),
    }
}

/// Token ids of a text and where each token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoding {
    pub ids: Vec<u32>,
    /// Byte offsets (start, end) in the input text of each token, always on character
    /// boundaries: a token holding only part of a multi-byte character spans the whole
    /// character, so neighbouring spans can overlap by that character. An added BOS has (0, 0).
    pub offsets: Vec<(usize, usize)>,
}

pub struct Tokenizer {
    /// Splits special-token strings (`<|im_start|>`) out of the text as their ids.
    special: HfTokenizer,
    /// The same tokenizer with `encode_special_tokens(true)`: special-token strings are plain text.
    plain: HfTokenizer,
    vocab_size: usize,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    /// Where a long text may be cut into pieces with the same ids (our GGUF tokenizers, and
    /// tokenizer.json files whose normalizer and pre-tokenizer see no further than a word).
    /// Keeps memory per input byte bounded.
    cuts: Cuts,
    /// How many times the normalizer may grow a text at most (`Replace`), checked against
    /// `MAX_NORMALIZED_BYTES` before a text is encoded: (factor, added), see
    /// `normalizer_growth`.
    growth: (u64, u64),
}

/// Texts longer than this are encoded in pieces of about this size (see `Tokenizer::encode`):
/// the tokenizers crate holds ~100 bytes per token of bookkeeping for a whole input.
pub const ENCODE_CHUNK_BYTES: usize = 1 << 20;

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

impl Tokenizer {
    fn new(
        mut special: HfTokenizer,
        vocab_size: usize,
        bos: Option<u32>,
        eos: Option<u32>,
        add_bos: bool,
        cuts: Cuts,
        growth: (u64, u64),
    ) -> Self {
        special.set_encode_special_tokens(false);
        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);
        Tokenizer {
            special,
            plain,
            vocab_size,
            bos,
            eos,
            add_bos,
            cuts,
            growth,
        }
    }

    /// A Hugging Face `tokenizer.json`. BOS/EOS come from `tokenizer_config.json` / `config.json`
    /// beside it when present; otherwise BOS is whatever the file's post-processor prepends.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = crate::io::read_capped(path, crate::io::MAX_JSON_BYTES, "tokenizer.json")?;
        let doc: Json = serde_json::from_slice(&bytes).map_err(|e| Error::bad_file(path, format!("not a valid tokenizer.json: {e}")))?;
        // A normalizer that grows text (Replace "a" by 64 KiB, chained) is refused before it
        // allocates: at load past MAX_GROWTH, for a text whose piece would pass
        // MAX_NORMALIZED_BYTES at encode.
        let growth = doc.get("normalizer").map_or((1, 0), normalizer_growth);
        if growth.0 > MAX_GROWTH {
            return Err(Error::bad_file(path, format!("the normalizer (Replace) grows a text up to {} times; at most {MAX_GROWTH} times is accepted", growth.0)));
        }
        let chunkable = doc.get("normalizer").is_none_or(|n| n.is_null() || matches!(n.get("type").and_then(Json::as_str), Some("NFC" | "NFKC" | "NFD" | "NFKD" | "Lowercase")))
            && !doc.get("pre_tokenizer").is_some_and(|p| {
                let t = p.to_string();
                t.contains("Metaspace") || t.contains("\"add_prefix_space\":true")
            });
        // The tokenizers crate can panic on hostile files (a bad Precompiled charsmap, an empty
        // Replace pattern): every call into it is contained.
        let mut hf = crate::error::contain("loading tokenizer.json", || {
            HfTokenizer::from_bytes(&bytes).map_err(|e| Error::bad_file(path, format!("not a valid tokenizer.json: {e}")))
        })?;
        // We add BOS ourselves, so the post-processor (which may also trim offsets) goes, and
        // so do truncation and padding, which some files carry and would cut long texts (or pad
        // the probe below to a giant length).
        hf.with_truncation(None).map_err(tok_err)?;
        hf.with_padding(None);
        // What the post-processor adds in front of an empty text is the model's BOS (if any).
        let probe = crate::error::contain("encoding with tokenizer.json", || hf.encode("", true).map_err(tok_err))?;
        let probed_bos = probe.get_ids().first().copied().filter(|&id| {
            hf.id_to_token(id)
                .is_some_and(|t| hf.get_added_vocabulary().is_special_token(&t))
        });
        hf.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
        // A file that cannot encode a plain sentence is refused now, not at the user's text.
        crate::error::contain("encoding with tokenizer.json", || hf.encode("Hello, world. 123", false).map_err(tok_err))?;

        let dir = path.parent().unwrap_or(Path::new("."));
        let read_json = |name: &str| -> Option<Json> {
            serde_json::from_slice(&crate::io::read_capped(&dir.join(name), crate::io::MAX_JSON_BYTES, name).ok()?).ok()
        };
        let tok_config = read_json("tokenizer_config.json");
        let model_config = read_json("config.json");

        // A token named in tokenizer_config.json: either a string or {"content": ...}.
        let named = |key: &str| -> Option<u32> {
            let v = tok_config.as_ref()?.get(key)?;
            let s = v.as_str().or_else(|| v.get("content")?.as_str())?;
            hf.token_to_id(s)
        };
        // An id in config.json: an integer or a list (first entry).
        let config_id = |key: &str| -> Option<u32> {
            let v = model_config.as_ref()?.get(key)?;
            let v = v.as_array().and_then(|a| a.first()).unwrap_or(v);
            v.as_u64().and_then(|i| u32::try_from(i).ok())
        };
        let bos = named("bos_token")
            .or_else(|| config_id("bos_token_id"))
            .or(probed_bos);
        let eos = named("eos_token").or_else(|| config_id("eos_token_id"));
        let add_bos = tok_config
            .as_ref()
            .and_then(|c| c.get("add_bos_token")?.as_bool())
            .unwrap_or(probed_bos.is_some())
            && bos.is_some();

        let vocab_size = hf
            .get_vocab(true)
            .values()
            .map(|&id| id as usize + 1)
            .max()
            .unwrap_or(0);
        Ok(Self::new(hf, vocab_size, bos, eos, add_bos, if chunkable { Cuts::Word } else { Cuts::None }, growth))
    }

    /// Rebuilds the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata:
    /// byte-level BPE (`tokenizer.ggml.model = "gpt2"`) or SentencePiece (`"llama"`).
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let bad = |detail: String| Error::bad_file(&g.path, detail);
        let model = g
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .unwrap_or("");
        match model {
            "gpt2" => {}
            "llama" => return Self::from_gguf_spm(g),
            "" => return Err(bad("missing metadata key tokenizer.ggml.model".into())),
            other => {
                return Err(Error::Tokenizer(format!(
                    "tokenizer type {other:?} is not supported; only byte-level BPE (\"gpt2\") and SentencePiece (\"llama\")"
                )))
            }
        }
        let pre = g
            .get("tokenizer.ggml.pre")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let (regexes, ignore_merges, default_add_bos) =
            pre_tokenizer_for(pre).ok_or_else(|| {
                Error::Tokenizer(format!(
                    "unsupported pre-tokenizer type {pre:?} (tokenizer.ggml.pre)"
                ))
            })?;

        let tokens = gguf_strings(g, "tokenizer.ggml.tokens")?;
        let merges = gguf_strings(g, "tokenizer.ggml.merges")?;
        let n = tokens.len();
        if merges.len() >= n {
            return Err(bad(format!("{} merges for only {n} tokens", merges.len())));
        }
        let types = gguf_token_types(g, n)?;
        let (vocab, added) = gguf_vocab(g, &tokens, &types)?;
        let merges = merges
            .iter()
            .enumerate()
            .map(|(i, m)| {
                // As llama.cpp: split at the first space after the first character (so a
                // merge may start with a space).
                let skip = m.chars().next().map_or(0, char::len_utf8);
                let pos = m[skip..].find(' ').map(|p| p + skip);
                let (a, b) = pos
                    .map(|p| (&m[..p], &m[p + 1..]))
                    .filter(|(a, b)| !a.is_empty() && !b.is_empty())
                    .ok_or_else(|| {
                        bad(format!("tokenizer.ggml.merges[{i}] {m:?} is not \"a b\""))
                    })?;
                Ok(json!([a, b]))
            })
            .collect::<Result<Vec<_>>>()?;

        let mut pre_tokenizers: Vec<Json> = regexes
            .iter()
            .map(|re| json!({"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false}))
            .collect();
        pre_tokenizers.push(json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}));
        let doc = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre_tokenizers},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges,
            },
        });
        let hf = HfTokenizer::from_bytes(serde_json::to_vec(&doc)?).map_err(|e| {
            bad(format!(
                "cannot build the tokenizer from tokenizer.ggml.*: {e}"
            ))
        })?;

        let (bos, eos, add_bos) = gguf_bos_eos(g, n, default_add_bos)?;
        Ok(Self::new(hf, n, bos, eos, add_bos, Cuts::Word, (1, 0)))
    }

    /// SentencePiece from GGUF (`tokenizer.ggml.model = "llama"`: tokens, scores, token types,
    /// BOS; Gemma), as llama.cpp's SPM tokenizer: spaces become U+2581 (with one in front of each
    /// piece of text when `tokenizer.ggml.add_space_prefix` is set, llama.cpp's default), pieces
    /// merge by score (`spm_merges`), and characters outside the vocabulary become their UTF-8
    /// bytes (`<0xNN>` tokens). No pre-tokenizer: a piece of text between added tokens is one
    /// word, cut only where no token reaches across (`Cuts::Spm`).
    fn from_gguf_spm(g: &GgufFile) -> Result<Self> {
        let bad = |detail: String| Error::bad_file(&g.path, detail);
        let tokens = gguf_strings(g, "tokenizer.ggml.tokens")?;
        let n = tokens.len();
        let types = gguf_token_types(g, n)?;
        let scores: Vec<f32> = match g.get("tokenizer.ggml.scores").and_then(Value::as_array) {
            Some(a) if a.len() == n => a
                .iter()
                .enumerate()
                .map(|(i, v)| v.as_f64().map(|x| x as f32).filter(|x| x.is_finite()).ok_or_else(|| bad(format!("tokenizer.ggml.scores[{i}] is not a finite number"))))
                .collect::<Result<_>>()?,
            Some(a) => return Err(bad(format!("tokenizer.ggml.scores has {} entries for {n} tokens", a.len()))),
            None => return Err(bad("missing metadata key tokenizer.ggml.scores (SentencePiece needs it)".into())),
        };
        let (vocab, added) = gguf_vocab(g, &tokens, &types)?;
        // Byte fallback needs every <0xNN> token.
        if let Some(b) = (0..=255u32).find(|b| !vocab.contains_key(&format!("<0x{b:02X}>"))) {
            return Err(bad(format!("SentencePiece vocabulary lacks the byte token <0x{b:02X}>")));
        }
        let merges = spm_merges(&tokens, &scores, &vocab);
        let space_prefix = g.get("tokenizer.ggml.add_space_prefix").and_then(Value::as_bool).unwrap_or(true);
        let mut normalizers = Vec::new();
        if space_prefix {
            normalizers.push(json!({"type": "Prepend", "prepend": "\u{2581}"}));
        }
        normalizers.push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}));
        let mut decoders = vec![
            json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
            json!({"type": "ByteFallback"}),
            json!({"type": "Fuse"}),
        ];
        if space_prefix {
            decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
        }
        let unk = g.get("tokenizer.ggml.unknown_token_id").and_then(Value::as_u64).and_then(|i| tokens.get(i as usize)).map(|t| t.to_string());
        let doc = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": null,
            "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": decoders},
            "model": {
                "type": "BPE", "dropout": null, "unk_token": unk, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": true,
                "ignore_merges": false, "vocab": vocab, "merges": merges,
            },
        });
        let hf = HfTokenizer::from_bytes(serde_json::to_vec(&doc)?).map_err(|e| bad(format!("cannot build the SentencePiece tokenizer from tokenizer.ggml.*: {e}")))?;
        // llama.cpp adds BOS to SentencePiece models unless the file says otherwise.
        let (bos, eos, add_bos) = gguf_bos_eos(g, n, true)?;
        // Without a space prefix, cut before spaces no token reaches across (Gemma); with one,
        // every piece would gain a `▁`: only fixed cuts in whitespace-free runs.
        let cuts = if space_prefix { Cuts::None } else { spm_cuts(tokens.iter().copied()) };
        Ok(Self::new(hf, n, bos, eos, add_bos, cuts, (1, 0)))
    }

    /// Token ids of `text`, with BOS in front when the model asks for it. With `parse_special`,
    /// special-token strings such as `<|im_start|>` become their ids; otherwise they are text.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Encoding> {
        self.encode_chunked(text, parse_special, ENCODE_CHUNK_BYTES)
    }

    /// The ids of `text` where it continues other text (a scored answer after its prompt):
    /// `encode`'s without the BOS it puts first where the model wants one (Gemma, Llama 3), which
    /// belongs only at the start of a sequence.
    pub fn encode_continuation(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.encode(text, false)?.ids;
        if self.add_bos && self.bos.is_some() && ids.first() == self.bos.as_ref() {
            ids.remove(0);
        }
        Ok(ids)
    }

    /// `encode` with pieces of about `chunk` bytes: a long text is cut where a pre-tokenizer
    /// would cut it anyway (between a letter or digit and the space or newline after it), so
    /// the ids are those of the whole text while memory stays per piece.
    pub fn encode_chunked(&self, text: &str, parse_special: bool, chunk: usize) -> Result<Encoding> {
        let hf = if parse_special { &self.special } else { &self.plain };
        let mut ids = Vec::new();
        let mut offsets = Vec::new();
        if self.add_bos {
            ids.extend(self.bos);
            offsets.push((0, 0));
        }
        let mut start = 0;
        for end in self.piece_ends(text, chunk) {
            let piece = &text[start..end];
            let (g, add) = self.growth;
            let normalized = (piece.len() as u64).saturating_mul(g).saturating_add(add);
            if normalized > MAX_NORMALIZED_BYTES {
                return Err(Error::Tokenizer(format!(
                    "the normalizer grows text up to {g} times: a piece of {} bytes could become {normalized} bytes; at most {MAX_NORMALIZED_BYTES} bytes are normalized at once",
                    piece.len()
                )));
            }
            let enc = crate::error::contain("encoding the text", || hf.encode(piece, false).map_err(tok_err))?;
            ids.extend_from_slice(enc.get_ids());
            offsets.extend(enc.get_offsets().iter().map(|&(a, b)| (a + start, b + start)));
            start = end;
        }
        Ok(Encoding { ids, offsets })
    }

    /// Where `encode_chunked` cuts `text` with pieces of about `chunk` bytes: the end of each
    /// piece, the last being `text.len()`.
    pub fn piece_ends(&self, text: &str, chunk: usize) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut start = 0;
        while start < text.len() {
            start = self.cuts.piece_end(text, start, chunk);
            ends.push(start);
        }
        ends
    }

    /// The text of `ids`, special tokens included. Byte sequences that are not valid UTF-8
    /// (a character cut between tokens) become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(Error::Tokenizer(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.vocab_size
            )));
        }
        self.special.decode(ids, false).map_err(tok_err)
    }

    /// Readable text of one token for display (byte-level decoded, lossy); empty for an unknown id.
    pub fn token_text(&self, id: u32) -> String {
        self.special.decode(&[id], false).unwrap_or_default()
    }

    /// Number of token ids (rows of the embedding the tokenizer can address).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode` puts BOS in front.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Ids of the special (control) tokens.
    pub fn special_ids(&self) -> HashSet<u32> {
        self.special
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect()
    }
}

/// A GGUF string array (token texts, merges).
fn gguf_strings<'a>(g: &'a GgufFile, key: &str) -> Result<Vec<&'a str>> {
    let bad = |detail: String| Error::bad_file(&g.path, detail);
    let arr = g
        .get(key)
        .ok_or_else(|| bad(format!("missing metadata key {key}")))?
        .as_array()
        .ok_or_else(|| bad(format!("metadata {key} is not an array")))?;
    let v: Vec<&str> = arr
        .iter()
        .enumerate()
        .map(|(i, v)| v.as_str().ok_or_else(|| bad(format!("{key}[{i}] is not a string"))))
        .collect::<Result<_>>()?;
    if key == "tokenizer.ggml.tokens" && (v.is_empty() || v.len() > u32::MAX as usize) {
        return Err(bad(format!("tokenizer.ggml.tokens has {} entries", v.len())));
    }
    Ok(v)
}

/// `tokenizer.ggml.token_type` (all normal when absent).
fn gguf_token_types(g: &GgufFile, n: usize) -> Result<Vec<u64>> {
    let bad = |detail: String| Error::bad_file(&g.path, detail);
    match g.get("tokenizer.ggml.token_type") {
        None => Ok(vec![TOKEN_TYPE_NORMAL; n]),
        Some(v) => {
            let arr = v.as_array().ok_or_else(|| bad("tokenizer.ggml.token_type is not an array".into()))?;
            if arr.len() != n {
                return Err(bad(format!("tokenizer.ggml.token_type has {} entries for {n} tokens", arr.len())));
            }
            arr.iter()
                .enumerate()
                .map(|(i, t)| t.as_u64().ok_or_else(|| bad(format!("tokenizer.ggml.token_type[{i}] is not an integer"))))
                .collect()
        }
    }
}

/// The vocabulary (text -> id) and the added tokens: control and unknown tokens are special
/// (split out only when special tokens are parsed), user-defined ones are always matched, as in
/// llama.cpp's `tokenizer_st_partition`.
fn gguf_vocab(g: &GgufFile, tokens: &[&str], types: &[u64]) -> Result<(serde_json::Map<String, Json>, Vec<Json>)> {
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, &text) in tokens.iter().enumerate() {
        // llama.cpp renames empty tokens the same way and rejects duplicate ones.
        let text = if text.is_empty() { format!("[EMPTY_{id}]") } else { text.to_string() };
        let special = matches!(types[id], TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN);
        if special || types[id] == TOKEN_TYPE_USER_DEFINED {
            added.push(json!({
                "id": id, "content": text, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special,
            }));
        }
        if vocab.insert(text.clone(), json!(id)).is_some() {
            return Err(Error::bad_file(&g.path, format!("tokenizer.ggml.tokens has {text:?} twice")));
        }
    }
    Ok((vocab, added))
}

/// BOS, EOS and whether BOS is added (`default_add_bos` when the file does not say).
fn gguf_bos_eos(g: &GgufFile, n: usize, default_add_bos: bool) -> Result<(Option<u32>, Option<u32>, bool)> {
    let bad = |detail: String| Error::bad_file(&g.path, detail);
    let id = |key: &str| -> Result<Option<u32>> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(i) if (i as usize) < n => Ok(Some(i as u32)),
                _ => Err(bad(format!("metadata {key} = {v:?} is not a token id below {n}"))),
            },
        }
    };
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos = id("tokenizer.ggml.eos_token_id")?;
    let add_bos = g.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool).unwrap_or(default_add_bos);
    if add_bos && bos.is_none() {
        return Err(bad("tokenizer.ggml.add_bos_token is set but there is no bos_token_id".into()));
    }
    Ok((bos, eos, add_bos))
}

/// SentencePiece merges from token scores: every split (a, b) of every token t with a and b in
/// the vocabulary, ranked by t's score (highest first; ties by id, then by split position).
/// llama.cpp's SPM merges, at each step, the adjacent pair whose union is the highest-scoring
/// token (ties to the left); BPE with these merges makes the same choices.
fn spm_merges(tokens: &[&str], scores: &[f32], vocab: &serde_json::Map<String, Json>) -> Vec<Json> {
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by(|&a, &b| scores[b].partial_cmp(&scores[a]).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)));
    let mut merges = Vec::new();
    for id in order {
        let t = tokens[id];
        for (cut, _) in t.char_indices().skip(1) {
            let (a, b) = t.split_at(cut);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                merges.push(json!([a, b]));
            }
        }
    }
    merges
}
