//! Issue 30's second hostile probe, one test per case: chat templates with a budget, hub
//! revisions kept inside the cache, stdout errors without panics, tokenizers within the memory
//! budget, exports that never replace a device and sets that survive a kill, padded
//! vocabularies, and errors that name their field. Every case ends in one clear error (or
//! success), never a panic, hang or abort.

mod common;
#[path = "common/gguf_builder.rs"]
mod gguf_builder;
/// The fuzz targets' helpers: the GPT-2 byte table the tiny byte-level tokenizers are built from.
#[path = "../fuzz/common/mod.rs"]
#[allow(dead_code)]
mod fuzz_common;
#[path = "common/chat_model.rs"]
mod chat_model;
use chat_model::{tiny_chat_model, CHATML};

use common::inputs::{assert_has, edit_config, err_msg, tiny_copy};
use focus_core::generate::chat::{self, ChatTemplate};
use focus_core::model::hub;
use focus_core::model::tokenizer::Tokenizer;
use gguf_builder::GgufBuilder;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// Chat templates are rendered under a memory budget that only this allocator enforces.
#[global_allocator]
static ALLOC: focus_core::io::budget::BudgetAlloc = focus_core::io::budget::BudgetAlloc;

/// Runs `f` on a thread and fails the test if it takes over `secs` seconds.
fn within<T: Send + 'static>(what: &str, secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} hung"))
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_focus-lens"))
}

fn run(args: &[&str]) -> Output {
    let mut c = bin();
    c.args(args);
    output_within(c, 120)
}

/// The output of `c`, killed (and the test failed) past `secs` seconds.
fn output_within(mut c: Command, secs: u64) -> Output {
    let child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let id = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("{c:?} ran past {secs} s");
        }
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 1 and exactly one `error:` line on stderr holding every phrase.
fn assert_one_error(o: &Output, phrases: &[&str]) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit {:?}: {e}", o.status);
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(e.starts_with("error: "), "{e}");
    assert_has(&e, phrases);
    e
}

// ---------------------------------------------------------------------------------------------
// Chat templates run with a budget of instructions, output and memory.

/// Templates that ran without a budget: each gives one error naming the template and the
/// limit, in seconds, through `generate --chat` on a Hugging Face tokenizer_config.json.
#[test]
fn hostile_chat_templates_give_one_error_naming_the_template() {
    let doubling = format!("{{% set s = 'ab' %}}{}{{{{ s|length }}}}", "{% set s = s ~ s %}".repeat(40));
    let cases = [
        // Two nested range(100000) loops, with output and without.
        ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}".to_string(), "budget of 10000000 instructions"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}".to_string(), "budget of 10000000 instructions"),
        // 100 MB of output from a 20-byte template, and 10 x 100 MB.
        ("{{ 'a' * 100000000 }}".to_string(), "renders more than 67108864 bytes"),
        ("{% for i in range(10) %}{{ 'a ' * 50000000 }}{% endfor %}".to_string(), "renders more than 67108864 bytes"),
        // A string doubled 40 times (1 TiB): stopped by the memory budget before it allocates.
        (doubling, "needs more than 268435456 bytes of memory"),
    ];
    for (template, want) in cases {
        let d = tiny_chat_model(template.clone().into());
        let m = d.path().to_str().unwrap();
        let t0 = Instant::now();
        let o = run(&["generate", "--model", m, "--prompt", "hi", "--chat", "--max-tokens", "1"]);
        assert_one_error(&o, &["chat template", "tokenizer_config.json", want]);
        assert!(t0.elapsed() < Duration::from_secs(60), "{template}: {:?}", t0.elapsed());
    }
    // The same limits in the library (this binary installs the budget allocator).
    let t = |text: &str| ChatTemplate { source: "test template".into(), text: text.into() };
    let limits = chat::Limits { fuel: 1000, output_bytes: 100, memory_bytes: 1 << 20, seconds: 2 };
    let r = |text: &str| err_msg(chat::render_user_turn_within(&t(text), "x", "", "", limits));
    assert_has(&r("{% for i in range(100000) %}{% endfor %}"), &["test template", "budget of 1000 instructions"]);
    assert_has(&r("{{ 'a' * 101 }}"), &["test template", "renders more than 100 bytes"]);
    assert_has(&r(&format!("{{% set s = 'ab' %}}{}", "{% set s = s ~ s %}".repeat(30))), &["test template", "more than 1048576 bytes of memory"]);
    // Found by the chat_template fuzz target: a namespace that holds itself
    // (`ns.r = (ns, ...)`), whose error listed the cyclic value without end.
    let found = std::fs::read_to_string(common::fixture("fuzz_regressions/chat-template-cyclic-namespace.txt")).unwrap();
    let (user, template) = found.split_once('\n').unwrap();
    let (user, template) = (user.to_string(), t(template));
    let e = within("the cyclic namespace", 20, move || err_msg(chat::render_user_turn(&template, &user, "<s>", "</s>")));
    assert_has(&e, &["test template", "cannot be rendered"]);
    assert!(e.len() < 2000, "{e}");
    // Also found by it: 20,000 unary minus signs, which minijinja's parser follows by
    // recursion past any stack.
    let found = std::fs::read_to_string(common::fixture("fuzz_regressions/chat-template-unary-chain.txt")).unwrap();
    let (user, template) = found.split_once('\n').unwrap();
    let e = err_msg(chat::render_user_turn(&t(template), user, "<s>", "</s>"));
    assert_has(&e, &["test template", "chains 20000 unary operators", "at most 64"]);
    // Nested conditional expressions (recursion without minijinja's limit) within the largest
    // template accepted; one byte more is refused.
    let nested = format!("{{{{ 1{} }}}}", " if 1 else 1".repeat(87_000));
    assert!(nested.len() < 1 << 20);
    let (n2, tt) = (nested.clone(), t(&nested));
    let r2 = within("nested if-else", 60, move || chat::render_user_turn(&tt, "x", "", ""));
    assert!(r2.is_ok() || err_msg(r2).contains("test template"), "{n2:.40}");
    let big = t(&" ".repeat((1 << 20) + 1));
    assert_has(&err_msg(chat::render_user_turn(&big, "x", "", "")), &["1048577 bytes", "at most 1048576"]);
    // Work inside one instruction (a lazily repeated sequence): the time limit.
    let t0 = Instant::now();
    assert_has(&r("{{ 'b' in ['a'] * 322222222222 }}"), &["test template", "ran past its time limit of 2 s"]);
    assert!(t0.elapsed() < Duration::from_secs(10));
    let found = std::fs::read_to_string(common::fixture("fuzz_regressions/chat-template-repeated-sequence.txt")).unwrap();
    let (user, template) = found.split_once('\n').unwrap();
    let e = err_msg(chat::render_user_turn_within(&t(template), user, "", "", limits));
    assert_has(&e, &["test template"]);
    // A real template still renders.
    let ok = chat::render_user_turn_within(&t(CHATML), "Hi!", "<s>", "</s>", limits).unwrap();
    assert_eq!(ok, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn a_chat_template_of_the_wrong_type_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("t.gguf");
    std::fs::write(&p, GgufBuilder::default().kv_str("general.architecture", "llama").kv_u32("tokenizer.chat_template", 5).bytes()).unwrap();
    let g = focus_core::model::gguf::GgufFile::open(&p).unwrap();
    assert_has(&err_msg(chat::gguf_chat_template(&g)), &["tokenizer.chat_template is a u32, not a string"]);
    let d = tiny_chat_model(serde_json::json!(5));
    let o = run(&["generate", "--model", d.path().to_str().unwrap(), "--prompt", "hi", "--chat", "--max-tokens", "1"]);
    assert_one_error(&o, &["tokenizer_config.json", "chat_template is a number, not a string"]);
    // Hugging Face's list of named templates: the default one is used.
    let d = tiny_chat_model(serde_json::json!([{"name": "tool_use", "template": "x"}, {"name": "default", "template": CHATML}]));
    let t = chat::hf_chat_template(&d.path().join("tokenizer_config.json")).unwrap().unwrap();
    assert_eq!(t.text, CHATML);
}

// ---------------------------------------------------------------------------------------------
// Hub revisions stay inside the cache.

/// A hub cache with `models--org--tiny` (snapshot `abc123`, refs/main -> it) beside a secret.
fn hub_cache() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    let repo = cache.join("models--org--tiny");
    std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(common::fixture("hf_tiny/llama").join(f), repo.join("snapshots/abc123").join(f)).unwrap();
    }
    std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
    std::fs::write(tmp.path().join("secret.txt"), "TOP-SECRET-CONTENT").unwrap();
    (tmp, cache, repo)
}

#[test]
fn hub_revisions_cannot_leave_the_cache() {
    let (tmp, cache, repo) = hub_cache();
    assert_eq!(hub::resolve_in(&cache, "org/tiny").unwrap(), repo.join("snapshots/abc123"));
    let info = |spec: &str| {
        let mut c = bin();
        c.args(["info", spec]).env("HF_HUB_CACHE", &cache);
        output_within(c, 30)
    };
    assert!(info("org/tiny").status.success(), "{}", stderr(&info("org/tiny")));
    // Revisions that are paths: refused by name, and the secret is never printed.
    for rev in ["../../../secret.txt", "../../secret.txt", "/etc/hostname", "a/b", "..", "."] {
        let o = info(&format!("org/tiny@{rev}"));
        let e = assert_one_error(&o, &["revision", "is not a ref name or commit"]);
        assert!(!e.contains("TOP-SECRET"), "{e}");
    }
    // refs/main as a link to a file outside the cache, a FIFO, /dev/zero, 1 GiB.
    let main = repo.join("refs/main");
    let reset = || drop(std::fs::remove_file(&main));
    reset();
    std::os::unix::fs::symlink(tmp.path().join("secret.txt"), &main).unwrap();
    let e = assert_one_error(&info("org/tiny"), &["refs/main", "links outside the Hugging Face cache"]);
    assert!(!e.contains("TOP-SECRET"), "{e}");
    // A ref inside the cache holding what is not a commit name: its content is not quoted.
    reset();
    std::fs::write(&main, "../../x SECRET").unwrap();
    let e = assert_one_error(&info("org/tiny"), &["refs/main", "does not hold a commit name"]);
    assert!(!e.contains("SECRET"), "{e}");
    reset();
    std::fs::write(&main, "SECRETCOMMIT").unwrap();
    let e = assert_one_error(&info("org/tiny"), &["no snapshot for refs/main"]);
    assert!(!e.contains("SECRET"), "{e}");
    reset();
    assert!(Command::new("mkfifo").arg(&main).status().unwrap().success());
    let (c, m) = (cache.clone(), main.clone());
    let e = within("a FIFO ref", 20, move || err_msg(hub::resolve_in(&c, "org/tiny")));
    assert_has(&e, &[m.to_str().unwrap(), "not a regular file"]);
    reset();
    std::os::unix::fs::symlink("/dev/zero", &main).unwrap();
    let (c, m2) = (cache.clone(), main.clone());
    let e = within("a /dev/zero ref", 20, move || err_msg(hub::resolve_in(&c, "org/tiny")));
    assert_has(&e, &[m2.to_str().unwrap(), "not a regular file"]);
    reset();
    std::fs::File::create(&main).unwrap().set_len(1 << 30).unwrap();
    let t0 = Instant::now();
    let o = info("org/tiny");
    let e = assert_one_error(&o, &["refs/main", "1073741824 bytes", "at most 1024"]);
    assert!(e.len() < 1000 && t0.elapsed() < Duration::from_secs(20), "{} bytes in {:?}", e.len(), t0.elapsed());
    reset();
    // A snapshot that is a link out of the cache.
    std::fs::write(&main, "abc123").unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, repo.join("snapshots/evil")).unwrap();
    assert_has(&err_msg(hub::resolve_in(&cache, "org/tiny@evil")), &["links outside the Hugging Face cache"]);
}

// ---------------------------------------------------------------------------------------------
// stdout: a closed pipe ends quietly, a full disk is one error line; never a panic.

/// `args` with stdout on /dev/full: one error line naming stdout. With stdout a pipe closed
/// before the command writes: exit 0 and nothing on stderr.
fn assert_stdout_errors_are_clean(args: &[&str], env: &[(&str, &Path)]) {
    let mut c = bin();
    c.args(args).envs(env.iter().copied());
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let child = c.stdin(Stdio::null()).stdout(full).stderr(Stdio::piped()).spawn().unwrap();
    let o = child.wait_with_output().unwrap();
    // Commands that report progress on stderr keep it; the error is one line, the last.
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {:?}: {e}", o.status);
    assert_eq!(e.lines().filter(|l| l.starts_with("error")).count(), 1, "{args:?}: {e}");
    assert_has(e.lines().last().unwrap(), &["error: cannot write to stdout: No space left on device"]);

    let mut c = bin();
    c.args(args).envs(env.iter().copied());
    let mut child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The reader goes before the command has written (it loads a model first).
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}: {:?} {}", o.status, stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(!e.contains("error"), "{args:?}: {e}");
}

#[test]
fn every_command_family_survives_a_closed_or_full_stdout() {
    let d = tiny_chat_model(CHATML.into());
    let m = d.path().to_str().unwrap();
    let text = d.path().join("text.txt");
    std::fs::write(&text, "the cat sat on the mat. ".repeat(20)).unwrap();
    let t = text.to_str().unwrap();
    let adapter = d.path().join("adapter");
    let o = run(&["adapter", "init", "--model", m, "--groups", "4", "--window", "4", "--out", adapter.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a = adapter.to_str().unwrap();
    let stats = d.path().join("stats.json");
    let s = stats.to_str().unwrap();
    let none: &[(&str, &Path)] = &[];
    let default_model = common::model_path();
    for (args, env) in [
        (vec!["info", m, "--json"], none),
        (vec!["info", m], none),
        (vec!["tokenize", "--model", m, "--json", t], none),
        (vec!["tokenize", "--model", m, t], none),
        (vec!["generate", "--model", m, "--prompt", "hi", "--max-tokens", "3", "--json"], none),
        (vec!["generate", "--model", m, "--prompt", "hi", "--max-tokens", "3", "--temperature", "0"], none),
        (vec!["ppl", "--model", m, "--ctx", "16", "--json", t], none),
        (vec!["ppl", "--model", m, "--ctx", "16", t], none),
        (vec!["analyze", "--model", m, "--adapter", a, "--no-twin", t, "--out", s], none),
        (vec!["eval", "--model", m, "--suite", "truthfulqa-mc", "--limit", "1", "--json"], none),
        (vec!["eval", "--model", m, "--suite", "truthfulqa-mc", "--limit", "1"], none),
        (vec!["bench", "attention", "--lengths", "256", "--groups", "4", "--k", "1", "--repeats", "1", "--no-warmup", "--json"], none),
        (vec!["demo"], &[("FOCUS_LENS_MODEL", default_model.as_path())][..]),
    ] {
        assert_stdout_errors_are_clean(&args, env);
    }
}

// ---------------------------------------------------------------------------------------------
// Tokenizers within the memory budget.

#[test]
fn sentencepiece_texts_are_cut_into_pieces_with_the_same_ids() {
    // Gemma 3 (SentencePiece, no space prefix): pieces cut before spaces give the ids of the
    // whole text.
    let g = focus_core::model::gguf::GgufFile::open(&common::gemma3_model_path()).unwrap();
    let t = Tokenizer::from_gguf(&g).unwrap();
    let base = std::fs::read_to_string(common::root().join("assets/sample.txt")).unwrap();
    let text = format!("{base}\nno newline: here, just words 123 4567 and more words.\n\n  {}  tail", "abc def ".repeat(40));
    let whole = t.encode_chunked(&text, true, usize::MAX / 4).unwrap();
    for chunk in [1, 7, 64, 1000] {
        // Cut into many pieces (it used to be one), with the ids of the whole.
        let ends = t.piece_ends(&text, chunk);
        assert!(ends.len() > text.len() / (chunk + 200), "chunk {chunk}: {} pieces", ends.len());
        let pieces = t.encode_chunked(&text, true, chunk).unwrap();
        assert_eq!(pieces.ids, whole.ids, "chunk {chunk}");
        assert_eq!(pieces.offsets, whole.offsets, "chunk {chunk}");
    }
    // llama.cpp's ids of the fixture texts, in pieces of about 64 bytes.
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("gemma3_reference.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    let persuasion = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    assert!(t.piece_ends(&persuasion, 64).len() > 500);
    assert_eq!(t.encode_chunked(&persuasion, false, 64).unwrap().ids, ids(&r["persuasion"]["token_ids"]));
    for c in r["tokenizer_cases"].as_array().unwrap() {
        let got = t.encode_chunked(c["text"].as_str().unwrap(), c["parse_special"].as_bool().unwrap(), 1).unwrap().ids;
        assert_eq!(got, ids(&c["ids"]), "{}", c["name"]);
    }
    // A text with no whitespace is cut at a fixed length (64 KiB, the least hard bound):
    // bounded pieces, every byte covered.
    let solid = "abcdefghij".repeat(20_000);
    let ends = t.piece_ends(&solid, 1000);
    assert_eq!(ends, [65536, 131072, 196608, 200000]);
    let enc = t.encode_chunked(&solid, false, 1000).unwrap();
    assert_eq!(enc.offsets.last().unwrap().1, solid.len());
}

/// Byte-level BPE (SmolLM2, Qwen2.5): a text without whitespace used to be one piece; it is cut
/// at the hard bound, while texts with words keep their cuts (and ids: `hostile_input.rs`).
#[test]
fn bpe_texts_without_whitespace_are_cut_at_a_fixed_length() {
    for model in [common::model_path(), common::qwen2_model_path()] {
        let g = focus_core::model::gguf::GgufFile::open(&model).unwrap();
        let t = Tokenizer::from_gguf(&g).unwrap();
        let solid = "abcdefghij".repeat(20_000);
        assert_eq!(t.piece_ends(&solid, 1000), [65536, 131072, 196608, 200000], "{}", model.display());
        let enc = t.encode_chunked(&solid, false, 1000).unwrap();
        assert_eq!(enc.offsets.last().unwrap().1, solid.len());
        // A multi-byte character at the bound: the cut moves back to its start.
        let wide = format!("a{}", "é".repeat(40_000));
        let ends = t.piece_ends(&wide, 1000);
        assert!(ends.iter().all(|&e| wide.is_char_boundary(e)) && ends[0] == 65535, "{ends:?}");
    }
}

/// A 63 MiB text without whitespace (under the 64 MiB limit) tokenizes with Gemma 3 within a
/// few GiB (it aborted at 4.6 GB, whole as one piece).
#[test]
fn a_63_mib_text_without_whitespace_tokenizes_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("solid.txt");
    std::fs::write(&p, "x".repeat(63 << 20)).unwrap();
    let gemma = common::gemma3_model_path();
    // Address space capped at 4 GiB: the whole text as one piece needed more and aborted.
    let mut c = Command::new("sh");
    c.args(["-c", "ulimit -v 4194304 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_focus-lens"), "tokenize", "--model", gemma.to_str().unwrap(), "--json", p.to_str().unwrap()]);
    let o = output_within(c, 600);
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["count"].as_u64().unwrap() > 1000);
}

#[test]
fn a_normalizer_that_grows_text_is_bounded_before_it_allocates() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("tokenizer.json");
    let tok = |normalizer: serde_json::Value| {
        serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": normalizer,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1, "b": 2}, "unk_token": "[UNK]"},
        })
        .to_string()
    };
    // 64 x 64 x 64 = 262,144 times: refused at load, naming the growth.
    let grow = |from: &str, to: String| serde_json::json!({"type": "Replace", "pattern": {"String": from}, "content": to});
    let n = serde_json::json!({"type": "Sequence", "normalizers": [grow("a", "b".repeat(64)), grow("b", "c".repeat(64)), grow("c", "d".repeat(64))]});
    std::fs::write(&p, tok(n)).unwrap();
    let q = p.clone();
    let e = within("loading", 20, move || err_msg(Tokenizer::from_file(&q)));
    assert_has(&e, &["normalizer", "grows a text up to 262144 times", "at most 1024"]);
    // 1000 times: loads, and a text that would pass 256 MiB normalized is refused up front.
    std::fs::write(&p, tok(grow("a", "b".repeat(1000)))).unwrap();
    let t = Tokenizer::from_file(&p).unwrap();
    assert_eq!(t.encode("b b", false).unwrap().ids, vec![2, 2]);
    let text = "a ".repeat(150_000);
    let e = within("encoding", 20, move || err_msg(t.encode(&text, false)));
    assert_has(&e, &["grows text up to 1000 times", "300000 bytes", "at most 268435456 bytes"]);
}

// ---------------------------------------------------------------------------------------------
// Exports.

/// The tiny chat model (the folder holds it) with a K=4, window-4 adapter at `adapter/`: what
/// the export tests analyse.
fn model_with_adapter() -> (tempfile::TempDir, String, PathBuf) {
    let d = tiny_chat_model(CHATML.into());
    let m = d.path().to_str().unwrap().to_string();
    let adapter = d.path().join("adapter");
    assert!(run(&["adapter", "init", "--model", &m, "--groups", "4", "--window", "4", "--out", adapter.to_str().unwrap()]).status.success());
    (d, m, adapter)
}

#[test]
fn exports_never_replace_a_device_fifo_or_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("out.json");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let dev = tmp.path().join("dev.json");
    std::os::unix::fs::symlink("/dev/null", &dev).unwrap();
    let sock_path = tmp.path().join("sock.json");
    let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    for p in [&fifo, &dev, &sock_path] {
        assert_has(&err_msg(focus_core::io::write_atomic(p, b"x")), &["cannot write", "not a regular file"]);
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&dev).unwrap().file_type().is_symlink());
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    // Through analyze --out (the set of CSVs too).
    let (d, m, adapter) = model_with_adapter();
    let m = m.as_str();
    let text = d.path().join("text.txt");
    std::fs::write(&text, "the cat sat on the mat. ".repeat(10)).unwrap();
    let csv = tmp.path().join("k.csv");
    assert!(Command::new("mkfifo").arg(tmp.path().join("k.tokens.csv")).status().unwrap().success());
    for out in [&fifo, &csv] {
        let o = run(&["analyze", "--model", m, "--adapter", adapter.to_str().unwrap(), "--no-twin", text.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert_one_error(&o, &["not a regular file"]);
    }
    assert!(std::fs::metadata(tmp.path().join("k.tokens.csv")).unwrap().file_type().is_fifo());
    assert!(!csv.exists(), "nothing of the set is written");
}

/// The visible content of `names` in `dir` (None: absent).
fn visible_set(dir: &Path, names: &[&str]) -> Vec<Option<Vec<u8>>> {
    names.iter().map(|n| std::fs::read(dir.join(n)).ok()).collect()
}

/// What a write of a set may leave in its folder once done: the visible names as plain files
/// and the set's manifest (`k.manifest.json`, which lists them, hashes and all); no temporary,
/// no hidden folder (issue 50: the set used to be links into `.k.csv.focus-sets`).
fn assert_no_leftovers(dir: &Path, names: &[&str]) {
    let mut extra: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| !names.contains(&n.as_str()) && n != "k.manifest.json").collect();
    extra.sort();
    assert!(extra.is_empty(), "leftovers beside the set: {extra:?}");
    for n in names {
        assert!(std::fs::symlink_metadata(dir.join(n)).unwrap().file_type().is_file(), "{n} is a plain file");
    }
    assert_eq!(focus_lens::gui::export::manifest::check(&dir.join("k.manifest.json")).unwrap(), Vec::<String>::new(), "the manifest lists the files as they are");
}

/// `analyze --out k.csv` killed at every step of its set's write (the test hook
/// `FOCUS_LENS_ABORT_SET_AT`), over an old set written by an earlier run and over plain files
/// (files the user put there): each visible file is whole (the old one or the new one), a
/// manifest on disk always describes the files as they are (the old manifest goes first, the
/// new one comes last), and the next run leaves the new set, its manifest and no temporary.
#[test]
fn a_set_killed_at_any_step_shows_the_old_or_the_new_set_and_the_next_run_cleans_up() {
    let (_d, m, adapter) = model_with_adapter();
    let names = ["k.csv", "k.profiles.csv", "k.tokens.csv", "k.groups.csv", "k.groups.arrow", "k.structure.csv", "k.structure_table.csv"];
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("text.txt");
    let texts = ["the cat sat on the mat. ".repeat(10), "a dog ran in the park, then slept! ".repeat(12)];
    let analyze = |dir: &Path, which: usize, abort_at: Option<usize>| {
        std::fs::write(&text, &texts[which]).unwrap();
        let mut c = bin();
        c.args(["analyze", "--model", &m, "--adapter", adapter.to_str().unwrap(), "--no-twin", text.to_str().unwrap(), "--out"]).arg(dir.join("k.csv"));
        if let Some(n) = abort_at {
            c.env("FOCUS_LENS_ABORT_SET_AT", n.to_string());
        }
        output_within(c, 120)
    };
    // The two sets, each written once undisturbed.
    let reference = |which| {
        let dir = tmp.path().join(format!("ref{which}"));
        std::fs::create_dir(&dir).unwrap();
        assert!(analyze(&dir, which, None).status.success());
        assert_no_leftovers(&dir, &names);
        visible_set(&dir, &names)
    };
    let (old, new) = (reference(0), reference(1));
    assert!(old.iter().chain(&new).all(Option::is_some));
    assert_ne!(old[0], new[0]);
    assert_ne!(old[2], new[2]);
    let manifest = |dir: &Path| dir.join("k.manifest.json");
    for plain_files in [false, true] {
        let mut kills = 0;
        for n in 1.. {
            let dir = tmp.path().join(format!("run-{plain_files}-{n}"));
            std::fs::create_dir(&dir).unwrap();
            if plain_files {
                for (name, content) in names.iter().zip(&old) {
                    std::fs::write(dir.join(name), content.as_ref().unwrap()).unwrap();
                }
            } else {
                assert!(analyze(&dir, 0, None).status.success());
            }
            let o = analyze(&dir, 1, Some(n));
            let seen = visible_set(&dir, &names);
            if o.status.success() {
                assert_eq!(seen, new, "a run past its last step writes the new set");
                assert_no_leftovers(&dir, &names);
                break;
            }
            use std::os::unix::process::ExitStatusExt;
            assert!(matches!(o.status.signal(), Some(6) | Some(9)), "killed at step {n}: {}", stderr(&o));
            kills += 1;
            for (i, s) in seen.iter().enumerate() {
                assert!(*s == old[i] || *s == new[i], "killed at step {n}: {} is neither the old file nor the new one", names[i]);
            }
            if manifest(&dir).exists() {
                assert_eq!(focus_lens::gui::export::manifest::check(&manifest(&dir)).unwrap(), Vec::<String>::new(), "killed at step {n}: a manifest that does not describe the files");
            }
            // The next run: the new set, nothing left over.
            assert!(analyze(&dir, 1, None).status.success());
            assert_eq!(visible_set(&dir, &names), new);
            assert_no_leftovers(&dir, &names);
        }
        // The old manifest removed, each file, the new manifest.
        assert_eq!(kills, names.len() + 2, "steps of the write");
    }
}

/// `analyze --out` (a JSON file, the CSV set) into a folder that does not exist, or whose folder
/// is a file, or under a path with a file in it: one error naming the folder and what is wrong,
/// nothing written (issue 51: a missing output folder was reported as whatever failed next).
/// A read-only folder is not tested: the tests run as root, who may write anywhere.
#[test]
fn outputs_into_a_missing_folder_or_a_file_name_the_folder() {
    let (_d, m, adapter) = model_with_adapter();
    let m = m.as_str();
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("text.txt");
    std::fs::write(&text, "the cat sat on the mat. ".repeat(10)).unwrap();
    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "a file").unwrap();
    let missing = tmp.path().join("missing");
    for name in ["k.csv", "k.json"] {
        let analyze = |out: &Path| run(&["analyze", "--model", m, "--adapter", adapter.to_str().unwrap(), "--no-twin", text.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert_one_error(&analyze(&missing.join(name)), &[&format!("its folder {} does not exist", missing.display())]);
        assert_one_error(&analyze(&file.join(name)), &[&format!("{} is not a folder", file.display())]);
        assert_one_error(&analyze(&file.join("sub").join(name)), &["is not a folder", &format!("{} is a file", file.display())]);
    }
    assert!(!missing.exists());
    assert_eq!(std::fs::read(&file).unwrap(), b"a file");
    // The library's writers say the same.
    assert_has(&err_msg(focus_core::io::write_atomic(&missing.join("x.csv"), b"x")), &["cannot write", "does not exist", &missing.display().to_string()]);
    assert_has(&err_msg(focus_core::io::write_atomic(&file.join("x.csv"), b"x")), &["cannot write", "is not a folder"]);
}

/// An export set left by an earlier version (issue 51: "an export set whose `current` link
/// points outside is reported missing and blocks every later export of that name"): `k.csv`
/// and `k.tokens.csv` link into `.k.csv.focus-sets/current/`, and `current` points to a folder
/// outside, where `k.tokens.csv` is a FIFO. `analyze --out k.csv` writes the set as plain files
/// with its manifest, follows no link (the FIFO and the file outside stay as they were), and
/// removes the old folder.
#[test]
fn an_old_link_set_pointing_outside_does_not_block_analyze_out() {
    let (_d, m, adapter) = model_with_adapter();
    let m = m.as_str();
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("text.txt");
    std::fs::write(&text, "the cat sat on the mat. ".repeat(10)).unwrap();
    let (dir, outside) = (tmp.path().join("out"), tmp.path().join("outside"));
    std::fs::create_dir_all(dir.join(".k.csv.focus-sets")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("k.csv"), "not ours").unwrap();
    mkfifo(&outside.join("k.tokens.csv"));
    std::os::unix::fs::symlink("../../outside", dir.join(".k.csv.focus-sets/current")).unwrap();
    for n in ["k.csv", "k.tokens.csv"] {
        std::os::unix::fs::symlink(format!(".k.csv.focus-sets/current/{n}"), dir.join(n)).unwrap();
    }
    let o = run(&["analyze", "--model", m, "--adapter", adapter.to_str().unwrap(), "--no-twin", text.to_str().unwrap(), "--out", dir.join("k.csv").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let names = ["k.csv", "k.profiles.csv", "k.tokens.csv", "k.groups.csv", "k.groups.arrow", "k.structure.csv", "k.structure_table.csv"];
    assert_no_leftovers(&dir, &names);
    assert_eq!(std::fs::read(outside.join("k.csv")).unwrap(), b"not ours");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(outside.join("k.tokens.csv")).unwrap().file_type().is_fifo());
}

// ---------------------------------------------------------------------------------------------
// Padded vocabularies.

#[test]
fn a_padded_embedding_never_samples_ids_the_tokenizer_lacks() {
    let d = tiny_chat_model(CHATML.into());
    let m = d.path().to_str().unwrap();
    let model = focus_core::Model::load(d.path(), &candle_core::Device::Cpu).unwrap();
    assert_eq!((model.config().vocab, model.tokenizer().unwrap().vocab_size()), (512, 260));
    for seed in ["0", "1", "2"] {
        let o = run(&["generate", "--model", m, "--prompt", "hello there", "--max-tokens", "40", "--temperature", "1.5", "--top-p", "1", "--seed", seed, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let tokens: Vec<&serde_json::Value> = lines.iter().filter(|l| l.get("id").is_some()).collect();
        assert!(!tokens.is_empty());
        for t in tokens {
            assert!(t["id"].as_u64().unwrap() < 260, "{t}");
            assert!(!t["text"].as_str().unwrap().is_empty(), "{t}");
        }
        // Without --json the text is decoded (this used to fail: "token id 469 is outside").
        let o = run(&["generate", "--model", m, "--prompt", "hello there", "--max-tokens", "40", "--temperature", "1.5", "--top-p", "1", "--seed", seed]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

// ---------------------------------------------------------------------------------------------
// Errors that name the field, the value and the limit.

#[test]
fn unclear_errors_name_the_field_and_the_limit() {
    // Mistral's sliding_window: 0.
    let d = tiny_copy("llama");
    edit_config(d.path(), |c| {
        c.insert("model_type".into(), "mistral".into());
        c.insert("sliding_window".into(), 0.into());
    });
    assert_has(&err_msg(focus_core::Model::load(d.path(), &candle_core::Device::Cpu)), &["sliding_window = 0"]);
    // router_layers of the wrong type in an adapter config.
    let m = focus_core::Model::load(&common::fixture("hf_tiny").join("llama"), &candle_core::Device::Cpu).unwrap();
    let a = tempfile::tempdir().unwrap();
    focus_core::Adapter::random(&m.identity(), m.device(), &focus_core::AdapterSpec { groups: 4, window: 4, ..Default::default() }, 1).unwrap().save(a.path()).unwrap();
    let cfg = a.path().join("adapter_config.json");
    let good: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    for bad in [serde_json::json!(5), serde_json::json!(["all"]), serde_json::json!("some")] {
        let mut v = good.clone();
        v["router_layers"] = bad.clone();
        std::fs::write(&cfg, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        assert_has(&err_msg(focus_core::Adapter::load(a.path(), &m.identity(), m.device())), &["field \"router_layers\""]);
    }
    // A text one byte over 64 MiB: its size and the limit in bytes.
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("big.txt");
    std::fs::File::create(&p).unwrap().set_len((64 << 20) + 1).unwrap();
    let e = err_msg(focus_core::io::text::read_text(&p));
    assert_has(&e, &["67108865 bytes", "over 67108864 bytes"]);
}

// ---------------------------------------------------------------------------------------------
// Issue 51, the third probe: inputs where a file is expected that are not one, and training
// knobs inside their documented ranges that did not fit memory.

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

fn run_os(args: &[&std::ffi::OsStr]) -> Output {
    let mut c = bin();
    c.args(args).env("FOCUS_LENS_MODEL", common::model_path());
    output_within(c, 300)
}

/// A FIFO where a file is expected hung `eval --truthfulqa`, `eval --cloze`, `train --resume`
/// (its trainer_state.json) and an export set's lock file; `/dev/zero` as a suite or a state
/// file was read without a cap (4.8 GB); a FIFO given as `--data` was said not to exist. Each
/// is now one error naming the file, at once.
#[test]
fn fifos_and_endless_files_where_a_file_is_expected_are_refused() {
    use std::ffi::OsStr;
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo.json");
    mkfifo(&fifo);
    let text = tmp.path().join("t.txt");
    std::fs::write(&text, "A short text of a few words, of which none is long. ".repeat(20)).unwrap();
    let s = |x: &str| OsStr::new(x).to_os_string();
    for (file, what) in [(fifo.as_path(), "not a regular file"), (Path::new("/dev/zero"), "not a regular file")] {
        for (suite, flag) in [("truthfulqa-mc", "--truthfulqa"), ("cloze", "--cloze")] {
            let o = run_os(&[&s("eval"), &s("--suite"), &s(suite), &s(flag), file.as_os_str(), &s("--limit"), &s("1")]);
            assert_one_error(&o, &[what, &file.display().to_string()]);
        }
    }
    // train --resume: the checkpoint's state file is a FIFO, then a link to /dev/zero.
    let ckpt = tmp.path().join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    mkfifo(&ckpt.join("trainer_state.json"));
    let out = tmp.path().join("run");
    let resume = |ckpt: &Path| run_os(&[&s("train"), &s("--data"), text.as_os_str(), &s("--heldout"), text.as_os_str(), &s("--out"), out.as_os_str(), &s("--resume"), ckpt.as_os_str()]);
    assert_one_error(&resume(&ckpt), &["trainer_state.json", "not a regular file"]);
    std::fs::remove_file(ckpt.join("trainer_state.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", ckpt.join("trainer_state.json")).unwrap();
    assert_one_error(&resume(&ckpt), &["trainer_state.json", "not a regular file"]);
    // A FIFO as --data exists: it is not a regular file.
    let o = run_os(&[&s("train"), &s("--data"), fifo.as_os_str(), &s("--heldout"), text.as_os_str(), &s("--out"), out.as_os_str(), &s("--steps"), &s("1")]);
    assert_one_error(&o, &["fifo.json", "is not a regular file"]);
    // An export set: the old link layout's lock file is a FIFO (never opened: the set is
    // written and the old folder removed), then a FIFO at the manifest's name (refused at once).
    let dir = tmp.path().join("exports");
    let store = focus_core::io::export_set::old_store_dir(&dir.join("k.csv"));
    std::fs::create_dir_all(&store).unwrap();
    mkfifo(&store.join("lock"));
    let files = vec![(dir.join("k.csv"), b"1".to_vec()), (dir.join("k.tokens.csv"), b"2".to_vec())];
    let set = files.clone();
    within("an old export set with a FIFO as its lock", 30, move || focus_core::io::export_set::write_set(&set, &serde_json::Value::Null).unwrap());
    assert!(!store.exists());
    let manifest = focus_core::io::export_set::manifest_path(&files[0].0);
    std::fs::remove_file(&manifest).unwrap();
    mkfifo(&manifest);
    let e = within("an export set with a FIFO as its manifest", 30, move || focus_core::io::export_set::write_set(&files, &serde_json::Value::Null).unwrap_err().to_string());
    assert!(e.contains("k.manifest.json") && e.contains("not a regular file"), "{e}");
}

/// `train --batch 4096 --seq-len 512`, inside the documented ranges, aborted on a 4.8 GB
/// allocation: refused first, with the figure; a sink of 100 with a window of 128 refused
/// `--seq-len 160` as "inside the local window" without naming the sink.
#[test]
fn training_knobs_that_cannot_run_say_why() {
    use std::ffi::OsStr;
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("t.txt");
    std::fs::write(&text, "A short text of a few words, of which none is long. ".repeat(50)).unwrap();
    let out = tmp.path().join("run");
    let s = |x: &str| OsStr::new(x).to_os_string();
    let base = [s("train"), s("--data"), text.clone().into_os_string(), s("--heldout"), text.clone().into_os_string(), s("--out"), out.clone().into_os_string(), s("--steps"), s("1")];
    let with = |extra: &[&str]| {
        let mut a: Vec<&OsStr> = base.iter().map(|x| x.as_os_str()).collect();
        a.extend(extra.iter().map(OsStr::new));
        run_os(&a)
    };
    let o = with(&["--batch", "4096", "--seq-len", "512"]);
    assert_one_error(&o, &["not enough memory", "batch 4096 x seq_len 512", "at least", "GB", "lower --batch or --seq-len"]);
    let o = with(&["--sink", "100", "--window", "128", "--seq-len", "160"]);
    assert_one_error(&o, &["seq_len 160", "100 sinks", "window 128", "above 229"]);
}
