//! `ppl`: perplexity of a text in llama.cpp's convention (non-overlapping chunks, second half
//! scored), dense or with an adapter in soft or hard top-k mode; with several `--ctx` lengths
//! or `--modes`, the table of quality and speed against length (issue 52): every mode's
//! perplexity against dense and the prefill speed of the same runs, length by length
//! (`focus_core::eval::ppl::length_table`, which the GUI's Speed view runs too).

use super::common::{print_json, progress, FocusArgs, ModelArgs};
use anyhow::{Context, Result};
use focus_core::eval::ppl::{length_table, table_modes, LengthOptions, LengthRow, LengthTable};
use focus_core::model::memory::{self, ModelHeader, Workload};
use focus_core::{Adapter, Mode};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub focus: FocusArgs,
    /// Chunk length in tokens (llama-perplexity's -c); several, comma-separated
    /// (1024,4096,8192), print the table of quality and speed against length. Lengths above the
    /// model's context are skipped, and the table says so.
    #[arg(long, value_delimiter = ',', default_values_t = vec![512], value_parser = super::common::count::<2, 1048576>)]
    pub ctx: Vec<usize>,
    /// The table's modes, comma-separated: dense, soft, topk (the adapter's k) or topN (k = N),
    /// e.g. dense,soft,top1,top2,top3. Dense is always run first: every figure is against it.
    /// Given, the table is printed even for one length. Without it, a table of several
    /// lengths runs dense and --mode.
    #[arg(long, value_delimiter = ',', conflicts_with = "mode")]
    pub modes: Vec<String>,
    /// Score at most this many chunks per length (default: every whole chunk of the text).
    #[arg(long, value_parser = super::common::count::<1, 1048576>)]
    pub chunks: Option<usize>,
    #[arg(long)]
    pub json: bool,
    pub file: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let mut text = focus_core::io::text::read_text(&a.file)?;
    // llama-perplexity strips one trailing newline before tokenizing.
    if text.ends_with('\n') {
        text.pop();
    }
    if a.ctx.len() > 1 || !a.modes.is_empty() {
        return table(&a, &text);
    }
    let ctx = a.ctx[0];
    let soft = a.focus.mode == focus_core::ModeKind::Soft;
    a.model.check_memory(&format!("ppl in chunks of {ctx} tokens"), |_| Ok(Workload::perplexity(ctx, soft)))?;
    let model = a.model.load()?;
    let (adapter, mode) = a.focus.load(&model)?;
    let ids = model.tokenizer()?.encode(&text, false)?.ids;
    let chunks = (ids.len() / ctx.max(1)).min(a.chunks.unwrap_or(usize::MAX));
    let pb = progress(chunks as u64, &format!("ppl {mode}"), a.json);
    let t0 = Instant::now();
    let r = focus_core::eval::ppl::perplexity_chunks(&model, &ids, ctx, a.chunks, mode, adapter.as_ref(), None, |d, _| pb.set_position(d as u64))?;
    pb.finish_and_clear();
    let seconds = t0.elapsed().as_secs_f64();
    if a.json {
        return print_json(&serde_json::json!({
            "ppl": r.ppl, "mean_nll": r.mean_nll, "tokens": ids.len(), "scored_tokens": r.scored_tokens,
            "chunks": r.chunks, "mode": mode.name(), "k": mode.k(), "ctx": r.ctx, "seconds": seconds,
            "per_chunk_nll": r.per_chunk_nll, "model": model.path, "adapter": a.focus.adapter,
        }));
    }
    crate::outln!(
        "PPL {:.4} (mode {mode}, ctx {}, {} chunks, {} scored of {} tokens, {:.1} s)",
        r.ppl, r.ctx, r.chunks, r.scored_tokens, ids.len(), seconds
    )?;
    Ok(())
}

/// A `--modes` entry as a mode of `adapter`: dense, soft, topk (its k) or topN.
pub fn parse_mode(s: &str, adapter: Option<&Adapter>) -> Result<Mode> {
    let s = s.trim().to_ascii_lowercase();
    let need = || adapter.with_context(|| format!("--modes {s} needs --adapter"));
    Ok(match s.as_str() {
        "dense" => Mode::Dense,
        "soft" => {
            need()?;
            Mode::Soft
        }
        "topk" => Mode::TopK(need()?.config.topk(need()?.config.top_k)?),
        _ => match s.strip_prefix("top").and_then(|n| n.trim_start_matches('-').parse::<usize>().ok()) {
            Some(k) => Mode::TopK(need()?.config.topk(k).with_context(|| format!("--modes {s}"))?),
            None => anyhow::bail!("--modes {s}: not one of dense, soft, topk, top1, top2, ..."),
        },
    })
}

/// The table of quality and speed against length.
fn table(a: &Args, text: &str) -> Result<()> {
    // The model's header first: each run's memory is checked before anything is spent.
    let header = if a.model.device == "cpu" { Some(ModelHeader::open(&a.model.path()?)?) } else { None };
    let avail = memory::available();
    let model = a.model.load()?;
    let adapter = super::common::load_adapter(a.focus.adapter.as_deref(), &model)?;
    let modes = if a.modes.is_empty() {
        vec![a.focus.resolve(adapter.as_ref())?]
    } else {
        a.modes.iter().map(|m| parse_mode(m, adapter.as_ref())).collect::<Result<Vec<_>>>()?
    };
    let modes = table_modes(&modes);
    let ids = model.tokenizer()?.encode(text, false)?.ids;
    let fits = |ctx: usize, mode: Mode| -> Option<String> {
        let h = header.as_ref()?;
        let e = h.estimate(&Workload::perplexity(ctx, mode == Mode::Soft));
        memory::check_fits(&format!("{} at ctx {ctx}", focus_core::eval::ppl::mode_label(mode)), &e, avail.as_ref()).err().map(|e| e.to_string())
    };
    if !a.json {
        // What each length will hold, said before it is spent (CPU; a GPU's is device memory).
        if let Some(h) = &header {
            for &ctx in a.ctx.iter().filter(|&&c| c <= model.config().context) {
                let need = |soft| memory::human(h.estimate(&Workload::perplexity(ctx, soft)).total());
                let soft = if modes.contains(&Mode::Soft) { format!(", soft {}", need(true)) } else { String::new() };
                eprintln!(
                    "ctx {ctx}: needs about {}{soft}; {} available",
                    need(false),
                    avail.as_ref().map_or("unknown".to_string(), |v| memory::human(v.bytes))
                );
            }
        }
    }
    let opts = LengthOptions { ctxs: a.ctx.clone(), modes: modes.clone(), max_chunks: a.chunks, cancel: None };
    let pb = progress(0, "ppl", a.json);
    let rows = length_table(&model, &ids, adapter.as_ref(), &opts, fits, |d, t, what| {
        pb.set_length(t as u64);
        pb.set_position(d as u64);
        pb.set_message(what);
    }, |_| {})?;
    pb.finish_and_clear();
    anyhow::ensure!(rows.iter().any(|r| r.skipped.is_none()), "no length could run: {}", rows.iter().map(|r| format!("ctx {}: {}", r.ctx, r.skipped.as_deref().unwrap_or(""))).collect::<Vec<_>>().join("; "));
    let report = LengthTable {
        table: "ppl_lengths".into(),
        model: model.path.display().to_string(),
        adapter: a.focus.adapter.as_ref().map(|p| p.display().to_string()),
        text: a.file.display().to_string(),
        tokens: ids.len(),
        device: a.model.device.clone(),
        threads: rayon::current_num_threads(),
        context: model.config().context,
        max_chunks: a.chunks,
        rows,
    };
    if a.json {
        return print_json(&report);
    }
    for line in table_lines(&report) {
        crate::outln!("{line}")?;
    }
    Ok(())
}

/// The table as text: a line per length and mode (perplexity, % vs dense, prefill tokens/s,
/// speed vs dense), a line per skipped length or mode.
pub fn table_lines(t: &LengthTable) -> Vec<String> {
    let chunks = t.max_chunks.map_or("every chunk".to_string(), |n| format!("at most {n} chunk(s)"));
    let mut out = vec![
        format!(
            "quality and speed against length: {}, adapter {}, {} ({} tokens), {chunks} per length, {} ({} threads)",
            t.model,
            t.adapter.as_deref().unwrap_or("none"),
            t.text,
            t.tokens,
            t.device,
            t.threads
        ),
        format!("{:>7} {:>6} {:<6} {:>10} {:>9} {:>13} {:>9}", "ctx", "chunks", "mode", "ppl", "vs dense", "prefill tok/s", "vs dense"),
    ];
    for r in &t.rows {
        if let Some(why) = &r.skipped {
            out.push(format!("{:>7} skipped: {why}", r.ctx));
            continue;
        }
        for m in &r.modes {
            out.push(mode_line(r, m));
        }
    }
    out
}

fn mode_line(r: &LengthRow, m: &focus_core::eval::ppl::ModeAtLength) -> String {
    if let Some(why) = &m.skipped {
        return format!("{:>7} {:>6} {:<6} skipped: {why}", r.ctx, r.chunks, m.mode);
    }
    let dense = m.mode == "dense";
    let pct = match m.vs_dense_pct {
        Some(p) if !dense => format!("{p:+.2}%"),
        _ => "-".into(),
    };
    let speed = match m.speed_vs_dense {
        Some(s) if !dense => format!("{s:.2}x"),
        _ => "-".into(),
    };
    format!(
        "{:>7} {:>6} {:<6} {:>10.4} {:>9} {:>13.1} {:>9}",
        r.ctx,
        r.chunks,
        m.mode,
        m.ppl.unwrap_or(f64::NAN),
        pct,
        m.tokens_per_s.unwrap_or(f64::NAN),
        speed
    )
}
