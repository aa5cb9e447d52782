//! Long background jobs: the estimate of time left, the analyses kept on disk, and the timings of
//! the heavy views (ignored by default: run in release).

use crate::common::TestResult;
use crate::harness::{harness, no_errors, settings, settle, started};
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use focus_lens::gui::FocusLensApp;
use std::time::{Duration, Instant};

/// A long job says how long it has left: its progress bar reads "n/30 · ~12 s left", from the
/// rate of its steps.
#[test]
fn long_jobs_estimate_the_time_left() {
    let (_dir, mut h) = started(64);
    h.state_mut().settings.setup.params.max_tokens = 2048;
    let t0 = Instant::now();
    let mut seen = None;
    let label = |n: &egui_kittest::Node<'_>| n.accesskit_node().label().map(|l| l.to_string());
    while h.state().busy() || t0.elapsed() < Duration::from_secs(2) {
        h.step();
        if let Some(l) = h.query_all_by_label_contains(" left").filter_map(|n| label(&n)).find(|l| l.contains("/30 · ~")) {
            seen = Some(l);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = seen.expect("an estimate while the analysis ran");
    let (count, left) = seen.split_once(" · ~").unwrap();
    let (done, total) = count.split_once('/').unwrap();
    assert!(done.parse::<usize>().unwrap() >= 1 && total == "30", "{seen}");
    assert!(left.ends_with(" s left") || left.ends_with(" min left"), "{seen}");
    assert!(left.split(' ').next().unwrap().parse::<f64>().is_ok(), "{seen}");
}

/// How good the estimate of time left is on a 32K-token analysis (Persuasion, 16 segments): the
/// status bar's "~N s left" sampled every 2 s against the time the job then really took (run it
/// in release: `cargo test --release -p focus-lens --test gui jobs::time_left_of_a_32k_analysis
/// -- --ignored --nocapture`).
#[test]
#[ignore]
fn time_left_of_a_32k_analysis() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut s = settings(32_768);
    s.inputs.text = Some(focus_lens::defaults::cache_dir().join("corpus/heldout/austen__persuasion.txt"));
    let mut h = harness(s, dir.path());
    while h.state().session.model.is_none() || h.state().session.text.is_none() {
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    let mut samples: Vec<(f64, f64, String)> = Vec::new();
    let mut next = 0.0;
    while h.state().busy() || h.state().session.result.as_ref().is_none_or(|r| r.tokens() < 32_768) {
        h.step();
        let t = t0.elapsed().as_secs_f64();
        if t >= next {
            next = t + 2.0;
            let label = h.query_all_by_label_contains(" left").filter_map(|n| n.accesskit_node().label().map(|l| l.to_string())).find(|l| l.contains(" · ~"));
            if let Some(l) = label {
                let (n, unit) = l.split_once(" · ~").unwrap().1.split_once(' ').unwrap();
                let secs = n.parse::<f64>()? * if unit.starts_with("min") { 60.0 } else { 1.0 };
                samples.push((t, secs, l.chars().take(90).collect()));
            }
        }
        assert!(t < 1800.0, "the 32K analysis did not end in 30 min");
        no_errors(&h);
        std::thread::sleep(Duration::from_millis(50));
    }
    let total = t0.elapsed().as_secs_f64();
    no_errors(&h);
    eprintln!("32K-token analysis: {total:.1} s");
    for (t, est, l) in &samples {
        eprintln!("at {t:6.1} s ({:3.0}%): estimate {est:6.0} s, really {:6.1} s left ({:+.0}%)  [{l}]", 100.0 * t / total, total - t, 100.0 * (est - (total - t)) / (total - t));
    }
    Ok(())
}

/// A finished analysis is kept on disk: the same text, adapter and settings opened again in a new
/// window are read back (no model run) with the same groups; a corrupt entry is ignored (the
/// analysis runs, no error) and replaced.
#[test]
fn reopening_a_text_reads_its_analysis_from_disk() -> TestResult {
    use focus_lens::gui::jobs::disk_cache::DiskCache;
    let dir = tempfile::tempdir()?;
    let cache = DiskCache { dir: dir.path().join("analyses"), max_bytes: 1 << 30 };
    let open = || {
        let mut h = harness(settings(300), dir.path());
        h.state_mut().session.disk_cache = Some(cache.clone());
        settle(&mut h);
        no_errors(&h);
        h
    };
    // The entry is written on a thread of its own, after the result shows.
    let entry = || {
        let t0 = Instant::now();
        loop {
            let files: Vec<_> = std::fs::read_dir(&cache.dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
            if let [p] = files.as_slice() {
                if serde_json::from_slice::<serde_json::Value>(&std::fs::read(p).unwrap()).is_ok() {
                    return p.clone();
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "no cache entry: {files:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let h = open();
    let first = h.state().session.result.clone().unwrap();
    assert!(!first.from_disk);
    let p = entry();
    drop(h);
    let h = open();
    let again = h.state().session.result.clone().unwrap();
    assert!(again.from_disk, "read back, not run again");
    assert_eq!((again.tokens(), &again.argmax, &again.masks, &again.labels, &again.aligned), (first.tokens(), &first.argmax, &first.masks, &first.labels, &first.aligned));
    assert_eq!(again.analysis.routing[7].memberships, first.analysis.routing[7].memberships);
    drop(h);
    // A corrupt entry: the analysis runs, and its entry is written anew.
    std::fs::write(&p, b"{\"format\": \"focus-lens analysis cache 1\", \"analysis\": {\"tok")?;
    let h = open();
    assert!(!h.state().session.result.as_ref().unwrap().from_disk);
    assert_eq!(entry(), p);
    Ok(())
}

/// Issue 29, item 8's timings, measured through the window's own jobs (run it in release:
/// `cargo test --release -p focus-lens --test gui jobs::heavy_view_timings -- --ignored
/// --nocapture`): a 2048-token analysis; right after it, a token's partners (layer 15, the
/// segment's first look, from the analysis' kept pass), another token's, another layer's, the
/// attention grid and a 512-token compare against dense (run A from the analysis); the same text
/// reopened from the disk cache, and the first look there (one pass: the disk keeps no layers).
#[test]
#[ignore]
fn heavy_view_timings() {
    use focus_lens::gui::jobs::disk_cache::DiskCache;
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache { dir: dir.path().join("analyses"), max_bytes: 1 << 30 };
    let open = || {
        let mut s = settings(2048);
        s.setup.layer = 15;
        let mut h = harness(s, dir.path());
        h.state_mut().session.disk_cache = Some(cache.clone());
        // The model loaded first, so that only the analysis is timed.
        while h.state().session.model.is_none() || h.state().session.text.is_none() {
            h.step();
            std::thread::sleep(Duration::from_millis(5));
        }
        let t0 = Instant::now();
        settle(&mut h);
        (h, t0.elapsed().as_secs_f64())
    };
    let time = |h: &mut Harness<'static, FocusLensApp>, f: &dyn Fn(&mut Harness<'static, FocusLensApp>)| {
        let t0 = Instant::now();
        f(h);
        h.step();
        settle(h);
        t0.elapsed().as_secs_f64()
    };
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split(' ').next().unwrap_or("?").to_string();
    let (mut h, analysis) = open();
    let res = h.state().session.result.clone().unwrap();
    let analysed = res.seconds;
    let kept_mb = res.kept.iter().map(|k| k.bytes()).sum::<usize>() as f64 / (1 << 20) as f64;
    let passes = || res.model.decoder.passes.get();
    let p0 = passes();
    let l1 = load();
    let partners = time(&mut h, &|h| h.state_mut().select_token(Some(1500)));
    assert!(h.state().selection.partners.is_some());
    let partners2 = time(&mut h, &|h| h.state_mut().select_token(Some(1400)));
    let layer2 = time(&mut h, &|h| h.key_press(egui::Key::ArrowRight));
    assert_eq!(h.state().selection.partners.as_ref().unwrap().layer, 16);
    let grid = time(&mut h, &|h| h.get_by_label("Attention").click());
    assert!(h.state().views.attention.current(&res, 1400).is_some());
    let p1 = passes();
    h.get_by_label("Compare").click();
    h.step();
    h.get_by_label("B = dense").click();
    h.step();
    let l2 = load();
    let compare = time(&mut h, &|h| h.get_by_label("Run comparison").click());
    assert_eq!(h.state().views.compare.result.as_ref().unwrap().tokens(), 512);
    let p2 = passes();
    drop(h);
    std::thread::sleep(Duration::from_secs(3)); // the cache entry is written
    let l3 = load();
    let (mut h, reopened) = open();
    assert!(h.state().session.result.as_ref().unwrap().from_disk);
    let disk_look = time(&mut h, &|h| h.state_mut().select_token(Some(1500)));
    eprintln!(
        "2048-token analysis {analysis:.2} s (the job's own {analysed:.2} s; {kept_mb:.0} MiB of passes kept) [load {l1}]\n\
         partners of #1500 in layer 15, the segment's first look {partners:.3} s; then #1400's {partners2:.3} s, layer 16's {layer2:.3} s, #1400's attention grid {grid:.3} s; model passes {}\n\
         512-token compare (B = dense) {compare:.2} s, model passes {} [load {l2}]\n\
         reopened from the disk cache {reopened:.2} s; the first look there (one pass) {disk_look:.2} s [load {l3}]",
        p1 - p0,
        p2 - p1
    );
}

/// Issue 50, item 5, old and new in one run (ignored: run in release, `--nocapture`): the
/// analysis of 2048 and 10,223 tokens of Persuasion through the window's own job, then the
/// partners of one token in each of the 10K text's five segments, the segment's first look
/// (the kept passes: the first two segments and the preview in memory, and, new, the rest in the
/// scratch file; old: the rest ran a model pass). Old and new alternate (old, new, old, new) so
/// that a load that moves meets both.
#[test]
#[ignore]
fn long_text_timings() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(crate::common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let p10k = dir.path().join("persuasion-10k.txt");
    std::fs::write(&p10k, &text[..41_800]).unwrap();
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split(' ').next().unwrap_or("?").to_string();
    let run = |new: bool, tokens: usize| -> String {
        let mut s = settings(tokens);
        s.setup.layer = 15;
        if tokens > 2048 {
            s.inputs.text = Some(p10k.clone());
        }
        let mut h = harness(s, dir.path());
        if !new {
            h.state_mut().session.keep.scratch_dir = None;
        }
        while h.state().session.model.is_none() || h.state().session.text.is_none() {
            h.step();
            std::thread::sleep(Duration::from_millis(5));
        }
        let l0 = load();
        let t0 = Instant::now();
        settle(&mut h);
        let wall = t0.elapsed().as_secs_f64();
        no_errors(&h);
        let res = h.state().session.result.clone().unwrap();
        let mut line = format!(
            "{} {} tokens: analysis {wall:.1} s (job {:.1} s), {} MiB kept in memory, {} MiB in the scratch file [load {l0} -> {}]",
            if new { "new" } else { "old" },
            res.tokens(),
            res.seconds,
            res.kept.iter().map(|k| k.bytes()).sum::<usize>() >> 20,
            res.spilled.iter().map(|k| k.bytes()).sum::<u64>() >> 20,
            load()
        );
        if tokens > 2048 {
            let passes = || res.model.decoder.passes.get();
            let segs = res.tokens().div_ceil(2048);
            for seg in 0..segs {
                let i = (seg * 2048 + 1000).min(res.tokens() - 1);
                let p0 = passes();
                let t0 = Instant::now();
                h.state_mut().select_token(Some(i));
                h.step();
                settle(&mut h);
                assert_eq!(h.state().selection.partners.as_ref().map(|p| p.token), Some(i));
                line += &format!("\n  partners of #{i} (segment {}): {:.3} s, {} model pass(es) [load {}]", seg + 1, t0.elapsed().as_secs_f64(), passes() - p0, load());
            }
        }
        line
    };
    let mut lines = Vec::new();
    for tokens in [2048, 10_240] {
        for new in [false, true, false, true] {
            let l = run(new, tokens);
            eprintln!("{l}");
            lines.push(l);
        }
    }
    eprintln!("{}", lines.join("\n"));
}
