//! What core's `analysis` computes for the app's views, on the tiny Hugging Face checkpoints
//! (tests/fixtures/hf_tiny): the comparison's per-token loss is the model's own.

#[path = "common/mod.rs"]
mod common;

use candle_core::Device;
use focus_core::analysis::compare::{run, Run};
use focus_core::model::{Decoder, ForwardOptions};
use focus_core::{Adapter, AdapterSpec, Mode, Model};

/// The Compare view's per-token loss (`analysis::compare::run`) is the model's own: computed
/// through `Decoder::logits`, which soft-caps Gemma 2's final logits. The view used to rebuild
/// the logits by hand (final norm + lm_head), skipping the cap: 1.3e-4 off at position 1 here.
#[test]
fn compare_loss_is_the_models_own_on_gemma2() {
    let model = Model::load(&common::fixture("hf_tiny").join("gemma2"), &Device::Cpu).unwrap();
    assert!(model.config().final_softcap.is_some(), "the fixture soft-caps its final logits");
    let adapter = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window: 3, ..Default::default() }, 1).unwrap();
    let ids: Vec<u32> = (0..40).map(|i| (i * 37 % 500) as u32).collect();
    let r = Run { label: "A", mode: Mode::Soft, k: 2, adapter: &adapter };
    let out = run(&model, &ids, &r, 2, None, |_| {}).unwrap();
    let logits = model.decoder.forward(&ids, &ForwardOptions::new(Mode::Soft, Some(&adapter))).unwrap().logits;
    let want = Decoder::nll(&logits.narrow(0, 0, ids.len() - 1).unwrap(), &ids[1..]).unwrap();
    for (i, (got, want)) in out.loss.iter().zip(&want).enumerate() {
        assert!((got - want).abs() <= 2e-5, "position {i}: compare's loss {got}, the model's {want}");
    }
    assert!(out.loss[ids.len() - 1].is_nan(), "the last position has no next token");
}

/// An analysis keeps its own passes (`analysis::kept`) in segment order while they fit the byte
/// budget it is given, each as large as `pass_bytes` says; a kept pass holds exactly what a fresh
/// pass of its segment computes (queries, keys and routing), and its last residual gives the
/// losses a compare's run computes.
#[test]
fn analysis_keeps_its_passes_within_the_budget() {
    use focus_core::analysis::kept::pass_bytes;
    use focus_core::analysis::{analyze_tokens_keeping, AnalyzeOptions, Tokens};
    let model = common::default_model();
    let adapter = focus_lens::defaults::sample_adapter(model).unwrap();
    let text: String = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap().chars().take(4000).collect();
    let enc = model.tokenizer().unwrap().encode(&text, false).unwrap();
    let n = 300.min(enc.ids.len());
    assert_eq!(n, 300, "the text is long enough");
    let tokens = Tokens { ids: &enc.ids[..n], offsets: &enc.offsets[..n] };
    let mode = common::topk(2, adapter.config.groups);
    let opts = AnalyzeOptions { mode: mode.kind(), k: adapter.config.topk(2).unwrap(), segment_len: 120, keep_tokens: false, cancel: None };
    let one = pass_bytes(model.config(), adapter.config.groups, 120);
    let end = &text[..enc.offsets[n - 1].1];
    // Segments of 120, 120 and 60 tokens: a budget of one and a half segments keeps the first.
    let (analysis, kept) = analyze_tokens_keeping(model, &adapter, "sample", end, &tokens, &opts, one + one / 2, |_, _| {}).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].start, kept[0].tokens(), kept[0].bytes()), (0, 120, one));
    let (_, none) = analyze_tokens_keeping(model, &adapter, "sample", end, &tokens, &opts, one - 1, |_, _| {}).unwrap();
    assert!(none.is_empty(), "a budget below one segment keeps nothing");
    let (again, all) = analyze_tokens_keeping(model, &adapter, "sample", end, &tokens, &opts, usize::MAX, |_, _| {}).unwrap();
    assert_eq!(all.iter().map(|k| (k.start, k.tokens())).collect::<Vec<_>>(), [(0, 120), (120, 120), (240, 60)]);
    assert_eq!(again.routing[3].memberships, analysis.routing[3].memberships, "keeping changes nothing of the analysis");
    // The second segment against a fresh pass of it.
    let fresh = focus_core::analysis::partners::sequence_heads(model, Some(&adapter), &enc.ids[120..240], mode, None, &|_| {}).unwrap();
    for l in [0, 17, 29] {
        let (kh, kr) = &all[1].heads.layers[l];
        let (fh, fr) = &fresh.layers[l];
        assert_eq!(kr.as_ref().unwrap().memberships, fr.as_ref().unwrap().memberships, "layer {l}");
        for (h, q) in [(0, 119), (8, 57)] {
            assert_eq!(kh.row(focus_core::analysis::partners::Distant::Attend, h, q).unwrap(), fh.row(focus_core::analysis::partners::Distant::Attend, h, q).unwrap(), "layer {l} head {h}");
        }
    }
    // Its residual gives the losses of a compare run over the segment.
    let ids = &enc.ids[120..240];
    let r = Run { label: "A", mode, k: 2, adapter: &adapter };
    let from_kept = focus_core::analysis::compare::run_from_kept(model, &all[1], ids, &r, 2, None);
    assert!(from_kept.is_err(), "a pass that starts at token 120 cannot stand for a run from position 0 of the text");
    let got = focus_core::analysis::compare::run_from_kept(model, &all[0], &enc.ids[..120], &r, 2, None).unwrap();
    let want = run(model, &enc.ids[..120], &r, 2, None, |_| {}).unwrap();
    assert_eq!(got.masks, want.masks);
    assert!(got.loss.iter().zip(&want.loss).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())));
    assert_eq!(got.pruned.unwrap().mass, want.pruned.unwrap().mass);
    // Whole-sequence Sinkhorn: a prefix of the pass is not the pass of the prefix.
    assert!(!adapter.config.causal_sinkhorn && !all[0].serves(mode, 100) && all[0].serves(mode, 120));
}

/// Issue 48: `focus-lens analyze --out` and the GUI's statistics export write the same files for
/// the same input (model, adapter, text, top-k with k = 2, no untrained twin: the GUI computes
/// none), byte for byte: the CSV set (per group, profiles, tokens, tidy groups, Arrow IPC,
/// structure and its table) in the shown numbering and in the raw one, and the JSON apart from
/// its `provenance` (the CLI records its arguments, the GUI its settings and selection: left out
/// of the comparison on purpose, as the only part that says who wrote the file).
#[test]
fn analyze_out_and_the_gui_export_write_the_same_files() {
    use focus_lens::gui::{export, jobs, state, worker::Handle};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let text: String = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap().chars().skip(10_000).take(1500).collect();
    let file = tmp.path().join("p.txt");
    std::fs::write(&file, &text).unwrap();
    let ad = common::root().join("sample_adapters/smollm2-135m-k8");
    // The CLI, once per file set.
    let cli = |out: &std::path::Path, extra: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens"))
            .args(["analyze", "--model"])
            .arg(common::model_path())
            .arg("--adapter")
            .arg(&ad)
            .args(["--mode", "topk", "--k", "2", "--no-twin"])
            .args(extra)
            .arg(&file)
            .arg("--out")
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    // The GUI's analysis job on the same inputs (the adapter named as the CLI names it).
    let model = Arc::new(Model::load(&common::model_path(), &Device::Cpu).unwrap());
    let adapter = Arc::new(Adapter::load(&ad, &model.identity(), model.device()).unwrap());
    let params = state::RunParams::default();
    assert_eq!((params.mode, params.k), (focus_core::ModeKind::TopK, 2));
    let job = jobs::AnalysisJob {
        model: model.clone(),
        adapter,
        adapter_label: ad.display().to_string(),
        text_label: "p.txt".into(),
        text: Arc::new(text.clone()),
        key: state::AnalysisKey { model_gen: 1, adapter_gen: 1, text_gen: 1, params },
        disk: None,
        adapter_file: String::new(),
        adapter_sha256: String::new(),
        keep: jobs::Keep::default(),
    };
    let res = jobs::analyze(job, false, &Handle::default(), &|_| {}).unwrap();
    assert!(res.tokens() < res.key.params.max_tokens, "the GUI analyses the whole text, as the CLI does");
    // The visible files of a folder (the atomic set's store is hidden), with their bytes.
    let files = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
            .collect();
        v.sort();
        v
    };
    for raw in [false, true] {
        let (a, b) = (tmp.path().join(format!("cli-{raw}")), tmp.path().join(format!("gui-{raw}")));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        cli(&a.join("s.csv"), if raw { &["--raw-groups"] } else { &[] });
        export::write_csv_set(&res, &b.join("s.csv"), raw).unwrap();
        let (fa, fb) = (files(&a), files(&b));
        let names: Vec<&str> = fa.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["s.csv", "s.groups.arrow", "s.groups.csv", "s.manifest.json", "s.profiles.csv", "s.structure.csv", "s.structure_table.csv", "s.tokens.csv"]);
        assert_eq!(fa.iter().map(|(n, _)| n).collect::<Vec<_>>(), fb.iter().map(|(n, _)| n).collect::<Vec<_>>(), "the same set");
        // Plain files (no links into a hidden folder), and manifests that list the same files
        // (their provenances differ: the CLI's and the GUI's).
        for d in [&a, &b] {
            assert!(std::fs::read_dir(d).unwrap().all(|e| e.unwrap().file_type().unwrap().is_file()), "only plain files in {}", d.display());
        }
        let listed = |d: &std::path::Path| -> serde_json::Value { serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(d.join("s.manifest.json")).unwrap()).unwrap()["files"].clone() };
        assert_eq!(listed(&a), listed(&b), "the manifests list the same files and hashes");
        for ((name, x), (_, y)) in fa.iter().zip(&fb).filter(|((n, _), _)| n != "s.manifest.json") {
            assert!(x == y, "{name} (raw numbers: {raw}) differs between analyze --out and the GUI's export");
        }
        if !raw {
            // The shown numbering is not the raw one somewhere, so the comparison saw it.
            assert!((0..res.layers()).any(|l| (0..res.groups()).any(|g| res.shown_group(l, g, false) != g)));
        }
    }
    let json_cli = tmp.path().join("cli.json");
    cli(&json_cli, &[]);
    let gui_json = export::stats_json(&res, serde_json::json!({"written_by": "the GUI"}), false).unwrap();
    let mut a: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_cli).unwrap()).unwrap();
    let mut b: serde_json::Value = serde_json::from_str(&gui_json).unwrap();
    for v in [&mut a, &mut b] {
        assert!(v.as_object_mut().unwrap().remove("provenance").is_some(), "both record a provenance");
    }
    assert!(a == b, "the JSON of analyze --out and of the GUI's export differ beyond the provenance");
    assert!(a["group_numbers"].as_str().unwrap().starts_with("shown"));
}

/// `ppl` scores a chunk's second half `SCORE_ROWS` rows of logits at a time (issue 52: the whole
/// half's logits were 19.9 GB at ctx 32K on Qwen2.5): at ctx 4096 (two slices of 1024 rows on
/// SmolLM2-135M) the perplexity is the whole half's, scored at once from the model's own logits.
#[test]
fn perplexity_scored_in_slices_is_the_whole_halfs() {
    use focus_core::eval::ppl::perplexity_chunks;
    use focus_core::model::memory::SCORE_ROWS;
    let model = common::default_model();
    let ctx = 4096;
    assert!(ctx / 2 > SCORE_ROWS, "more than one slice");
    let ids = common::persuasion_ids(model, 0, ctx);
    let got = perplexity_chunks(model, &ids, ctx, Some(1), Mode::Dense, None, None, |_, _| {}).unwrap();
    let first = ctx / 2;
    let opts = ForwardOptions { logits_from: first, ..ForwardOptions::new(Mode::Dense, None) };
    let logits = model.decoder.forward(&ids, &opts).unwrap().logits;
    let nll = Decoder::nll(&logits.narrow(0, 0, ctx - 1 - first).unwrap(), &ids[first + 1..]).unwrap();
    let want = (nll.iter().map(|&x| x as f64).sum::<f64>() / nll.len() as f64).exp();
    assert_eq!(got.scored_tokens, nll.len());
    assert!((got.ppl - want).abs() < 1e-5 * want, "sliced {} vs whole {want}", got.ppl);
}
