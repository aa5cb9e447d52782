//! The GUI on Gemma 3 270M with its shipped adapter (262,144-token vocabulary, 18 interleaved
//! layers): it loads and analyses without an error, the layer list marks sliding and global
//! layers, and a 10K-token result scrolls within the frame-time bound of the SmolLM2 test
//! (`tokens.rs`, `scrolling_10k_tokens_stays_fast`).

use crate::common;
use crate::harness;

use focus_lens::gui::state::Tab;
use egui_kittest::kittest::Queryable;
use crate::harness::{harness, has, no_errors, settle};

#[test]
fn gemma3_loads_marks_its_layers_and_scrolls_10k_tokens_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = harness::settings(300);
    s.inputs.model = Some(common::gemma3_model_path());
    s.inputs.adapter = Some(common::root().join("sample_adapters/gemma3-270m-k8"));
    let mut h = harness(s, dir.path());
    settle(&mut h);
    no_errors(&h);
    let r = h.state().session.result.clone().expect("an analysis of the sample text");
    assert_eq!(r.layers(), 18);
    assert_eq!(r.model.config().vocab, 262_144);

    // The layer list: layers 5, 11 and 17 are global, the others sliding ("Ns").
    h.state_mut().settings.setup.tab = Tab::Layers;
    h.state_mut().settings.setup.strip = false;
    h.step();
    h.step();
    for l in 0..18 {
        let global = l % 6 == 5;
        assert_eq!(r.model.config().is_sliding(l), !global, "layer {l}");
    }
    // Exact labels: the sliding layers' buttons read "Ns", the global ones' "N".
    let exact = |label: &str| h.query_all_by_label(label).next().is_some();
    for l in 0..18 {
        let (plain, marked) = (l.to_string(), format!("{l}s"));
        if l % 6 == 5 {
            assert!(exact(&plain) && !exact(&marked), "global layer {l} is listed as {plain}");
        } else {
            assert!(exact(&marked), "sliding layer {l} is listed as {marked}");
        }
    }
    assert!(has(&h, "17"), "the list reaches the last layer");

    // The start-up result tiled to 10K tokens and scrolled through in the token, layers and
    // strip views (the same bound as for SmolLM2).
    let n = 10_000;
    harness::tile_result(&mut h, n);
    let report = harness::assert_scrolling_fast(&mut h, n);
    eprintln!("Gemma 3, frame times while scrolling {n} tokens:\n{}", report.join("\n"));
    no_errors(&h);
}
