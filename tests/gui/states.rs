//! The states a user gets into (issue 50, item 2), each one the app means: a refused adapter
//! leaves a cancelled analysis cancelled; the Train view says whose run it shows after a model
//! switch and opens no checkpoint on another model; the adapter picker offers only adapters
//! that fit; an error goes once its cause is fixed; k follows an adapter named at start-up; a
//! failed model load is not "loading"; File → default model keeps the adapter; a model switch
//! lets the old model and its analyses go.

use crate::common::{self, TestResult};
use crate::harness::{click_menu, harness, has, no_errors, settings, settle, started};
use egui_kittest::kittest::{NodeT, Queryable};
use focus_lens::gui::state::InputKind;
use focus_lens::gui::worker::TaskKind;
use std::time::{Duration, Instant};

/// A cancelled analysis stays cancelled when an adapter is then refused (it restarted by
/// itself: the refused open had cleared the stop).
#[test]
fn a_refused_adapter_leaves_a_cancelled_analysis_cancelled() -> TestResult {
    let (dir, mut h) = started(64);
    let before = h.state().session.result.clone().unwrap().key.clone();
    // A long analysis, cancelled while it runs.
    h.state_mut().settings.setup.params.max_tokens = 2000;
    let t0 = Instant::now();
    while !h.state().is_running(TaskKind::Analyze) {
        h.step();
        assert!(t0.elapsed() < Duration::from_secs(60), "the analysis did not start");
    }
    h.state_mut().cancel_analysis();
    h.step();
    // An adapter that cannot load: refused with an error.
    let bad = dir.path().join("bad-adapter");
    std::fs::create_dir_all(&bad)?;
    std::fs::write(bad.join("adapter_config.json"), "{ not json")?;
    h.state_mut().open(InputKind::Adapter, bad);
    settle(&mut h);
    assert!(h.state().errors.iter().any(|e| e.contains("bad-adapter")), "{:?}", h.state().errors);
    let now = h.state().session.result.clone().unwrap();
    assert_ne!(now.key.params.max_tokens, 2000, "the cancelled analysis ran after the refused adapter");
    assert!(now.key == before || now.tokens() <= 512, "the view keeps what it showed");
    assert!(!h.state().is_running(TaskKind::Analyze));
    Ok(())
}

/// `--adapter A` over a remembered k: A's top_k, said in the status line (k = 3 stayed with
/// a K = 4 adapter, every pair kept).
#[test]
fn k_follows_an_adapter_named_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut stored = settings(64);
    stored.setup.params.k = 3;
    let args = focus_lens::gui::StartArgs {
        inputs: focus_lens::gui::Inputs { adapter: Some(common::root().join("sample_adapters/smollm2-135m-k4")), ..Default::default() },
        ..Default::default()
    };
    let mut h = harness(focus_lens::gui::startup_settings(stored, &args), dir.path());
    settle(&mut h);
    no_errors(&h);
    assert_eq!(h.state().settings.setup.params.k, 2, "k is the K = 4 adapter's top_k");
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "topk(2)");
    assert!(h.state().status.contains("k set to 2"), "{}", h.state().status);
}

/// An error goes once its cause is fixed: a refused text, then a text that opens and analyses.
#[test]
fn an_error_goes_once_its_cause_is_fixed() -> TestResult {
    let (dir, mut h) = started(64);
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "")?;
    h.state_mut().open(InputKind::Text, empty);
    settle(&mut h);
    assert_eq!(h.state().errors.len(), 1, "{:?}", h.state().errors);
    let good = dir.path().join("good.txt");
    std::fs::write(&good, "A short text that opens and is analysed, so the error above is no longer true.")?;
    h.state_mut().open(InputKind::Text, good);
    settle(&mut h);
    assert!(h.state().session.result.as_ref().unwrap().text_label.contains("good.txt"));
    assert!(h.state().errors.is_empty(), "a stale error beside the finished analysis: {:?}", h.state().errors);
    Ok(())
}

/// A model that fails to load is not "loading": the controls say none is loaded.
#[test]
fn a_failed_model_load_is_not_loading() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(64);
    s.inputs.model = Some(dir.path().join("no-such-model.gguf"));
    let mut h = harness(s, dir.path());
    settle(&mut h);
    assert!(h.state().session.model.is_none());
    assert!(!h.state().errors.is_empty());
    assert!(!has(&h, "the model is loading"), "the panel says the failed model is loading");
    assert!(has(&h, "no model loaded"));
}

/// The adapter picker offers only what fits the loaded model: no recent adapter of another
/// model, and not the embedded default (SmolLM2's) on another model.
#[test]
fn the_adapter_picker_offers_only_what_fits() -> TestResult {
    let dir = tempfile::tempdir()?;
    let gemma_adapter = common::root().join("sample_adapters/gemma3-270m-k8");
    let mut s = settings(64);
    s.remember(InputKind::Adapter, gemma_adapter.clone());
    let mut h = harness(s, dir.path());
    settle(&mut h);
    click_menu(&mut h, "File", "Open adapter…");
    assert!(has(&h, "hidden (gemma3-270m-k8"), "the Gemma adapter is named as hidden");
    assert!(h.query_by_label(&gemma_adapter.display().to_string()).is_none(), "a recent adapter of another model is offered");
    assert!(has(&h, "the embedded default (smollm2-135m-k8)"));
    h.state_mut().views.files.close();
    h.step();
    // Another model (a tiny Llama): SmolLM2's embedded adapter is not offered for it.
    h.state_mut().open(InputKind::Model, common::fixture("hf_tiny/llama"));
    settle(&mut h);
    assert!(h.state().session.model.as_ref().is_some_and(|m| m.model.config().n_layers != 30));
    click_menu(&mut h, "File", "Open adapter…");
    assert!(!has(&h, "the embedded default (smollm2-135m-k8)"), "SmolLM2's adapter offered on another model");
    assert!(has(&h, "is made for SmolLM2-135M, not this model"));
    Ok(())
}

/// File → default model, from another model and its adapter: the adapter cannot run on the
/// default model, so the embedded default adapter (made for it) comes with it, and one error
/// says why; the window is not left without an adapter.
#[test]
fn the_default_model_comes_with_an_adapter() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tiny = focus_core::Model::load(&common::fixture("hf_tiny/llama"), &candle_core::Device::Cpu)?;
    let ad = dir.path().join("tiny-adapter");
    focus_core::Adapter::random(&tiny.identity(), tiny.device(), &focus_core::AdapterSpec { groups: 4, ..Default::default() }, 1)?.save(&ad)?;
    let mut s = settings(64);
    s.inputs.model = Some(common::fixture("hf_tiny/llama"));
    s.inputs.adapter = Some(ad.clone());
    let mut h = harness(s, dir.path());
    settle(&mut h);
    // (The tiny model ships no tokenizer: its analysis fails, an error that goes with the next
    // analysis that runs.)
    assert_eq!(h.state().session.adapter.as_ref().and_then(|a| a.path.clone()), Some(ad.clone()), "the tiny model with its adapter");
    click_menu(&mut h, "File", "default model");
    settle(&mut h);
    let app = h.state();
    assert_eq!(app.session.model.as_ref().unwrap().model.config().n_layers, 30, "the default SmolLM2");
    assert!(app.session.adapter.as_ref().is_some_and(|a| a.path.is_none()), "the embedded default adapter is loaded");
    assert_eq!(app.session.result.as_ref().map(|r| r.groups()), Some(8), "and analysed");
    assert_eq!(app.errors.len(), 1, "{:?}", app.errors);
    assert!(app.errors[0].contains("tiny-adapter") && app.errors[0].contains("embedded default adapter"), "{:?}", app.errors);
    Ok(())
}

/// After a model switch the Train view says whose run it shows, and opens none of its
/// checkpoints on the other model (its "Open step N" failed there).
#[test]
fn the_train_view_keeps_its_run_with_its_model() -> TestResult {
    use focus_lens::gui::state::Tab;
    let dir = tempfile::tempdir()?;
    let p = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt"))?;
    let (train, held) = (dir.path().join("train"), dir.path().join("heldout"));
    std::fs::create_dir_all(&train)?;
    std::fs::create_dir_all(&held)?;
    std::fs::write(train.join("a.txt"), p.chars().take(8000).collect::<String>())?;
    std::fs::write(held.join("b.txt"), p.chars().skip(20000).take(3000).collect::<String>())?;
    let mut h = harness(settings(64), dir.path());
    settle(&mut h);
    h.state_mut().settings.setup.tab = Tab::Train;
    h.step();
    {
        let f = &mut h.state_mut().views.train.form;
        f.data = train.display().to_string();
        f.heldout = held.display().to_string();
        f.out = dir.path().join("run").display().to_string();
        // One stage (the paper's recipe) of 2 steps, small.
        f.recipe = focus_lens::training::Recipe::paper();
        (f.recipe.spec.groups, f.recipe.spec.window) = (4, 16);
        f.recipe.set_all(|o| (o.seq_len, o.batch, o.steps, o.eval_every, o.checkpoint_every, o.lr) = (64, 1, 2, 1, 1, 5e-2));
    }
    h.step();
    h.get_by_label("Start training").click();
    h.step();
    settle(&mut h);
    assert!(h.state().views.train.error.is_none(), "{:?}", h.state().views.train.error);
    assert!(!h.state().views.train.run.as_ref().unwrap().checkpoints.is_empty());
    assert!(h.query_all_by_label_contains("Open step").next().is_some(), "checkpoints to open on their own model");
    h.state_mut().open(InputKind::Model, common::fixture("hf_tiny/llama"));
    settle(&mut h);
    assert!(h.state().session.model.as_ref().is_some_and(|m| m.model.config().n_layers != 30));
    h.step();
    assert!(has(&h, "not of the loaded model"), "the view says the run is another model's");
    for b in h.query_all_by_label_contains("Open step") {
        assert!(b.accesskit_node().is_disabled(), "a checkpoint of SmolLM2 offered on the tiny model");
    }
    Ok(())
}

/// The status bar's Cancel button stays where it is while its task's bar and words change (it
/// moved along the bar as they grew).
#[test]
fn the_cancel_button_stays_put() {
    let (_dir, mut h) = started(64);
    h.state_mut().settings.setup.params.max_tokens = 2000;
    let mut xs: Vec<f32> = Vec::new();
    let t0 = Instant::now();
    while xs.len() < 30 && t0.elapsed() < Duration::from_secs(120) {
        h.step();
        if h.state().is_running(TaskKind::Analyze) {
            if let Some(n) = h.query_by_label("Cancel") {
                xs.push(n.rect().min.x);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    h.state_mut().cancel_analysis();
    settle(&mut h);
    assert!(xs.len() >= 10, "the analysis ran with its Cancel button: {xs:?}");
    assert!(xs.iter().all(|&x| (x - xs[0]).abs() < 0.5), "the Cancel button moved: {xs:?}");
}

/// A restart on a long remembered text does not launch minutes of analysis by itself: it waits
/// for Run analysis (`FocusLensApp::hold_long_restart`, which `focus-lens gui` calls when no
/// text is named), and runs when asked.
#[test]
fn a_restart_asks_before_a_long_analysis() -> TestResult {
    let dir = tempfile::tempdir()?;
    let long = dir.path().join("long.txt");
    let p = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt"))?;
    std::fs::write(&long, &p)?;
    let mut s = settings(20000);
    s.inputs.text = Some(long);
    let mut app = focus_lens::gui::FocusLensApp::new(s);
    app.export_dir = Some(dir.path().to_path_buf());
    app.hold_long_restart();
    let mut h = egui_kittest::Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut focus_lens::gui::FocusLensApp| app.show(ui), app);
    settle(&mut h);
    no_errors(&h);
    assert!(h.state().session.result.is_none() && !h.state().is_running(TaskKind::Analyze), "no analysis ran by itself");
    assert!(h.state().status.contains("is long"), "{}", h.state().status);
    h.get_by_label("Run analysis").click();
    h.step();
    h.step();
    assert!(h.state().is_running(TaskKind::Analyze), "Run analysis starts it");
    h.state_mut().cancel_analysis();
    settle(&mut h);
    Ok(())
}

/// The last export folder, the Centroids view's corpus and index and the Train form come back
/// after a restart (they were forgotten).
#[test]
fn views_remember_their_folders_and_the_train_form() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = focus_lens::gui::FocusLensApp::new(settings(64));
    app.views.files.export_folder = Some(dir.path().to_path_buf());
    app.views.centroids.corpus = "/data/corpus".into();
    app.views.centroids.index_path = "/data/corpus.focus-index".into();
    app.views.train.form.data = "/data/train".into();
    app.views.train.form.recipe.stages[1].opts.steps = 1234;
    app.views.train.form.recipe.spec.lambda = 7.5;
    app.remember_views();
    // Through the settings' stored form (serde), as eframe keeps them.
    let stored: focus_lens::gui::state::Settings = serde_json::from_str(&serde_json::to_string(&app.settings).unwrap()).unwrap();
    let back = focus_lens::gui::FocusLensApp::new(stored);
    assert_eq!(back.views.files.export_folder.as_deref(), Some(dir.path()));
    assert_eq!((back.views.centroids.corpus.as_str(), back.views.centroids.index_path.as_str()), ("/data/corpus", "/data/corpus.focus-index"));
    assert_eq!((back.views.train.form.data.as_str(), back.views.train.form.recipe.stages[1].opts.steps), ("/data/train", 1234));
    // The whole form, its recipe's stages and adapter shape included.
    assert_eq!(back.views.train.form, app.views.train.form);
}

/// A model switch lets the old model go (issue 50: memory grew over switches, 1.47 GB -> 2.85 GB
/// with Gemma -> 2.65 GB back on SmolLM2): once another model has loaded, nothing in the app
/// holds the old one (weights, tokenizer), its results or their kept passes (up to 480 MiB
/// each). The recent analyses (a preview, the full result, another k's) held them all, and the
/// partners' segment cache its heads.
#[test]
fn a_model_switch_lets_the_old_model_go() -> TestResult {
    use std::sync::{Arc, Weak};
    let (dir, mut h) = started(600);
    h.state_mut().settings.setup.params.k = 3;
    settle(&mut h);
    h.state_mut().select_token(Some(550));
    settle(&mut h);
    assert!(h.state().selection.partners.is_some());
    let model = Arc::downgrade(&h.state().session.model.as_ref().unwrap().model);
    let res = h.state().session.result.clone().unwrap();
    let kept: Vec<Weak<_>> = res.kept.iter().map(Arc::downgrade).collect();
    assert!(!kept.is_empty(), "the analysis kept its passes");
    drop(res);
    h.state_mut().open(InputKind::Model, common::fixture("hf_tiny/llama"));
    settle(&mut h);
    assert!(h.state().session.model.as_ref().is_some_and(|m| m.model.config().n_layers != 30), "the tiny model is loaded");
    // A cancelled job lets go when it stops: a few seconds at most.
    let t0 = Instant::now();
    while (model.strong_count() > 0 || kept.iter().any(|k| k.strong_count() > 0)) && t0.elapsed() < Duration::from_secs(10) {
        h.step();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(model.strong_count(), 0, "the old model is still held after the switch");
    assert!(kept.iter().all(|k| k.strong_count() == 0), "the old analyses' kept passes are still held");
    drop(dir);
    Ok(())
}
