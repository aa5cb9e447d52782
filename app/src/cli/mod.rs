//! Command-line interface: argument definitions and dispatch. Each subcommand lives in its own
//! module and prints either a human-readable summary or, with `--json`, one JSON object.
//!
//! Files: `info`, `tokenize`, `generate`, `ppl`, `analyze`, `intervene`, `index` (`index` and
//! `centroids`, and `bench centroids`), `eval`, `train`, `init` (`adapter init`), `rebase`
//! (`adapter rebase`), `derive` (`adapter derive`), `demo`, `bench` (the other `bench`
//! subcommands); `common` (the flags they share and the range checks), `out` (the one writer of
//! stdout). `gui` takes the GUI's `StartArgs` (`crate::gui`).

mod analyze;
pub mod bench;
pub mod common;
pub mod demo;
mod derive;
mod eval;
mod generate;
mod index;
mod info;
mod init;
mod intervene;
pub mod out;
mod ppl;
mod rebase;
mod tokenize;
pub mod train;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "focus-lens", version, about = "Run and inspect Focus sparse attention (arXiv 2604.03260)")]
struct Cli {
    /// Without a subcommand: open the desktop app on the default model, the sample adapter and
    /// the sample text (without a display: print the `demo` analysis instead).
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Open the desktop app (the default when no subcommand is given), optionally on a model,
    /// an adapter and a text (or a saved session).
    Gui(crate::gui::StartArgs),
    /// Print the routing analysis of the embedded sample text (default model + sample adapter).
    Demo,
    /// Describe a model file or directory.
    Info(info::Args),
    /// Print the token ids of a text file.
    Tokenize(tokenize::Args),
    /// Generate text from a prompt, streamed token by token (KV cache; Focus top-k decode reads
    /// only the keys its mask keeps).
    ///
    /// With whole-sequence Sinkhorn (adapter_config causal_sinkhorn = false) no KV cache is exact
    /// in soft or topk mode: every new token then reruns the whole sequence (exact, but O(T^2)
    /// per token); causal-Sinkhorn adapters decode incrementally.
    Generate(generate::Args),
    /// Perplexity with llama.cpp's chunking convention (comparable with llama-perplexity).
    Ppl(ppl::Args),
    /// Per-layer routing statistics of a text, written to JSON or CSV.
    Analyze(analyze::Args),
    /// Edit one layer's routing on a text (ablate a group, force a token into a group, swap two
    /// groups) and print the change in per-token loss and in attention.
    Intervene(intervene::Args),
    /// Route a folder of texts once and store, per token and layer, the top groups and their
    /// memberships with per-centroid summaries (an SQLite file; resumes where it stopped).
    Index(index::Args),
    /// Read a corpus index: a layer's centroids, one centroid's dashboard (--layer L --centroid
    /// G), or which centroid holds a token (--search " of").
    Centroids(index::CentroidsArgs),
    /// Zero-degradation suites (TruthfulQA MC, last-word cloze): base vs Focus.
    Eval(eval::Args),
    /// Train a centroid adapter (routers only; the base model stays frozen).
    Train(Box<train::Args>),
    /// Manage centroid adapters.
    Adapter {
        #[command(subcommand)]
        command: AdapterCommand,
    },
    /// Benchmarks (figures are printed, not asserted).
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Subcommand)]
enum AdapterCommand {
    /// Make a randomly initialised adapter for a model.
    Init(init::Args),
    /// Copy an adapter to a new folder for other weights of the same shape (the same model
    /// quantized, or a stand-in): its base_model becomes this model's, rebased_from records
    /// the old one, results are dropped, the router weights are copied unchanged.
    Rebase(common::CopyArgs),
    /// Copy an adapter to a new folder with inference settings changed (--window, --sink,
    /// --top-k, --sinkhorn-iters): derived_from records the source and each change, results
    /// are dropped, the router weights are copied unchanged.
    Derive(derive::Args),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Prefill tokens/s of the whole model, dense vs hard top-k, in one run.
    Forward(bench::ForwardArgs),
    /// A layer's projections: quantized GGUF weights (QMatMul) vs dequantized f32, in one run.
    Matmul(bench::MatmulArgs),
    /// One attention call: tiled dense vs exact hard top-k Focus vs candle, in one run.
    Attention(bench::AttentionArgs),
    /// One generation step over a cached context, dense vs top-k: tokens/s and bytes read.
    Decode(bench::DecodeArgs),
    /// How far whole-sequence and causal Sinkhorn route a text apart, per layer.
    Routing(bench::RoutingArgs),
    /// The Centroids view's queries on a corpus index (optionally scaled up to N tokens first).
    Centroids(index::BenchArgs),
}

pub fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Some(command) = cli.command else { return run_or_demo() };
    match command {
        Command::Gui(a) => crate::gui::run(a),
        Command::Demo => demo::run(),
        Command::Info(a) => info::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Ppl(a) => ppl::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::Intervene(a) => intervene::run(a),
        Command::Index(a) => index::run(a),
        Command::Centroids(a) => index::centroids(a),
        Command::Train(a) => train::run(*a),
        Command::Eval(a) => eval::run(a),
        Command::Adapter { command: AdapterCommand::Init(a) } => init::run(a),
        Command::Adapter { command: AdapterCommand::Rebase(a) } => rebase::run(a),
        Command::Adapter { command: AdapterCommand::Derive(a) } => derive::run(a),
        Command::Bench { command: BenchCommand::Forward(a) } => bench::forward(a),
        Command::Bench { command: BenchCommand::Matmul(a) } => bench::matmul(a),
        Command::Bench { command: BenchCommand::Attention(a) } => bench::attention(a),
        Command::Bench { command: BenchCommand::Decode(a) } => bench::decode(a),
        Command::Bench { command: BenchCommand::Routing(a) } => bench::routing(a),
        Command::Bench { command: BenchCommand::Centroids(a) } => index::bench(a),
    }
}

/// `focus-lens` with no arguments: the window when there is a display, else (or when the window
/// cannot open) a clear message and the text demo.
pub fn run_or_demo() -> anyhow::Result<()> {
    if !crate::gui::display_available() {
        eprintln!("focus-lens: no display (neither DISPLAY nor WAYLAND_DISPLAY is set), so no window: printing the text demo instead (`focus-lens demo`; `focus-lens --help` lists the commands)");
        return demo::run();
    }
    if let Err(e) = crate::gui::run(Default::default()) {
        eprintln!("focus-lens: {e:#}: printing the text demo instead");
        return demo::run();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `focus-lens gui FILE` and its options parse (it used to be rejected).
    #[test]
    fn gui_takes_model_adapter_and_text() {
        let cli = Cli::try_parse_from(["focus-lens", "gui", "--model", "m.gguf", "--adapter", "ad", "--session", "s.json", "notes.txt"]).expect("parses");
        let Some(Command::Gui(a)) = cli.command else { panic!("not the gui command") };
        assert_eq!(a.inputs.model.as_deref(), Some(std::path::Path::new("m.gguf")));
        assert_eq!(a.inputs.adapter.as_deref(), Some(std::path::Path::new("ad")));
        assert_eq!(a.inputs.text.as_deref(), Some(std::path::Path::new("notes.txt")));
        assert_eq!(a.session.as_deref(), Some(std::path::Path::new("s.json")));
        let Some(Command::Gui(a)) = Cli::try_parse_from(["focus-lens", "gui"]).unwrap().command else { panic!() };
        assert!(a.inputs.model.is_none() && a.inputs.adapter.is_none() && a.inputs.text.is_none());
    }
}
