//! `index`: route a folder of texts once and keep per token and layer the top groups and their
//! memberships, with per-centroid summaries (`crate::index`); `centroids`: read such an index
//! headless (a layer's centroids, one centroid's dashboard, or which centroid holds a token).

use super::common::{FocusArgs, ModelArgs};
use crate::index::{build_index, BuildRequest, Index};
use anyhow::{Context, Result};
use focus_core::index::label::{printable as pr, quoted};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
#[command(mut_arg("adapter", |a| a.required(true)), mut_arg("mode", |a| a.default_value("topk")))]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub focus: FocusArgs,
    /// Texts are routed in consecutive segments of this many tokens, each from position 0
    /// (capped at the model's context), as `analyze` cuts them.
    #[arg(long, default_value_t = 1024, value_parser = super::common::count::<1, 1048576>)]
    pub segment: usize,
    /// The index file (SQLite). Default: CORPUS_DIR's name + `.focus-index` in the current folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the build report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A folder of UTF-8 text files (read recursively; hidden files are left out).
    pub corpus: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let out = match &a.out {
        Some(p) => p.clone(),
        None => {
            let name = a.corpus.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())).unwrap_or_else(|| "corpus".into());
            PathBuf::from(format!("{name}.focus-index"))
        }
    };
    // Bad folders and outputs fail before the model loads.
    crate::index::build::list_corpus(&a.corpus)?;
    crate::index::build::check_out(&out)?;
    let model = a.model.load()?;
    let adapter_path = a.focus.adapter.clone().expect("clap requires --adapter");
    let (adapter, mode) = a.focus.load(&model)?;
    let adapter = adapter.expect("an adapter path is given");
    let k = mode.k().unwrap_or(a.focus.k.unwrap_or(adapter.config.top_k));
    if k == 0 || k > adapter.config.groups {
        anyhow::bail!("--k {k} must be in 1..={} (the adapter's K)", adapter.config.groups);
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed)).context("installing the Ctrl-C handler")?;
    }
    let req = BuildRequest { model: &model, adapter: &adapter, adapter_path: Some(&adapter_path), corpus: &a.corpus, out: &out, mode, k, segment_len: a.segment };
    let pb = super::common::progress(1, "index", a.json);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {percent}% of the text ({elapsed}, ETA {eta})").expect("valid template").progress_chars("=> "),
    );
    let report = build_index(
        &req,
        &stop,
        // A hidden bar (stderr not a terminal, or --json) drops println: print the note itself.
        |m| if pb.is_hidden() { eprintln!("{m}") } else { pb.println(m) },
        |p| {
            pb.set_length(p.bytes_total.max(1));
            pb.set_position(p.bytes_done);
            let rate = if p.seconds > 0.0 { p.tokens_routed as f64 / p.seconds } else { 0.0 };
            pb.set_message(format!("{}/{} docs, {} tokens routed ({rate:.0}/s), {}", p.docs_done, p.docs_total, p.tokens_routed, p.current));
        },
    );
    pb.finish_and_clear();
    let report = report?;
    if a.json {
        return super::common::print_json(&report);
    }
    if report.up_to_date {
        eprintln!("{} is up to date ({} documents, {} tokens)", out.display(), report.documents, report.tokens);
    } else {
        eprintln!(
            "{} documents ({} routed now, {} already indexed, {} removed, {} skipped), {} tokens; routing {:.1} s ({} tokens), summaries {:.1} s",
            report.documents,
            report.routed,
            report.reused,
            report.removed,
            report.skipped.len(),
            report.tokens,
            report.route_seconds,
            report.tokens_routed,
            report.summary_seconds
        );
    }
    eprintln!("wrote {} (read it with `focus-lens centroids {}` or in the app's Centroids view)", out.display(), out.display());
    Ok(())
}

#[derive(clap::Args)]
pub struct CentroidsArgs {
    /// An index written by `focus-lens index`.
    pub index: PathBuf,
    /// A layer (0-based): its centroids, or with --centroid one centroid's dashboard.
    #[arg(long, value_parser = super::common::count::<0, 4096>)]
    pub layer: Option<usize>,
    /// A centroid (group) of --layer.
    #[arg(long, requires = "layer", value_parser = super::common::count::<0, 4096>)]
    pub centroid: Option<usize>,
    /// Which centroids hold this token (its text, e.g. " of"; "of" also finds " of"), at
    /// --layer or at every layer.
    #[arg(long, conflicts_with = "centroid")]
    pub search: Option<String>,
    /// Rows of examples and tokens shown.
    #[arg(long, default_value_t = 10, value_parser = super::common::count::<1, 50>)]
    pub rows: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Overview<'a> {
    index: String,
    identity: &'a crate::index::store::Identity,
    documents: u64,
    tokens: u64,
    layers: Vec<Vec<crate::index::CentroidRow>>,
}

pub fn centroids(a: CentroidsArgs) -> Result<()> {
    let ix = Index::open(&a.index)?;
    if let Some(q) = &a.search {
        let hits = ix.search(q, a.layer)?;
        if a.json {
            return super::common::print_json(&hits);
        }
        if hits.is_empty() {
            crate::outln!("no token {} in the index", quoted(q))?;
        }
        crate::outln!("token          layer  centroid  count   share  label")?;
        for h in &hits {
            crate::outln!("{:<14} {:>5}  {:>8}  {:>6}  {:>5.1}%  {}", quoted(&h.text), h.layer, h.group, h.count, 100.0 * h.share, pr(&h.label))?;
        }
        return Ok(());
    }
    match (a.layer, a.centroid) {
        (Some(l), Some(g)) => {
            let d = ix.centroid(l, g, a.rows)?;
            if a.json {
                return super::common::print_json(&d);
            }
            crate::outln!("layer {l} centroid {g}: {}  ({} members, {:.1}% of the layer; mean membership where held {:.2})", pr(&d.label), d.members, 100.0 * d.size_share, d.mean_held_membership)?;
            for e in &d.evidence {
                crate::outln!("  evidence: {}", pr(e))?;
            }
            crate::outln!("\ntop examples (membership, document:position, context):")?;
            for e in &d.examples {
                // The corpus's text on one line, without the control sequences it may hold.
                crate::outln!("  {:.3}  {}:{}  {}[{}]{}", e.membership, pr(&e.document), e.position, pr(&e.left), pr(&e.token), pr(&e.right))?;
            }
            crate::outln!("\nmembership histogram (tokens held, bins of 0.05; {} tokens not held):", d.not_held)?;
            crate::outln!("  {}", d.histogram.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" "))?;
            crate::outln!("\ncategories (share of members vs corpus, lift):")?;
            for c in &d.categories {
                crate::outln!("  {:<12} {:>6}  {:>5.1}% vs {:>5.1}%  x{:.2}", pr(&c.name), c.count, 100.0 * c.share, 100.0 * c.base, c.lift)?;
            }
            crate::outln!("\ntop tokens:")?;
            for t in &d.top_tokens {
                crate::outln!("  {:<14} {:>6}  {:>5.1}% vs {:>5.2}%  x{:.1}", quoted(&t.name), t.count, 100.0 * t.share, 100.0 * t.base, t.lift)?;
            }
            crate::outln!("\nmost over-represented tokens:")?;
            for t in &d.lifted_tokens {
                crate::outln!("  {:<14} {:>6}  x{:.1}", quoted(&t.name), t.count, t.lift)?;
            }
            crate::outln!("\nneighbours (best centroid of each other layer: shared members, share, Jaccard):")?;
            for n in &d.neighbours {
                crate::outln!("  layer {:>2} G{}  {:>7}  {:>5.1}%  {:.2}  {}", n.layer, n.group, n.shared, 100.0 * n.share, n.jaccard, pr(&n.label))?;
            }
        }
        (layer, _) => {
            let layers: Vec<usize> = match layer {
                Some(l) => vec![l],
                None => (0..ix.identity.n_layers).collect(),
            };
            let rows = layers.iter().map(|&l| ix.layer(l)).collect::<Result<Vec<_>>>()?;
            if a.json {
                let o = Overview { index: a.index.display().to_string(), identity: &ix.identity, documents: ix.documents, tokens: ix.tokens, layers: rows };
                return super::common::print_json(&o);
            }
            crate::outln!(
                "{}: {} documents, {} tokens; {} with {} (K = {}, k = {}, {}, segments of {})",
                a.index.display(),
                ix.documents,
                ix.tokens,
                pr(&ix.identity.model),
                pr(&ix.identity.adapter),
                ix.identity.groups,
                ix.identity.settings.k,
                pr(&ix.identity.settings.mode),
                ix.identity.settings.segment_len
            )?;
            for layer in rows {
                for c in layer {
                    crate::outln!("layer {:>2}  G{}  {:>8} members  {}", c.layer, c.group, c.members, pr(&c.label))?;
                }
            }
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// An index (finished, or the `.partial` of a build under way).
    pub index: PathBuf,
    /// First copy the index's documents (repeated under new names) into --scratch until it
    /// holds this many tokens, write its summaries (timed), and time the queries there.
    #[arg(long, requires = "scratch", value_parser = super::common::count::<1, 1_000_000_000>)]
    pub scale_to: Option<usize>,
    /// The scaled index's file: a new file (an existing one is never replaced). Alone (without
    /// --scale-to), a finished copy of INDEX's documents: how an unfinished `.partial` is timed.
    #[arg(long)]
    pub scratch: Option<PathBuf>,
    /// Rows of examples and tokens per dashboard, as the view shows.
    #[arg(long, default_value_t = 20, value_parser = super::common::count::<1, 50>)]
    pub rows: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn bench(a: BenchArgs) -> Result<()> {
    if let Some(s) = &a.scratch {
        crate::index::bench::check_scratch(s)?;
    }
    let (path, summary) = match (a.scale_to, &a.scratch) {
        (n, Some(s)) => {
            let n = n.unwrap_or(1);
            eprintln!("copying the documents of {} into {} up to {n} tokens ...", a.index.display(), s.display());
            let secs = crate::index::bench::scale(&a.index, s, n as u64)?;
            (s.clone(), Some(secs))
        }
        _ => {
            if !crate::index::store::Store::open(&a.index)?.complete() {
                anyhow::bail!(
                    "{} is an unfinished index (a build under way or interrupted): its summaries are not written yet; time a finished copy of its documents with --scratch NEW_FILE (and --scale-to N for more tokens)",
                    a.index.display()
                );
            }
            (a.index.clone(), None)
        }
    };
    let r = crate::index::bench::bench(&path, a.rows, summary)?;
    if a.json {
        return super::common::print_json(&r);
    }
    crate::outln!("{}: {} documents, {} tokens, {} layers x {} centroids, {:.1} MB", r.index, r.documents, r.tokens, r.layers, r.groups, r.file_bytes as f64 / 1e6)?;
    if let Some(s) = r.summary_seconds {
        crate::outln!("summaries written in {s:.1} s")?;
    }
    crate::outln!("open (checks included): {:.1} ms", r.open_ms)?;
    crate::outln!("{:<36} {:>6} {:>10} {:>10} {:>10}", "query", "calls", "median ms", "p95 ms", "max ms")?;
    for t in &r.timings {
        crate::outln!("{:<36} {:>6} {:>10.2} {:>10.2} {:>10.2}", t.query, t.calls, t.median_ms, t.p95_ms, t.max_ms)?;
    }
    Ok(())
}
