//! Models, adapters and settings: which model an adapter opens, an adapter that does not fit, k
//! re-fitted to K, the adapter pickers, and the settings that persist.

use crate::common::{self, TestResult};
use crate::harness::{click_menu, harness, has, no_errors, settings, settle, started, type_path_and_open};
use egui_kittest::kittest::Queryable;
use focus_lens::gui::state::{InputKind, Settings, Tab};
use focus_core::ModeKind;
use std::time::{Duration, Instant};

/// k is re-fitted and said when another adapter comes (K = 8, k = 3 -> K = 4 used to keep k = 3:
/// every pair shares a group, silently dense); k beyond K/2 is flagged in the controls.
#[test]
fn k_follows_the_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(120);
    s.setup.params.k = 3;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "topk(3)", "the remembered k at start-up");
    let k8 = h.state().session.result.clone().unwrap();
    h.state_mut().open(InputKind::Adapter, common::root().join("sample_adapters/smollm2-135m-k4"));
    settle(&mut h);
    no_errors(&h);
    // Its groups are numbered by the K = 8 run's, layer by layer (the same tokens).
    let k4 = h.state().session.result.clone().unwrap();
    assert_eq!(k4.aligned, focus_core::analysis::align::to_reference(&k8.masks, &k8.aligned, &k4.masks, 4));
    assert!(k4.aligned_to.as_deref().is_some_and(|a| a.contains("smollm2-135m-k8")));
    h.step();
    assert!(has(&h, "matched, layer by layer, to the reference run"));
    assert_eq!(h.state().settings.setup.params.k, 2);
    assert!(h.state().status.contains("k set to 2") && h.state().status.contains("K = 4"), "{}", h.state().status);
    assert_eq!(h.state().session.result.as_ref().unwrap().analysis.mode, "topk(2)");
    h.state_mut().settings.setup.params.k = 3;
    settle(&mut h);
    assert!(h.query_by_label_contains("every pair shares a group (2k > K)").is_some());
}

/// The remembered layer and head survive the start-up (the sliders used to clamp them to 0
/// while no model was loaded).
#[test]
fn layer_and_head_are_restored() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(64);
    s.setup.layer = 12;
    s.setup.head = 5;
    let mut h = harness(s, dir.path());
    h.step();
    h.step();
    assert!(h.state().session.model.is_none(), "the first frames run before the model is loaded");
    settle(&mut h);
    assert_eq!((h.state().settings.setup.layer, h.state().settings.setup.head), (12, 5));
}

/// Settings survive a round trip through eframe's storage format (RON via serde).
#[test]
fn settings_persist() -> TestResult {
    let mut s = Settings::default();
    s.inputs.text = Some("/tmp/x.txt".into());
    s.remember(InputKind::Text, "/tmp/x.txt".into());
    s.setup.params.mode = ModeKind::Soft;
    s.setup.layer = 12;
    s.setup.tab = Tab::Mask;
    let json = serde_json::to_string(&s)?;
    let back: Settings = serde_json::from_str(&json)?;
    assert_eq!((back.inputs.text, back.setup.params, back.setup.layer, back.setup.tab), (s.inputs.text.clone(), s.setup.params.clone(), 12, Tab::Mask));
    assert_eq!(back.prefs.recent, s.prefs.recent);
    // Older or partial stored settings fall back to defaults field by field.
    let partial: Settings = serde_json::from_str(r#"{"layer": 3}"#)?;
    assert_eq!((partial.setup.layer, partial.setup.params.max_tokens), (3, Settings::default().setup.params.max_tokens));
    Ok(())
}

/// Issue 29, item 2: `focus-lens gui --adapter A` after the app was last used on another model
/// opens A's own base model (here the default SmolLM2) instead of an empty window.
#[test]
fn adapter_alone_opens_its_base_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut stored = settings(120);
    stored.inputs.model = Some(common::gemma3_model_path());
    let args = focus_lens::gui::StartArgs {
        inputs: focus_lens::gui::Inputs { adapter: Some(common::root().join("sample_adapters/smollm2-135m-k4")), ..Default::default() },
        ..Default::default()
    };
    let s = focus_lens::gui::startup_settings(stored, &args);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    let r = h.state().session.result.clone().expect("an analysis, not an empty window");
    assert_eq!(r.groups(), 4);
    assert_eq!(r.layers(), 30, "SmolLM2, the adapter's base model");
    assert!(!has(&h, "no adapter"));
}

/// Issue 29, item 2: `--adapter A` alone, when no local model is A's base model, opens the
/// default model (not the remembered one): the adapter is refused with one error naming it.
#[test]
fn adapter_alone_without_its_base_model_opens_the_default() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tiny = focus_core::Model::load(&common::fixture("hf_tiny/llama"), &candle_core::Device::Cpu)?;
    let ad = dir.path().join("tiny-adapter");
    focus_core::Adapter::random(&tiny.identity(), tiny.device(), &focus_core::AdapterSpec { groups: 4, ..Default::default() }, 1)?.save(&ad)?;
    let mut stored = settings(120);
    stored.inputs.model = Some(common::gemma3_model_path());
    let args = focus_lens::gui::StartArgs { inputs: focus_lens::gui::Inputs { adapter: Some(ad.clone()), ..Default::default() }, ..Default::default() };
    let s = focus_lens::gui::startup_settings(stored, &args);
    assert_eq!(s.inputs.model, None, "the default model, not the remembered Gemma 3");
    let mut h = harness(s, dir.path());
    settle(&mut h);
    let app = h.state();
    assert_eq!(app.session.model.as_ref().unwrap().model.config().n_layers, 30, "the default SmolLM2");
    assert!(app.errors.iter().any(|e| e.contains("tiny-adapter")), "{:?}", app.errors);
    Ok(())
}

/// Issue 29, item 3: opening a model that the loaded adapter does not fit stops the running
/// analysis and drops the adapter with a message; no frame shows the old analysis or the old
/// adapter under the new model.
#[test]
fn another_model_never_mixes_with_the_old_adapter() {
    let (_dir, mut h) = started(120);
    no_errors(&h);
    // A longer analysis running when the model changes.
    h.state_mut().settings.setup.params.max_tokens = 400;
    h.step();
    assert!(h.state().session.running_analysis().is_some());
    type_path_and_open(&mut h, "Open model…", &common::gemma3_model_path(), "Open as model");
    let t0 = Instant::now();
    loop {
        h.step();
        let app = h.state();
        if let (Some(m), Some(r)) = (&app.session.model, &app.session.result) {
            assert_eq!(r.key.model_gen, m.gen, "an analysis of the previous model on screen under {}", m.model.config().name);
        }
        if app.session.model.as_ref().is_some_and(|m| m.model.config().n_layers == 18) {
            assert!(!has(&h, "smollm2-135m-k8"), "the SmolLM2 adapter named beside Gemma");
        }
        if !app.busy() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300));
        std::thread::sleep(Duration::from_millis(20));
    }
    settle(&mut h);
    let app = h.state();
    assert_eq!(app.session.model.as_ref().unwrap().model.config().n_layers, 18);
    assert!(app.session.adapter.is_none() && app.session.result.is_none() && app.session.running_analysis().is_none());
    assert!(app.errors.iter().any(|e| e.contains("no adapter is loaded: open one made for")), "{:?}", app.errors);
}

/// Issue 29, item 4: an adapter that does not fit is refused and changes nothing: the Sinkhorn
/// and window settings stay, no analysis runs, the result on screen stays.
#[test]
fn a_refused_adapter_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    h.state_mut().settings.setup.params.causal = Some(true);
    h.state_mut().settings.setup.params.window = Some(64);
    settle(&mut h);
    no_errors(&h);
    let before = h.state().session.result.clone().unwrap();
    h.state_mut().open(InputKind::Adapter, common::root().join("sample_adapters/gemma3-270m-k8"));
    let t0 = Instant::now();
    loop {
        h.step();
        assert!(h.state().session.running_analysis().is_none(), "a re-analysis started");
        if !h.state().busy() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(20));
    }
    settle(&mut h);
    let app = h.state();
    assert!(app.errors.iter().any(|e| e.contains("gemma3-270m-k8")), "{:?}", app.errors);
    assert_eq!((app.settings.setup.params.causal, app.settings.setup.params.window), (Some(true), Some(64)));
    assert!(std::sync::Arc::ptr_eq(app.session.result.as_ref().unwrap(), &before));
    assert_eq!(app.settings.inputs.adapter, None);
}

/// Both adapter pickers offer only the adapters that fit the loaded model, say how many were
/// hidden, and show perplexities measured alike (one held-out text, one context, dense / soft /
/// top-k side by side; not the training log's soft figure beside a held-out top-k one).
#[test]
fn adapter_pickers_fit_the_model_and_compare_like_with_like() -> TestResult {
    let (_dir, mut h) = started(64);
    h.state_mut().views.files.native = false;
    click_menu(&mut h, "File", "Open adapter…");
    assert!(h.query_by_label("smollm2-135m-k4").is_some());
    assert!(h.query_by_label("gemma3-270m-k8").is_none() && h.query_by_label("gemma3-270m-k8-global").is_none(), "a Gemma adapter offered for SmolLM2");
    assert!(has(&h, "2 adapters made for other models are hidden (gemma3-270m-k8, gemma3-270m-k8-global)"));
    // The figures the default adapter's config records (read here from its raw JSON, so that
    // a retrained adapter with new recorded figures needs no change here).
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::root().join("sample_adapters/smollm2-135m-k8/adapter_config.json"))?)?;
    let ppl = &cfg["results"]["ppl"]["ctx1024"];
    // The text's file name, as the picker shows it (`results.ppl_file` up to its first " (").
    let file = cfg["results"]["ppl_file"].as_str().unwrap().split(" (").next().unwrap().rsplit('/').next().unwrap();
    let line = format!("held-out PPL on {file}, ctx 1024: dense {:.2}, soft {:.2}, top-2 {:.2}", ppl["dense"].as_f64().unwrap(), ppl["soft"].as_f64().unwrap(), ppl["topk2"].as_f64().unwrap());
    assert!(has(&h, &line), "the sample adapter's figures, alike: {line}");
    assert!(!has(&h, "held-out PPL 3"), "the training log's figure beside the measured ones");
    h.get_by_label("Cancel").click();
    h.step();
    // The compare view's picker.
    h.get_by_label("Compare").click();
    h.step();
    h.get_by_value("pick…").click();
    h.step();
    h.step();
    assert!(h.query_by_label_contains("smollm2-135m-k4  (").is_some());
    assert!(h.query_by_label_contains("gemma3-270m-k8  (").is_none(), "a Gemma adapter offered as run B");
    assert!(has(&h, "2 adapters made for other models are hidden"));
    Ok(())
}
