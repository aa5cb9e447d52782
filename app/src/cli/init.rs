use super::common::ModelArgs;
use anyhow::Result;
use focus_core::{Adapter, AdapterSpec, Gate};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// K, the number of groups per layer.
    #[arg(long, default_value_t = 8)]
    pub groups: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 16)]
    pub dg: usize,
    #[arg(long, default_value_t = 0.1)]
    pub tau: f64,
    #[arg(long, default_value_t = 10)]
    pub sinkhorn_iters: usize,
    #[arg(long, default_value_t = 128)]
    pub window: usize,
    #[arg(long, value_parser = ["paper", "log"], default_value = "log")]
    pub gate: String,
    #[arg(long, default_value_t = 10.0)]
    pub lambda: f64,
    /// Default k for hard top-k inference.
    #[arg(long, default_value_t = 2)]
    pub top_k: usize,
    #[arg(long)]
    pub causal_sinkhorn: bool,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model.load()?;
    let spec = AdapterSpec {
        groups: a.groups,
        d_g: a.dg,
        tau: a.tau,
        sinkhorn_iters: a.sinkhorn_iters,
        window: a.window,
        gate: if a.gate == "paper" { Gate::Paper } else { Gate::Log },
        lambda: a.lambda,
        top_k: a.top_k.min(a.groups),
        causal_sinkhorn: a.causal_sinkhorn,
    };
    let adapter = Adapter::random(&model, &spec, a.seed)?;
    adapter.save(&a.out)?;
    eprintln!("wrote a random K={} adapter for {} ({} layers) to {}", a.groups, model.config().name, model.config().n_layers, a.out.display());
    Ok(())
}
