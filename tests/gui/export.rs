//! Exports: PNG crops, the shown group numbers with their raw indices, the tidy CSV and Arrow IPC,
//! and where the export window starts.

use crate::common::{self, TestResult};
use crate::harness::{click_menu, harness, has, no_errors, settings, settle, started};
use egui_kittest::kittest::Queryable;

/// PNG export crops the screenshot to the view (points to pixels) and writes a valid PNG.
#[test]
fn png_export_crops_the_view() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (w, h) = (40usize, 30usize);
    let pixels = (0..w * h).map(|n| if n % w >= 10 { egui::Color32::RED } else { egui::Color32::BLUE }).collect();
    let img = egui::ColorImage::new([w, h], pixels);
    let path = dir.path().join("view.png");
    // Points (5, 0)-(20, 10) at 2 pixels per point: pixels (10, 0)-(40, 20).
    let rect = egui::Rect::from_min_max(egui::pos2(5.0, 0.0), egui::pos2(20.0, 10.0));
    focus_lens::gui::export::save_png(&img, rect, 2.0, &path)?;
    let bytes = std::fs::read(&path)?;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(bytes[16..20].try_into()?);
    let height = u32::from_be_bytes(bytes[20..24].try_into()?);
    assert_eq!((width, height), (30, 20));
    Ok(())
}

/// Issue 29, item 1: the exported group numbers are the ones on screen (matched across layers),
/// each with its raw centroid index; a tidy per-token per-layer CSV; a truthful provenance.
#[test]
fn exports_use_the_shown_group_numbers() -> TestResult {
    let (dir, mut h) = started(120);
    no_errors(&h);
    let r = h.state().session.result.clone().unwrap();
    // A layer whose shown numbers differ from the raw ones (matched to the layer before).
    let layer = (0..r.layers()).find(|&l| (0..r.groups()).any(|g| r.shown_group(l, g, false) != g)).expect("some layer renumbered");
    h.state_mut().settings.setup.layer = layer;
    h.step();
    for item in ["Statistics as CSV…", "Statistics as JSON…"] {
        click_menu(&mut h, "Export", item);
    }
    no_errors(&h);
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-stats.csv"))?;
    assert!(csv.starts_with("layer,group,group_raw,size,"), "{}", csv.lines().next().unwrap());
    let profiles = std::fs::read_to_string(dir.path().join("focus-lens-stats.profiles.csv"))?;
    for g in 0..r.groups() {
        let shown = r.shown_group(layer, g, false);
        let size = r.argmax[layer].iter().filter(|&&a| a as usize == g).count();
        // The row of shown group `shown` is raw group `g`, with the size the screen shows for it.
        let row = csv.lines().find(|l| l.starts_with(&format!("{layer},{shown},"))).unwrap();
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!((f[2], f[3]), (g.to_string().as_str(), size.to_string().as_str()), "{row}");
        let prow = profiles.lines().find(|l| l.starts_with(&format!("{layer},{shown},"))).unwrap();
        assert!(prow.starts_with(&format!("{layer},{shown},{g},{size},")), "{prow}");
    }
    // Rows in the order the screen shows them.
    let shown_col: Vec<usize> = csv.lines().skip(1).filter(|l| l.starts_with(&format!("{layer},"))).map(|l| l.split(',').nth(1).unwrap().parse().unwrap()).collect();
    assert_eq!(shown_col, (0..r.groups()).collect::<Vec<_>>());
    // Tidy: one row per token and layer.
    let tidy = std::fs::read_to_string(dir.path().join("focus-lens-stats.groups.csv")).expect("per-token per-layer CSV");
    assert!(tidy.starts_with("token,text,layer,group,group_raw,confidence,category\n"));
    // Records, not lines: a token's text may hold a quoted line break.
    let mut quoted = false;
    let records = tidy.chars().filter(|&c| {
        if c == '"' {
            quoted = !quoted;
        }
        c == '\n' && !quoted
    });
    assert_eq!(records.count(), 1 + r.tokens() * r.layers());
    let g5 = r.argmax[layer][5] as usize;
    let t5 = &r.analysis.tokens[5].text;
    let t5 = if t5.contains([',', '"', '\n', '\r']) { format!("\"{}\"", t5.replace('"', "\"\"")) } else { t5.clone() };
    let row5 = tidy.lines().find(|l| l.starts_with(&format!("5,{t5},{layer},"))).unwrap().to_string();
    assert!(row5.contains(&format!(",{layer},{},{g5},", r.shown_group(layer, g5, false))), "{row5}");
    // JSON: arrays by shown number, the mapping, and a provenance that says so.
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json"))?)?;
    let lj = &json["layers"][layer];
    for g in 0..r.groups() {
        let shown = r.shown_group(layer, g, false);
        assert_eq!(lj["group_raw_of_shown"][shown].as_u64(), Some(g as u64));
        assert_eq!(lj["group_size"][shown].as_u64(), Some(r.analysis.layers[layer].group_size[g] as u64));
    }
    let pv = &json["provenance"];
    assert_eq!(pv["settings"]["raw_group_indices"], false);
    assert!(pv["group_numbers"].as_str().unwrap().starts_with("shown"), "{pv}");
    let c0 = &json["profiles"][layer]["centroids"][0];
    assert_eq!(c0["group"].as_u64(), Some(0));
    assert_eq!(r.shown_group(layer, c0["group_raw"].as_u64().unwrap() as usize, false), 0);
    Ok(())
}

/// Issue 29, exports: Statistics as CSV also writes each token's group and memberships in every
/// layer as Arrow IPC (STEM.groups.arrow, for long texts): the tidy CSV's rows and numbers (the
/// group as shown, the raw index beside it), with the memberships by shown number.
#[test]
fn exports_write_the_tidy_groups_as_arrow_ipc() -> TestResult {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, UInt16Type, UInt32Type};
    let (dir, mut h) = started(120);
    let r = h.state().session.result.clone().unwrap();
    click_menu(&mut h, "Export", "Statistics as CSV…");
    no_errors(&h);
    let f = std::fs::File::open(dir.path().join("focus-lens-stats.groups.arrow")).expect("the Arrow IPC file");
    let reader = arrow_ipc::reader::FileReader::try_new(f, None)?;
    assert!(reader.schema().metadata()["group_numbers"].starts_with("shown"));
    let batches: Vec<_> = reader.collect::<Result<_, _>>()?;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), r.tokens() * r.layers());
    let tidy = std::fs::read_to_string(dir.path().join("focus-lens-stats.groups.csv"))?;
    // A layer whose shown numbers differ from the raw ones.
    let layer = (0..r.layers()).find(|&l| (0..r.groups()).any(|g| r.shown_group(l, g, false) != g)).expect("some layer renumbered");
    let b = batches.iter().find(|b| b.column_by_name("layer").unwrap().as_primitive::<UInt16Type>().value(0) as usize == layer).unwrap();
    let col = |name: &str| b.column_by_name(name).unwrap().clone();
    let (token, group, group_raw) = (col("token"), col("group"), col("group_raw"));
    let (conf, text, mem) = (col("confidence"), col("text"), col("memberships"));
    for i in [0, 5, 119] {
        let g = r.argmax[layer][i] as usize;
        assert_eq!(token.as_primitive::<UInt32Type>().value(i) as usize, i);
        assert_eq!(text.as_string::<i32>().value(i), r.analysis.tokens[i].text);
        assert_eq!((group.as_primitive::<UInt16Type>().value(i) as usize, group_raw.as_primitive::<UInt16Type>().value(i) as usize), (r.shown_group(layer, g, false), g));
        let c = conf.as_primitive::<Float32Type>().value(i);
        assert_eq!(c, r.token_routing(layer, i).unwrap().confidence);
        let m = mem.as_list::<i32>().value(i);
        let m = m.as_primitive::<Float32Type>();
        for raw in 0..r.groups() {
            assert_eq!(m.value(r.shown_group(layer, raw, false)), r.analysis.routing[layer].row(i)[raw], "token {i}, raw group {raw}");
        }
        // The tidy CSV's row says the same.
        let row = tidy.lines().filter(|l| l.starts_with(&format!("{i},"))).find(|l| l.contains(&format!(",{layer},{},{g},", r.shown_group(layer, g, false))));
        assert!(row.is_some_and(|l| l.ends_with(&format!("{c:.6},{}", r.analysis.tokens[i].category))), "token {i}: {row:?}");
    }
    Ok(())
}

/// The export window starts outside the source tree (~/Documents/focus-lens or the cache
/// folder), then in the folder of the last export.
#[test]
fn exports_default_outside_the_repository() -> TestResult {
    use focus_lens::gui::views::files::default_export_dir;
    let dir = tempfile::tempdir()?;
    let mut h = harness(settings(64), dir.path());
    h.state_mut().export_dir = None;
    h.state_mut().views.files.native = false;
    settle(&mut h);
    let root = common::root().canonicalize()?;
    let default = default_export_dir();
    assert!(!default.starts_with(&root));
    click_menu(&mut h, "Export", "Statistics as JSON…");
    let path = std::path::PathBuf::from(&h.state().views.files.path);
    assert_eq!(path.parent(), Some(default.as_path()), "{}", path.display());
    assert!(default.is_dir(), "the folder is made");
    assert!(has(&h, &format!("Folder: {}", default.display())), "the browser shows it");
    // Saved elsewhere: the next export starts there.
    let out = dir.path().join("s.json");
    h.state_mut().views.files.path = out.display().to_string();
    h.get_by_label("Save").click();
    h.step();
    h.step();
    assert!(out.is_file());
    click_menu(&mut h, "Export", "Statistics as JSON…");
    assert_eq!(std::path::PathBuf::from(&h.state().views.files.path).parent(), Some(dir.path()));
    // Opening a file still starts in the working directory.
    h.get_by_label("Cancel").click();
    h.step();
    click_menu(&mut h, "File", "Open text…");
    assert!(has(&h, &format!("Folder: {}", std::env::current_dir()?.display())));
    Ok(())
}
