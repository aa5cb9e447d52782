//! Files a user can trust (issue 50, item 3): an export set is plain files with a manifest
//! (no links into a hidden folder), every export and session says which model and adapter
//! (fingerprints) and which app version made it, and the SVG of a long view says which tokens
//! it holds, following the screen.

use crate::common::TestResult;
use crate::harness::{click_menu, no_errors, settle, started, tile_result};
use focus_lens::gui::state::Tab;

#[test]
fn exports_and_sessions_carry_their_provenance() -> TestResult {
    let (dir, mut h) = started(120);
    no_errors(&h);
    let res = h.state().session.result.clone().unwrap();
    let (model_fp, adapter_sha) = (res.model.fingerprint.clone(), focus_lens::gui::jobs::adapter_fingerprint(None));
    assert!(!model_fp.is_empty() && adapter_sha.len() == 64);
    let version = format!("focus-lens {}", env!("CARGO_PKG_VERSION"));

    // Statistics as CSV: plain files and a manifest that lists them with the fingerprints.
    click_menu(&mut h, "Export", "Statistics as CSV…");
    no_errors(&h);
    let stem = dir.path().join("focus-lens-stats.csv");
    for e in std::fs::read_dir(dir.path())? {
        let e = e?;
        assert!(e.file_type()?.is_file(), "{:?} is not a plain file", e.file_name());
        assert!(!e.file_name().to_string_lossy().starts_with('.'), "a hidden {:?}", e.file_name());
    }
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(stem.with_extension("manifest.json"))?)?;
    let names: Vec<&str> = manifest["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"focus-lens-stats.csv") && names.contains(&"focus-lens-stats.groups.arrow") && names.len() == 7, "{names:?}");
    let p = &manifest["provenance"];
    assert_eq!((p["model_fingerprint"].as_str(), p["adapter_sha256"].as_str(), p["app"].as_str()), (Some(model_fp.as_str()), Some(adapter_sha.as_str()), Some(version.as_str())));
    assert!(focus_lens::gui::export::manifest::check(&stem.with_extension("manifest.json")).map_err(|e| e.to_string())?.is_empty());
    // Moved alone, the file is still its content.
    std::fs::rename(&stem, dir.path().join("moved.csv"))?;
    assert!(std::fs::read_to_string(dir.path().join("moved.csv"))?.starts_with("layer,group,group_raw"));

    // JSON, SVG and PNG carry them too.
    click_menu(&mut h, "Export", "Statistics as JSON…");
    no_errors(&h);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("focus-lens-stats.json"))?)?;
    assert_eq!(json["provenance"]["model_fingerprint"].as_str(), Some(model_fp.as_str()));
    assert_eq!(json["provenance"]["adapter_sha256"].as_str(), Some(adapter_sha.as_str()));
    h.state_mut().settings.setup.tab = Tab::Balance;
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let svg = std::fs::read_to_string(dir.path().join(format!("focus-lens-balance-layer{layer}.svg")))?;
    assert!(svg.contains("<metadata>") && svg.contains(&model_fp) && svg.contains(&adapter_sha) && svg.contains(&version), "the SVG's metadata");
    let png = focus_lens::gui::export::png_with_text(&tiny_png(), "focus-lens", &focus_lens::gui::export::fingerprints(&res).to_string());
    let decoded = image::load_from_memory(&png).map_err(|e| e.to_string())?;
    assert_eq!((decoded.width(), decoded.height()), (2, 1), "a PNG with its text chunk still decodes");
    assert!(String::from_utf8_lossy(&png).contains(&adapter_sha));

    // A session records the fingerprints; reopened with other weights at the same place, it says so.
    click_menu(&mut h, "File", "Save session…");
    let session = dir.path().join("focus-lens-session.json");
    no_errors(&h);
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session)?)?;
    assert_eq!((v["model_fingerprint"].as_str(), v["adapter_sha256"].as_str(), v["app"].as_str()), (Some(model_fp.as_str()), Some(adapter_sha.as_str()), Some(version.as_str())));
    v["adapter_sha256"] = "0".repeat(64).into();
    std::fs::write(&session, v.to_string())?;
    h.state_mut().open_session(&session);
    settle(&mut h);
    assert!(h.state().errors.iter().any(|e| e.contains("was saved with other inputs") && e.contains("the adapter")), "{:?}", h.state().errors);
    Ok(())
}

/// A 2 x 1 PNG.
fn tiny_png() -> Vec<u8> {
    let mut b = Vec::new();
    image::RgbaImage::new(2, 1).write_to(&mut std::io::Cursor::new(&mut b), image::ImageFormat::Png).unwrap();
    b
}

/// The Tokens SVG of a long text holds the tokens from the first one on screen, and says which.
#[test]
fn a_long_views_svg_says_its_range_and_follows_the_screen() -> TestResult {
    let (dir, mut h) = started(120);
    tile_result(&mut h, 6000);
    h.state_mut().settings.setup.tab = Tab::Tokens;
    h.step();
    h.step();
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let layer = h.state().settings.setup.layer;
    let path = dir.path().join(format!("focus-lens-tokens-layer{layer}.svg"));
    let svg = std::fs::read_to_string(&path)?;
    assert!(svg.contains("tokens #0-#3999 (4000 of 6000"), "the title says the range it holds");
    h.state_mut().views.scroll_to = Some(5000);
    for _ in 0..4 {
        h.step();
    }
    let first = h.state().views.tokens.first_visible;
    assert!(first > 0 && first <= 5000, "scrolled to #{first}");
    click_menu(&mut h, "Export", "Current view as SVG…");
    no_errors(&h);
    let svg = std::fs::read_to_string(&path)?;
    // The title's range: from the first token on screen when the export ran, up to 4000.
    let title = svg.split("tokens #").nth(1).expect("a range in the title");
    let from: usize = title.split('-').next().unwrap().parse().unwrap();
    let shown_now = h.state().views.tokens.first_visible;
    assert!(from > 0 && from == shown_now, "the SVG follows the screen: from #{from}, the screen at #{shown_now} (#{first} before the export)");
    let end = (from + 4000).min(6000);
    assert!(title.starts_with(&format!("{from}-#{} ({} of 6000)", end - 1, end - from)), "{}", &title[..40.min(title.len())]);
    Ok(())
}
