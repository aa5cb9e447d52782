//! What adapters' groups capture, each beside its untrained twin on the same held-out text
//! (issue 28's measurement; `analysis::structure`): per layer, NMI of the top group with the word
//! category (and its permutation null), with the token id, a position bucket and the repeat
//! flag, purity, centroids >= 60% pure with >= 50 tokens, dominance; then the medians over
//! layers >= 1, the adapter / twin ratio, and the best layer.
//!
//!   structure --model GGUF --probe BOOK,BOOK[,...] [--bytes 15000] [--k 2] [--seq 1024]
//!       [--json OUT.json] ADAPTER_DIR...
//!
//! The twin of an adapter is `Adapter::random` with the adapter's own settings (its spec), seed
//! 0: the routers it started from before training. Analysis runs in soft mode over segments of
//! `--seq` tokens (the training length).
//! Build: `cargo build --release -p focus-core --example structure`.

use focus_core::analysis::structure::{self, Structure};
use focus_core::analysis::{analyze, AnalyzeOptions};
use focus_core::{Adapter, Mode, Model};
use std::path::Path;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.to_string())
}

fn measure(model: &Model, adapter: &Adapter, name: &str, text: &str, seq: usize, k: usize) -> focus_core::Result<Structure> {
    let opts = AnalyzeOptions { mode: Mode::Soft, k: k.min(adapter.config.groups), segment_len: seq, keep_tokens: false, cancel: None };
    let a = analyze(model, adapter, name, text, &opts, |_, _| {})?;
    Ok(structure::of_analysis(&a))
}

fn print(name: &str, s: &Structure, twin: &Structure) {
    println!("== {name}: {} tokens, K = {}", s.tokens, s.groups);
    println!("layer  nmi(cat) null  twin | nmi(tok) null | nmi(pos) | nmi(rep) | purity twin | pure60 twin | dominance");
    for (l, t) in s.layers.iter().zip(&twin.layers) {
        println!(
            "{:>5}  {:.3}  {:.3}  {:.3} | {:.3}  {:.3} | {:.3} | {:.3} | {:.3}  {:.3} | {:>2}  {:>2} | {:.3}",
            l.layer, l.category.value, l.category.null_max, t.category.value, l.token.value, l.token.null_mean, l.position.value, l.repeat.value, l.purity, t.purity, l.pure60, t.pure60, l.dominance
        );
    }
    let c = s.against(twin);
    let worst = s.layers.iter().map(|l| l.dominance).fold(0.0, f64::max);
    let best = s.best_layer().expect("a layer");
    println!(
        "median nmi(cat) over layers >= 1: {:.3} (twin {:.3}, ratio {:.2}); best layer {} with {} centroids >= 60% pure (twin there: {}); worst dominance {:.3} (1/K = {:.3})",
        s.median_from_layer_1(|l| l.category.value),
        twin.median_from_layer_1(|l| l.category.value),
        c.median,
        best.layer,
        best.pure60,
        twin.layers[best.layer].pure60,
        worst,
        1.0 / s.groups as f64
    );
}

fn main() -> focus_core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let model = Model::load(Path::new(&arg(&args, "--model", "")), &candle_core::Device::Cpu)?;
    let bytes: usize = arg(&args, "--bytes", "15000").parse().unwrap();
    let (seq, k): (usize, usize) = (arg(&args, "--seq", "1024").parse().unwrap(), arg(&args, "--k", "2").parse().unwrap());
    let books = arg(&args, "--probe", "")
        .split(',')
        .filter(|f| !f.is_empty())
        .map(|f| std::fs::read_to_string(f).map_err(|e| focus_core::Error::io(Path::new(f), e)))
        .collect::<focus_core::Result<Vec<_>>>()?;
    if books.len() < 2 {
        return Err(focus_core::Error::Invalid("--probe needs two or more held-out books (comma-separated)".into()));
    }
    let text = focus_core::train::probe_from_books(&books.iter().map(|s| s.as_str()).collect::<Vec<_>>(), bytes);
    eprintln!("probe: {} bytes from {} books", text.len(), books.len());
    let flags = ["--model", "--probe", "--bytes", "--seq", "--k", "--json"];
    let dirs: Vec<&String> = args.iter().enumerate().skip(1).filter(|(i, a)| !a.starts_with("--") && !flags.contains(&args[i - 1].as_str())).map(|(_, a)| a).collect();
    let mut out = Vec::new();
    for d in dirs {
        let adapter = Adapter::load(Path::new(d), &model.identity(), model.device())?;
        let twin = Adapter::random(&model.identity(), model.device(), &adapter.config.spec(), 0)?;
        let s = measure(&model, &adapter, d, &text, seq, k)?;
        let t = measure(&model, &twin, "twin", &text, seq, k)?;
        print(d, &s, &t);
        out.push(serde_json::json!({ "adapter": d, "structure": s, "twin": t, "against_twin": s.against(&t) }));
    }
    let json = arg(&args, "--json", "");
    if !json.is_empty() {
        std::fs::write(&json, serde_json::to_string_pretty(&serde_json::json!({ "probe_bytes": text.len(), "books": books.len(), "runs": out })).unwrap()).map_err(|e| focus_core::Error::io(Path::new(&json), e))?;
    }
    Ok(())
}
