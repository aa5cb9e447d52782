//! `focus-lens demo` (and `focus-lens` without arguments when no window can open): the embedded
//! default. Loads the default model, the sample
//! adapter and the sample text compiled into the binary, and prints the routing analysis.

use super::common::{progress, ModelArgs};
use crate::defaults::{sample_adapter, SAMPLE_ADAPTER_NAME, SAMPLE_TEXT};
use anyhow::Result;
use focus_core::analysis::{analyze, AnalyzeOptions};
use focus_core::Mode;

pub fn run() -> Result<()> {
    let model = ModelArgs { model: None, device: "cpu".into() }.load()?;
    let adapter = sample_adapter(&model)?;
    let k = adapter.config.top_k;
    let opts = AnalyzeOptions { mode: Mode::TopK(k), k, segment_len: 2048, keep_tokens: true, cancel: None };
    let pb = progress(1, "analysing the sample text", false);
    let t0 = std::time::Instant::now();
    let an = analyze(&model, &adapter, SAMPLE_ADAPTER_NAME, SAMPLE_TEXT, &opts, |d, n| {
        pb.set_length(n as u64);
        pb.set_position(d as u64);
    })?;
    pb.finish_and_clear();
    println!("Focus Lens: {} + {} (K={}, w={}, top-k {k})", model.config().name, SAMPLE_ADAPTER_NAME, an.groups, an.window);
    println!("sample text: {} tokens, analysed in {:.1} s", an.tokens.len(), t0.elapsed().as_secs_f64());
    println!("\nlayer  dominance  confidence  entropy  pairs_retained  group sizes");
    for l in &an.layers {
        let sizes: Vec<String> = l.group_size.iter().map(|s| s.to_string()).collect();
        println!(
            "{:>5}  {:>9.3}  {:>10.3}  {:>7.3}  {:>14.3}  {}",
            l.layer, l.dominance, l.mean_confidence, l.mean_entropy, l.pairs.retained, sizes.join(" ")
        );
    }
    // The most frequent tokens of each group in the middle layer.
    let mid = an.layers.len() / 2;
    println!("\nlayer {mid}: most frequent tokens per group (argmax membership)");
    let toks = an.layers[mid].tokens.as_ref().expect("kept");
    for g in 0..an.groups {
        let mut counts: std::collections::HashMap<&str, usize> = Default::default();
        for (t, r) in an.tokens.iter().zip(toks) {
            if r.top[0] == g {
                *counts.entry(t.text.as_str()).or_default() += 1;
            }
        }
        let mut v: Vec<_> = counts.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = v.iter().take(10).map(|(t, c)| format!("{:?}x{c}", t)).collect();
        println!("  group {g}: {}", shown.join(" "));
    }
    println!("\nThe adapter is untrained (random init): groups become linguistic only after training.");
    println!("More: focus-lens --help");
    Ok(())
}
