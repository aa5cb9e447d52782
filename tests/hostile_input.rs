//! The failure classes of issue 17's hostile-input corpus, one test per class: non-regular
//! files, dependency panics, allocations driven by untrusted counts, NaN results, silent
//! accepts. Every case must end in one clear error (never a panic, hang or abort).

mod common;
#[path = "common/gguf_builder.rs"]
mod gguf_builder;

use candle_core::Device;
use focus_core::model::tokenizer::Tokenizer;
use focus_core::model::ForwardOptions;
use focus_core::{Adapter, AdapterSpec, Mode, Model};
use common::inputs::{assert_has, edit_config, edit_tensor, err_msg, tiny_copy};
use gguf_builder::GgufBuilder;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it takes over 20 s (a FIFO read would block forever).
fn within_time<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what} hung"))
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo").arg(p).status().expect("mkfifo runs");
    assert!(st.success());
}

fn load_err(path: &Path) -> String {
    let p = path.to_path_buf();
    within_time("Model::load", move || err_msg(Model::load(&p, &Device::Cpu)))
}

/// A small word-level tokenizer.json; `normalizer` and `padding` are spliced in.
fn tokenizer_json(normalizer: serde_json::Value, padding: serde_json::Value) -> String {
    let mut vocab = serde_json::Map::new();
    for (i, w) in ["[UNK]", "hello", "world", "the", "cat", "sat", ",", "."].iter().enumerate() {
        vocab.insert(w.to_string(), i.into());
    }
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": padding, "added_tokens": [],
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    })
    .to_string()
}

// ---------------------------------------------------------------------------------------------
// Not a regular file: FIFOs would block forever, /dev/zero never ends.

#[test]
fn fifos_and_devices_are_refused_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("pipe");
    mkfifo(&fifo);
    let zero = tmp.path().join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for p in [&fifo, &zero] {
        let q = p.clone();
        let e = within_time("read_text", move || err_msg(focus_core::io::text::read_text(&q)));
        assert_has(&e, &["not a regular file"]);
        assert_has(&load_err(p), &["not a regular file"]);
        let q = p.clone();
        let e = within_time("Tokenizer::from_file", move || err_msg(Tokenizer::from_file(&q)));
        assert_has(&e, &["not a regular file"]);
    }
    // Inside a model directory: config.json, then a safetensors file.
    let d = tiny_copy("llama");
    std::fs::remove_file(d.path().join("config.json")).unwrap();
    mkfifo(&d.path().join("config.json"));
    assert_has(&load_err(d.path()), &["config.json", "not a regular file"]);
    let d = tiny_copy("llama");
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    mkfifo(&d.path().join("model.safetensors"));
    assert_has(&load_err(d.path()), &["model.safetensors", "not a regular file"]);
    // An adapter whose config and weights are FIFOs.
    let m = Model::load(&common::fixture("hf_tiny").join("llama"), &Device::Cpu).unwrap();
    let a = tempfile::tempdir().unwrap();
    Adapter::random(&m.identity(), m.device(), &AdapterSpec { groups: 4, window: 4, ..Default::default() }, 1).unwrap().save(a.path()).unwrap();
    for f in ["adapter_model.safetensors", "adapter_config.json"] {
        std::fs::remove_file(a.path().join(f)).unwrap();
        mkfifo(&a.path().join(f));
        let (dir, id) = (a.path().to_path_buf(), m.identity());
        let e = within_time("Adapter::load", move || err_msg(Adapter::load(&dir, &id, &Device::Cpu)));
        assert_has(&e, &[f, "not a regular file"]);
    }
}

// ---------------------------------------------------------------------------------------------
// Panics inside the tokenizers crate, and allocations a tokenizer.json asks for.

#[test]
fn hostile_tokenizer_json_gives_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("tokenizer.json");
    std::fs::write(&p, tokenizer_json(serde_json::Value::Null, serde_json::Value::Null)).unwrap();
    let t = Tokenizer::from_file(&p).expect("the baseline tokenizer loads");
    assert_eq!(t.encode("hello world", false).unwrap().ids, vec![1, 2]);
    let cases = [
        serde_json::json!({"type": "Precompiled", "precompiled_charsmap": "AAAAAAAAAAAA"}),
        serde_json::json!({"type": "Replace", "pattern": {"String": ""}, "content": "x"}),
        serde_json::json!({"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"Regex": ""}, "content": ""}]}),
    ];
    for n in cases {
        std::fs::write(&p, tokenizer_json(n.clone(), serde_json::Value::Null)).unwrap();
        // Either refused at load, or every encode is an error: never a panic.
        let r = std::panic::catch_unwind(|| Tokenizer::from_file(&p).and_then(|t| t.encode("hello world, the cat sat.", false)));
        match r {
            Err(_) => panic!("normalizer {n}: panicked"),
            Ok(Ok(e)) => assert!(!e.ids.is_empty(), "normalizer {n}: accepted but encoded nothing"),
            Ok(Err(e)) => assert!(!e.to_string().is_empty()),
        }
    }
    // Padding to 1e8 tokens: removed before anything is encoded, so loading is cheap.
    let pad = serde_json::json!({"strategy": {"Fixed": 100000000}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[UNK]"});
    std::fs::write(&p, tokenizer_json(serde_json::Value::Null, pad)).unwrap();
    let q = p.clone();
    let t = within_time("padded tokenizer", move || Tokenizer::from_file(&q).unwrap());
    assert_eq!(t.encode("the cat", false).unwrap().ids, vec![3, 4]);
}

#[test]
fn long_texts_encode_in_pieces_with_the_same_ids() {
    // The real BPE tokenizer (from the default model's GGUF metadata), pieces of 64 bytes:
    // every cut must fall where the pre-tokenizer would cut anyway.
    // Both pre-tokenizer families we ship: SmolLM2 (GPT-2's regex, digits isolated) and
    // Qwen2.5 (llama3-style regex).
    for model in [common::model_path(), common::qwen2_model_path()] {
        let g = focus_core::model::gguf::GgufFile::open(&model).unwrap();
        let t = Tokenizer::from_gguf(&g).unwrap();
        let base = std::fs::read_to_string(common::root().join("assets/sample.txt")).unwrap();
        let text = format!("{base}\nno newline: here, just words 123 4567 and more words.\n\n  {}", "abc def ".repeat(40));
        let whole = t.encode_chunked(&text, true, usize::MAX / 2).unwrap();
        for chunk in [1, 7, 64, 1000] {
            let pieces = t.encode_chunked(&text, true, chunk).unwrap();
            assert_eq!(pieces.ids, whole.ids, "{}: chunk {chunk}", model.display());
            assert_eq!(pieces.offsets, whole.offsets, "{}: chunk {chunk}", model.display());
        }
        assert!(whole.ids.len() > 500);
    }
}

// ---------------------------------------------------------------------------------------------
// Counts and sizes checked before allocating.

#[test]
fn gguf_metadata_beyond_the_value_budget_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let n = focus_core::model::gguf::MAX_METADATA_VALUES as u64 + 1;
    let b = GgufBuilder::default().kv_str("general.architecture", "llama").kv_u32_array("huge", n, &vec![0; n as usize]).bytes();
    let p = tmp.path().join("huge.gguf");
    std::fs::write(&p, b).unwrap();
    assert_has(&load_err(&p), &["metadata holds more than", "values"]);
}

#[test]
fn adapter_fields_are_checked_before_allocating() {
    let m = Model::load(&common::fixture("hf_tiny").join("llama"), &Device::Cpu).unwrap();
    let id = m.identity();
    let spec = |d_g, tau| AdapterSpec { d_g, tau, groups: 4, window: 4, ..Default::default() };
    assert_has(&err_msg(Adapter::random(&id, &Device::Cpu, &spec(0, 0.1), 0)), &["d_g = 0"]);
    assert_has(&err_msg(Adapter::random(&id, &Device::Cpu, &spec(100_000_000, 0.1), 0)), &["d_g = 100000000"]);
    // A tau that passes `> 0` but overflows every score.
    assert_has(&err_msg(Adapter::random(&id, &Device::Cpu, &spec(16, 5e-324), 0)), &["tau", "must be in [1e-4, 1e4]"]);
    // The same through a saved config.
    let d = tempfile::tempdir().unwrap();
    Adapter::random(&id, &Device::Cpu, &spec(16, 0.1), 0).unwrap().save(d.path()).unwrap();
    let cfg = d.path().join("adapter_config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    v["tau"] = serde_json::json!(5e-324);
    std::fs::write(&cfg, v.to_string()).unwrap();
    assert_has(&err_msg(Adapter::load(d.path(), &id, &Device::Cpu)), &["tau"]);
}

// ---------------------------------------------------------------------------------------------
// Values that would give NaN results are refused up front, and NaN at run time is an error.

fn gguf_with(eps: f32, freq_base: Option<f32>) -> Vec<u8> {
    let mut b = GgufBuilder::default()
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 1)
        .kv_u32("llama.embedding_length", 8)
        .kv_u32("llama.attention.head_count", 2)
        .kv_u32("llama.feed_forward_length", 16)
        .kv_u32("llama.context_length", 64)
        .kv_f32("llama.attention.layer_norm_rms_epsilon", eps);
    if let Some(f) = freq_base {
        b = b.kv_f32("llama.rope.freq_base", f);
    }
    b.tensor_f32("token_embd.weight", &[8, 4], &[0.5; 32]).bytes()
}

#[test]
fn header_values_that_give_nan_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (eps, base, want)) in [
        (f32::NAN, None, "norm epsilon"),
        (-1.0, None, "norm epsilon"),
        (1e-5, Some(0.0), "RoPE base"),
        (1e-5, Some(f32::NAN), "RoPE base"),
        (1e-5, Some(-10000.0), "RoPE base"),
    ]
    .into_iter()
    .enumerate()
    {
        let p = tmp.path().join(format!("m{i}.gguf"));
        std::fs::write(&p, gguf_with(eps, base)).unwrap();
        assert_has(&load_err(&p), &["invalid model header", want]);
    }
    for (key, val, want) in [
        ("rms_norm_eps", serde_json::json!(-1.0), "norm epsilon"),
        ("rope_theta", serde_json::json!(0.0), "RoPE base"),
        ("rope_theta", serde_json::json!("10000"), "\"rope_theta\": \"10000\" is not a number"),
    ] {
        let d = tiny_copy("llama");
        edit_config(d.path(), |c| {
            c.remove("rope_parameters");
            c.insert(key.into(), val.clone());
        });
        assert_has(&load_err(d.path()), &[want]);
    }
}

#[test]
fn overflowing_weights_give_an_error_not_nan() {
    let d = tiny_copy("llama");
    edit_tensor(d.path(), "model.norm.weight", |v| v.iter_mut().for_each(|x| *x = 3e38));
    let m = Model::load(d.path(), &Device::Cpu).expect("finite weights load");
    let e = err_msg(m.decoder.forward(&[1, 2, 3, 4], &ForwardOptions::new(Mode::Dense, None)));
    assert_has(&e, &["NaN or infinite logits"]);
    // Generation checks its host copy of the logits: a prefill and a one-token step alike.
    for ids in [&[1u32, 2, 3, 4][..], &[1u32][..]] {
        let mut g = focus_core::generate::Generator::new(&m.decoder, None, Mode::Dense).unwrap();
        assert_has(&err_msg(g.feed(ids)), &["NaN or infinite logits"]);
    }
    // NaN routing in top-k mode is an error too, not a silently dense pass.
    let d = tiny_copy("llama");
    edit_tensor(d.path(), "model.layers.0.input_layernorm.weight", |v| v.iter_mut().for_each(|x| *x = 3e38));
    let m = Model::load(d.path(), &Device::Cpu).unwrap();
    let a = Adapter::random(&m.identity(), m.device(), &AdapterSpec { groups: 4, window: 1, top_k: 1, ..Default::default() }, 3).unwrap();
    let ids: Vec<u32> = (1..20).collect();
    let e = err_msg(m.decoder.forward(&ids, &ForwardOptions::new(common::topk(1, 4), Some(&a))));
    assert!(e.contains("NaN or infinite"), "{e}");
}

#[test]
fn a_layer_count_below_the_tensors_is_refused() {
    let d = tiny_copy("llama");
    let mut layers = 0;
    edit_config(d.path(), |c| {
        layers = c["num_hidden_layers"].as_u64().unwrap();
        c.insert("num_hidden_layers".into(), (layers - 1).into());
    });
    assert!(layers >= 2, "the fixture needs two layers for this test");
    assert_has(&load_err(d.path()), &["layer count disagrees", &format!("model.layers.{}", layers - 1)]);
}

#[test]
fn io_errors_name_the_os_cause_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing: PathBuf = tmp.path().join("missing.txt");
    let e = err_msg(focus_core::io::text::read_text(&missing));
    assert_eq!(e.matches("No such file").count(), 1, "{e}");
    // A write is worded as a write.
    let e = err_msg(focus_core::io::write_atomic(tmp.path(), b"x"));
    assert!(e.starts_with("cannot write"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The command line: every flag has a range, checked before anything is loaded.

fn cli(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn absurd_flags_are_usage_errors_naming_the_range() {
    let tiny = common::fixture("hf_tiny").join("llama");
    let tiny = tiny.to_str().unwrap();
    for (args, want) in [
        (vec!["adapter", "init", "--dg", "0", "--out", "x"], "0 is outside the accepted range 1..=4096"),
        (vec!["adapter", "init", "--dg", "100000000", "--out", "x"], "100000000 is outside"),
        (vec!["adapter", "init", "--tau", "5e-324", "--out", "x"], "outside the accepted range [0.0001"),
        (vec!["bench", "attention", "--groups", "1000000"], "1000000 is outside the accepted range 1..=64"),
        (vec!["bench", "forward", "--repeats", "0"], "0 is outside the accepted range 1..=1000"),
        (vec!["eval", "--limit", "0"], "0 is outside"),
        (vec!["train", "--lr", "nan", "--data", "a", "--heldout", "b", "--out", "c"], "NaN is outside the accepted range (0, 10]"),
        (vec!["ppl", "--ctx", "1", "f.txt"], "1 is outside the accepted range 2..="),
    ] {
        let (code, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // A top-k above K is refused, not clamped (exit 1: a valid flag that does not fit).
    let out = tempfile::tempdir().unwrap();
    let (code, err) = cli(&["adapter", "init", "--model", tiny, "--groups", "4", "--top-k", "5", "--out", out.path().join("a").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("top_k = 5 must be in 1..=4"), "{err}");
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    // --resume with no text to continue on.
    let (code, err) = cli(&["train", "--model", tiny, "--resume", out.path().to_str().unwrap(), "--out", out.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no training text given"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Inputs the fuzzers found (fuzz/, scripts/fuzz.sh), kept as regressions.

#[test]
fn fuzz_regressions_are_clean_errors() {
    for (file, want) in [("gguf-unaligned-tensor.gguf", "is not aligned")] {
        let p = common::fixture("fuzz_regressions").join(file);
        assert_has(&load_err(&p), &[want]);
    }
}
