//! `adapter rebase`: copy an adapter to a new folder as an adapter of another model of the same
//! shape (the same model's weights in other bytes, e.g. its Q4_K_M GGUF, or a stand-in), which
//! loading refuses by the weights' fingerprint. `Adapter::rebase` checks and writes.

use super::common::CopyArgs;
use anyhow::{Context, Result};
use focus_core::focus::adapter::short_fingerprint;
use focus_core::Adapter;

pub fn run(copy: CopyArgs) -> Result<()> {
    let model = copy.model.load()?;
    let rebased = Adapter::rebase(&copy.adapter, &model.identity(), &copy.out).with_context(|| format!("adapter {}", copy.adapter.display()))?;
    let new = &rebased.config.base_model;
    let old = rebased.config.rebased_from.as_ref().map(|r| &r.base_model).context("a rebased adapter records rebased_from")?;
    eprintln!(
        "rebased {}: {} ({}) -> {} ({}); wrote {} (router weights copied unchanged, not retrained; no measured results carried over)",
        copy.adapter.display(),
        old.name,
        short_fingerprint(&old.fingerprint),
        new.name,
        short_fingerprint(&new.fingerprint),
        copy.out.display()
    );
    Ok(())
}
