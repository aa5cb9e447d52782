//! `adapter rebase`: copy an adapter to a new folder as an adapter of another model of the same
//! shape (the same model's weights in other bytes, e.g. its Q4_K_M GGUF, or a stand-in), which
//! loading refuses by the weights' fingerprint. `Adapter::rebase` checks and writes.

use super::common::ModelArgs;
use anyhow::{Context, Result};
use focus_core::focus::adapter::short_fingerprint;
use focus_core::Adapter;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The adapter folder (read only: never written to).
    pub adapter: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The new adapter folder: must not exist, or be empty.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model.load()?;
    let rebased = Adapter::rebase(&a.adapter, &model.identity(), &a.out).with_context(|| format!("adapter {}", a.adapter.display()))?;
    let new = &rebased.config.base_model;
    let old = rebased.config.rebased_from.as_ref().map(|r| &r.base_model).context("a rebased adapter records rebased_from")?;
    eprintln!(
        "rebased {}: {} ({}) -> {} ({}); wrote {} (router weights copied unchanged, not retrained; no measured results carried over)",
        a.adapter.display(),
        old.name,
        short_fingerprint(&old.fingerprint),
        new.name,
        short_fingerprint(&new.fingerprint),
        a.out.display()
    );
    Ok(())
}
