//! `adapter derive`: copy an adapter to a new folder with inference settings changed (the local
//! window, the sinks, the default k, the Sinkhorn iterations), its router weights unchanged.
//! Editing the config by hand would keep its measured `results`, taken at the old settings;
//! `Adapter::derive` drops them and records what changed.

use super::common::CopyArgs;
use anyhow::{Context, Result};
use focus_core::focus::adapter::Settings;
use focus_core::Adapter;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub copy: CopyArgs,
    /// Local window w: pairs with i - j <= w always attend (at 4,096-8,192 tokens a window of
    /// 512 takes SmolLM2 K=8's top-2 within 2% of dense: docs/RESULTS.md, "Focus at length").
    #[arg(long, value_parser = super::common::count::<0, 16777216>)]
    pub window: Option<usize>,
    /// [ours] Attention sinks: the first N tokens stay attendable by every query.
    #[arg(long, value_parser = super::common::count::<0, 1024>)]
    pub sink: Option<usize>,
    /// The default k of top-k inference, 1..=K.
    #[arg(long, value_parser = super::common::count::<1, 64>)]
    pub top_k: Option<usize>,
    /// Sinkhorn iterations at inference, 0..=1000.
    #[arg(long, value_parser = super::common::count::<0, 1000>)]
    pub sinkhorn_iters: Option<usize>,
}

pub fn run(a: Args) -> Result<()> {
    let set = Settings { window: a.window, sink: a.sink, top_k: a.top_k, sinkhorn_iters: a.sinkhorn_iters };
    if set == Settings::default() {
        anyhow::bail!("nothing to change: give --window, --sink, --top-k or --sinkhorn-iters");
    }
    let model = a.copy.model.load()?;
    let derived = Adapter::derive(&a.copy.adapter, &model.identity(), set, &a.copy.out).with_context(|| format!("adapter {}", a.copy.adapter.display()))?;
    let changed = derived.config.derived_from.as_ref().map(|d| d.changed.join(", ")).unwrap_or_default();
    eprintln!("derived {} -> {}: {changed} (router weights copied unchanged; no measured results carried over)", a.copy.adapter.display(), a.copy.out.display());
    Ok(())
}
