//! Chat templates rendered in a child process (`focus_core::generate::chat_process`): a hostile
//! template in the GUI's generation job gives its one error within the time limit and leaves
//! no thread or process behind (rendered in this process, its thread spun on for minutes). A
//! test binary of its own: it counts this process's threads and children.

mod common;
#[path = "../fuzz/common/mod.rs"]
mod fuzz_common;
#[path = "common/chat_model.rs"]
mod chat_model;

use chat_model::{tiny_chat_model, CHATML};
use common::inputs::{assert_has, err_msg};
use focus_core::generate::chat::{ChatTemplate, Limits, LIMITS};
use focus_core::generate::chat_process::render_user_turn_in_child;
use focus_lens::gui::jobs::streaming::{GenJob, Generated};
use focus_lens::gui::jobs::JobError;
use focus_lens::gui::state::RunParams;
use focus_lens::gui::worker::{TaskKind, Worker};
use focus_lens::sampling::Sampling;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FOCUS_LENS: &str = env!("CARGO_BIN_EXE_focus-lens");

/// This process's threads, by name.
fn threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task").unwrap().flatten().map(|t| std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string()).collect()
}

/// The processes whose parent is this one (zombies included: they are gone once reaped).
fn children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        if rest.split_whitespace().nth(1) == Some(me.as_str()) {
            out.push(head.to_string());
        }
    }
    out
}

/// Waits up to `secs` for `ok`, returning whether it held.
fn eventually(secs: u64, ok: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ok()
}

#[test]
fn a_hostile_chat_template_in_the_gui_stops_within_its_limit_and_leaves_nothing_running() {
    // The child renders like the library in this process, with the same errors.
    let t = |text: &str| ChatTemplate { source: "test template".into(), text: text.into() };
    let exe = Path::new(FOCUS_LENS);
    let ok = render_user_turn_in_child(exe, &t(CHATML), "Hi!", "<s>", "</s>", LIMITS).unwrap();
    assert_eq!(ok, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
    let limits = Limits { fuel: 1000, output_bytes: 100, memory_bytes: 1 << 20, seconds: 2 };
    let r = |text: &str| err_msg(render_user_turn_in_child(exe, &t(text), "x", "", "", limits));
    assert_has(&r("{% for i in range(100000) %}{% endfor %}"), &["test template", "budget of 1000 instructions"]);
    assert_has(&r("{{ 'a' * 101 }}"), &["test template", "renders more than 100 bytes"]);
    assert_has(&r(&format!("{{% set s = 'ab' %}}{}", "{% set s = s ~ s %}".repeat(30))), &["test template", "more than 1048576 bytes of memory"]);
    assert_has(&r("{{ raise_exception('no system role') }}"), &["test template", "no system role"]);
    // The child's error is the library's, once: not wrapped a second time.
    let same = err_msg(focus_core::generate::chat::render_user_turn_within(&t("{{ 'a' * 101 }}"), "x", "", "", limits));
    assert_eq!(r("{{ 'a' * 101 }}"), same);
    // Not a renderer: one error saying so.
    assert_has(&err_msg(render_user_turn_in_child(Path::new("/bin/true"), &t(CHATML), "x", "", "", limits)), &["renderer", "gave no answer"]);

    // The GUI's generation job, as the Generate view starts it, on a template that iterates
    // 3e11 times inside one minijinja instruction.
    focus_lens::sampling::set_renderer(FOCUS_LENS.into());
    let d = tiny_chat_model("{{ 'b' in ['a'] * 300000000000 }}".into());
    let model = Arc::new(focus_core::Model::load(d.path(), &candle_core::Device::Cpu).unwrap());
    let spec = focus_core::AdapterSpec { groups: 4, window: 4, ..Default::default() };
    let adapter = Arc::new(focus_core::Adapter::random(&model.identity(), model.device(), &spec, 0).unwrap());
    let job = GenJob { model, adapter, params: RunParams::default(), mode: focus_core::Mode::Dense, prompt: "hi".into(), chat: true, sampling: Sampling::default(), ids: None, adapter_sha256: String::new() };
    assert!(eventually(5, || children().is_empty()), "{:?}", children());
    let before = threads();
    let mut w: Worker<Result<Generated, JobError>> = Worker::default();
    let t0 = Instant::now();
    w.spawn_streaming(TaskKind::Generate, move |h, interim| job.run(h, &|g| interim.send(Ok(g))));
    let result = loop {
        if let Some(r) = w.poll().into_iter().last() {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the job hung");
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    let e = match result {
        Ok(Err(JobError::Failed(e))) => e,
        other => panic!("expected the template's error, got {:?}", other.map(|r| r.map(|g| g.text))),
    };
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(e.matches("invalid argument").count(), 1, "{e}");
    assert_has(&e, &["chat template", "tokenizer_config.json", "ran past its time limit of 10 s"]);
    assert!(took < Duration::from_secs(LIMITS.seconds + 5), "{took:?}");
    // Nothing of the rendering remains: the child was reaped, its threads here have ended.
    assert!(eventually(3, || children().is_empty()), "children left: {:?}", children());
    assert!(eventually(3, || threads().len() <= before.len()), "threads before {before:?}, after {:?}", threads());
    assert!(!threads().iter().any(|t| t == "focus-budget"), "{:?}", threads());
}
