//! Command-line interface: argument definitions and dispatch. Each subcommand lives in its own
//! module and prints either a human-readable summary or, with `--json`, one JSON object.

mod analyze;
pub mod bench;
pub mod common;
pub mod demo;
mod eval;
mod info;
mod init;
mod ppl;
mod tokenize;
mod train;

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
    /// Open the desktop app (the default when no subcommand is given).
    Gui,
    /// Print the routing analysis of the embedded sample text (default model + sample adapter).
    Demo,
    /// Describe a model file or directory.
    Info(info::Args),
    /// Print the token ids of a text file.
    Tokenize(tokenize::Args),
    /// Perplexity with llama.cpp's chunking convention (comparable with llama-perplexity).
    Ppl(ppl::Args),
    /// Per-layer routing statistics of a text, written to JSON or CSV.
    Analyze(analyze::Args),
    /// Zero-degradation suites (TruthfulQA MC, last-word cloze): base vs Focus.
    Eval(eval::Args),
    /// Train a centroid adapter (routers only; the base model stays frozen).
    Train(train::Args),
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
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Prefill tokens/s of the whole model, dense vs hard top-k, in one run.
    Forward(bench::ForwardArgs),
    /// A layer's projections: quantized GGUF weights (QMatMul) vs dequantized f32, in one run.
    Matmul(bench::MatmulArgs),
    /// One attention call: tiled dense vs exact hard top-k Focus vs candle, in one run.
    Attention(bench::AttentionArgs),
}

pub fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Some(command) = cli.command else { return run_or_demo() };
    match command {
        Command::Gui => crate::gui::run(),
        Command::Demo => demo::run(),
        Command::Info(a) => info::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Ppl(a) => ppl::run(a),
        Command::Analyze(a) => analyze::run(a),
        Command::Train(a) => train::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Adapter { command: AdapterCommand::Init(a) } => init::run(a),
        Command::Bench { command: BenchCommand::Forward(a) } => bench::forward(a),
        Command::Bench { command: BenchCommand::Matmul(a) } => bench::matmul(a),
        Command::Bench { command: BenchCommand::Attention(a) } => bench::attention(a),
    }
}

/// `focus-lens` with no arguments: the window when there is a display, else (or when the window
/// cannot open) a clear message and the text demo.
pub fn run_or_demo() -> anyhow::Result<()> {
    if !crate::gui::display_available() {
        eprintln!("focus-lens: no display (neither DISPLAY nor WAYLAND_DISPLAY is set), so no window: printing the text demo instead (`focus-lens demo`; `focus-lens --help` lists the commands)");
        return demo::run();
    }
    if let Err(e) = crate::gui::run() {
        eprintln!("focus-lens: {e:#}: printing the text demo instead");
        return demo::run();
    }
    Ok(())
}
