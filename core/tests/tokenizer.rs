//! The GGUF-built tokenizer against llama.cpp's ids for the default model
//! (`tests/fixtures/tokenizer_smollm2.json`, see `tests/fixtures/README.md`).

use focus_core::model::gguf::GgufFile;
use focus_core::model::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
    parse_special: bool,
    add_bos: bool,
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// FOCUS_LENS_MODEL, else whatever `scripts/fetch-model.sh` prints (it downloads once).
fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FOCUS_LENS_MODEL") {
        return p.into();
    }
    let script = manifest_dir().join("../scripts/fetch-model.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .expect("run fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let g = GgufFile::open(&model_path()).expect("open model");
        Tokenizer::from_gguf(&g).expect("tokenizer from GGUF")
    })
}

fn cases() -> Vec<Case> {
    let path = manifest_dir().join("../tests/fixtures/tokenizer_smollm2.json");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases: Vec<Case> = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(cases.len(), 12);
    cases
}

#[test]
fn metadata() {
    let t = tokenizer();
    assert_eq!(t.vocab_size(), 49152);
    assert_eq!(t.bos_id(), Some(1));
    assert_eq!(t.eos_id(), Some(2));
    assert!(!t.add_bos());
    assert_eq!(t.token_text(1), "<|im_start|>");
    assert_eq!(t.token_text(198), "\n");
}

#[test]
fn matches_llama_cpp() {
    let t = tokenizer();
    let mut failed = Vec::new();
    for c in cases() {
        assert_eq!(c.add_bos, t.add_bos(), "{}", c.name);
        let got = t.encode(&c.text, c.parse_special).unwrap().ids;
        if got != c.ids {
            let first = got
                .iter()
                .zip(&c.ids)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(c.ids.len()));
            failed.push(format!(
                "{}: {} ids vs {} expected, first difference at {first}: got {:?} expected {:?}",
                c.name,
                got.len(),
                c.ids.len(),
                &got[first..(first + 5).min(got.len())],
                &c.ids[first..(first + 5).min(c.ids.len())],
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn offsets_cover_the_text() {
    let t = tokenizer();
    for c in cases() {
        let enc = t.encode(&c.text, c.parse_special).unwrap();
        assert_eq!(enc.ids.len(), enc.offsets.len(), "{}", c.name);
        // Monotone, on character boundaries, without gaps, from 0 to the end. A token holding
        // part of a multi-byte character spans that whole character, so neighbours may overlap.
        let mut covered = 0;
        let mut prev = (0, 0);
        for (i, &(s, e)) in enc.offsets.iter().enumerate() {
            assert!(
                s <= e && e <= c.text.len(),
                "{}: token {i} offset {s}..{e}",
                c.name
            );
            assert!(
                c.text.is_char_boundary(s) && c.text.is_char_boundary(e),
                "{}: token {i}",
                c.name
            );
            assert!(
                s >= prev.0 && e >= prev.1,
                "{}: token {i} goes backwards",
                c.name
            );
            assert!(
                s <= covered,
                "{}: gap before token {i} ({covered}..{s})",
                c.name
            );
            covered = covered.max(e);
            prev = (s, e);
        }
        assert_eq!(covered, c.text.len(), "{}: offsets end early", c.name);
    }
}

#[test]
fn decode_round_trips() {
    let t = tokenizer();
    for c in cases() {
        let ids = t.encode(&c.text, c.parse_special).unwrap().ids;
        assert_eq!(t.decode(&ids).unwrap(), c.text, "{}", c.name);
        assert_eq!(
            t.decode(&c.ids).unwrap(),
            c.text,
            "{}: llama.cpp ids",
            c.name
        );
    }
    assert!(t.decode(&[49152]).is_err());
    assert_eq!(t.token_text(u32::MAX), "");
}

#[test]
fn special_tokens_only_when_asked() {
    let t = tokenizer();
    let text = "<|im_start|>user";
    assert_eq!(t.encode(text, true).unwrap().ids[0], 1);
    assert!(!t.encode(text, false).unwrap().ids.contains(&1));
    assert!(t.encode("", false).unwrap().ids.is_empty());
}

#[test]
fn corrupt_tokenizer_json_is_an_error() {
    let dir = std::env::temp_dir().join(format!("focus-tokenizer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: &[(&str, &[u8])] = &[
        ("truncated.json", br#"{"version":"1.0","model":{"type":"BPE","vocab":{"a":0"#),
        ("not_json.json", b"\xff\xfe garbage"),
        ("empty.json", b""),
        // Well-formed JSON whose merge names a token that is not in the vocabulary.
        (
            "bad_merge.json",
            br#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
               "pre_tokenizer":null,"post_processor":null,"decoder":null,
               "model":{"type":"BPE","vocab":{"a":0},"merges":[["a","zz"]]}}"#,
        ),
    ];
    for (name, bytes) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        assert!(Tokenizer::from_file(&p).is_err(), "{name} was accepted");
    }
    assert!(Tokenizer::from_file(&dir.join("missing.json")).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn from_file_reads_bos_from_post_processor_and_config() {
    let dir = std::env::temp_dir().join(format!("focus-tokenizer-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = r#"{
      "version": "1.0",
      "truncation": {"direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0},
      "padding": null,
      "added_tokens": [
        {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
        {"id": 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
      ],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
      "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
      "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
        "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
        "vocab": {"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4, "Ġ": 5, "Ġab": 6},
        "merges": [["a", "b"], ["Ġ", "ab"]]}
    }"#;
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, json).unwrap();

    let t = Tokenizer::from_file(&path).unwrap();
    assert_eq!(t.vocab_size(), 7);
    assert_eq!((t.bos_id(), t.eos_id(), t.add_bos()), (Some(0), None, true));
    let enc = t.encode("ab ab", false).unwrap();
    assert_eq!(enc.ids, [0, 4, 6]);
    // The space belongs to the second token: offsets are not trimmed.
    assert_eq!(enc.offsets, [(0, 0), (0, 2), (2, 5)]);
    assert_eq!(t.decode(&enc.ids[1..]).unwrap(), "ab ab");
    assert_eq!(t.encode("</s>", true).unwrap().ids, [0, 1]);
    // The file's truncation (max_length 2) is ignored.
    assert_eq!(t.encode("ab ab ab", false).unwrap().ids, [0, 4, 6, 6]);

    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"add_bos_token": false, "eos_token": {"content": "</s>"}}"#,
    )
    .unwrap();
    let t = Tokenizer::from_file(&path).unwrap();
    assert_eq!(
        (t.bos_id(), t.eos_id(), t.add_bos()),
        (Some(0), Some(1), false)
    );
    assert_eq!(t.encode("ab ab", false).unwrap().ids, [4, 6]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A GGUF file with no tensors and the given metadata (string, string-array and bool values).
fn write_gguf(path: &Path, kvs: &[(&str, Meta)]) {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, v) in kvs {
        string(&mut out, key);
        match v {
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
            Meta::Strs(a) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((a.len() as u64).to_le_bytes());
                for s in a {
                    string(&mut out, s);
                }
            }
            Meta::U32(x) => {
                out.extend(4u32.to_le_bytes());
                out.extend(x.to_le_bytes());
            }
        }
    }
    std::fs::write(path, out).unwrap();
}

enum Meta {
    Str(&'static str),
    Strs(Vec<&'static str>),
    U32(u32),
}

#[test]
fn bad_gguf_metadata_is_an_error() {
    let dir = std::env::temp_dir().join(format!("focus-tokenizer-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = || {
        vec![
            ("tokenizer.ggml.model", Meta::Str("gpt2")),
            ("tokenizer.ggml.pre", Meta::Str("smollm")),
            (
                "tokenizer.ggml.tokens",
                Meta::Strs(vec!["a", "b", "ab", "Ġ"]),
            ),
            ("tokenizer.ggml.merges", Meta::Strs(vec!["a b"])),
        ]
    };
    let build = |name: &str, kvs: Vec<(&str, Meta)>| {
        let p = dir.join(name);
        write_gguf(&p, &kvs);
        Tokenizer::from_gguf(&GgufFile::open(&p).unwrap())
    };
    let t = build("good.gguf", good()).unwrap();
    assert_eq!(t.encode("ab a", false).unwrap().ids, [2, 3, 0]);
    assert!(!t.add_bos() && t.bos_id().is_none());

    let with = |key: &'static str, v: Meta| {
        let mut kvs: Vec<_> = good().into_iter().filter(|(k, _)| *k != key).collect();
        kvs.push((key, v));
        kvs
    };
    let without = |key: &str| {
        good()
            .into_iter()
            .filter(|(k, _)| *k != key)
            .collect::<Vec<_>>()
    };
    let expect_err = |name: &str, kvs, needle: &str| {
        let e = build(name, kvs).expect_err(name).to_string();
        assert!(e.contains(needle), "{name}: {e}");
    };
    expect_err(
        "spm.gguf",
        with("tokenizer.ggml.model", Meta::Str("llama")),
        "SentencePiece",
    );
    expect_err(
        "pre.gguf",
        with("tokenizer.ggml.pre", Meta::Str("mystery")),
        "mystery",
    );
    expect_err(
        "no_tokens.gguf",
        without("tokenizer.ggml.tokens"),
        "tokenizer.ggml.tokens",
    );
    expect_err(
        "no_merges.gguf",
        without("tokenizer.ggml.merges"),
        "tokenizer.ggml.merges",
    );
    expect_err(
        "bad_merge.gguf",
        with("tokenizer.ggml.merges", Meta::Strs(vec!["a zz"])),
        "tokenizer",
    );
    expect_err(
        "no_space.gguf",
        with("tokenizer.ggml.merges", Meta::Strs(vec!["ab"])),
        "merges[0]",
    );
    expect_err(
        "dup.gguf",
        with(
            "tokenizer.ggml.tokens",
            Meta::Strs(vec!["a", "b", "ab", "a"]),
        ),
        "twice",
    );
    expect_err(
        "bos.gguf",
        with("tokenizer.ggml.bos_token_id", Meta::U32(99)),
        "bos_token_id",
    );
    expect_err(
        "types.gguf",
        with("tokenizer.ggml.token_type", Meta::Strs(vec!["x"])),
        "token_type",
    );
    std::fs::remove_dir_all(&dir).ok();
}
