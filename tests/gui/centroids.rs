//! The Centroids view driven headlessly through egui_kittest on the real default model and the
//! embedded sample adapter: build an index of a small folder from the view (progress, Cancel,
//! Build again resumes), read a centroid's dashboard and search, and open an index file (a damaged
//! one gives one clear error in the view).

use crate::common::{self, TestResult};

use egui_kittest::kittest::Queryable;
use focus_lens::gui::state::Tab;
use focus_lens::gui::worker::TaskKind;
use crate::harness::{harness_at, has, no_errors, settings, settle, type_into};
use std::path::Path;
use std::time::{Duration, Instant};

/// Three short texts: the third spans two segments of 1024 tokens, so a build has steps to
/// cancel between.
fn corpus(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let persuasion = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let cut = |a: usize, n: usize| persuasion.chars().skip(a).take(n).collect::<String>();
    std::fs::write(dir.join("a.txt"), cut(0, 1500)).unwrap();
    std::fs::write(dir.join("b.txt"), "The king of the north said: of all the ships, one of them is ours. Of course.").unwrap();
    std::fs::write(dir.join("c.txt"), cut(30_000, 6000)).unwrap();
}

#[test]
fn centroids_view_builds_reads_and_searches_an_index() -> TestResult {
    let tmp = tempfile::tempdir()?;
    // Tall enough that the whole dashboard (neighbours at the bottom) is on screen to click.
    let mut h = harness_at(settings(120), tmp.path(), egui::vec2(1600.0, 1600.0));
    settle(&mut h);
    no_errors(&h);
    h.get_by_label(Tab::Centroids.label()).click();
    h.step();
    assert_eq!(h.state().settings.setup.tab, Tab::Centroids);
    assert!(has(&h, "No index open"));

    // Build from the view, and cancel once the first document is in.
    let dir = tmp.path().join("corpus");
    corpus(&dir);
    let index = tmp.path().join("small.focus-index");
    type_into(&mut h, "Corpus folder:", &dir.display().to_string());
    type_into(&mut h, "Index file:", &index.display().to_string());
    assert_eq!(h.state().views.centroids.corpus, dir.display().to_string());
    h.get_by_label("Build index").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Index));
    let t0 = Instant::now();
    loop {
        h.step();
        let p = h.state().worker.progress().into_iter().find(|p| p.0 == TaskKind::Index);
        if p.as_ref().is_some_and(|p| p.3.contains("1/3 documents") || p.3.contains("2/3 documents")) {
            break;
        }
        assert!(h.state().is_running(TaskKind::Index), "the build ended before it could be cancelled: {}", h.state().views.centroids.message);
        assert!(t0.elapsed() < Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(has(&h, "indexing: "), "the progress bar says what runs");
    h.get_by_label("Cancel").click();
    settle(&mut h);
    assert!(!index.exists(), "no finished index after a cancel");
    assert!(focus_lens::index::build::partial_path(&index).exists(), "the routed documents are kept");
    assert!(h.state().views.centroids.index.is_none());
    // The cancel's message is the view's (a cancelled task's own message is dropped by the worker).
    assert!(!h.state().is_running(TaskKind::Index));

    // Build again: resumes, finishes and opens the index.
    h.get_by_label("Build index").click();
    settle(&mut h);
    no_errors(&h);
    let v = &h.state().views.centroids;
    assert!(v.error.is_none(), "{:?}", v.error);
    assert!(v.message.contains("indexed 3 documents") && v.message.contains("already indexed") && v.message.contains("resuming"), "{}", v.message);
    let ix = v.index.as_ref().expect("the built index is open");
    assert_eq!(ix.documents, 3);
    let tokens = ix.tokens;

    // A centroid's dashboard: pick layer 9 and centroid 3 as a user does, by the name every
    // view gives it (the index was built with the loaded adapter: the app's numbering, issue 50).
    let ids = h.state().session.ids.clone().expect("the app's numbering");
    let name = move |l: usize, g: usize| format!("g{}", ids.number(l, g));
    h.state_mut().views.centroids.layer = 9;
    h.step();
    h.step();
    let label = h.state().views.centroids.index.as_ref().unwrap().layer(9).unwrap()[3].label.clone();
    h.get_by_label(&format!("{} {label}", name(9, 3))).click();
    h.step();
    h.step();
    let v = &mut h.state_mut().views.centroids;
    assert_eq!((v.layer, v.group), (9, 3));
    let d = v.current().unwrap().as_ref().unwrap().clone();
    assert!(d.members > 0 && d.examples.len() >= 3, "{d:?}");
    assert_eq!(d.histogram.iter().sum::<u64>() + d.not_held, tokens);
    for s in ["Top examples", "Membership histogram", "Categories: share of members", "Neighbours", "auto-label", &d.label, &d.examples[0].document] {
        assert!(has(&h, s), "the dashboard shows {s:?}");
    }
    assert!(h.state().views.centroids.query_ms < 200.0, "query {} ms", h.state().views.centroids.query_ms);

    // A neighbour link selects that centroid.
    let n = d.neighbours[0].clone();
    h.get_by_label(&format!("layer {} {}", n.layer, name(n.layer, n.group))).click();
    h.step();
    h.step();
    assert_eq!((h.state().views.centroids.layer, h.state().views.centroids.group), (n.layer, n.group));

    // Search: which centroid holds " of" at layer 9? Every occurrence is in one hit's count.
    // (Frames to let the layer's centroid buttons, whose labels change, settle the layout.)
    h.state_mut().views.centroids.layer = 9;
    for _ in 0..4 {
        h.step();
    }
    type_into(&mut h, "Which centroid holds", " of");
    assert_eq!(h.state().views.centroids.search, " of");
    h.get_by_label("Search").click();
    h.step();
    h.step();
    let hits = h.state().views.centroids.hits.clone().unwrap().unwrap();
    assert!(!hits.is_empty() && hits.iter().all(|x| x.layer == 9 && x.text == " of"), "{hits:?}");
    assert!((hits.iter().map(|x| x.share).sum::<f64>() - 1.0).abs() < 1e-9);
    let first = hits[0].clone();
    assert!(has(&h, "of its occurrences"));
    h.get_by_label(&format!("layer 9 {}", name(9, first.group))).click();
    h.step();
    assert_eq!(h.state().views.centroids.group, first.group);
    no_errors(&h);

    // Opening a damaged file: one clear line in the view, the open index stays.
    let bad = tmp.path().join("bad.focus-index");
    std::fs::write(&bad, b"not an index at all")?;
    h.state_mut().views.centroids.index_path.clear();
    type_into(&mut h, "Index file:", &bad.display().to_string());
    h.get_by_label("Open index").click();
    h.step();
    h.step();
    let e = h.state().views.centroids.error.clone().expect("an error");
    assert!(e.contains("not a readable Focus Lens index") && e.lines().count() == 1, "{e}");
    assert!(has(&h, "not a readable Focus Lens index"));
    assert!(h.state().views.centroids.index.is_some(), "the open index stays open");

    // And the good one again, by its path.
    h.state_mut().views.centroids.index_path.clear();
    type_into(&mut h, "Index file:", &index.display().to_string());
    h.get_by_label("Open index").click();
    h.step();
    assert!(h.state().views.centroids.error.is_none());
    assert_eq!(h.state().views.centroids.index.as_ref().unwrap().tokens, tokens);
    Ok(())
}

/// The Centroids view's group names read on the light panel (issue 50): each is dark text on
/// its group's colour (the identity every view gives it), not the pastel colour as text, which
/// had a contrast of 1.2-2.0 against the panel. WCAG's contrast ratio >= 4.5 for every piece of
/// text painted in or on a group's colour.
#[test]
fn centroid_names_are_readable_on_their_colours() -> TestResult {
    use egui::epaint::Shape;
    let tmp = tempfile::tempdir()?;
    let mut h = harness_at(settings(60), tmp.path(), egui::vec2(1600.0, 1200.0));
    // The window's theme (the harness' default is dark).
    h.ctx.set_theme(egui::Theme::Light);
    settle(&mut h);
    h.get_by_label(Tab::Centroids.label()).click();
    h.step();
    let dir = tmp.path().join("corpus");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("b.txt"), "The king of the north said: of all the ships, one of them is ours. Of course.")?;
    type_into(&mut h, "Corpus folder:", &dir.display().to_string());
    type_into(&mut h, "Index file:", &tmp.path().join("b.focus-index").display().to_string());
    h.get_by_label("Build index").click();
    settle(&mut h);
    no_errors(&h);
    assert!(h.state().views.centroids.index.is_some());
    h.state_mut().views.centroids.layer = 9;
    h.state_mut().views.centroids.group = 2;
    for _ in 0..4 {
        h.step();
    }
    let k = h.state().session.result.as_ref().unwrap().analysis.groups;
    let colours: Vec<egui::Color32> = (0..k).map(focus_lens::gui::paint::palette::group).collect();
    let panel = h.ctx.style_of(egui::Theme::Light).visuals.panel_fill;
    let (mut on_colour, mut bad) = (0, Vec::new());
    for shape in crate::harness::shapes(&h) {
        let Shape::Text(t) = shape else { continue };
        for sec in &t.galley.job.sections {
            let (fg, bg) = (sec.format.color, sec.format.background);
            let text = &t.galley.job.text[sec.byte_range.start.0..sec.byte_range.end.0];
            if !colours.contains(&fg) && !colours.contains(&bg) || text.trim().is_empty() {
                continue;
            }
            on_colour += 1;
            let behind = if bg == egui::Color32::TRANSPARENT { panel } else { bg };
            if contrast(fg, behind) < 4.5 {
                bad.push(format!("{text:?}: {fg:?} on {behind:?}, contrast {:.2}", contrast(fg, behind)));
            }
        }
    }
    assert!(on_colour > k, "every centroid button and the heading show their group's colour ({on_colour} pieces of text)");
    assert!(bad.is_empty(), "unreadable: {bad:#?}");
    Ok(())
}

/// WCAG 2's contrast ratio of two opaque colours.
fn contrast(a: egui::Color32, b: egui::Color32) -> f64 {
    let lum = |c: egui::Color32| {
        let ch = |v: u8| {
            let v = v as f64 / 255.0;
            if v <= 0.03928 { v / 12.92 } else { ((v + 0.055) / 1.055).powf(2.4) }
        };
        0.2126 * ch(c.r()) + 0.7152 * ch(c.g()) + 0.0722 * ch(c.b())
    };
    let (x, y) = (lum(a), lum(b));
    (x.max(y) + 0.05) / (x.min(y) + 0.05)
}
