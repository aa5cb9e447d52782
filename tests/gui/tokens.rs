//! The token view and the token x layer strip: headers, scrolling speed, search, keys, palettes,
//! group labels and range selection.

use crate::common::TestResult;
use crate::harness::{self, click_menu, filled, harness, has, no_errors, settings, settle, started};
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::Harness;
use focus_lens::gui::state::Tab;
use focus_lens::gui::FocusLensApp;

/// The token x layer strip's header numbers its layer columns: each number is centred over its
/// column (the pointer on the strip below a number is on that layer), and the header stays
/// while the strip scrolls.
#[test]
fn strip_header_numbers_its_columns() {
    use focus_lens::gui::views::layers::STRIP_CORNER;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(400);
    s.setup.tab = Tab::Layers;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    h.get_by_label("token x layer strip").click();
    h.step();
    h.step();
    assert!(h.state().settings.setup.strip);
    let corner = h.get_by_label(STRIP_CORNER).rect();
    let header = |h: &Harness<'static, FocusLensApp>| -> Vec<(usize, egui::Rect)> {
        let mut v: Vec<(usize, egui::Rect)> = h
            .query_all_by(|n| n.bounding_box().is_some() && n.label().or(n.value()).is_some_and(|l| l.parse::<usize>().is_ok()))
            .filter(|n| (corner.top()..=corner.bottom()).contains(&n.rect().center().y))
            .map(|n| (n.accesskit_node().label().or(n.accesskit_node().value()).unwrap().parse().unwrap(), n.rect()))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    };
    let numbers = header(&h);
    assert!(numbers.len() >= 2, "the header's numbers: {numbers:?}");
    let every = numbers[1].0 - numbers[0].0;
    assert!(numbers[0].0 == 0 && [1, 2, 5].contains(&every), "{numbers:?}");
    assert_eq!(numbers.iter().map(|n| n.0).collect::<Vec<_>>(), (0..30).step_by(every).collect::<Vec<_>>());
    assert!(numbers.iter().all(|n| n.1.left() >= corner.right() - 1.0), "the numbers are right of the corner");
    // Below each number, on the strip, is its layer.
    let y = corner.bottom() + 60.0;
    for &(l, r) in &numbers {
        h.hover_at(egui::pos2(r.center().x, y));
        h.step();
        assert_eq!(h.state().selection.hovered_layer, Some(l), "under the header's {l} at x = {}", r.center().x);
    }
    let before = h.state().selection.hovered;
    assert!(before.is_some());
    // Scrolled down the strip, the header is where it was and the pointer is on later tokens.
    for _ in 0..4 {
        h.event(egui::Event::MouseWheel { unit: egui::MouseWheelUnit::Point, delta: egui::vec2(0.0, -300.0), phase: egui::TouchPhase::Move, source: egui::MouseWheelSource::Wheel, modifiers: egui::Modifiers::NONE });
        h.step();
    }
    for _ in 0..30 {
        h.step();
    }
    h.hover_at(egui::pos2(numbers[0].1.center().x, y + 1.0));
    h.step();
    assert!(h.state().selection.hovered.unwrap() > before.unwrap() + 50, "scrolled: {:?} then {:?}", before, h.state().selection.hovered);
    assert_eq!(h.get_by_label(STRIP_CORNER).rect(), corner, "the header stays");
    assert_eq!(header(&h), numbers);
}

/// The strip's header gives the rows' real range: the analysed tokens by number, and the text's
/// length when only part of it was analysed (it said "tokens 0..N" whatever N was).
#[test]
fn strip_header_gives_the_real_range() -> TestResult {
    let dir = tempfile::tempdir()?;
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "A short text, far shorter than the analysis allows.\n")?;
    let mut s = settings(2048);
    s.inputs.text = Some(short);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    let n = h.state().session.result.as_ref().unwrap().tokens();
    assert!(n < 30);
    h.get_by_label("Layers").click();
    h.step();
    h.get_by_label("token x layer strip").click();
    h.step();
    h.step();
    assert!(has(&h, &format!("rows: tokens #0-#{} ({n} tokens;", n - 1)), "the header gives the analysed range");
    assert!(!has(&h, &format!("0..{n}")));
    // Part of a longer text: the header says of how many.
    h.state_mut().settings.inputs.text = None;
    h.state_mut().settings.setup.params.max_tokens = 300;
    settle(&mut h);
    h.step();
    let all = h.state().session.result.as_ref().unwrap().text_tokens;
    assert!(has(&h, &format!("rows: tokens #0-#299 (300 tokens of the text's {all};")));
    Ok(())
}

/// Views stay interactive on long texts: a 10K-token result (the start-up analysis tiled) is
/// scrolled through in the token, layers and strip views; every frame's UI time is measured.
#[test]
fn scrolling_10k_tokens_stays_fast() {
    let (_dir, mut h) = started(300);
    no_errors(&h);
    let n = 10_000;
    harness::tile_result(&mut h, n);
    let report = harness::assert_scrolling_fast(&mut h, n);
    eprintln!("frame times while scrolling {n} tokens (egui pass incl. tessellation, no GPU):\n{}", report.join("\n"));
    assert_eq!(h.state().session.result.as_ref().unwrap().tokens(), n, "the tiled result stays (no re-analysis)");
}

/// Presses Ctrl+F and steps two frames.
fn ctrl_f(h: &mut Harness<'static, FocusLensApp>) {
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    h.step();
    h.step();
}

/// Ctrl+F opens the search: typing finds every occurrence (case folded) and scrolls to the
/// first; Enter goes to the next; matches are underlined.
#[test]
fn ctrl_f_searches_the_text() {
    let (_dir, mut h) = started(300);
    ctrl_f(&mut h);
    let field = h.get_by_label("Find:");
    assert!(field.is_focused(), "Ctrl+F puts the keyboard in the search field");
    field.type_text("the");
    h.step();
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let text: String = res.analysis.tokens.iter().map(|t| t.text.to_ascii_lowercase()).collect();
    let n = text.matches("the").count();
    assert!(n > 3);
    assert_eq!(h.state().views.tokens.matches.len(), n);
    assert!(h.query_by_label(&format!("match 1 of {n}")).is_some());
    let first = h.state().views.tokens.matches[0];
    assert!(res.analysis.tokens[first].text.to_ascii_lowercase().contains("th"));
    h.key_press(egui::Key::Enter);
    h.step();
    h.step();
    assert!(h.query_by_label(&format!("match 2 of {n}")).is_some());
}

/// Ctrl+F's matches are filled (the current one in its own colour), not underlined.
#[test]
fn search_matches_are_filled() {
    use focus_lens::gui::views::tokens::{FIND_CURRENT, FIND_FILL, ROW_H};
    let (_dir, mut h) = started(300);
    ctrl_f(&mut h);
    h.get_by_label("Find:").type_text("the");
    h.step();
    h.step();
    h.step();
    let (all, current) = (filled(&h, FIND_FILL), filled(&h, FIND_CURRENT));
    assert!(!current.is_empty(), "the current match is filled");
    assert!(all.len() >= 3, "the other matches on screen are filled: {}", all.len());
    for r in all.iter().chain(&current) {
        assert!(r.height() >= ROW_H - 3.0, "a fill over the whole token, not a line under it: {r:?}");
    }
    // Next: the current match moves on, and the first is an ordinary match again.
    let first = h.state().views.tokens.matches[0];
    h.get_by_label("Next").click();
    h.step();
    h.step();
    let c = h.state().views.tokens.token_center(first).unwrap();
    assert!(filled(&h, FIND_FILL).iter().any(|r| r.contains(c)), "the first match is no longer the current one");
    assert!(!filled(&h, FIND_CURRENT).iter().any(|r| r.contains(c)));
}

/// Arrow keys move the layer and the head (not while a text field has the keyboard).
#[test]
fn arrow_keys_move_layer_and_head() {
    let (_dir, mut h) = started(64);
    let (l, hd) = (h.state().settings.setup.layer, h.state().settings.setup.head);
    h.key_press(egui::Key::ArrowRight);
    h.step();
    h.key_press(egui::Key::ArrowDown);
    h.step();
    assert_eq!((h.state().settings.setup.layer, h.state().settings.setup.head), (l + 1, hd + 1));
    h.key_press(egui::Key::ArrowLeft);
    h.step();
    h.key_press(egui::Key::ArrowUp);
    h.step();
    assert_eq!((h.state().settings.setup.layer, h.state().settings.setup.head), (l, hd));
}

/// The colour-blind option switches the group colours to Okabe-Ito.
#[test]
fn colour_blind_palette() {
    let (_dir, mut h) = started(64);
    h.get_by_label("colour-blind palette").click();
    h.step();
    h.step();
    assert!(h.state().settings.setup.colour_blind);
    let c = focus_lens::gui::paint::palette::OKABE_ITO[0];
    assert_eq!(focus_lens::gui::paint::palette::group(0), egui::Color32::from_rgb(c[0], c[1], c[2]));
    h.get_by_label("colour-blind palette").click();
    h.step();
    h.step();
    assert_ne!(focus_lens::gui::paint::palette::group(0), egui::Color32::from_rgb(c[0], c[1], c[2]));
}

/// The token view's legend names each group by its centroid label, as the categories view does
/// ("g3 determiner 71% · 120 tokens (12%)"), not by its number alone.
#[test]
fn legend_shows_centroid_labels() {
    let (_dir, mut h) = started(200);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let layer = h.state().settings.setup.layer;
    let profile = &res.analysis.profiles[layer];
    for c in &profile.centroids {
        let shown = res.shown_group(layer, c.group, false);
        assert_eq!(res.labels[layer][c.group], c.label, "the legend's label is the centroid profile's");
        let entry = format!("g{shown} {} · {} tokens", c.label, c.tokens);
        assert!(has(&h, &entry), "legend entry {entry:?}");
    }
    h.get_by_label("Categories").click();
    h.step();
    h.step();
    for c in &profile.centroids {
        let shown = res.shown_group(layer, c.group, false);
        assert!(has(&h, &format!("g{shown} ({}): ", c.label)), "the categories view names g{shown} the same way");
    }
}

/// Range selection in the token view: a drag over tokens, or a click and then a shift-click,
/// selects the range; the details panel shows its group and category make-up; its partners are
/// the mean over its queries of each query's own partners; the token view's SVG covers it.
#[test]
fn range_selection_by_drag_and_shift_click() -> TestResult {
    let (dir, mut h) = started(300);
    no_errors(&h);
    h.step();
    let center = |h: &Harness<'static, FocusLensApp>, i: usize| h.state().views.tokens.token_center(i).expect("the token view is drawn");
    // Drag from token 3 to token 12.
    let (a, b) = (center(&h, 3), center(&h, 12));
    h.hover_at(a);
    h.step();
    h.drag_at(a);
    h.step();
    h.hover_at(a + egui::vec2(8.0, 0.0));
    h.step();
    h.hover_at(b);
    h.step();
    assert_eq!(h.state().views.tokens.dragging, Some((3, 12)), "the range follows the pointer");
    h.drop_at(b);
    h.step();
    h.step();
    assert_eq!(h.state().selection.range, Some((3, 12)));
    assert_eq!(h.state().selection.selected, Some(3));
    settle(&mut h);
    no_errors(&h);
    h.step();
    assert!(h.query_by_label_contains("#3-#12: 10 tokens, layer 0").is_some(), "the range's make-up in the details panel");
    let res = h.state().session.result.clone().unwrap();
    for line in focus_lens::gui::views::tokens::range_summary(&res, 0, (3, 12), false) {
        assert!(has(&h, &line), "{line}");
    }
    // A plain click selects one token again.
    let c = center(&h, 20);
    h.hover_at(c);
    h.step();
    h.get_by_label("Tokens").hover();
    h.hover_at(c);
    h.event(egui::Event::PointerButton { pos: c, button: egui::PointerButton::Primary, pressed: true, modifiers: egui::Modifiers::NONE });
    h.step();
    h.event(egui::Event::PointerButton { pos: c, button: egui::PointerButton::Primary, pressed: false, modifiers: egui::Modifiers::NONE });
    h.step();
    h.step();
    assert_eq!((h.state().selection.selected, h.state().selection.range), (Some(20), None));

    // Click token 200, then shift-click token 215 (beyond the window: they have partners).
    h.state_mut().views.scroll_to = Some(200);
    h.step();
    h.step();
    let click = |h: &mut Harness<'static, FocusLensApp>, i: usize, shift: bool| {
        let p = h.state().views.tokens.token_center(i).unwrap();
        let m = if shift { egui::Modifiers::SHIFT } else { egui::Modifiers::NONE };
        h.event(egui::Event::ModifiersChanged(m));
        h.hover_at(p);
        h.step();
        h.event(egui::Event::PointerButton { pos: p, button: egui::PointerButton::Primary, pressed: true, modifiers: m });
        h.step();
        h.event(egui::Event::PointerButton { pos: p, button: egui::PointerButton::Primary, pressed: false, modifiers: m });
        h.step();
        h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
        h.step();
    };
    click(&mut h, 200, false);
    assert_eq!(h.state().selection.selected, Some(200));
    click(&mut h, 215, true);
    assert_eq!(h.state().selection.range, Some((200, 215)), "shift-click extends the selection to a range");
    settle(&mut h);
    no_errors(&h);
    let app = h.state();
    let res = app.session.result.clone().unwrap();
    let p = app.selection.partners.as_ref().expect("the range's partners");
    assert_eq!((p.range, p.layer, p.key.clone()), (Some((200, 215)), 0, res.key.clone()));
    // Each partner's weight is the mean over the range's queries of that query's own weight.
    let handle = focus_lens::gui::worker::Handle::default();
    let cache = focus_lens::gui::jobs::HeadsCache::default();
    let mut sum: std::collections::HashMap<usize, f64> = Default::default();
    let (mut pm, mut lm) = (0f64, 0f64);
    for i in 200..=215 {
        let one = focus_lens::gui::jobs::partners(&res, i, 0, app.settings.setup.head, &cache, &handle).unwrap();
        for (j, w) in one.partners {
            *sum.entry(j).or_default() += w as f64 / 16.0;
        }
        pm += one.partner_mass as f64 / 16.0;
        lm += one.local_mass as f64 / 16.0;
    }
    assert!(!p.partners.is_empty(), "tokens 200-215 have partners beyond w = 128");
    assert_eq!(p.partners.len(), sum.len());
    for &(j, w) in &p.partners {
        assert!((w as f64 - sum[&j]).abs() < 1e-5, "partner {j}: {w} vs {}", sum[&j]);
    }
    assert!((p.partner_mass as f64 - pm).abs() < 1e-5 && (p.local_mass as f64 - lm).abs() < 1e-5);
    h.step();
    assert!(h.query_by_label_contains("#200-#215 (16 queries, weights averaged over them)").is_some());
    // The token view's SVG covers the range.
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let svg = std::fs::read_to_string(dir.path().join("focus-lens-tokens-layer0.svg"))?;
    assert!(svg.contains("tokens #200-#215 (16 of 300)"), "the SVG shows the range");
    // The JSON export records the selection: the range, its byte span and its group make-up.
    click_menu(&mut h, "Export", "Statistics as JSON…");
    no_errors(&h);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json"))?)?;
    let sel = &json["provenance"]["selection"];
    assert_eq!((sel["token"].as_u64(), sel["range"].clone()), (Some(200), serde_json::json!([200, 215])), "{sel}");
    let n: Vec<u64> = sel["range_group_tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(n.iter().sum::<u64>(), 16);
    for (g, &c) in n.iter().enumerate() {
        assert_eq!(c as usize, res.argmax[0][200..=215].iter().filter(|&&x| x as usize == g).count());
    }
    assert_eq!(sel["range_bytes"], serde_json::json!([res.analysis.tokens[200].start, res.analysis.tokens[215].end]));
    // The range can be cleared from the panel.
    h.get_by_label("clear the range").click();
    h.step();
    assert_eq!(h.state().selection.range, None);
    Ok(())
}

/// A character split over byte tokens is drawn once (issue 50): the tokenizer gives each piece
/// the whole character's span, so the token view showed "ÜÜber"; its tokens now read as the
/// text, once, on screen and in the SVG.
#[test]
fn split_characters_are_drawn_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let text = "Über die Brücke zur Ärztin, Öl und Süßes für Ćirić.";
    let path = dir.path().join("umlaut.txt");
    std::fs::write(&path, text)?;
    let mut s = settings(64);
    s.inputs.text = Some(path);
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    h.step();
    let res = h.state().session.result.clone().unwrap();
    let toks = &res.analysis.tokens;
    assert!(toks.windows(2).any(|w| w[1].start < w[0].end), "the text has a character split over tokens: {:?}", toks.iter().map(|t| (&t.text, t.start, t.end)).collect::<Vec<_>>());
    let shown: String = h.state().views.tokens.layout.texts.concat();
    assert_eq!(shown, text, "each character once on screen");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-tokens-layer{layer}.svg")))?;
    let mono: String = svg.split("font-family=\"monospace\"").skip(1).map(|t| t.split_once('>').unwrap().1.split_once("</text>").unwrap().0).collect();
    assert_eq!(mono, text, "each character once in the SVG");
    Ok(())
}

/// Chinese and Japanese text is drawn with glyphs, not as empty boxes (issue 50): every CJK
/// character the token view paints has a glyph in a font (the harness panics on a character no
/// font has, where the window drew the empty box), each its own glyph in the font atlas; on any
/// machine (the fallback font ships with the binary: this machine has no CJK font installed).
#[test]
fn cjk_text_is_drawn_with_glyphs() -> TestResult {
    use egui::epaint::Shape;
    let dir = tempfile::tempdir()?;
    let text = "東京は日本の首都です。漢字と仮名、中文也可以，對嗎？ Tokyo.";
    let path = dir.path().join("cjk.txt");
    std::fs::write(&path, text)?;
    let mut s = settings(64);
    s.inputs.text = Some(path);
    s.setup.tab = Tab::Tokens;
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    h.step();
    h.step();
    let cjk = |c: char| matches!(c as u32, 0x3000..=0x9FFF | 0xFF00..=0xFFEF);
    let mut drawn: std::collections::BTreeMap<char, ([u16; 2], [u16; 2])> = Default::default();
    for shape in harness::shapes(&h) {
        let Shape::Text(t) = shape else { continue };
        for row in &t.galley.rows {
            for g in row.glyphs.iter().filter(|g| cjk(g.chr)) {
                assert!(g.uv_rect.max[0] > g.uv_rect.min[0] && g.uv_rect.max[1] > g.uv_rect.min[1], "{:?} has no glyph drawn", g.chr);
                drawn.insert(g.chr, (g.uv_rect.min, g.uv_rect.max));
            }
        }
    }
    for c in text.chars().filter(|&c| cjk(c)) {
        assert!(drawn.contains_key(&c), "{c:?} is on screen (drawn: {:?})", drawn.keys().collect::<String>());
    }
    let distinct: std::collections::HashSet<_> = drawn.values().collect();
    assert_eq!(distinct.len(), drawn.len(), "each character its own glyph, not one box for all");
    for family in [egui::FontFamily::Proportional, egui::FontFamily::Monospace] {
        let id = egui::FontId::new(14.0, family);
        assert!(h.ctx.fonts_mut(|f| text.chars().all(|c| c == ' ' || f.has_glyph(&id, c))), "every character has a glyph in {id:?}");
    }
    Ok(())
}

/// A new text starts at its top (it kept the old text's scroll offset); another k on the same
/// text keeps the place.
#[test]
fn a_new_text_starts_at_the_top() -> TestResult {
    // Below the preview's length: another k's result comes whole (no shorter preview first); a
    // small window, so that the text scrolls.
    let dir = tempfile::tempdir()?;
    let mut h = harness::harness_at(settings(500), dir.path(), egui::vec2(1024.0, 480.0));
    settle(&mut h);
    h.state_mut().settings.setup.tab = Tab::Tokens;
    h.step();
    h.state_mut().views.scroll_to = Some(450);
    h.step();
    h.step();
    let at = h.state().views.tokens.first_visible;
    assert!(at > 200, "scrolled to #{at}");
    h.state_mut().settings.setup.params.k = 3;
    settle(&mut h);
    h.step();
    assert!(h.state().views.tokens.first_visible > 200, "another k keeps the place (about #{at})");
    let other = dir.path().join("other.txt");
    std::fs::write(&other, std::fs::read_to_string(crate::common::fixture("ppl_persuasion_60k.txt"))?.chars().take(9000).collect::<String>())?;
    h.state_mut().open(focus_lens::gui::state::InputKind::Text, other);
    settle(&mut h);
    h.step();
    h.step();
    assert_eq!(h.state().views.tokens.first_visible, 0, "the new text from its top");
    Ok(())
}
