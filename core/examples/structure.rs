//! What adapters' groups capture, each beside its untrained twin on the same held-out text
//! (issue 28's measurement; `analysis::structure`): per layer, NMI of the top group with the word
//! category (and its permutation null), with the token id, a position bucket and the repeat
//! flag, purity, centroids >= 60% pure with >= 50 tokens, dominance; then the medians over
//! layers >= 1, the adapter / twin ratio, and the best layer.
//!
//!   structure --model GGUF --probe BOOK,BOOK[,...] [--bytes 15000] [--k 2] [--seq 1024]
//!       [--json OUT.json] ADAPTER_DIR...
//!   structure --model GGUF --probe BOOK,BOOK --init kmeans,pca,pca-white --data TRAIN_DIR
//!       [--groups 8] [--score dot|cosine] [--d-g 16] [--router-layers all|global]
//!       [--gate log|paper] [--lambda 10] [--sink 0] [--init-gain 1]
//!   (an init may be `scale+random`, `scale+pca`, ...: the router input scale [ours] first)
//!
//! With `--init`, the adapters measured are initialisations before any training (the trainer's
//! `init_kmeans` / `init_pca` [ours] over 8 windows of the training text's start), each beside
//! the random twin.
//!
//! The twin of an adapter is `Adapter::random` with the adapter's own settings (its spec), seed
//! 0: the routers it started from before training. Analysis runs in soft mode over segments of
//! `--seq` tokens (the training length).
//! Build: `cargo build --release -p focus-core --example structure`.

use focus_core::analysis::structure::{self, Structure};
use focus_core::analysis::{analyze, AnalyzeOptions};
use focus_core::train::{TrainData, TrainOptions, Trainer};
use focus_core::{Adapter, AdapterSpec, ModeKind, Model, Score};
use std::path::Path;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.to_string())
}

fn measure(model: &Model, adapter: &Adapter, name: &str, text: &str, seq: usize, k: usize) -> focus_core::Result<Structure> {
    let opts = AnalyzeOptions { mode: ModeKind::Soft, k: adapter.config.topk(k.min(adapter.config.groups))?, segment_len: seq, keep_tokens: false, cancel: None };
    let a = analyze(model, adapter, name, text, &opts, |_, _| {})?;
    Ok(structure::of_analysis(&a))
}

fn print(name: &str, s: &Structure, twin: &Structure) {
    println!("== {name}: {} tokens, K = {}", s.tokens, s.groups);
    println!("layer  nmi(cat) null  twin | nmi(tok) null | nmi(pos) | nmi(rep) | purity twin | pure60 twin | dominance");
    for (l, t) in s.layers.iter().zip(&twin.layers) {
        println!(
            "{:>5}  {:.3}  {:.3}  {:.3} | {:.3}  {:.3} | {:.3} | {:.3} | {:.3}  {:.3} | {:>2}  {:>2} | {:.3}{}",
            l.layer, l.category.value, l.category.null_max, t.category.value, l.token.value, l.token.null_mean, l.position.value, l.repeat.value, l.purity, t.purity, l.pure60, t.pure60, l.dominance,
            if l.routed { "" } else { "  (not routed: dense)" }
        );
    }
    // The medians, the best layer and the worst dominance count the routed layers only.
    let c = s.against(twin);
    let worst = s.worst_dominance();
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
    let flags = ["--model", "--probe", "--bytes", "--seq", "--k", "--json", "--init", "--data", "--groups", "--score", "--d-g", "--router-layers", "--gate", "--lambda", "--sink", "--init-gain"];
    let dirs: Vec<&String> = args.iter().enumerate().skip(1).filter(|(i, a)| !a.starts_with("--") && !flags.contains(&args[i - 1].as_str())).map(|(_, a)| a).collect();
    let mut adapters: Vec<(String, Adapter)> = Vec::new();
    for d in dirs {
        adapters.push((d.clone(), Adapter::load(Path::new(d), &model.identity(), model.device())?));
    }
    let inits = arg(&args, "--init", "");
    if !inits.is_empty() {
        let data_dir = arg(&args, "--data", "");
        let mut files: Vec<_> = std::fs::read_dir(&data_dir).map_err(|e| focus_core::Error::io(Path::new(&data_dir), e))?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "txt")).collect();
        files.sort();
        let tok = model.tokenizer()?;
        let mut train = Vec::new();
        for f in files.iter().take(4) {
            train.extend(tok.encode(&std::fs::read_to_string(f).map_err(|e| focus_core::Error::io(f, e))?, false)?.ids);
        }
        let data = TrainData { train, heldout: Vec::new() };
        let score = if arg(&args, "--score", "dot") == "cosine" { Score::Cosine } else { Score::Dot };
        // The routing settings of a training run (train_paper's flags), so that an init is
        // measured as that run's step 0.
        let spec = AdapterSpec {
            groups: arg(&args, "--groups", "8").parse().unwrap(),
            score,
            d_g: arg(&args, "--d-g", "16").parse().unwrap(),
            router_layers: arg(&args, "--router-layers", "all").parse().map_err(focus_core::Error::Invalid)?,
            gate: if arg(&args, "--gate", "log") == "paper" { focus_core::Gate::Paper } else { focus_core::Gate::Log },
            lambda: arg(&args, "--lambda", "10").parse().unwrap(),
            sink: arg(&args, "--sink", "0").parse().unwrap(),
            ..Default::default()
        };
        let gain: f64 = arg(&args, "--init-gain", "1").parse().unwrap();
        let opts = TrainOptions { steps: 0, seq_len: seq, batch: 1, lr: 0.0, weight_decay: 0.0, seed: 0, eval_every: 0, eval_seqs: 0, checkpoint_every: 0, max_seconds: 0.0, sinkhorn_grad: Default::default(), cosine_decay: false, straight_through: None, grad_clip: 0.0, freeze_centroids: false, freeze_projection: false, sharpen: 0.0, balance: 0.0 };
        for init in inits.split(',') {
            let mut tr = Trainer::new(&model, &spec, opts.clone())?;
            // "scale+INIT": the router input scale [ours] first (`Trainer::init_input_scale`).
            let base = match init.strip_prefix("scale+") {
                Some(base) => {
                    tr.init_input_scale(&data, 8)?;
                    base
                }
                None => init,
            };
            match base {
                "random" => {}
                "kmeans" => tr.init_kmeans(&data, 8, 50)?,
                "pca" | "pca-white" => tr.init_pca(&data, 8, base == "pca-white", 50)?,
                other => return Err(focus_core::Error::Invalid(format!("--init {other}: random, kmeans, pca or pca-white, each optionally as scale+INIT"))),
            }
            if gain != 1.0 {
                tr.scale_projection(gain)?;
            }
            adapters.push((format!("init {init}"), tr.adapter.clone()));
        }
    }
    let mut out = Vec::new();
    for (d, adapter) in &adapters {
        let d = d.as_str();
        let twin = adapter.untrained_twin(0)?;
        let s = measure(&model, adapter, d, &text, seq, k)?;
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
