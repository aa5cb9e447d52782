//! `adapter init`: write a randomly initialised (untrained) centroid adapter for a model.

use super::common::{ModelArgs, SpecArgs};
use anyhow::Result;
use focus_core::Adapter;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model.load()?;
    let spec = a.spec.spec(focus_core::AdapterSpec::default());
    let adapter = Adapter::random(&model.identity(), model.device(), &spec, a.seed)?;
    adapter.save(&a.out)?;
    eprintln!("wrote a random K={} adapter for {} ({} layers) to {}", spec.groups, model.config().name, model.config().n_layers, a.out.display());
    Ok(())
}
