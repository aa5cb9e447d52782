//! The Generate view driven headlessly through egui_kittest on the real default model
//! (SmolLM2-135M) and the embedded sample adapter: tokens stream into the view from a
//! background run, the newest token's highlighted keys are `decode::selected_keys`'s, Stop ends
//! the run, "Analyse this" loads prompt and generation as the text (and its analysis routes them
//! as the view showed), errors show in the window, and frames stay short while the model runs.


use crate::common::TestResult;
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use focus_core::attention::decode::{selected_keys, DecodeAttention};
use focus_core::generate::{Generator, Strategy};
use focus_lens::sampling::{self, Run, Stop};
use focus_lens::gui::jobs::streaming::Generated;
use focus_lens::gui::session::Session;
use focus_lens::gui::state::Tab;
use focus_lens::gui::views::generate::tail;
use focus_lens::gui::worker::TaskKind;
use focus_lens::gui::FocusLensApp;
use crate::harness::{harness, has, no_errors, settings, settle};
use std::time::{Duration, Instant};

type H = Harness<'static, FocusLensApp>;

/// The app on the Generate tab, its start-up analysis done, with "Continue the loaded text"
/// pressed: the end of the sample text is the prompt, cut to its last 800 characters (about 190
/// tokens: beyond the window of 128, so that top-k prunes, and short enough for a 2-core machine;
/// with what is generated, below the analysis' preview length).
fn generate_tab(dir: &std::path::Path) -> H {
    let mut h = harness(settings(120), dir);
    settle(&mut h);
    no_errors(&h);
    h.get_by_label("Generate").click();
    h.step();
    assert_eq!(h.state().settings.setup.tab, Tab::Generate);
    h.get_by_label("Continue the loaded text").click();
    h.step();
    let text = h.state().session.text.as_ref().unwrap().text.clone();
    let prompt = h.state().views.generate.prompt.clone();
    assert!(!prompt.is_empty() && text.ends_with(&prompt), "the prompt is the end of the loaded text");
    h.state_mut().views.generate.prompt = tail(&prompt, 800).to_string();
    h.step();
    h
}

/// Steps frames (each timed) until the generation ends; returns the frame times and the token
/// counts the view showed.
fn run_to_end(h: &mut H) -> (Vec<f64>, Vec<usize>) {
    let (mut times, mut seen) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    // The click lands within a few frames.
    for _ in 0..4 {
        h.step();
    }
    while h.state().is_running(TaskKind::Generate) {
        let t = Instant::now();
        h.step();
        times.push(t.elapsed().as_secs_f64());
        if let Some(r) = &h.state().views.generate.run {
            if seen.last() != Some(&r.tokens()) {
                seen.push(r.tokens());
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "the generation did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    h.step();
    (times, seen)
}

/// The view's run, ended.
fn shown(h: &H) -> Generated {
    h.state().views.generate.run.clone().expect("a generation on screen")
}

/// The same generation without the GUI (the CLI's loop, `sampling::Run`) on the app's model
/// and adapter as the view configured them: its ids and caches.
fn replay(h: &H, r: &Generated) -> (Vec<u32>, Vec<focus_core::attention::kv_cache::LayerCache>) {
    let app = h.state();
    let model = app.session.model.as_ref().unwrap().model.clone();
    let adapter = Session::configured_adapter(&app.session.adapter.as_ref().unwrap().adapter, &r.params);
    let (_, prompt) = sampling::prompt(&model, &app.views.generate.prompt, false).unwrap();
    assert_eq!(prompt, r.ids[..r.prompt_tokens]);
    let mut run = Run::start(&model, Some(adapter.as_ref()), r.params.mode(adapter.config.groups).unwrap(), &prompt, &app.settings.prefs.generate.sampling, None).unwrap();
    while run.next().unwrap().is_some() {}
    (run.generator.ids().to_vec(), run.generator.layers().to_vec())
}

/// Every routed layer's highlighted keys are those `decode::selected_keys` gives the newest token
/// over `caches`, and the line above the tokens states their share of the context.
fn highlight_is_the_masks(h: &mut H, r: &Generated, caches: &[focus_core::attention::kv_cache::LayerCache]) {
    let n = r.tokens();
    // The adapter's attention sinks (the first tokens, always attendable) as the view ran it.
    let sink = Session::configured_adapter(&h.state().session.adapter.as_ref().unwrap().adapter, &r.params).config.sink;
    for (l, c) in caches.iter().enumerate() {
        let (mut keys, _) = selected_keys(c, DecodeAttention::TopK { window: r.window, sink }).unwrap();
        keys.sort_unstable();
        assert_eq!(r.layers[l].attended, keys, "layer {l}: the highlighted tokens");
    }
    for layer in [0, 14, 29] {
        h.state_mut().settings.setup.layer = layer;
        h.step();
        let k = r.layers[layer].attended.len();
        assert!(k < n, "layer {layer}: {n} tokens with w = {} prune some", r.window);
        let line = format!("layer {layer}: may attend to {k} of {n} tokens ({:.1}%)", 100.0 * k as f64 / n as f64);
        assert!(has(h, &line), "{line}");
    }
}

#[test]
fn tokens_stream_in_and_analyse_this_loads_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = generate_tab(dir.path());
    h.state_mut().settings.prefs.generate.sampling.temperature = 0.0;
    h.state_mut().settings.prefs.generate.sampling.max_tokens = 40;
    h.step();
    assert!(has(&h, "KV cache, one step per token"), "causal Sinkhorn (the default) decodes from the cache");
    h.get_by_label("Start generating").click();
    let (times, seen) = run_to_end(&mut h);
    no_errors(&h);
    let r = shown(&h);
    assert_eq!(r.strategy, Strategy::KvCache);
    assert!(r.drawn == 40 || r.stop == Some(Stop::Eos), "{} tokens drawn, {:?}", r.drawn, r.stop);
    assert!(r.stop.is_some(), "ended on its own");
    // Streamed: the view showed states between the prompt and the last token.
    let between = seen.iter().filter(|&&c| c > r.prompt_tokens && c < r.tokens()).count();
    assert!(between >= 2, "token counts the view showed: {seen:?} (prompt {}, end {})", r.prompt_tokens, r.tokens());
    assert!(has(&h, "tokens (max tokens reached) in") || has(&h, "(end-of-sequence token)"), "the run's end is stated");

    // The view shows the CLI's generation: the same tokens, and its highlights are the mask's.
    let (ids, caches) = replay(&h, &r);
    assert_eq!(ids, r.ids, "the view's tokens are the CLI loop's");
    highlight_is_the_masks(&mut h, &r, &caches);

    // Frames stay within the bound the other views keep while the model runs beside them.
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let (median, worst) = (sorted[sorted.len() / 2], sorted[sorted.len() - 1]);
    eprintln!(
        "{} frames while generating {} tokens after a prompt of {} (prefill {:.2} s, {:.1} tok/s): median {:.1} ms, worst {:.1} ms",
        times.len(),
        r.drawn,
        r.prompt_tokens,
        r.prefill_seconds,
        r.tokens_per_second(),
        median * 1e3,
        worst * 1e3
    );
    assert!(worst < 0.5, "a frame took {worst:.3} s while generating");

    // Analyse this: the prompt and the generation become the text, analysed as generated.
    h.state_mut().settings.setup.layer = 7;
    h.get_by_label("Analyse this").click();
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    assert_eq!(app.settings.setup.tab, Tab::Tokens);
    assert_eq!(app.session.text.as_ref().unwrap().text.as_str(), r.text, "the loaded text is the prompt and the generation");
    assert!(app.settings.inputs.text.as_ref().unwrap().starts_with(dir.path()), "saved in the export folder");
    let res = app.session.result.as_ref().unwrap();
    let ids: Vec<u32> = res.analysis.tokens.iter().map(|t| t.id).collect();
    let first_diff = ids.iter().zip(&r.ids).position(|(a, b)| a != b);
    assert!(ids.len() == r.ids.len() && first_diff.is_none(), "the analysis has the generation's tokens: {} vs {}, first difference at {first_diff:?}: {:?} vs {:?}", ids.len(), r.ids.len(), first_diff.map(|i| &ids[i..(i + 5).min(ids.len())]), first_diff.map(|i| &r.ids[i..(i + 5).min(r.ids.len())]));
    for l in 0..res.layers() {
        assert_eq!(res.masks[l], r.layers[l].masks, "layer {l}: the analysis routes as the view showed");
        assert_eq!(res.aligned[l], r.layers[l].aligned, "layer {l}: the same group numbers and colours");
    }
}

#[test]
fn stop_ends_the_run_within_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = generate_tab(dir.path());
    h.state_mut().settings.prefs.generate.sampling.max_tokens = 2000;
    h.get_by_label("Start generating").click();
    let t0 = Instant::now();
    loop {
        h.step();
        if h.state().views.generate.run.as_ref().is_some_and(|r| r.drawn >= 5) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "no tokens arrived: errors {:?}, running {}, run {:?}", h.state().errors, h.state().is_running(TaskKind::Generate), h.state().views.generate.run.as_ref().map(|r| (r.drawn, r.stop, r.tokens())));
        assert!(t0.elapsed() < Duration::from_secs(5) || h.state().is_running(TaskKind::Generate) || h.state().views.generate.run.is_some(), "never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    h.get_by_label("Stop").click();
    h.step();
    assert!(!h.state().is_running(TaskKind::Generate), "stopped at once");
    let n = shown(&h).tokens();
    // Nothing more arrives (the job stops before its next step), and the view says so.
    for _ in 0..50 {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    no_errors(&h);
    let r = shown(&h);
    assert_eq!((r.tokens(), r.stop), (n, None), "no token after the stop");
    assert!(r.drawn < 2000);
    assert!(has(&h, "tokens (stopped) in"), "the view says it was stopped");
    assert!(h.query_by_label("Start generating").is_some());
}

/// Whole-sequence Sinkhorn (the sample adapter's, chosen instead of causal) in top-k mode: the
/// view says every token reruns the whole sequence, and the highlights come from the caches the
/// last pass refilled.
#[test]
fn whole_sequence_sinkhorn_recomputes_each_token() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut h = generate_tab(dir.path());
    h.get_by_label("the analysis' (whole-sequence)").click();
    h.step();
    h.step();
    h.state_mut().settings.prefs.generate.sampling.max_tokens = 3;
    h.step();
    assert!(!h.state().settings.prefs.generate.causal);
    assert!(has(&h, "every token reruns the whole sequence"), "the view says it is slow");
    h.get_by_label("Start generating").click();
    run_to_end(&mut h);
    no_errors(&h);
    let r = shown(&h);
    assert_eq!(r.strategy, Strategy::Recompute);
    assert_eq!(r.params.causal, Some(false));
    // One pass over every fed token gives the caches the view's last state was drawn from.
    let app = h.state();
    let model = app.session.model.as_ref().unwrap().model.clone();
    let adapter = Session::configured_adapter(&app.session.adapter.as_ref().unwrap().adapter, &r.params);
    let mut g = Generator::new(&model.decoder, Some(adapter.as_ref()), r.params.mode(adapter.config.groups)?)?;
    g.feed(&r.ids)?;
    let caches = g.layers().to_vec();
    highlight_is_the_masks(&mut h, &r, &caches);
    Ok(())
}

#[test]
fn errors_show_in_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = generate_tab(dir.path());
    h.state_mut().views.generate.prompt.clear();
    h.get_by_label("Start generating").click();
    run_to_end(&mut h);
    assert!(h.state().errors.iter().any(|e| e.starts_with("generation failed") && e.contains("the prompt has no tokens")), "{:?}", h.state().errors);
    assert!(has(&h, "the prompt has no tokens"), "in the status bar");
}

/// A CJK prompt streams in as characters, not replacement marks (issue 50): a character split
/// over byte tokens is shown once, by the token that starts it (the others show nothing, as in
/// the token view); each piece decoded alone was U+FFFD. The prompt's shown pieces put together
/// are the prompt.
#[test]
fn cjk_characters_split_over_tokens_stream_in_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(settings(120), dir.path());
    settle(&mut h);
    h.get_by_label("Generate").click();
    h.step();
    let prompt = "吾輩は猫である。名前はまだ無い。床前明月光，疑是地上霜。";
    h.state_mut().views.generate.prompt = prompt.into();
    h.state_mut().settings.prefs.generate.sampling.temperature = 0.0;
    h.state_mut().settings.prefs.generate.sampling.max_tokens = 8;
    h.step();
    h.get_by_label("Start generating").click();
    run_to_end(&mut h);
    no_errors(&h);
    let r = shown(&h);
    let cont = focus_lens::gui::views::tokens::CONTINUES;
    let prompt_pieces: String = r.texts[..r.prompt_tokens].iter().filter(|t| *t != cont).map(String::as_str).collect();
    assert!(prompt_pieces.ends_with(prompt), "the prompt's characters, each once: {prompt_pieces:?}");
    assert!(r.texts.iter().filter(|t| *t == cont).count() > 10, "the prompt's characters are split over byte tokens");
    assert!(!r.texts[..r.prompt_tokens].iter().any(|t| t.contains('\u{FFFD}')), "no replacement marks: {:?}", r.texts);
}
