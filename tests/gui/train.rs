//! The Train view driven headlessly through egui_kittest on the real default model
//! (SmolLM2-135M): a bad setting is one error and starts nothing; Start runs the CLI's training
//! (`focus_lens::training`) in the background, whose log rows become the plots' points (the
//! same numbers as OUT/train_log.jsonl); Stop ends it after a step with its checkpoint kept;
//! and "Open step N" loads that checkpoint as the app's adapter, which the Tokens view then
//! shows (its K, its routing).

use crate::common::{self, TestResult};
use crate::harness;

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_lens::gui::state::Tab;
use focus_lens::gui::worker::TaskKind;
use focus_lens::gui::FocusLensApp;
use crate::harness::{harness, has, no_errors, settings, settle};
use std::path::Path;
use std::time::{Duration, Instant};

type H = Harness<'static, FocusLensApp>;

/// A training folder of two texts and a held-out folder of one, cut from the Persuasion fixture
/// (disjoint parts).
fn texts(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let p = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let cut = |a: usize, b: usize| {
        let (a, b) = ((a..).find(|&i| p.is_char_boundary(i)).unwrap(), (b..).find(|&i| p.is_char_boundary(i)).unwrap());
        p[a..b].to_string()
    };
    let (train, held) = (dir.join("train"), dir.join("heldout"));
    std::fs::create_dir_all(&train).unwrap();
    std::fs::create_dir_all(&held).unwrap();
    std::fs::write(train.join("a.txt"), cut(0, 12000)).unwrap();
    std::fs::write(train.join("b.txt"), cut(12000, 24000)).unwrap();
    std::fs::write(held.join("c.txt"), cut(40000, 46000)).unwrap();
    (train, held)
}

/// Types `text` into a text field emptied first (as select-all would).
fn type_into(h: &mut H, label: &str, text: &str, clear: impl Fn(&mut FocusLensApp)) {
    clear(h.state_mut());
    h.step();
    harness::type_into(h, label, text);
}

/// Steps frames until `done` holds (or fails after `secs`).
fn until(h: &mut H, secs: u64, what: &str, done: impl Fn(&FocusLensApp) -> bool) {
    let t0 = Instant::now();
    while !done(h.state()) {
        h.step();
        assert!(t0.elapsed() < Duration::from_secs(secs), "{what}: not within {secs} s; errors {:?}, progress {:?}", h.state().errors, h.state().worker.progress());
        std::thread::sleep(Duration::from_millis(20));
    }
    h.step();
}

#[test]
fn start_watch_stop_and_open_a_checkpoint() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let (train, held) = texts(tmp.path());
    let out = tmp.path().join("run");
    let mut h = harness(settings(120), tmp.path());
    settle(&mut h);
    no_errors(&h);
    let sample_groups = h.state().session.result.as_ref().unwrap().groups();
    h.get_by_label("Train").click();
    h.step();
    assert_eq!(h.state().settings.setup.tab, Tab::Train);
    assert!(has(&h, "No run yet"), "the view says what to do before a run");

    // A missing folder: one error naming it, and nothing runs.
    type_into(&mut h, "training text", &tmp.path().join("nowhere").display().to_string(), |a| a.views.train.form.data.clear());
    type_into(&mut h, "held-out text", &held.display().to_string(), |a| a.views.train.form.heldout.clear());
    h.get_by_label("Start training").click();
    h.step();
    h.step();
    let err = h.state().views.train.error.clone().expect("an error under the button");
    assert!(err.starts_with("cannot start training: training text:") && err.contains("nowhere") && err.contains("does not exist"), "{err}");
    assert!(has(&h, "does not exist"), "the error is shown");
    assert!(!h.state().is_running(TaskKind::Train) && h.state().views.train.run.is_none());
    // A sequence inside the window: the trainer's own rule, said before anything runs.
    type_into(&mut h, "training text", &train.display().to_string(), |a| a.views.train.form.data.clear());
    {
        // The default recipe's stages, small and long, from random routers.
        let r = &mut h.state_mut().views.train.form.recipe;
        (r.spec.groups, r.spec.window, r.init) = (4, 16, focus_lens::training::Init::Random);
        r.set_all(|o| (o.seq_len, o.batch, o.steps, o.eval_every, o.checkpoint_every, o.lr) = (16, 1, 1000, 2, 2, 5e-2));
    }
    h.get_by_label("Start training").click();
    h.step();
    h.step();
    let err = h.state().views.train.error.clone().expect("an error under the button");
    assert!(err.contains("inside the local window"), "{err}");
    assert!(h.state().views.train.run.is_none());

    // A small run: seq 64, K = 4, w = 16, evaluations and checkpoints every 2 steps.
    let r = &mut h.state_mut().views.train.form.recipe;
    // The sharpening and balance terms [ours] reach the trainer (its checkpoint keeps its options).
    r.set_all(|o| (o.seq_len, o.sharpen, o.balance) = (64, 0.05, 0.5));
    // The length stage widens the window (the shipped recipe: 512) within these sequences.
    r.stages.iter_mut().filter(|s| s.window.is_some()).for_each(|s| s.window = Some(24));
    // So do the projection gain and the frozen projection [ours].
    r.init_gain = 0.5;
    r.set_all(|o| o.freeze_projection = true);
    type_into(&mut h, "output folder", &out.display().to_string(), |a| a.views.train.form.out.clear());
    h.get_by_label("Start training").click();
    h.step();
    h.step();
    assert!(h.state().views.train.error.is_none(), "{:?}", h.state().views.train.error);
    assert!(h.state().is_running(TaskKind::Train), "the run started");
    // Plots get points as the run goes: step 0 (the twin) and two more evaluations.
    until(&mut h, 400, "three evaluations", |a| a.views.train.run.as_ref().is_some_and(|r| r.ppl.len() >= 3 && !r.checkpoints.is_empty()));
    {
        let r = h.state().views.train.run.clone().unwrap();
        assert_eq!(r.ppl[0][0], 0.0, "the first evaluation is the untrained twin's, at step 0");
        assert_eq!(r.dominance.len(), 30, "one dominance bar per layer");
        assert!(r.nmi.len() >= 3 && r.nmi.iter().all(|p| p[1].is_finite()), "{:?}", r.nmi);
        let f = r.figures.clone().unwrap();
        assert!(f.twin_median_nmi.is_some() && f.nmi_ratio.is_some(), "{f:?}");
        assert!(has(&h, "held-out PPL") && has(&h, "x twin") && has(&h, "worst dominance"), "the figures line");
    }
    assert!(has(&h, "training: step"), "progress with the step");
    assert!(has(&h, "stage 1/3 train: 1000 steps x 1 x 64 tokens"), "the stage running");
    assert!(h.state().is_running(TaskKind::Train), "1000 steps: still running");

    // Stop: the run ends after its current step with a checkpoint.
    h.get_by_label("Stop training").click();
    until(&mut h, 300, "the run to stop", |a| !a.is_running(TaskKind::Train));
    no_errors(&h);
    let r = h.state().views.train.run.clone().unwrap();
    let ended = r.ended.clone().unwrap();
    assert!(ended.starts_with("stopped at step"), "{ended}");
    assert!(has(&h, "stopped at step"));
    assert!(out.join("checkpoint/optimizer.safetensors").exists(), "the resumable checkpoint");
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint/trainer_state.json"))?)?;
    assert_eq!((state["options"]["sharpen"].as_f64(), state["options"]["balance"].as_f64()), (Some(0.05), Some(0.5)), "{}", state["options"]);
    assert_eq!(state["options"]["freeze_projection"].as_bool(), Some(true), "{}", state["options"]);
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint/adapter_config.json"))?)?;
    assert!(cfg["init"].as_str().unwrap().ends_with("then W_g multiplied by 0.5 [ours]"), "{}", cfg["init"]);
    // The plots' points are the log's rows.
    let log: Vec<serde_json::Value> = std::fs::read_to_string(out.join("train_log.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(log.len(), r.loss.len(), "one loss point per log row");
    for (row, p) in log.iter().zip(&r.loss) {
        assert!(row["step"].as_f64().unwrap() == p[0] && (row["loss"].as_f64().unwrap() - p[1]).abs() <= 1e-12 * p[1].abs().max(1.0), "{row} / {p:?}");
    }
    // serde_json's default float parser may land one ulp off the value it wrote: compare to 1e-12.
    let ppl: Vec<[f64; 2]> = log.iter().filter_map(|row| Some([row["step"].as_f64()?, row["heldout_ppl"].as_f64()?])).collect();
    assert_eq!(ppl.len(), r.ppl.len(), "{ppl:?} / {:?}", r.ppl);
    for (a, b) in ppl.iter().zip(&r.ppl) {
        assert!(a[0] == b[0] && (a[1] - b[1]).abs() <= 1e-12 * b[1].abs(), "{ppl:?} / {:?}", r.ppl);
    }
    // Every checkpoint kept; the stop's among them.
    let stopped_at: usize = ended.trim_start_matches("stopped at step ").split(':').next().unwrap().parse().unwrap();
    assert_eq!(r.checkpoints.last().unwrap().step, stopped_at, "{:?}", r.checkpoints);
    assert!(r.checkpoints.iter().any(|c| c.step == 2));

    // Open the checkpoint of step 2: it becomes the adapter, and the Tokens view shows it.
    let step2 = r.checkpoints.iter().find(|c| c.step == 2).unwrap().dir.clone();
    h.get_by_label("Open step 2").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    assert_eq!(app.settings.setup.tab, Tab::Tokens);
    assert_eq!(app.session.adapter.as_ref().unwrap().path.as_ref(), Some(&step2));
    let res = app.session.result.as_ref().expect("an analysis with the checkpoint");
    assert_eq!(res.groups(), 4, "the checkpoint's K (the sample adapter has {sample_groups})");
    let on_disk = focus_core::Adapter::load(&step2, &res.model.identity(), &candle_core::Device::Cpu)?;
    assert_eq!(
        res.adapter.layers[5].proj.flatten_all()?.to_vec1::<f32>()?,
        on_disk.layers[5].proj.flatten_all()?.to_vec1::<f32>()?,
        "the analysis routes with the checkpoint's weights"
    );
    assert!(has(&h, "step-000002"), "the menu bar names the checkpoint");
    Ok(())
}

/// The Train view starts from the CLI's defaults: the recipe `focus-lens train` resolves with no
/// option given (`shipped`, its stages and adapter shape), on the default model unchanged by
/// the view's fitting; a recipe picked in the view replaces every value with that recipe's.
#[test]
fn the_train_views_defaults_are_the_clis() -> TestResult {
    use clap::{Args as _, FromArgMatches};
    use focus_lens::cli::train::Args;
    let tmp = tempfile::tempdir()?;
    let mut h = harness(settings(64), tmp.path());
    settle(&mut h);
    h.get_by_label("Train").click();
    h.step();
    let m = Args::augment_args(clap::Command::new("train")).try_get_matches_from(["train", "--data", "d", "--heldout", "h", "--out", "o"])?;
    let cli = Args::from_arg_matches(&m)?.recipe()?;
    assert_eq!(h.state().views.train.form.recipe, cli);
    assert_eq!(cli, focus_lens::training::Recipe::shipped());
    assert!(has(&h, "stage train") && has(&h, "stage long"), "the recipe's stages are shown");
    // Picking `paper` gives the CLI's `--recipe paper`.
    h.get_by_label("recipe").click();
    h.step();
    h.step();
    h.get_by_label("paper").click();
    h.step();
    let m = Args::augment_args(clap::Command::new("train")).try_get_matches_from(["train", "--recipe", "paper", "--data", "d", "--heldout", "h", "--out", "o"])?;
    assert_eq!(h.state().views.train.form.recipe, Args::from_arg_matches(&m)?.recipe()?);
    assert!(!has(&h, "stage long"), "one stage");
    Ok(())
}
