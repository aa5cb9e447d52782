//! The File window and the system file dialogs: typed paths, dropped files, sessions, and hostile or
//! odd files (a FIFO, a corrupt GGUF, a binary text, a huge or a Latin-1 one).

use crate::common::{self, TestResult};
use crate::harness::{click_menu, harness, has, no_errors, settings, settle, started, type_path_and_open, type_path_and_save};
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use focus_lens::gui::state::{InputKind, Settings, Tab};
use focus_core::ModeKind;
use focus_lens::gui::FocusLensApp;
use std::path::Path;
use std::time::{Duration, Instant};

/// Without a system file dialog (no portal, no zenity, as on CI): the file window says so, the
/// typed path opens and exports, and the adapter picker lists the shipped adapters with what
/// their configs record.
#[test]
fn file_window_without_a_system_dialog() -> TestResult {
    let (dir, mut h) = started(120);
    no_errors(&h);
    h.state_mut().views.files.native = false;
    h.state_mut().export_dir = None;

    // The adapter picker.
    click_menu(&mut h, "File", "Open adapter…");
    assert!(h.query_by_label_contains("No system file dialog on this display").is_some(), "the window says why it is there");
    assert!(h.get_by_label("System dialog…").accesskit_node().is_disabled());
    // The K = 4 adapter with what its config records (read from its raw JSON, so that a
    // retrained adapter needs no change here).
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::root().join("sample_adapters/smollm2-135m-k4/adapter_config.json"))?)?;
    let ppl = &cfg["results"]["ppl"]["ctx1024"];
    // The text's file name, as the picker shows it (`results.ppl_file` up to its first " (").
    let file = cfg["results"]["ppl_file"].as_str().unwrap().split(" (").next().unwrap().rsplit('/').next().unwrap();
    let line = format!(
        "K = 4, k = 2 · {:.2}M training tokens · held-out PPL on {file}, ctx 1024: dense {:.2}, soft {:.2}, top-2 {:.2}",
        cfg["training"]["tokens_seen"].as_f64().unwrap() / 1e6,
        ppl["dense"].as_f64().unwrap(),
        ppl["soft"].as_f64().unwrap(),
        ppl["topk2"].as_f64().unwrap()
    );
    assert!(has(&h, &line), "the K = 4 adapter with what its config records: {line}");
    assert!(h.query_by_label_contains("K = 8, k = 2 · untrained (random init)").is_some(), "the init adapter");
    h.get_by_label("smollm2-135m-k4").click();
    settle(&mut h);
    no_errors(&h);
    assert!(h.state().settings.inputs.adapter.as_ref().unwrap().ends_with("smollm2-135m-k4"));
    assert_eq!(h.state().session.result.as_ref().unwrap().groups(), 4);

    // Export through the typed path: the CSV set.
    let out = dir.path().join("typed.csv");
    type_path_and_save(&mut h, "Export", "Statistics as CSV…", &out);
    no_errors(&h);
    for f in ["typed.csv", "typed.profiles.csv", "typed.tokens.csv"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    assert!(h.state().status.contains("typed.tokens.csv"), "{}", h.state().status);

    // JSON and SVG through the typed path as well.
    for (item, name) in [("Statistics as JSON…", "typed.json"), ("Current view as SVG…", "typed.svg")] {
        type_path_and_save(&mut h, "Export", item, &dir.path().join(name));
        no_errors(&h);
        assert!(dir.path().join(name).exists(), "{name}");
    }
    assert!(std::fs::read_to_string(dir.path().join("typed.json"))?.contains("text_sha256"));

    // A model through the typed path (another name for the same file, so that it loads again).
    let link = dir.path().join("linked-model.gguf");
    std::os::unix::fs::symlink(common::model_path(), &link)?;
    type_path_and_open(&mut h, "Open model…", &link, "Open as model");
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().session.model.as_ref().unwrap().path.as_ref(), Some(&link));
    assert!(h.state().session.result.is_some());

    // A system dialog that answers "cancelled" at once never showed: the window opens instead.
    h.state_mut().dialogs.start(focus_lens::gui::jobs::dialogs::Purpose::Open(InputKind::Text), || None, None);
    wait_for_dialog(&mut h);
    h.step();
    assert!(h.query_by_label_contains("The system file dialog did not open").is_some());
    assert!(h.state().views.files.task.is_some());
    Ok(())
}

/// Steps frames until the open dialog's answer has been taken (at most ~1 s).
fn wait_for_dialog(h: &mut Harness<'static, FocusLensApp>) {
    for _ in 0..100 {
        h.step();
        if h.state().dialogs.open().is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// File dialogs answer in a later frame: the UI keeps running while one is open, its menu items
/// are disabled, and the chosen path opens the file or receives the export.
#[test]
fn file_dialog_answers_arrive_asynchronously() -> TestResult {
    use focus_lens::gui::jobs::dialogs::Purpose;
    use focus_lens::gui::export::ExportKind;
    let (dir, mut h) = started(200);
    h.state_mut().export_dir = None; // exports go through the dialog path
    let text = dir.path().join("picked.txt");
    std::fs::write(&text, "Words chosen in a dialog. ".repeat(10))?;
    // A stand-in for the native dialog that stays open until we answer it.
    let (answer, wait) = std::sync::mpsc::channel::<Option<std::path::PathBuf>>();
    h.state_mut().dialogs.start(Purpose::Open(InputKind::Text), move || wait.recv().unwrap(), None);
    click_menu(&mut h, "File", "Open text…");
    h.step();
    h.state_mut().views.files.native = true;
    h.step();
    let item = h.get_by_label("System dialog…");
    assert!(item.accesskit_node().is_disabled(), "no second dialog while one is open");
    h.get_by_label("Cancel").click();
    h.step();
    let t0 = Instant::now();
    for _ in 0..5 {
        h.step();
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "frames run while the dialog is open");
    answer.send(Some(text.clone()))?;
    let t0 = Instant::now();
    while h.state().dialogs.open().is_some() {
        h.step();
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().settings.inputs.text, Some(text));
    assert!(h.state().session.result.as_ref().unwrap().analysis.tokens[0].text.starts_with("Words"));

    // A cancelled dialog changes nothing; a chosen export path receives the file.
    let key = h.state().session.result.as_ref().unwrap().key.clone();
    h.state_mut().dialogs.start(Purpose::Open(InputKind::Model), || None, None);
    let out = dir.path().join("chosen.csv");
    let out2 = out.clone();
    wait_for_dialog(&mut h);
    assert_eq!(h.state().session.result.as_ref().unwrap().key, key);
    h.state_mut().dialogs.start(Purpose::Export(ExportKind::StatsCsv), move || Some(out2), None);
    for _ in 0..100 {
        h.step();
        if out.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    no_errors(&h);
    assert!(std::fs::read_to_string(&out)?.starts_with("layer,group,group_raw,size"));

    // The model-folder dialog (Hugging Face directories) answers with a folder, opened as the model.
    let folder = dir.path().join("hf_model");
    std::fs::create_dir(&folder)?;
    let folder2 = folder.clone();
    h.state_mut().dialogs.start(Purpose::OpenModelFolder, move || Some(folder2), None);
    wait_for_dialog(&mut h);
    assert_eq!(h.state().settings.inputs.model, Some(folder));
    Ok(())
}

/// Huge text files are truncated with a visible note.
#[test]
fn huge_text_is_truncated_with_a_note() -> TestResult {
    let dir = tempfile::tempdir()?;
    let p = dir.path().join("huge.txt");
    let line = "ab cd ef gh\n".repeat(1000);
    let mut f = String::new();
    while f.len() <= focus_lens::gui::state::MAX_TEXT_BYTES {
        f += &line;
    }
    f += "é";
    std::fs::write(&p, &f)?;
    let (text, note) = focus_lens::gui::jobs::read_text(&Some(p)).unwrap();
    assert!(text.len() <= focus_lens::gui::state::MAX_TEXT_BYTES);
    assert!(note.unwrap().contains("only its first 4 MiB"));
    Ok(())
}

/// Dropped paths are opened as what they look like.
#[test]
fn dropped_files_are_classified() -> TestResult {
    let dir = tempfile::tempdir()?;
    let adapter = dir.path().join("ad");
    std::fs::create_dir(&adapter)?;
    std::fs::write(adapter.join("adapter_config.json"), "{}")?;
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf)?;
    std::fs::write(hf.join("config.json"), "{}")?;
    assert_eq!(FocusLensApp::classify(&adapter), InputKind::Adapter);
    assert_eq!(FocusLensApp::classify(&adapter.join("adapter_config.json")), InputKind::Adapter);
    assert_eq!(FocusLensApp::classify(&hf), InputKind::Model);
    assert_eq!(FocusLensApp::classify(Path::new("/x/model.GGUF")), InputKind::Model);
    assert_eq!(FocusLensApp::classify(Path::new("/x/notes.txt")), InputKind::Text);
    let mut app = FocusLensApp::new(Settings::default());
    app.open_dropped(adapter.join("adapter_config.json"));
    assert_eq!(app.settings.inputs.adapter, Some(adapter));
    Ok(())
}

/// A session saved from the menu reopens, from the menu, what was on screen: inputs, settings,
/// layer, tab and the selection (a range of tokens) with its partners.
#[test]
fn sessions_save_and_reopen() {
    let (dir, mut h) = started(150);
    h.state_mut().export_dir = None;
    h.state_mut().settings.setup.layer = 9;
    h.state_mut().settings.setup.params.mode = ModeKind::Soft;
    settle(&mut h);
    h.state_mut().select_range(Some((140, 145)));
    settle(&mut h);
    h.get_by_label("Balance").click();
    h.step();
    let path = dir.path().join("my.session.json");
    type_path_and_save(&mut h, "File", "Save session…", &path);
    no_errors(&h);
    assert!(std::fs::read_to_string(&path).unwrap().contains("focus-lens-session"));

    // A fresh window on other settings, then File → Open session….
    let mut h = harness(settings(100), dir.path());
    settle(&mut h);
    type_path_and_open(&mut h, "Open session…", &path, "Open this session");
    settle(&mut h);
    h.step();
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    assert_eq!((app.settings.setup.layer, app.settings.setup.tab, app.settings.setup.params.mode, app.settings.setup.params.max_tokens), (9, Tab::Balance, ModeKind::Soft, 150));
    assert_eq!(app.session.result.as_ref().unwrap().analysis.mode, "soft");
    assert_eq!((app.selection.selected, app.selection.range), (Some(140), Some((140, 145))), "the token and its range");
    assert!(app.selection.partners.as_ref().is_some_and(|p| p.token == 140 && p.range == Some((140, 145)) && p.layer == 9));
}

/// Hostile inputs given through the file window, typed as a user does: a FIFO (as session, text
/// and model), a corrupt GGUF, an adapter that does not fit the model, a binary text and an empty
/// file. Each gives one clear error in the window within seconds (nothing hangs on the FIFO),
/// the app keeps its working inputs and result, and keeps running.
#[test]
fn hostile_inputs_through_the_file_window() -> TestResult {
    let (dir, mut h) = started(120);
    no_errors(&h);
    h.state_mut().views.files.native = false;
    let before = h.state().session.result.as_ref().unwrap().key.clone();
    let d = dir.path();
    let fifo = d.join("pipe.txt");
    let fifo_model = d.join("pipe.gguf");
    for f in [&fifo, &fifo_model] {
        assert!(std::process::Command::new("mkfifo").arg(f).status()?.success());
    }
    let corrupt = d.join("corrupt.gguf");
    std::fs::write(&corrupt, b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f junk")?;
    let misfit = d.join("misfit-adapter");
    std::fs::create_dir(&misfit)?;
    let init = common::root().join("sample_adapters/smollm2-135m-k8-init");
    let cfg = std::fs::read_to_string(init.join("adapter_config.json"))?;
    assert!(cfg.contains("\"n_layers\": 30"));
    std::fs::write(misfit.join("adapter_config.json"), cfg.replace("\"n_layers\": 30", "\"n_layers\": 2"))?;
    std::fs::copy(init.join("adapter_model.safetensors"), misfit.join("adapter_model.safetensors"))?;
    let binary = d.join("binary.txt");
    std::fs::write(&binary, b"text\0\x01\x02 with a NUL")?;
    let empty = d.join("empty.txt");
    std::fs::write(&empty, b"")?;
    let fifo_session = d.join("pipe.session.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo_session).status()?.success());
    let cases: [(&str, &Path, &str, &[&str]); 7] = [
        ("Open session…", &fifo_session, "Open this session", &["cannot open session", "pipe.session.json", "not a regular file"]),
        ("Open text…", &fifo, "Open as text", &["cannot open text", "pipe.txt", "not a regular file"]),
        ("Open model…", &fifo_model, "Open as model", &["cannot open model", "pipe.gguf", "not a regular file"]),
        ("Open model…", &corrupt, "Open as model", &["cannot open model", "corrupt.gguf"]),
        ("Open adapter…", &misfit, "Open as adapter", &["cannot open adapter", "misfit-adapter", "does not fit the model"]),
        ("Open text…", &binary, "Open as text", &["cannot open text", "binary"]),
        ("Open text…", &empty, "Open as text", &["cannot open text", "empty"]),
    ];
    for (item, path, button, words) in cases {
        let t0 = Instant::now();
        type_path_and_open(&mut h, item, path, button);
        while h.state().busy() || h.state().errors.is_empty() {
            h.step();
            assert!(t0.elapsed() < Duration::from_secs(60), "{}: no answer after 60 s (a hang?): {:?}", path.display(), h.state().worker.progress());
            std::thread::sleep(Duration::from_millis(10));
        }
        settle(&mut h);
        h.step();
        let errs = h.state().errors.clone();
        assert_eq!(errs.len(), 1, "{}: one error, got {errs:?}", path.display());
        for w in words {
            assert!(errs[0].contains(w), "{}: {w:?} not in {:?}", path.display(), errs[0]);
        }
        assert!(!errs[0].contains("panicked") && !errs[0].contains("internal error"), "{}", errs[0]);
        assert!(h.query_by_label_contains(&errs[0]).is_some(), "the error shows in the window");
        // The working inputs and the result on screen stay.
        let app = h.state();
        assert_eq!(app.settings.inputs.model, Some(common::model_path()));
        assert_eq!((app.settings.inputs.adapter.as_ref(), app.settings.inputs.text.as_ref()), (None, None));
        assert_eq!(app.session.result.as_ref().unwrap().key, before, "{}", path.display());
        h.get_by_label("dismiss").click();
        h.step();
        assert!(h.state().errors.is_empty());
    }
    // Still running: a control click re-analyses.
    h.get_by_label("dense").click();
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "dense");
    Ok(())
}

/// A Latin-1 text is not refused outright: the window offers to read it as Latin-1, and says
/// that it did.
#[test]
fn latin1_text_is_offered_a_lossy_read() {
    let (dir, mut h) = started(64);
    h.state_mut().views.files.native = false;
    let p = dir.path().join("latin1.txt");
    std::fs::write(&p, b"Un caf\xe9 au lait, s'il vous pla\xeet. La cr\xe8me br\xfbl\xe9e est d\xe9licieuse.\n".repeat(3)).unwrap();
    type_path_and_open(&mut h, "Open text…", &p, "Open as text");
    settle(&mut h);
    assert!(h.state().errors.iter().any(|e| e.contains("not valid UTF-8")), "{:?}", h.state().errors);
    h.get_by_label("Read it as Latin-1 (lossy)").click();
    h.step();
    settle(&mut h);
    h.step();
    no_errors(&h);
    let text = h.state().session.text.as_ref().unwrap().text.clone();
    assert!(text.contains("café au lait") && text.contains("crème brûlée"), "{text}");
    assert!(h.state().status.contains("read as Latin-1, lossy"), "{}", h.state().status);
    assert!(h.query_by_label("Read it as Latin-1 (lossy)").is_none(), "the offer goes once taken");
    assert_eq!(h.state().session.result.as_ref().unwrap().key.text_gen, h.state().session.text.as_ref().unwrap().gen, "the text is analysed");
}
