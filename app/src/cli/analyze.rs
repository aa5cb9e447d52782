//! `analyze`: route a text through the model with an adapter and write the per-layer routing
//! statistics (JSON, or CSV with category profiles and per-token categories beside it).

use super::common::{load_adapter, progress, ModeArgs, ModelArgs};
use anyhow::{bail, Result};
use focus_core::analysis::{analyze, AnalyzeOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long)]
    pub adapter: PathBuf,
    #[command(flatten)]
    pub mode: ModeArgs,
    /// Texts longer than this are analysed in consecutive segments of this many tokens, each
    /// from position 0 (capped at the model's context).
    #[arg(long, default_value_t = 2048, value_parser = super::common::count::<1, 1048576>)]
    pub segment: usize,
    /// Leave per-token memberships out of the JSON.
    #[arg(long)]
    pub no_tokens: bool,
    pub file: PathBuf,
    /// stats.json (everything) or stats.csv (one row per layer and group; the groups' category
    /// profiles go to STEM.profiles.csv and per-token categories to STEM.tokens.csv beside it).
    #[arg(long)]
    pub out: PathBuf,
    /// Print each layer's centroid labels (e.g. "punctuation 96%") to stdout.
    #[arg(long)]
    pub labels: bool,
}

pub fn run(a: Args) -> Result<()> {
    let ext = a.out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if ext != "json" && ext != "csv" {
        bail!("--out must end in .json or .csv, got {}", a.out.display());
    }
    let text = focus_core::io::text::read_text(&a.file)?;
    let model = a.model.load()?;
    let adapter = load_adapter(Some(&a.adapter), &model)?.expect("adapter given");
    let mode = a.mode.resolve(Some(&adapter))?;
    let k = mode.k().unwrap_or(a.mode.k.unwrap_or(adapter.config.top_k));
    let opts = AnalyzeOptions { mode, k, segment_len: a.segment, keep_tokens: !a.no_tokens, cancel: None };
    let pb = progress(1, "analyze", false);
    let an = analyze(&model, &adapter, &a.adapter.display().to_string(), &text, &opts, |d, n| {
        pb.set_length(n as u64);
        pb.set_position(d as u64);
    })?;
    pb.finish_and_clear();
    let bytes = if ext == "json" { serde_json::to_vec_pretty(&an)? } else { an.to_csv().into_bytes() };
    // One export: the CSV set is written to temporary files first and renamed together, so a
    // kill leaves either the old set or the new one (and no temporary file that piles up).
    let mut files = vec![(a.out.clone(), bytes)];
    if ext == "csv" {
        for (suffix, csv) in [("profiles.csv", an.profiles_csv()), ("tokens.csv", an.tokens_csv())] {
            files.push((a.out.with_extension(suffix), csv.into_bytes()));
        }
    }
    focus_core::io::write_atomic_set(&files)?;
    for (p, _) in &files[1..] {
        eprintln!("wrote {}", p.display());
    }
    let segs = an.tokens.len().div_ceil(an.segment_len);
    eprintln!("{} tokens in {segs} segment(s) of <= {} tokens; {} layers", an.tokens.len(), an.segment_len, an.layers.len());
    println!("layer  dominance  confidence  pairs_retained");
    for l in &an.layers {
        println!("{:>5}  {:>9.3}  {:>10.3}  {:>14.3}", l.layer, l.dominance, l.mean_confidence, l.pairs.retained);
    }
    if a.labels {
        for p in &an.profiles {
            println!("layer {:>2}:", p.layer);
            for c in &p.centroids {
                let top: Vec<String> = c.top_tokens.iter().take(5).map(|t| format!("{:?}", t.text)).collect();
                println!("  group {:>2} ({:>5} tokens)  {:<36} {}", c.group, c.tokens, c.label, top.join(" "));
            }
        }
    }
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
