//! `analyze`: route a text through the model with an adapter and write the per-layer routing
//! statistics: core's statistics set (`analysis::export`, the files the GUI's export writes),
//! group numbers matched across layers as the GUI shows them unless `--raw-groups`.

use super::common::{progress, FocusArgs, ModelArgs};
use anyhow::{bail, Result};
use focus_core::analysis::export::StatsExport;
use focus_core::analysis::shown::{Numbering, ShownAnalysis};
use focus_core::analysis::structure::{shown_token, StructureReport};
use focus_core::analysis::{analyze, AnalyzeOptions, DEFAULT_SEGMENT};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(mut_arg("adapter", |a| a.required(true)))]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub focus: FocusArgs,
    /// Texts longer than this are analysed in consecutive segments of this many tokens, each
    /// from position 0 (capped at the model's context).
    #[arg(long, default_value_t = DEFAULT_SEGMENT, value_parser = super::common::count::<1, 1048576>)]
    pub segment: usize,
    /// Leave per-token memberships out of the JSON.
    #[arg(long)]
    pub no_tokens: bool,
    pub file: PathBuf,
    /// stats.json (everything, with a `structure` object and a `provenance`) or stats.csv (one
    /// row per layer and group; the groups' category profiles go to STEM.profiles.csv,
    /// per-token categories to STEM.tokens.csv, each token's group in every layer to
    /// STEM.groups.csv and, with its memberships, to STEM.groups.arrow (Arrow IPC), the structure
    /// per layer beside the twin's to STEM.structure.csv and the best layer's paper-form table
    /// to STEM.structure_table.csv): the same files as the GUI's statistics export.
    #[arg(long)]
    pub out: PathBuf,
    /// Write the centroids' own group numbers instead of numbers matched across layers (the
    /// GUI's "raw group numbers"); either way a `group_raw` column gives the centroid.
    #[arg(long)]
    pub raw_groups: bool,
    /// Print the best layer's centroid table in the paper's form (group, category, purity, top
    /// tokens with counts); the best layer has the highest token-weighted purity.
    #[arg(long)]
    pub labels: bool,
    /// With --labels: print this layer's table instead of the best layer's (0-based).
    #[arg(long, requires = "labels", value_parser = super::common::count::<0, 4096>)]
    pub layer: Option<usize>,
    /// Skip the untrained twin's analysis (a random init with the adapter's config, seed 0, on
    /// the same text, mode and k), which the structure measures are reported beside.
    #[arg(long)]
    pub no_twin: bool,
}

pub fn run(a: Args) -> Result<()> {
    let ext = a.out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if ext != "json" && ext != "csv" {
        bail!("--out must end in .json or .csv, got {}", a.out.display());
    }
    let text = focus_core::io::text::read_text(&a.file)?;
    // Refused before anything is loaded when it will not fit (the header's tokenizer counts the text).
    a.model.check_memory("analyze", |h| {
        let n = match &h.tokenizer {
            Some(t) => t.encode(&text, false)?.ids.len(),
            None => text.len(),
        };
        let copies = if a.no_twin { 1 } else { 2 };
        let seg = a.segment.min(h.config.context);
        Ok(super::common::analysis_workload(a.focus.adapter.as_deref(), n, seg, copies, a.focus.mode == focus_core::ModeKind::Soft, 0)?.0)
    })?;
    let model = a.model.load()?;
    if let Some(l) = a.layer {
        let n = model.config().n_layers;
        if l >= n {
            bail!("--layer {l} is out of range: the model has {n} layers (0..={})", n - 1);
        }
    }
    let path = a.focus.adapter.as_deref().expect("clap requires --adapter").display().to_string();
    let (adapter, mode) = a.focus.load(&model)?;
    let adapter = adapter.expect("an adapter path is given");
    let opts = AnalyzeOptions { mode: mode.kind(), k: a.focus.topk(&adapter)?, segment_len: a.segment, keep_tokens: !a.no_tokens, cancel: None };
    let pb = progress(1, "analyze", false);
    let an = analyze(&model, &adapter, &path, &text, &opts, |d, n| {
        pb.set_length(n as u64);
        pb.set_position(d as u64);
    })?;
    // The untrained twin on the same text, mode and k: what the structure measures are read
    // against (FOCUS-METHOD section 6).
    let twin = if a.no_twin {
        None
    } else {
        const SEED: u64 = 0;
        let twin = adapter.untrained_twin(SEED)?;
        pb.set_message("untrained twin");
        pb.set_position(0);
        let t = analyze(&model, &twin, "untrained twin", &text, &opts, |d, n| {
            pb.set_length(n as u64);
            pb.set_position(d as u64);
        })?;
        Some((t, SEED))
    };
    pb.finish_and_clear();
    let structure = StructureReport::of_analysis(&an, twin.as_ref().map(|(t, s)| (t, *s)));
    let numbering = Numbering::raw_if(a.raw_groups);
    let shown = ShownAnalysis::new(an);
    let export = StatsExport::new(&shown, numbering, &structure);
    let provenance = serde_json::json!({
        "app": format!("focus-lens {}", env!("CARGO_PKG_VERSION")),
        "model_path": a.model.model.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| format!("default: {}", crate::defaults::default_model_path().display())),
        "adapter_path": path,
        "model_fingerprint": model.fingerprint,
        "adapter_sha256": crate::gui::jobs::adapter_fingerprint(a.focus.adapter.as_deref()),
        "text_path": a.file.display().to_string(),
        "text_sha256": crate::gui::export::sha256_hex(text.as_bytes()),
        "text_bytes": text.len(),
    });
    // One export: the CSV set as plain files with the manifest that says they belong together
    // (`io::export_set`, the one set writer, the GUI's too).
    let files = export.files(&a.out, Some(&provenance), &crate::gui::export::arrow::token_groups_arrow)?;
    focus_core::io::export_set::write_set(&files, &provenance)?;
    let an = &shown.analysis;
    for (p, _) in &files[1..] {
        eprintln!("wrote {}", p.display());
    }
    let segs = an.tokens.len().div_ceil(an.segment_len);
    eprintln!("{} tokens in {segs} segment(s) of <= {} tokens; {} layers", an.tokens.len(), an.segment_len, an.layers.len());
    crate::outln!("layer  dominance  confidence  pairs_retained  purity")?;
    for (l, p) in an.layers.iter().zip(&an.profiles) {
        crate::outln!("{:>5}  {:>9.3}  {:>10.3}  {:>14.3}  {:>6.3}", l.layer, l.dominance, l.mean_confidence, l.pairs.retained, p.purity())?;
    }
    if a.labels {
        crate::out!("{}", labels_table(&shown, numbering, a.layer))?;
    }
    eprint!("{}", structure.summary());
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

/// Top tokens listed per group in the labels table.
const TABLE_TOKENS: usize = 5;

/// The centroid table of one layer (`layer`, else the one of highest token-weighted purity) in
/// the paper's form: per group (by its number, in the order of the numbers) its top category,
/// purity, share of the tokens and top tokens with counts, e.g.
/// `G4  punctuation  96%  12.5%  , x55  . x24  ; x4`.
pub fn labels_table(shown: &ShownAnalysis, numbering: Numbering, layer: Option<usize>) -> String {
    use focus_core::analysis::categories::best_layer;
    let an = &shown.analysis;
    let Some((best, _)) = best_layer(an.routed_profiles()) else { return "no category profiles: nothing to label\n".into() };
    let l = layer.unwrap_or(best);
    let Some(p) = an.profiles.get(l) else { return format!("no category profile for layer {l}\n") };
    let total: usize = p.centroids.iter().map(|c| c.tokens).sum();
    let stats = &an.layers[l];
    let mut why = if layer.is_some() && l != best { format!("layer {l} (asked for; the best routed layer is {best})") } else { format!("layer {l} (best: highest token-weighted purity)") };
    if !stats.routed {
        why += ", not routed by this adapter: it attends densely, so these groups shape nothing";
    }
    let mut s = format!(
        "\n{why}: token-weighted purity {:.1}%, {} tokens, mean confidence {:.2}, dominance {:.1}% (1/K = {:.1}%)\n",
        100.0 * p.purity(),
        total,
        stats.mean_confidence,
        100.0 * stats.dominance,
        100.0 / an.groups.max(1) as f64
    );
    s += &format!("{:<5}  {:<12}  {:>6}  {:>6}  top tokens (count)\n", "group", "category", "purity", "size");
    let (number, _) = shown.numbers(l, numbering);
    let mut rows: Vec<(usize, &focus_core::analysis::categories::CentroidProfile)> = p.centroids.iter().map(|c| (number.get(c.group).copied().unwrap_or(c.group), c)).collect();
    rows.sort_by_key(|&(n, _)| n);
    for (n, c) in rows {
        let cat = c.top_category.map(|c| c.name()).unwrap_or("empty");
        let purity = c.purity.map(|u| format!("{:.0}%", 100.0 * u)).unwrap_or_else(|| "-".into());
        let size = format!("{:.1}%", 100.0 * c.tokens as f64 / total.max(1) as f64);
        let tops: Vec<String> = c.top_tokens.iter().take(TABLE_TOKENS).map(|t| format!("{} x{}", shown_token(&t.text), t.count)).collect();
        s += &format!("{:<5}  {:<12}  {:>6}  {:>6}  {}\n", format!("G{n}"), cat, purity, size, tops.join("  "));
    }
    s
}
