//! The Compare view: dense against top-k and adapter against adapter, per token, head and layer,
//! its exports, and run A read from the analysis' own pass.

use crate::common::{self, TestResult};
use crate::harness::{click_menu, harness, has, no_errors, settings, settle, started};
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use focus_lens::gui::state::Tab;
use focus_lens::gui::worker::TaskKind;
use focus_lens::gui::FocusLensApp;

/// The rows of the compare table on screen, top to bottom: their token indices.
fn compare_rows(h: &Harness<'static, FocusLensApp>) -> Vec<usize> {
    let n = h.state().views.compare.result.as_ref().map_or(0, |c| c.tokens());
    // A row starts with its index padded to the first column's 7 characters, then Δ loss.
    let mut rows: Vec<(f32, usize)> = h
        .query_all_by(|node| node.label().or(node.value()).is_some_and(|l| l.len() > 8 && l.contains("    \"")))
        .filter_map(|node| {
            let l = node.accesskit_node().label().or(node.accesskit_node().value())?;
            let i: usize = l.get(..7)?.trim().parse().ok()?;
            (i < n).then_some((node.rect().top(), i))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    rows.into_iter().map(|r| r.1).collect()
}

/// Compare mode, dense vs top-k, driven by clicks: per-token loss change, pruned attention mass
/// (top-k run) and group changes; a row click jumps to the token with its partners; the table
/// and the curves export.
#[test]
fn compare_dense_with_topk() -> TestResult {
    let (dir, mut h) = started(200);
    h.get_by_label("Compare").click();
    h.step();
    h.get_by_label("B = dense").click();
    h.step();
    h.state_mut().settings.setup.compare.max_tokens = 200;
    h.step();
    h.get_by_label("Run comparison").click();
    h.step();
    assert!(h.state().is_running(TaskKind::Compare));
    settle(&mut h);
    no_errors(&h);
    {
        let c = h.state().views.compare.result.as_ref().expect("a comparison");
        assert_eq!(c.tokens(), 200);
        assert_eq!(c.layers(), 30);
        assert!(c.a.contains("topk(2)") && c.b.contains("dense"), "{} / {}", c.a, c.b);
        let pa = &c.pruned_a.as_ref().expect("run A is top-k: its pruned mass").mass;
        assert!(c.pruned_b.is_none(), "dense prunes nothing");
        assert_eq!((pa.len(), pa[0].len(), pa[0][0].len()), (30, 9, 200), "per layer, head and token");
        // Within the window (w = 128) nothing is pruned; beyond it some mass is.
        assert!(pa.iter().flatten().all(|h| h[..=128].iter().all(|&m| m == 0.0)));
        assert!(pa.iter().flatten().any(|h| h[150..].iter().any(|&m| m > 0.0)));
        assert!(pa.iter().flatten().flatten().all(|&m| (0.0..=1.0 + 1e-5).contains(&m)));
        // Up to the window top-k is exact dense attention: the losses agree there.
        for i in 0..100 {
            assert!((c.loss_a[i] - c.loss_b[i]).abs() < 2e-3, "token {i}: {} vs {}", c.loss_a[i], c.loss_b[i]);
        }
        assert!(c.loss_a[199].is_nan());
        assert!(c.loss_a[..199].iter().all(|x| x.is_finite() && *x >= 0.0));
    }
    let (layer, head) = (h.state().settings.setup.layer, h.state().settings.setup.head);
    // Sorted by Δ loss, largest first: the first row is the token that lost most.
    let order = {
        let v = &h.state().views.compare;
        v.order(v.result.as_ref().unwrap(), layer, head)
    };
    let c = h.state().views.compare.result.as_ref().unwrap();
    let best = (0..199).max_by(|&a, &b| c.delta(a).total_cmp(&c.delta(b))).unwrap();
    assert_eq!(order[0], best);
    h.step();
    // The column headers sit over their columns: monospace cells as wide as the values'.
    {
        use focus_lens::gui::views::compare::{header_cell, COLUMNS};
        let v = &h.state().views.compare;
        let row_prefix = format!("{:<7}", order[0]);
        let row = h.get_by(|n| n.label().is_some_and(|l| l.starts_with(&row_prefix)) || n.value().is_some_and(|l| l.starts_with(&row_prefix))).rect();
        let mut at = 0usize;
        let mut glyph = None;
        for (s, name, width, right) in COLUMNS {
            let mark = if v.sort == s { if v.descending { "↓" } else { "↑" } } else { "" };
            let cell = h.get_by_label(&header_cell(name, mark, width, right)).rect();
            let g = *glyph.get_or_insert(cell.width() / width as f32);
            assert!((cell.width() - g * width as f32).abs() < 0.5, "{name}: {cell:?}");
            assert!((cell.left() - (row.left() + g * at as f32)).abs() < 1.0, "header {name:?} at {} but its column at {}", cell.left(), row.left() + g * at as f32);
            at += width;
        }
    }
    let prefix = format!("{:<7}", best);
    h.get_by(|n| n.label().is_some_and(|l| l.starts_with(&prefix)) || n.value().is_some_and(|l| l.starts_with(&prefix))).click();
    h.step();
    settle(&mut h);
    assert_eq!(h.state().settings.setup.tab, Tab::Tokens);
    assert_eq!(h.state().selection.selected, Some(best));
    assert!(h.state().selection.partners.as_ref().is_some_and(|p| p.token == best));
    h.get_by_label("Compare").click();
    h.step();
    h.get_by_label("Export table (CSV)…").click();
    h.step();
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-compare.csv"))?;
    assert!(csv.contains("index,token,loss_a,loss_b,delta_loss"));
    assert!((0..200).all(|i| csv.contains(&format!("\n{i},\""))), "one row per token");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    assert!(std::fs::read_to_string(dir.path().join(format!("focus-lens-compare-layer{layer}.svg")))?.contains("pruned mass A"));
    Ok(())
}

/// Compare mode's pruned mass per head and its per-layer curves, driven by clicks: the table
/// shows (and sorts by) the selected layer and head's pruned mass, which equals the attention
/// view's pruned share for that head (another computation of the same figure); the per-layer
/// curves are drawn over every layer and exported (CSV, JSON, SVG); the 20 tokens that lost most
/// are one header click away, and a click on one jumps to it with its partners.
#[test]
fn compare_per_head_and_per_layer() -> TestResult {
    use focus_core::analysis::compare::Scope;
    use focus_lens::gui::views::compare::{DELTA_PLOT, SHARES_PLOT};
    let dir = tempfile::tempdir()?;
    let mut s = settings(300);
    (s.setup.layer, s.setup.head) = (20, 4);
    s.setup.tab = Tab::Compare;
    s.setup.compare.max_tokens = 300;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    run_against_dense(&mut h);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let (l, hd) = (20, 4);

    // Per head: choose the selected layer and head, sort by run A's pruned mass.
    h.get_by_label("layer 20, head 4").click();
    h.step();
    assert_eq!(h.state().views.compare.scope, Scope::Head);
    use focus_lens::gui::views::compare::header_cell;
    h.get_by_label(&header_cell("pruned A", "", 10, true)).click();
    h.step();
    h.step();
    let (mass, top) = {
        let c = h.state().views.compare.result.as_ref().unwrap();
        let m = c.pruned_a.as_ref().unwrap().mass[l][hd].clone();
        let mut by_mass: Vec<usize> = (0..c.tokens()).collect();
        by_mass.sort_by(|&a, &b| m[b].total_cmp(&m[a]).then(a.cmp(&b)));
        (m, by_mass)
    };
    let rows = compare_rows(&h);
    assert!(rows.len() >= 10, "rows on screen: {rows:?}");
    assert_eq!(rows[..10], top[..10], "sorted by head {hd}'s pruned mass in layer {l}");
    // Head 4 alone, not the mean over heads: the order differs from the layer's mean.
    let mean: Vec<f32> = {
        let c = h.state().views.compare.result.as_ref().unwrap();
        (0..300).map(|i| c.pruned_at(i, Scope::Layer, l, hd).0.unwrap()).collect()
    };
    assert!((0..300).any(|i| (mean[i] - mass[i]).abs() > 0.02), "head {hd} differs from the mean over heads");
    // The row shows the figure.
    let first = h.get_by(|n| n.label().or(n.value()).is_some_and(|s| s.starts_with(&format!("{:<7}", top[0])))).accesskit_node();
    let first = first.label().or(first.value()).unwrap_or_default();
    assert!(first.contains(&format!("{:.1}%", 100.0 * mass[top[0]])), "{first:?}");
    // The same figure another way: the attention view's pruned share of that token's dense
    // softmax row in layer 20, head 4 (one row at a time, not the whole matrix).
    let handle = focus_lens::gui::worker::Handle::default();
    let cache = focus_lens::gui::jobs::HeadsCache::default();
    for &i in &top[..3] {
        let g = focus_lens::gui::jobs::attention_grid(&res, i, &cache, &handle).unwrap();
        assert!((g.cells[l][hd][2] - mass[i]).abs() < 1e-3, "token {i}: grid {} vs compare {}", g.cells[l][hd][2], mass[i]);
    }

    // Per layer: the curves are drawn over every layer (the plots' bounds cover them) and are
    // the means of the per-token figures.
    let rows_l = h.state().views.compare.result.as_ref().unwrap().layer_rows(hd);
    assert_eq!(rows_l.len(), 30);
    {
        let c = h.state().views.compare.result.as_ref().unwrap();
        let r = &rows_l[l];
        let changed: Vec<usize> = (0..300).filter(|&i| c.changed[l][i]).collect();
        assert_eq!(r.changed, changed.len());
        let pa = c.pruned_a.as_ref().unwrap();
        let want = pa.mass[l].iter().flatten().map(|&x| x as f64).sum::<f64>() / (9.0 * 300.0);
        assert!((r.pruned_a.unwrap() - want).abs() < 1e-6);
        assert!((r.pruned_a_head.unwrap() - mass.iter().map(|&x| x as f64).sum::<f64>() / 300.0).abs() < 1e-6);
        let stay: Vec<f64> = (0..299).filter(|&i| !c.changed[l][i]).map(|i| c.delta(i) as f64).collect();
        assert!((r.delta_unchanged - stay.iter().sum::<f64>() / stay.len() as f64).abs() < 1e-6);
    }
    let ctx = h.ctx.clone();
    for id in [SHARES_PLOT, DELTA_PLOT] {
        let mem = egui_plot::PlotMemory::load(&ctx, egui::Id::unique(id)).unwrap_or_else(|| panic!("{id} is drawn"));
        let b = mem.bounds();
        assert!(b.min()[0] <= 0.0 && b.max()[0] >= 29.0, "{id}: {b:?}");
    }
    let b = *egui_plot::PlotMemory::load(&ctx, egui::Id::unique(DELTA_PLOT)).unwrap().bounds();
    for r in &rows_l {
        for y in [r.delta_changed, r.delta_unchanged].into_iter().filter(|y| y.is_finite()) {
            assert!(b.min()[1] <= y && y <= b.max()[1], "layer {}: {y} outside {b:?}", r.layer);
        }
    }
    assert!(has(&h, "Δ loss of tokens whose groups change there, or stay"));

    // Exports: the table with the per-head columns, the per-layer CSV, the JSON, the SVG.
    h.get_by_label("Export table (CSV)…").click();
    h.step();
    h.get_by_label("Export as JSON…").click();
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-compare.csv"))?;
    let header = csv.lines().find(|l| l.starts_with("index,")).unwrap();
    let col = header.split(',').position(|c| c == "pruned_mass_a_layer20_head4").expect("the per-head column");
    let row = csv.lines().find(|r| r.starts_with(&format!("{},", top[0]))).unwrap();
    // The fields after the (quoted) token are numbers: split them off from the right.
    let mut cells: Vec<&str> = row.rsplitn(header.split(',').count() - 1, ',').collect();
    cells.reverse();
    assert!((cells[col - 1].parse::<f32>()? - mass[top[0]]).abs() < 1e-5, "{row}");
    let layers = std::fs::read_to_string(dir.path().join("focus-lens-compare.layers.csv"))?;
    let lh = layers.lines().find(|l| l.starts_with("layer,")).unwrap();
    assert!(lh.contains("pruned_mass_a_head4") && lh.contains("delta_loss_changed"), "{lh}");
    assert_eq!(layers.lines().filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit())).count(), 30, "one row per layer");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-compare.json"))?)?;
    assert_eq!(json["per_layer"].as_array().unwrap().len(), 30);
    assert!((json["pruned_mass_a_layer_head_token"][l][hd][top[0]].as_f64().unwrap() - mass[top[0]] as f64).abs() < 1e-6);
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-compare-layer{l}.svg")))?;
    assert!(svg.contains("pruned mass A, head 4") && svg.contains("Δ loss, groups stay"), "the head's curve and the Δ loss curves");

    // The 20 tokens that lost most: one click on the Δ loss header.
    h.get_by_label(&header_cell("delta loss", "", 12, true)).click();
    h.step();
    h.step();
    let lost: Vec<usize> = {
        let c = h.state().views.compare.result.as_ref().unwrap();
        let mut v: Vec<usize> = (0..299).collect();
        v.sort_by(|&a, &b| c.delta(b).total_cmp(&c.delta(a)).then(a.cmp(&b)));
        v
    };
    let rows = compare_rows(&h);
    assert!(rows.len() >= 20, "rows on screen: {rows:?}");
    assert_eq!(rows[..20], lost[..20]);
    // A click on the 5th jumps to it in the text, with its partners.
    let i = lost[4];
    h.get_by(|n| n.label().or(n.value()).is_some_and(|s| s.starts_with(&format!("{i:<7}")))).click();
    h.step();
    settle(&mut h);
    assert_eq!((h.state().settings.setup.tab, h.state().selection.selected), (Tab::Tokens, Some(i)));
    assert!(h.state().selection.partners.as_ref().is_some_and(|p| p.token == i && p.layer == l && p.head == hd));
    assert!(h.state().views.tokens.token_center(i).is_some_and(|p| p.y > 0.0 && p.y < 900.0), "scrolled to the token");
    Ok(())
}

/// In the Compare view: B = dense, Run comparison, run to the end without an error.
fn run_against_dense(h: &mut Harness<'static, FocusLensApp>) {
    h.get_by_label("B = dense").click();
    h.step();
    h.get_by_label("Run comparison").click();
    h.step();
    settle(h);
    no_errors(h);
}

/// The sample adapter (K = 8) on screen compared with the K = 4 one as run B, both over the
/// first `n` tokens, run to the end without an error.
fn compare_with_k4(n: usize) -> (tempfile::TempDir, Harness<'static, FocusLensApp>) {
    let (dir, mut h) = started(n);
    h.get_by_label("Compare").click();
    h.step();
    h.state_mut().settings.setup.compare.max_tokens = n;
    h.step();
    h.get_by_label("adapter B:").click();
    h.step();
    h.get_by_label("adapter B:").type_text(&common::root().join("sample_adapters/smollm2-135m-k4").display().to_string());
    h.step();
    h.step();
    h.get_by_label("Run comparison").click();
    h.step();
    settle(&mut h);
    no_errors(&h);
    (dir, h)
}

/// Issue 29, item 6: comparing adapters of different K (K = 8 on screen, K = 4 as run B) warns
/// that their group numbers do not correspond and reports no "layers changed".
#[test]
fn compare_of_different_k_warns() {
    let (_dir, h) = compare_with_k4(64);
    let c = h.state().views.compare.result.as_ref().expect("a comparison");
    assert_eq!(c.groups, (8, 4));
    assert!(has(&h, "their group numbers do not correspond"));
    assert!(!has(&h, &format!("/{}", c.layers())), "a 'layers changed' count in the table");
    let svg = h.state().views.compare.svg(0).unwrap();
    assert!(!svg.contains("top-k groups change") && !svg.contains("Δ loss, groups change"));
}

/// Comparing adapters of different K: the CSV and JSON exports say that the groups do not
/// correspond, as the screen does, and carry no "layers changed" figures.
#[test]
fn compare_exports_of_different_k_carry_no_group_changes() -> TestResult {
    let (dir, mut h) = compare_with_k4(48);
    h.step();
    h.get_by_label("Export table (CSV)…").click();
    h.step();
    h.get_by_label("Export as JSON…").click();
    h.step();
    no_errors(&h);
    let csv = std::fs::read_to_string(dir.path().join("focus-lens-compare.csv"))?;
    let layers = std::fs::read_to_string(dir.path().join("focus-lens-compare.layers.csv"))?;
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-compare.json"))?)?;
    for text in [&csv, &layers] {
        assert!(text.starts_with("# Run A has K = 8 groups and run B K = 4: their group numbers do not correspond"), "{}", &text[..200]);
        assert!(!text.contains("groups_changed") && !text.contains("tokens_changed") && !text.contains("delta_loss_changed"));
    }
    // Every row keeps its other columns.
    let header = csv.lines().find(|l| l.starts_with("index,")).unwrap();
    assert!(header.rsplit(',').next().unwrap().starts_with("pruned_mass_b_layer"), "{header}");
    let cols = header.split(',').count();
    let row = csv.lines().find(|l| l.starts_with("5,")).unwrap();
    assert!(row.split(',').count() >= cols, "{row}");
    assert_eq!(json["groups"]["correspond"], false);
    assert_eq!((json["groups"]["k_a"].as_u64(), json["groups"]["k_b"].as_u64()), (Some(8), Some(4)));
    assert!(json["groups"]["warning"].as_str().unwrap().contains("do not correspond"));
    assert!(json["per_token"][0].get("groups_changed_layers").is_none() && json["per_layer"][0].get("tokens_changed").is_none());
    assert!(json["per_token"][0].get("loss_a").is_some() && json["per_layer"][0].get("pruned_mass_a").is_some());
    Ok(())
}

/// A compare after an analysis reads run A from the analysis' own pass (issue 29, item 8): it
/// runs the model once (run B), and its figures equal a compare run from scratch. The text is
/// longer than the preview, so run A over the first 512 tokens is the preview's pass.
#[test]
fn compare_after_an_analysis_runs_one_model_pass() {
    use focus_core::analysis::compare;
    let (_dir, mut h) = started(700);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    assert_eq!(res.tokens(), 700);
    let before = res.model.decoder.passes.get();
    h.get_by_label("Compare").click();
    h.step();
    run_against_dense(&mut h);
    assert_eq!(res.model.decoder.passes.get(), before + 1, "run A ran the model again");
    let c = h.state().views.compare.result.as_ref().expect("a comparison");
    assert_eq!(c.tokens(), 512);
    // From scratch: both runs through the model.
    let ids: Vec<u32> = res.analysis.tokens[..512].iter().map(|t| t.id).collect();
    let texts = res.analysis.tokens[..512].iter().map(|t| t.text.clone()).collect();
    let k = res.key.params.k;
    let a = compare::Run { label: "A", mode: res.mode, k, adapter: &res.adapter };
    let b = compare::Run { label: "B", mode: focus_core::Mode::Dense, k, adapter: &res.adapter };
    let want = compare::compare(&res.model, &ids, texts, &a, &b, true, None, |_, _, _| {}).unwrap();
    let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p == q || (p.is_nan() && q.is_nan())) && x.len() == y.len();
    assert!(same(&c.loss_a, &want.loss_a), "loss A");
    assert!(same(&c.loss_b, &want.loss_b), "loss B");
    assert_eq!(c.changed, want.changed);
    let (pa, wa) = (&c.pruned_a.as_ref().unwrap().mass, &want.pruned_a.as_ref().unwrap().mass);
    assert_eq!(pa, wa, "run A's pruned mass");
    assert!(c.pruned_b.is_none() && want.pruned_b.is_none());
}
